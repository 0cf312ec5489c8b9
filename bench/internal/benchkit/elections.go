package benchkit

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/meteor-edge/meteor/cluster/api"
)

// termTimeout bounds each server's answer to RaftTerm.
const termTimeout = 5 * time.Second

// RaftTerm returns the highest Raft term that the Meteor servers at addrs
// ("host:port" or a URL of their HTTP API) report on GET /v1/health.
// Every election, won or not, starts a new term, so the elections held
// during a period are the growth of this value over it: read it when the
// period starts and when it ends, and pass both to Elections. This is the
// one way every benchmark counts Meteor's elections (meteor dev counts
// them the same way).
//
// A server without a leader still answers with its term. One that does
// not answer at all (a server the run killed, say) is passed over; the
// error is returned only when none answers.
func RaftTerm(ctx context.Context, addrs []string) (uint64, error) {
	var top uint64
	var errs []error
	answered := false
	for _, addr := range addrs {
		cctx, cancel := context.WithTimeout(ctx, termTimeout)
		h, err := api.NewClient(addr, nil).Health(cctx)
		cancel()
		if err != nil && h.Term == 0 {
			errs = append(errs, fmt.Errorf("%s: %w", addr, err))
			continue
		}
		answered = true
		top = max(top, h.Term)
	}
	if !answered {
		return 0, fmt.Errorf("read the Raft term: %w", errors.Join(errs...))
	}
	return top, nil
}

// Elections returns the elections held between two readings of the
// highest Raft term, start and end. It is 0 if end is lower, which
// happens only when the server that had the highest term no longer
// answers.
func Elections(start, end uint64) int {
	if end < start {
		return 0
	}
	return int(end - start)
}

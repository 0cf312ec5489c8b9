package api

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// termTimeout bounds each server's answer to HighestTerm.
const termTimeout = 5 * time.Second

// HighestTerm returns the highest Raft term that the servers clients talk
// to report on GET /v1/health, and the leader the server
// with that term knows ("" if none). Every election, won or not, starts a
// new term, so the elections held during a period are the growth of this
// value over it: the one way meteor dev, the chaos harness and every
// benchmark count elections.
//
// A server without a leader still answers with its term. One that does
// not answer at all (a server that was killed, say) is passed over; the
// error is returned only when none answers.
func HighestTerm(ctx context.Context, clients []*Client) (uint64, string, error) {
	var top uint64
	var leader string
	answered := false
	err := eachHealth(ctx, clients, func(h *Health) {
		if !answered || h.Term > top || (h.Term == top && leader == "") {
			top, leader = h.Term, h.Leader
		}
		answered = true
	})
	if err != nil {
		return 0, "", fmt.Errorf("read the Raft term: %w", err)
	}
	return top, leader, nil
}

// HighestCommitIndex returns the highest Raft commit index that the
// servers clients talk to report on GET /v1/health, passing over those
// that do not answer as HighestTerm does: the entries the cluster
// committed during a period are the growth of this value over it.
func HighestCommitIndex(ctx context.Context, clients []*Client) (uint64, error) {
	var top uint64
	err := eachHealth(ctx, clients, func(h *Health) { top = max(top, h.CommitIndex) })
	if err != nil {
		return 0, fmt.Errorf("read the Raft commit index: %w", err)
	}
	return top, nil
}

// eachHealth calls visit with each answer to GET /v1/health, a server
// without a leader's included (it still answers with its Raft figures),
// each bounded by termTimeout. It fails only when no server answers.
func eachHealth(ctx context.Context, clients []*Client, visit func(*Health)) error {
	var errs []error
	answered := false
	for _, c := range clients {
		cctx, cancel := context.WithTimeout(ctx, termTimeout)
		h, err := c.Health(cctx)
		cancel()
		if err != nil && h.Term == 0 {
			errs = append(errs, fmt.Errorf("%s: %w", c.Addr(), err))
			continue
		}
		visit(h)
		answered = true
	}
	if !answered {
		return errors.Join(errs...)
	}
	return nil
}

package benchkit

import (
	"context"

	"github.com/meteor-edge/meteor/cluster/api"
)

// RaftTerm returns the highest Raft term that the Meteor servers clients
// talk to report (api.HighestTerm): read it when a measured period starts
// and when it ends, and pass both to Elections.
func RaftTerm(ctx context.Context, clients []*api.Client) (uint64, error) {
	term, _, err := api.HighestTerm(ctx, clients)
	return term, err
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

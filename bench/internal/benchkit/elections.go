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

// ElectionLog is a run's Raft leader elections, cluster by cluster: each
// counted from the moment its servers first agreed on a leader
// (StartMeteor) until just before they were stopped, so that nothing the
// run did to them (connecting fleets, storms, changes) is left out. Every
// driver that runs Meteor clusters writes one in its results, under
// "leader_elections"; bench/report sums them in the row "leader elections
// during any benchmark".
type ElectionLog struct {
	Clusters []ClusterElections `json:"clusters"`
	// Total is the sum over the clusters whose count is known.
	Total int `json:"total"`
}

// ClusterElections is one cluster's count; Error says why it is unknown.
type ClusterElections struct {
	Name      string `json:"name"`
	Elections int    `json:"elections"`
	Error     string `json:"error,omitempty"`
}

// Record counts the elections cluster c held since it started, under
// name. Call it before c's servers are stopped.
func (l *ElectionLog) Record(ctx context.Context, name string, c *MeteorCluster) {
	n, err := c.ElectionsSinceStart(ctx)
	ce := ClusterElections{Name: name, Elections: n}
	if err != nil {
		ce.Error = err.Error()
	} else {
		l.Total += n
	}
	l.Clusters = append(l.Clusters, ce)
}

// Unknown counts the clusters whose elections could not be read.
func (l *ElectionLog) Unknown() int {
	n := 0
	for _, c := range l.Clusters {
		if c.Error != "" {
			n++
		}
	}
	return n
}

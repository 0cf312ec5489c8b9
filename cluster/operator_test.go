package cluster

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/meteor-edge/meteor/cluster/api"
	"github.com/meteor-edge/meteor/fsm"
)

// TestRemovePeerGuardsTheQuorum: the Raft configuration lists every voter
// with whether it is alive and what the cluster can stand. Removing a live
// server is refused, saying the leader would add it back; removing one
// whose loss would leave fewer alive voters than a commit needs is
// refused, saying so; a failed server is removed; --force removes a live
// one all the same (and the leader adds it back, as it said).
func TestRemovePeerGuardsTheQuorum(t *testing.T) {
	c := newTestCluster(t, 3, nil)
	ctx := context.Background()
	leader := c.waitLeader()
	var followers []*Server
	for _, s := range c.alive() {
		if s != leader {
			followers = append(followers, s)
		}
	}
	cl := client(followers[0])
	conf, err := cl.RaftConfiguration(ctx, api.ReadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if conf.Voters != 3 || conf.AliveVoters != 3 || conf.Quorum != 2 || conf.FailureTolerance != 1 || len(conf.Peers) != 3 || conf.Leader != leader.ID() {
		t.Fatalf("raft configuration %+v", conf)
	}

	var apiErr *api.Error
	live := followers[1].ID()
	if err := cl.RemoveMember(ctx, live, false); !errors.As(err, &apiErr) || apiErr.StatusCode != http.StatusConflict || !strings.Contains(err.Error(), "add it back") {
		t.Fatalf("remove live %s: %v, want 409 saying the leader would add it back", live, err)
	}
	dead := followers[0].ID()
	c.kill(c.index(followers[0]))
	cl = client(leader)
	if err := cl.RemoveMember(ctx, live, false); !errors.As(err, &apiErr) || apiErr.StatusCode != http.StatusConflict ||
		!strings.Contains(err.Error(), "leave 2 voters of which 1 are alive, fewer than the 2 a commit needs") {
		t.Fatalf("remove live %s with %s down: %v, want 409 about the quorum", live, dead, err)
	}
	waitFor(t, 10*time.Second, func() error {
		conf, err := cl.RaftConfiguration(ctx, api.ReadOptions{})
		if err != nil || conf.AliveVoters != 2 || conf.FailureTolerance != 0 {
			return fmt.Errorf("raft configuration with %s down: %v %+v", dead, err, conf)
		}
		return nil
	})
	if err := cl.RemoveMember(ctx, dead, false); err != nil {
		t.Fatalf("remove failed %s: %v", dead, err)
	}
	if v := c.voters(); slices.Contains(v, dead) {
		t.Fatalf("voters after removing %s: %v", dead, v)
	}
	if err := cl.RemoveMember(ctx, live, true); err != nil {
		t.Fatalf("forced removal of %s: %v", live, err)
	}
	recs, err := leader.State().Read().Audit(nil, fsm.AuditQuery{Target: "member/" + live})
	if err != nil || len(recs) == 0 || recs[0].Action != "member-remove-forced" {
		t.Fatalf("audit of %s: %v %+v", live, err, recs)
	}
	waitFor(t, 20*time.Second, func() error {
		if v := c.voters(); !slices.Contains(v, live) {
			return fmt.Errorf("voters %v: %s not added back", v, live)
		}
		return nil
	})
}

// TestTransferLeader: leadership moves to the voter asked for, through a
// follower too, or to the most up-to-date one; an unknown target is a
// 404 and changes nothing; every hand-over is audited.
func TestTransferLeader(t *testing.T) {
	// The old leader records the hand-over through the new one: a
	// forwarded command, signed with the cluster secret.
	c := newTestCluster(t, 3, func(cfg *Config) { cfg.ClusterSecret = []byte("0123456789abcdef0123456789abcdef") })
	ctx := context.Background()
	leader := c.waitLeader()
	target := c.follower()
	var other *Server
	for _, s := range c.alive() {
		if s != leader && s != target {
			other = s
		}
	}
	res, err := client(other).TransferLeader(ctx, target.ID())
	if err != nil {
		t.Fatal(err)
	}
	if res.Previous != leader.ID() || res.Leader != target.ID() || c.waitLeader() != target {
		t.Fatalf("transfer to %s: %+v, leader now %s", target.ID(), res, c.waitLeader().ID())
	}
	var apiErr *api.Error
	if _, err := client(other).TransferLeader(ctx, "nope"); !errors.As(err, &apiErr) || apiErr.StatusCode != http.StatusNotFound {
		t.Fatalf("transfer to an unknown server: %v", err)
	}
	res, err = client(target).TransferLeader(ctx, "")
	if err != nil || res.Previous != target.ID() || res.Leader == target.ID() {
		t.Fatalf("transfer to anyone: %v %+v", err, res)
	}
	waitFor(t, 10*time.Second, func() error {
		recs, err := c.waitLeader().State().Read().Audit(nil, fsm.AuditQuery{})
		n := 0
		for _, r := range recs {
			if r.Action == "member-transfer-leader" && strings.HasSuffix(r.Summary, ": ok") {
				n++
			}
		}
		if err != nil || n != 2 {
			return fmt.Errorf("transfers audited: %d (%v)", n, err)
		}
		return nil
	})
}

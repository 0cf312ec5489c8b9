package cluster

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/meteor-edge/meteor/cluster/api"
)

// TestRecoverAfterLosingAMajority: a three-server cluster loses two
// servers for good. The survivor, stopped, is recovered into a cluster of
// one (RecoverRaft on its data dir, which refuses while the server runs);
// started again it leads, holds every intent the cluster had committed,
// and takes writes; a new server then joins it.
func TestRecoverAfterLosingAMajority(t *testing.T) {
	c := newTestCluster(t, 3, nil)
	for i := range 8 {
		c.propose(simpleIntent(fmt.Sprintf("app-%d", i%4), fmt.Sprintf("v%d", i)))
	}
	c.waitConverged()
	survivor := c.index(c.follower())
	want := recordLines(t, c.Server(survivor).State(), "intent", "history")
	cfg := c.Config(survivor)

	if _, err := RecoverRaft(RecoverOptions{DataDir: cfg.DataDir, FSM: cfg.FSM}); err == nil || !strings.Contains(err.Error(), "in use: stop the server first") {
		t.Fatalf("recover of a running server: %v", err)
	}
	for i := range c.Size() {
		if i != survivor {
			c.kill(i) // lost for good: never started again
		}
	}
	c.kill(survivor)
	if _, err := RecoverRaft(RecoverOptions{DataDir: cfg.DataDir, NodeID: "other", FSM: cfg.FSM}); err == nil || !strings.Contains(err.Error(), "belongs to node") {
		t.Fatalf("recover with another node ID: %v", err)
	}
	res, err := RecoverRaft(RecoverOptions{DataDir: cfg.DataDir, FSM: cfg.FSM})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Old) != 3 || len(res.New) != 1 || res.New[0].ID != cfg.NodeID || res.New[0].Address != cfg.RaftAddr || res.Revision != 8 {
		t.Fatalf("recover result %+v", res)
	}

	s := c.restart(survivor)
	if c.waitLeader() != s {
		t.Fatal("the recovered server does not lead")
	}
	if diff := cmp.Diff(want, recordLines(t, s.State(), "intent", "history")); diff != "" {
		t.Fatalf("intents after the recovery (-want +got):\n%s", diff)
	}
	if got := c.propose(simpleIntent("after", "x")); got.Revision != 9 {
		t.Fatalf("write after the recovery at revision %d", got.Revision)
	}
	conf, err := client(s).RaftConfiguration(context.Background(), api.ReadOptions{})
	if err != nil || conf.Voters != 1 || conf.FailureTolerance != 0 {
		t.Fatalf("configuration after the recovery: %v %+v", err, conf)
	}
	// A new server with an empty data dir joins and takes the state.
	added := c.add()
	hash := c.waitConverged()
	if h, _ := added.State().Hash(); h != hash || len(c.voters()) != 2 {
		t.Fatalf("the new server: same state %v, voters %v", h == hash, c.voters())
	}
}

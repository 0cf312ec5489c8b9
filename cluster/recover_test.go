package cluster

import (
	"context"
	"fmt"
	"slices"
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
	second := cfg
	second.HTTPAddr, second.RaftAddr, second.GossipAddr = "127.0.0.1:0", "127.0.0.1:0", "127.0.0.1:0"
	if s, err := New(second); err == nil || !strings.Contains(err.Error(), "in use by another server") {
		if s != nil {
			s.Shutdown()
		}
		t.Fatalf("a second server on a running server's data dir: %v", err)
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

// TestRecoverWithTwoSurvivors: a five-server cluster loses three servers
// for good, and its two survivors hold different logs: one stopped before
// the last writes. Both are recovered with the same configuration of the
// two; started again, the one with the longer log leads (the other's vote
// goes to the more up-to-date log), the other takes its state, every
// write the cluster committed is there, and the two take writes.
func TestRecoverWithTwoSurvivors(t *testing.T) {
	c := newTestCluster(t, 5, nil)
	for i := range 6 {
		c.propose(simpleIntent(fmt.Sprintf("app-%d", i%3), fmt.Sprintf("v%d", i)))
	}
	c.waitConverged()
	leader := c.waitLeader()
	var survivors []int
	for i := range c.Size() {
		if c.Server(i) != leader && len(survivors) < 2 {
			survivors = append(survivors, i)
		}
	}
	ahead, behind := survivors[0], survivors[1]
	c.kill(behind)
	for i := range 3 {
		c.propose(simpleIntent(fmt.Sprintf("late-%d", i), "v"))
	}
	c.waitConverged()
	want := recordLines(t, c.Server(ahead).State(), "intent", "history")
	for i := range c.Size() {
		if i != ahead && i != behind {
			c.kill(i) // lost for good
		}
	}
	c.kill(ahead)

	peers := []RecoverPeer{
		{ID: c.Config(ahead).NodeID, Address: c.Config(ahead).RaftAddr},
		{ID: c.Config(behind).NodeID, Address: c.Config(behind).RaftAddr},
	}
	revisions := map[int]uint64{}
	for _, i := range survivors {
		cfg := c.Config(i)
		res, err := RecoverRaft(RecoverOptions{DataDir: cfg.DataDir, Peers: peers, FSM: cfg.FSM})
		if err != nil {
			t.Fatalf("recover %s: %v", cfg.NodeID, err)
		}
		if len(res.Old) != 5 || len(res.New) != 2 {
			t.Fatalf("recover %s: %+v", cfg.NodeID, res)
		}
		revisions[i] = res.Revision
	}
	if revisions[ahead] != 9 || revisions[behind] != 6 {
		t.Fatalf("revisions recovered: ahead %d, behind %d; want 9 and 6", revisions[ahead], revisions[behind])
	}
	for _, i := range survivors {
		c.restart(i)
	}
	if l := c.waitLeader(); l != c.Server(ahead) {
		t.Fatalf("%s leads, not %s, which has the longer log", l.ID(), c.Server(ahead).ID())
	}
	if got := c.propose(simpleIntent("after", "x")); got.Revision != 10 {
		t.Fatalf("write after the recovery at revision %d", got.Revision)
	}
	c.waitConverged()
	for _, i := range survivors {
		got := strings.Split(recordLines(t, c.Server(i).State(), "intent", "history"), "\n")
		for _, line := range strings.Split(want, "\n") {
			if !slices.Contains(got, line) {
				t.Fatalf("%s lacks %q after the recovery", c.Server(i).ID(), line)
			}
		}
	}
	if v := c.voters(); len(v) != 2 {
		t.Fatalf("voters after the recovery: %v", v)
	}
}

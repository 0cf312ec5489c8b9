package cluster

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/meteor-edge/meteor/cluster/api"
	"github.com/meteor-edge/meteor/fsm"
)

func TestApplyThroughFollower(t *testing.T) {
	c := newTestCluster(t, 3, nil)
	f := c.follower()
	ctx := context.Background()
	res, err := client(f).PutIntent(ctx, "store-net", putDoc(t, simpleIntent("store-net", "v1")), nil)
	if err != nil {
		t.Fatal(err)
	}
	if res.Revision != 1 {
		t.Fatalf("revision %d, want 1", res.Revision)
	}
	// A linearizable read through any server sees the write at once.
	for _, s := range c.alive() {
		got, err := client(s).GetIntent(ctx, "store-net", api.ReadOptions{})
		if err != nil {
			t.Fatalf("read via %s: %v", s.ID(), err)
		}
		if got.Revision != 1 || got.Intent.Resources[0].Spec["content"] != "v1" {
			t.Fatalf("read via %s: %+v", s.ID(), got)
		}
	}
	c.waitConverged()
	// Stale reads are served by each server from its own replica.
	for _, s := range c.alive() {
		got, err := client(s).GetIntent(ctx, "store-net", api.ReadOptions{Stale: true})
		if err != nil || got.Revision != 1 {
			t.Fatalf("stale read via %s: %+v %v", s.ID(), got, err)
		}
	}
}

// TestKillLeaderDuringWrites checks invariant 1: every acknowledged write
// survives the loss of the leader, on every surviving server.
func TestKillLeaderDuringWrites(t *testing.T) {
	for _, n := range []int{3, 5} {
		t.Run(fmt.Sprintf("%d-servers", n), func(t *testing.T) {
			c := newTestCluster(t, n, nil)
			leader := c.waitLeader()
			var acked sync.Map // name -> revision
			var nacked atomic.Int64
			stop := make(chan struct{})
			var wg sync.WaitGroup
			for w := range 8 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					// Each writer talks to its own server, so some writes go
					// through followers and some to the leader directly.
					servers := c.alive()
					cl := client(servers[w%len(servers)])
					cl.RetryNoLeader = 0
					for i := 0; ; i++ {
						select {
						case <-stop:
							return
						default:
						}
						name := fmt.Sprintf("w%d-%d", w, i)
						ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
						res, err := cl.PutIntent(ctx, name, putDoc(t, simpleIntent(name, strconv.Itoa(i))), nil)
						cancel()
						if err == nil {
							acked.Store(name, res.Revision)
							nacked.Add(1)
						}
					}
				}()
			}
			// The bounds are for a busy host (five servers under the race
			// detector beside other tests write a few a second); what the
			// test checks is below, that no acknowledged write is lost.
			waitFor(t, 60*time.Second, func() error {
				if nacked.Load() < 50 {
					return fmt.Errorf("%d writes acknowledged", nacked.Load())
				}
				return nil
			})
			c.kill(c.index(leader))
			before := nacked.Load()
			waitFor(t, 60*time.Second, func() error {
				if nacked.Load() < before+50 {
					return fmt.Errorf("%d writes acknowledged since the kill", nacked.Load()-before)
				}
				return nil
			})
			close(stop)
			wg.Wait()
			c.waitConverged()
			count := 0
			acked.Range(func(k, v any) bool {
				count++
				for _, s := range c.alive() {
					rec, err := s.State().Read().Intent(nil, k.(string))
					if err != nil {
						t.Errorf("acknowledged write %s (revision %d) missing on %s: %v", k, v, s.ID(), err)
						return false
					}
					if rec.Revision != v.(uint64) {
						t.Errorf("%s on %s: revision %d, acknowledged %d", k, s.ID(), rec.Revision, v)
					}
				}
				return true
			})
			t.Logf("%d acknowledged writes checked on %d surviving servers", count, len(c.alive()))
		})
	}
}

func TestRestartFromDataDir(t *testing.T) {
	c := newTestCluster(t, 3, nil)
	f := c.follower()
	fi := c.index(f)
	for i := range 5 {
		c.propose(simpleIntent(fmt.Sprintf("a%d", i), "x"))
	}
	c.waitConverged()
	c.kill(fi)
	for i := range 5 {
		c.propose(simpleIntent(fmt.Sprintf("b%d", i), "y"))
	}
	s := c.restart(fi)
	c.waitConverged()
	for _, name := range []string{"a4", "b4"} {
		if _, err := s.State().Read().Intent(nil, name); err != nil {
			t.Fatalf("restarted server: %v", err)
		}
	}

	// A whole-cluster restart loses nothing either.
	want := c.waitConverged()
	for i := range c.servers {
		c.kill(i)
	}
	for i := range c.servers {
		c.restart(i)
	}
	if got := c.waitConverged(); got != want {
		t.Fatal("state changed across a whole-cluster restart")
	}
	if r := c.waitLeader().State().Read(); r.Revision() != 10 {
		t.Fatalf("revision %d after restart, want 10", r.Revision())
	}
}

func TestSnapshotInstallOnLaggingFollower(t *testing.T) {
	c := newTestCluster(t, 3, func(cfg *Config) {
		cfg.SnapshotThreshold = 64
		cfg.TrailingLogs = 16
		cfg.SnapshotInterval = time.Hour // snapshots are taken by hand below
	})
	fi := c.index(c.follower())
	c.kill(fi)
	for i := range 300 {
		c.propose(simpleIntent(fmt.Sprintf("i%d", i%40), strconv.Itoa(i)))
	}
	leader := c.waitLeader()
	if err := leader.raft.Snapshot().Error(); err != nil {
		t.Fatal(err)
	}
	first, err := leader.rparts.store.FirstIndex()
	if err != nil {
		t.Fatal(err)
	}
	if first <= 10 {
		t.Fatalf("log not compacted: first index %d", first)
	}
	s := c.restart(fi)
	want := c.waitConverged()
	if got, _ := s.State().Hash(); got != want {
		t.Fatal("follower state differs after snapshot install")
	}
	if idx, _ := strconv.ParseUint(s.raft.Stats()["last_snapshot_index"], 10, 64); idx < first {
		t.Fatalf("follower's last snapshot index %d: it did not install the leader's snapshot (leader log starts at %d)", idx, first)
	}
}

func TestGrowAndShrink(t *testing.T) {
	c := newTestCluster(t, 3, nil)
	ctx := context.Background()
	c.propose(simpleIntent("before", "x"))
	c.add()
	c.add()
	waitFor(t, 20*time.Second, func() error {
		if v := c.voters(); len(v) != 5 {
			return fmt.Errorf("voters %v", v)
		}
		return nil
	})
	hash := c.waitConverged()
	if got, _ := c.Server(4).State().Hash(); got != hash {
		t.Fatal("new server did not receive the state")
	}
	// Each member's figures are asked of it with a deadline, which a busy
	// host can miss for a moment (the member then shows the error): wait
	// for a listing in which every member answered.
	waitFor(t, 20*time.Second, func() error {
		members, err := client(c.Server(4)).Members(ctx)
		if err != nil {
			return err
		}
		if len(members.Members) != 5 || members.Leader == "" {
			return fmt.Errorf("members: %+v", members)
		}
		for _, m := range members.Members {
			if m.GossipState != "alive" || m.Suffrage != "voter" || m.Error != "" || m.AppliedIndex == 0 {
				return fmt.Errorf("member %+v", m)
			}
		}
		return nil
	})

	// Shrink back: two servers leave, one of them the leader.
	leaving := []*Server{c.waitLeader(), c.Server(3)}
	if leaving[1] == leaving[0] {
		leaving[1] = c.Server(4)
	}
	// The leader leaves through the Go API, the other through the HTTP API
	// (meteor members leave).
	if err := leaving[0].Leave(15 * time.Second); err != nil {
		t.Fatalf("leave %s: %v", leaving[0].ID(), err)
	}
	c.Detach(c.index(leaving[0]))
	if err := client(leaving[1]).Leave(ctx); err != nil {
		t.Fatalf("leave %s through the API: %v", leaving[1].ID(), err)
	}
	select {
	case <-leaving[1].ctx.Done():
	case <-time.After(30 * time.Second):
		t.Fatalf("%s did not shut down after leaving", leaving[1].ID())
	}
	leaving[1].Shutdown() // waits for the leave to finish
	c.Detach(c.index(leaving[1]))
	waitFor(t, 20*time.Second, func() error {
		if v := c.voters(); len(v) != 3 {
			return fmt.Errorf("voters %v", v)
		}
		return nil
	})
	c.propose(simpleIntent("after", "x"))
	c.waitConverged()
}

func TestRemoveFailedServer(t *testing.T) {
	c := newTestCluster(t, 3, nil)
	fi := c.index(c.follower())
	id := c.ID(fi)
	c.kill(fi)
	cl := client(c.alive()[0])
	if err := cl.RemoveMember(context.Background(), id, false); err != nil {
		t.Fatal(err)
	}
	if v := c.voters(); len(v) != 2 {
		t.Fatalf("voters after remove: %v", v)
	}
	var apiErr *api.Error
	if err := cl.RemoveMember(context.Background(), id, false); !errors.As(err, &apiErr) || apiErr.StatusCode != 404 {
		t.Fatalf("second remove: %v", err)
	}
}

func TestNoLeaderIsServiceUnavailable(t *testing.T) {
	// One server of an expected three never forms a cluster.
	cfg := testConfig(t, "lonely")
	cfg.BootstrapExpect = 3
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Shutdown() })
	cl := client(s)
	cl.RetryNoLeader = 0
	_, err = cl.PutIntent(context.Background(), "x", putDoc(t, simpleIntent("x", "1")), nil)
	var apiErr *api.Error
	if !errors.As(err, &apiErr) || apiErr.StatusCode != 503 || apiErr.Code != api.CodeNoLeader || apiErr.RetryAfterMS == 0 {
		t.Fatalf("write without leader: %#v", err)
	}
	h, err := cl.Health(context.Background())
	if !errors.As(err, &apiErr) || apiErr.StatusCode != 503 || h.Healthy || h.Message == "" {
		t.Fatalf("health without leader: %+v, %v", h, err)
	}
	if _, _, err := s.Propose(context.Background(), fsm.PutIntentType, &fsm.PutIntentRequest{Intent: simpleIntent("x", "1")}); !errors.Is(err, ErrNotLeader) {
		t.Fatalf("Propose on a non-leader: %v", err)
	}
}

func TestDataDirBelongsToNode(t *testing.T) {
	cfg := testConfig(t, "a")
	cfg.Dev = true
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	s.Shutdown()
	cfg.NodeID = "b"
	if _, err := New(cfg); err == nil {
		t.Fatal("a data dir of node a was accepted for node b")
	}
}

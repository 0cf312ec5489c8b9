package cluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"

	"github.com/meteor-edge/meteor/chaos"
	"github.com/meteor-edge/meteor/cluster/api"
	"github.com/meteor-edge/meteor/fsm"
	"github.com/meteor-edge/meteor/fsm/intent"
	"github.com/meteor-edge/meteor/wire"
)

// earlierRelease makes a server stand for one of the release before
// this one: state machine level 1 (no audit-operation, no operator
// restores, no classes, windows or lock breaks) and agent protocol 1.3.
func earlierRelease(cfg *Config) { cfg.FeatureLevel, cfg.WireMinor = 1, 3 }

// upgraded undoes earlierRelease.
func upgraded(cfg *Config) { cfg.FeatureLevel, cfg.WireMinor = 0, 0 }

// operation is a command of level 2.
func operation(action string) *fsm.OperationRequest {
	return &fsm.OperationRequest{Action: action, Target: "snapshot/test", Time: time.Now().UnixNano()}
}

// TestMixedVersionCluster: a cluster with one server of the earlier
// release keeps working: intents are written, an agent connects to that
// server at its protocol minor, and a command of the new level is held
// back (409 held_back naming the server), as a snapshot restore is, while
// a snapshot save works without its audit record. Once the server is
// upgraded (restarted at this release's level) the command goes through
// and every replica applies it.
func TestMixedVersionCluster(t *testing.T) {
	pki := newTestPKI(t)
	c := newTestCluster(t, 3, func(cfg *Config) {
		pki.withAgents(t)(cfg)
		if cfg.NodeID == "s3" {
			earlierRelease(cfg)
		}
	})
	ctx := context.Background()
	old := c.Index("s3")
	c.propose(fileIntentN("web", 2, "v1"))
	c.waitConverged() // s3 answers the Pull below from its own replica
	waitFor(t, 10*time.Second, func() error {
		m, err := client(c.Server(0)).Members(ctx)
		if err != nil {
			return err
		}
		for _, mm := range m.Members {
			want := [2]uint16{fsm.FeatureLevel, wire.ProtocolMinor}
			if mm.ID == "s3" {
				want = [2]uint16{1, 3}
			}
			if got := [2]uint16{mm.FeatureLevel, mm.WireMinor}; got != want {
				return fmt.Errorf("%s advertises level and minor %v, want %v", mm.ID, got, want)
			}
		}
		return nil
	})

	// An agent of this release on the old server: the session runs at 1.3.
	a := dialAgent(t, c.Server(old).AgentAddr(), pki.deviceTLS(t, "dev-1"))
	a.send(hello(map[string]string{"region": "eu"}))
	if w := expect[*wire.Welcome](a); w.Minor != 3 {
		t.Fatalf("Welcome from the old server at minor %d", w.Minor)
	}
	a.send(&wire.Pull{Inventory: true})
	if d := expect[*wire.Delta](a); len(d.Upserts) != 2 {
		t.Fatalf("Delta from the old server: %d upserts", len(d.Upserts))
	}

	// Held back, on the leader and through any server.
	var held *HeldBackError
	if _, _, err := applied(ctx, c.waitLeader(), fsm.AuditOperationType, operation("snapshot-save")); !errors.As(err, &held) ||
		held.Level != 2 || len(held.Behind) != 1 || held.Behind[0].ID != "s3" || !strings.Contains(err.Error(), "s3 runs feature level 1 (Meteor "+Version+")") {
		t.Fatalf("a level 2 command with s3 at level 1: %v", err)
	}
	var apiErr *api.Error
	for _, s := range c.alive() {
		if _, _, err := applied(ctx, s, fsm.AuditOperationType, operation("snapshot-save")); !errors.As(err, &apiErr) && !errors.As(err, &held) {
			t.Fatalf("through %s: %v, want held back", s.ID(), err)
		}
	}
	var file bytes.Buffer
	if _, err := client(c.Server(0)).SaveSnapshot(ctx, &file, false); err != nil {
		t.Fatalf("a snapshot save in a mixed cluster: %v", err)
	}
	if _, err := client(c.Server(0)).RestoreSnapshot(ctx, bytes.NewReader(file.Bytes()), api.RestoreOptions{}); !errors.As(err, &apiErr) ||
		apiErr.StatusCode != http.StatusConflict || apiErr.Code != api.CodeHeldBack {
		t.Fatalf("a snapshot restore in a mixed cluster: %v", err)
	}
	c.propose(fileIntentN("web", 2, "v2")) // intents are still written

	// Upgrade s3 as an operator would: SIGTERM (drain, stop), start the
	// new release on its data dir.
	drained := make(chan struct{})
	go func() { c.Server(old).Drain(5 * time.Second); close(drained) }()
	if g := expect[*wire.GoAway](a); g.Code != wire.CodeShuttingDown {
		t.Fatalf("the agent on the server being upgraded: %+v", g)
	}
	a.conn.CloseWithError(wire.CloseNormal, "moving")
	<-drained
	c.kill(old)
	if _, err := c.RestartWith(old, upgraded); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 20*time.Second, func() error {
		_, _, err := applied(ctx, c.waitLeader(), fsm.AuditOperationType, operation("after-upgrade"))
		return err
	})
	c.waitConverged()
	recs, err := c.Server(old).State().Read().Audit(nil, fsm.AuditQuery{Limit: 1})
	if err != nil || len(recs) != 1 || recs[0].Action != "after-upgrade" {
		t.Fatalf("the upgraded server's newest audit record: %v %+v", err, recs)
	}
}

// TestRollingUpgradeAcrossAWireMinor: every server of a cluster of the
// earlier release (state machine level 1, protocol 1.3) is replaced in
// turn by this release, SIGTERM as an operator sends it, while real
// agents (protocol 1.4) stay connected and intents are written without a
// failed write; the agents converge on the last intent, an intent using
// a feature of level 3 is refused until the last server is upgraded, and
// then the leader raises the cluster's active level: the new command
// level opens and so does the intent.
func TestRollingUpgradeAcrossAWireMinor(t *testing.T) {
	pki := newTestPKI(t)
	c := newTestCluster(t, 3, func(cfg *Config) {
		pki.withAgents(t)(cfg)
		earlierRelease(cfg)
	})
	ctx := context.Background()
	c.propose(filesIntent("fleet", 2, "v0"))
	var agents []*runningAgent
	for i := range 3 {
		agents = append(agents, startAgent(t, pki, fmt.Sprintf("dev-%d", i), agentAddrs(c), map[string]string{"region": "eu"}, chaos.LinkProfile{}, nil))
	}
	for i := range agents {
		waitDeviceConverged(t, c, fmt.Sprintf("dev-%d", i))
	}

	// Intents are written throughout, through whichever server is up.
	stop := make(chan struct{})
	var writes atomic.Int64
	var mu sync.Mutex
	var failed []error
	var wg sync.WaitGroup
	wg.Go(func() {
		for n := 0; ; n++ {
			select {
			case <-stop:
				return
			case <-time.After(50 * time.Millisecond):
			}
			doc := putDoc(t, simpleIntent(fmt.Sprintf("w%d", n%5), fmt.Sprint(n)))
			var err error
			for _, s := range c.alive() {
				if _, err = client(s).PutIntent(ctx, fmt.Sprintf("w%d", n%5), doc, nil); err == nil {
					writes.Add(1)
					break
				}
				// A server that stops refuses what it cannot write, which
				// the next one takes; an outcome it cannot tell is a
				// failure: the client could not know whether to retry.
				var e *api.Error
				if errors.As(err, &e) && e.Code == api.CodeUnknownOutcome {
					break
				}
			}
			if err != nil {
				mu.Lock()
				failed = append(failed, err)
				mu.Unlock()
			}
		}
	})
	rotating := simpleIntent("rotating", "x")
	rotating.Resources[0].Rotation = &intent.Rotation{Deadline: "2099-01-01T00:00:00Z"}
	for i := range c.Size() {
		if _, err := client(c.waitLeader()).PutIntent(ctx, "rotating", putDoc(t, rotating), nil); !isHeldBack(err) {
			t.Fatalf("an intent with a rotation window with %d of %d servers upgraded: %v; want held_back", i, c.Size(), err)
		}
		s := c.Server(i)
		s.Drain(5 * time.Second)
		c.kill(i)
		if _, err := c.RestartWith(i, upgraded); err != nil {
			t.Fatal(err)
		}
		c.waitCaughtUp() // the restarted server holds the log before the next one stops
	}
	close(stop)
	wg.Wait()
	if len(failed) > 0 || writes.Load() == 0 {
		t.Fatalf("%d writes made, %d failed: %v", writes.Load(), len(failed), failed)
	}
	c.propose(filesIntent("fleet", 2, "v1"))
	for i, a := range agents {
		dev := waitDeviceConverged(t, c, fmt.Sprintf("dev-%d", i))
		if st := a.Status(); !st.Connected {
			t.Fatalf("dev-%d not connected after the upgrade (server %s)", i, dev.Server)
		}
	}
	if _, _, err := applied(ctx, c.waitLeader(), fsm.AuditOperationType, operation("upgraded")); err != nil {
		t.Fatalf("the new level after the last upgrade: %v", err)
	}
	waitFor(t, 20*time.Second, func() error {
		if l := c.waitLeader().State().Read().ActiveLevel(); l != fsm.FeatureLevel {
			return fmt.Errorf("active feature level %d", l)
		}
		return nil
	})
	if _, err := client(c.waitLeader()).PutIntent(ctx, "rotating", putDoc(t, rotating), nil); err != nil {
		t.Fatalf("an intent with a rotation window once every server is upgraded: %v", err)
	}
	c.waitConverged()
}

func isHeldBack(err error) bool {
	var e *api.Error
	return errors.As(err, &e) && e.Code == api.CodeHeldBack
}

// TestServerBelowTheActiveLevelStaysOutside: once the cluster's active
// feature level is raised, a server of an earlier release that joins is
// not added to the Raft configuration (its replica would apply the log
// the earlier way and diverge), while a server of this release joining
// after it is; upgraded, it joins and takes the state.
func TestServerBelowTheActiveLevelStaysOutside(t *testing.T) {
	c := newTestCluster(t, 3, func(cfg *Config) {
		if cfg.NodeID == "s4" {
			earlierRelease(cfg)
		}
	})
	c.propose(simpleIntent("web", "v1"))
	waitFor(t, 20*time.Second, func() error {
		if l := c.waitLeader().State().Read().ActiveLevel(); l != fsm.FeatureLevel {
			return fmt.Errorf("active feature level %d", l)
		}
		return nil
	})
	leader := c.waitLeader()
	old := c.add()
	waitFor(t, 20*time.Second, func() error {
		for _, m := range leader.gossip.members() {
			if m.ID == old.ID() && m.State == memberlist.StateAlive {
				return nil
			}
		}
		return fmt.Errorf("the leader does not see %s alive in gossip", old.ID())
	})
	// The pass that adds s5 considers s4 too, which the leader knew first.
	// (s4, outside, knows no leader: the cluster's own waits would fail.)
	j, err := c.Add()
	if err != nil {
		t.Fatal(err)
	}
	added := c.Server(j)
	waitFor(t, 20*time.Second, func() error {
		if v := votersOf(t, leader); !slices.Contains(v, added.ID()) {
			return fmt.Errorf("voters %v, want %s among them", v, added.ID())
		}
		return nil
	})
	if v := votersOf(t, leader); slices.Contains(v, old.ID()) {
		t.Fatalf("voters %v: %s, below the active level, was added", v, old.ID())
	}

	i := c.Index(old.ID())
	c.kill(i)
	if _, err := c.RestartWith(i, upgraded); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 20*time.Second, func() error {
		if v := votersOf(t, leader); !slices.Contains(v, old.ID()) {
			return fmt.Errorf("voters %v, want the upgraded %s among them", v, old.ID())
		}
		return nil
	})
	c.waitConverged()
}

package cluster

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/meteor-edge/meteor/fsm"
	"github.com/meteor-edge/meteor/wire"
)

// TestAckCommittedWithTheReport: once the cluster's active level is
// fsm.LevelAckWithStatus, a device's Ack of a change is committed by its
// owner with the report that follows it, in the report's status
// transition: the session server (here not the owner, so the report and
// its acknowledged revision are forwarded) commits no session record for
// it, and the status is judged by it. At level 3 the session server
// commits the Ack first, as servers of that release do.
func TestAckCommittedWithTheReport(t *testing.T) {
	for _, tc := range []struct {
		name   string
		level  uint16
		folded bool
	}{
		{"level 4", fsm.LevelAckWithStatus, true},
		{"level 3", fsm.LevelEdge, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pki := newTestPKI(t)
			c := newTestCluster(t, 3, func(cfg *Config) {
				pki.withAgents(t)(cfg)
				cfg.FeatureLevel = tc.level
				cfg.PullInterval = time.Hour
				// An Ack left to its report is never committed alone
				// during the test.
				cfg.AckFoldWait = time.Hour
			})
			eu := map[string]string{"region": "eu"}
			c.propose(filesIntent("store-config", 2, "v1"))
			f := c.follower()
			c.waitConverged()
			if l := f.State().Read().ActiveLevel(); l != tc.level {
				t.Fatalf("active level %d, want %d", l, tc.level)
			}
			dev := ""
			for i := 0; dev == ""; i++ {
				if id := fmt.Sprintf("kiosk-%d", i); f.OwnerOf(id, eu) != f.config.NodeID {
					dev = id
				}
			}

			a := dialAgent(t, f.AgentAddr(), pki.deviceTLS(t, dev))
			a.send(hello(eu))
			expect[*wire.Welcome](a)
			a.send(&wire.Pull{Inventory: true})
			applied := map[string]wire.ResourceReport{}
			seq := uint64(0)
			// apply takes d as the device would, acknowledges it, and
			// reports every resource converged.
			apply := func(d *wire.Delta) {
				t.Helper()
				a.send(&wire.Ack{Revision: d.TargetRevision})
				for _, u := range d.Upserts {
					applied[u.Key] = wire.ResourceReport{Key: u.Key, Effective: wire.EffectiveOK, State: wire.StateConverged,
						AppliedDigest: u.Digest, AppliedRevision: u.Revision}
				}
				seq++
				rep := &wire.Report{Seq: seq, DesiredRevision: d.TargetRevision, Full: true, Status: "converged", States: true}
				for _, r := range applied {
					rep.Resources = append(rep.Resources, r)
				}
				a.send(rep)
				if ack := expect[*wire.ReportAck](a); ack.Seq != seq {
					t.Fatalf("report %d acknowledged as %d", seq, ack.Seq)
				}
			}
			// converged waits until f's replica shows the device converged
			// on rev, having acknowledged it.
			converged := func(rev uint64) {
				t.Helper()
				waitFor(t, 10*time.Second, func() error {
					d, err := client(f).GetDevice(context.Background(), dev, apiStale)
					if err != nil {
						return err
					}
					if d.AckedRevision != rev || d.Status != "converged" {
						return fmt.Errorf("acknowledged revision %d, status %s (%s); want %d, converged", d.AckedRevision, d.Status, d.StatusReason, rev)
					}
					return nil
				})
			}
			first := expect[*wire.Delta](a)
			apply(first)
			converged(first.TargetRevision)

			before := f.AgentStats().RecordEvents
			c.propose(filesIntent("store-config", 2, "v2"))
			n := expect[*wire.Notify](a)
			if n.Delta == nil {
				t.Fatalf("Notify of revision %d without its Delta", n.Revision)
			}
			apply(n.Delta)
			converged(n.Revision)
			after := f.AgentStats().RecordEvents
			if tc.folded && after != before {
				t.Fatalf("the session server committed %d session events for the change, want none: the Ack goes with the report", after-before)
			}
			if !tc.folded && after == before {
				t.Fatal("at level 3 the session server committed no session record for the Ack")
			}
		})
	}
}

package cluster

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/meteor-edge/meteor/fsm"
	"github.com/meteor-edge/meteor/wire"
)

// TestReportsCommittedWhereTheSessionIs: a device in session on a follower
// that is not its home owner is owned by that follower once the replicas
// record the session: its report is committed by the follower, with no
// forward to another server, every server names the follower its owner,
// and the home owner's evaluations leave it alone. Once the session ends
// the device goes back to its home owner, and the follower lets it go.
func TestReportsCommittedWhereTheSessionIs(t *testing.T) {
	pki := newTestPKI(t)
	c := newTestCluster(t, 3, pki.withAgents(t))
	c.propose(fileIntentN("store", 1, "v0"))
	c.waitConverged()
	f := c.follower()
	eu := map[string]string{"region": "eu"}
	var dev string
	var home *Server
	for i := 0; dev == ""; i++ {
		id := fmt.Sprintf("kiosk-%d", i)
		if o := f.OwnerOf(id, eu); o != "" && o != f.ID() {
			dev = id
			for _, s := range c.alive() {
				if s.ID() == o {
					home = s
				}
			}
		}
	}
	// ownersAre waits until every server names want the device's owner,
	// in GET /v1/devices/{id} and in its ownership figures.
	ownersAre := func(want string) {
		t.Helper()
		waitFor(t, 20*time.Second, func() error {
			for _, s := range c.alive() {
				if o := s.OwnerOf(dev, eu); o != want {
					return fmt.Errorf("%s names %s the owner of %s, want %s", s.ID(), o, dev, want)
				}
				d, err := client(s).GetDevice(context.Background(), dev, apiStale)
				if err != nil {
					return err
				}
				if d.Owner != want {
					return fmt.Errorf("%s: GET /v1/devices/%s says owner %s, want %s", s.ID(), dev, d.Owner, want)
				}
			}
			return nil
		})
	}
	// holds says whether s's status owner keeps the device after an
	// evaluation.
	holds := func(s *Server) bool {
		t.Helper()
		if err := s.status.evaluate(s.clock.Now()); err != nil {
			t.Fatal(err)
		}
		s.status.mu.Lock()
		defer s.status.mu.Unlock()
		_, ok := s.status.devices[dev]
		return ok
	}

	a := dialAgent(t, f.AgentAddr(), pki.deviceTLS(t, dev))
	a.send(hello(eu))
	expect[*wire.Welcome](a)
	ownersAre(f.ID())

	forwarded := f.reportFwd.reports.Load()
	a.send(&wire.Report{Seq: 1, DesiredRevision: 1, Full: true, Status: "converged"})
	if ack := expect[*wire.ReportAck](a); ack.Seq != 1 {
		t.Fatalf("report 1 acknowledged as %d", ack.Seq)
	}
	if n := f.reportFwd.reports.Load() - forwarded; n != 0 {
		t.Errorf("%s forwarded %d reports of a device whose session it holds", f.ID(), n)
	}
	// The acknowledgement means the report is committed; every replica
	// applies it in its own time, through an election on a busy host too.
	waitRecordedAs(t, c, dev, func(rec *fsm.DeviceRecord) error {
		if rec.ReportSeq != 1 || rec.StatusOwner != f.ID() {
			return fmt.Errorf("report %d, status committed by %q; want report 1 committed by %s", rec.ReportSeq, rec.StatusOwner, f.ID())
		}
		return nil
	})
	if !holds(f) {
		t.Errorf("%s let go of %s, whose session it holds", f.ID(), dev)
	}
	if holds(home) {
		t.Errorf("the home owner %s judges %s, in session on %s", home.ID(), dev, f.ID())
	}

	a.close()
	waitFor(t, 20*time.Second, func() error {
		if rec := deviceRecord(t, f, dev); rec.Connected {
			return fmt.Errorf("%s still recorded in session on %s", dev, rec.Server)
		}
		return nil
	})
	ownersAre(home.ID())
	if holds(f) {
		t.Errorf("%s keeps judging %s, whose session ended", f.ID(), dev)
	}
	if !holds(home) {
		t.Errorf("the home owner %s does not judge %s once its session ended", home.ID(), dev)
	}
}

// TestFirstReportWaitsForTheSessionRecord: a report of a device in session
// on a server that will own it, sent before the replicas record the
// session (a device's first report after it connects), waits for that
// record and is committed by the session server, not forwarded to the
// device's home owner.
func TestFirstReportWaitsForTheSessionRecord(t *testing.T) {
	c := newTestCluster(t, 3, func(cfg *Config) { cfg.ClusterSecret = []byte("0123456789abcdef0123456789abcdef") })
	leader := c.waitLeader()
	f := c.follower()
	eu := map[string]string{"region": "eu"}
	var dev string
	for i := 0; dev == ""; i++ {
		if id := fmt.Sprintf("kiosk-%d", i); f.OwnerOf(id, eu) != f.ID() {
			dev = id
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	forwarded := f.reportFwd.reports.Load()
	done := make(chan error, 1)
	go func() {
		done <- f.deliverReport(ctx, dev, eu, 0, &wire.Report{Seq: 1, Full: true, Status: "converged", States: true, Resources: []wire.ResourceReport{
			{Key: "app/cfg", AppliedDigest: [32]byte{1}, AppliedRevision: 1, Effective: wire.EffectiveOK, State: wire.StateConverged},
		}})
	}()
	select {
	case err := <-done:
		t.Fatalf("the report was answered before the device had a record: %v", err)
	case <-time.After(100 * time.Millisecond):
		// Time for the report to reach its wait; it cannot be answered
		// before the record exists, whichever server takes it.
	}
	sess := fsm.DeviceSessionRequest{ID: dev, Labels: eu, SessionID: "s-" + dev, Server: f.ID(), Conn: "c", Connected: true, Time: 1}
	if res, _, err := applied(ctx, leader, fsm.DeviceSessionType, &sess); err != nil || res.Err != nil {
		t.Fatalf("record the session: %v %v", err, res.Err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if n := f.reportFwd.reports.Load() - forwarded; n != 0 {
		t.Errorf("%s forwarded %d reports of a device whose session it holds", f.ID(), n)
	}
	// Answered only once committed: the leader, whose answer f waited
	// for, has applied it.
	if rec := deviceRecord(t, leader, dev); rec.ReportSeq != 1 || rec.StatusOwner != f.ID() {
		t.Errorf("report %d, status committed by %q; want report 1 committed by %s", rec.ReportSeq, rec.StatusOwner, f.ID())
	}
}

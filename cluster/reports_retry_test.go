package cluster

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/meteor-edge/meteor/wire"
)

// TestReportRecordedOnceQuorumReturns: a report that arrives while the
// cluster cannot commit is kept by the session's server and recorded, and
// acknowledged, as soon as a majority is back, without the agent sending
// it again (this test's agent never resends): the device's status in the
// API follows the cluster's recovery, not the agent's resend backoff,
// which grows through a long outage.
func TestReportRecordedOnceQuorumReturns(t *testing.T) {
	pki := newTestPKI(t)
	c := newTestCluster(t, 3, pki.withAgents(t))
	c.propose(fileIntentN("store", 1, "v0"))
	c.waitConverged()
	s := c.Server(0)

	a := dialAgent(t, s.AgentAddr(), pki.deviceTLS(t, "dev-retry"))
	a.send(hello(map[string]string{"region": "eu"}))
	expect[*wire.Welcome](a)
	a.send(&wire.Ack{Revision: 1})
	waitFor(t, 10*time.Second, func() error {
		dev, err := client(s).GetDevice(context.Background(), "dev-retry", apiStale)
		if err != nil {
			return err
		}
		if !dev.Connected || dev.AckedRevision != 1 {
			return fmt.Errorf("device %+v", dev.DeviceSummary)
		}
		return nil
	})

	// The other two servers crash: nothing can commit.
	c.kill(1)
	c.kill(2)
	a.send(&wire.Report{Seq: 1, DesiredRevision: 1, Full: true, Status: "converged", Resources: []wire.ResourceReport{{
		Key: "store/r00", AppliedDigest: wire.Digest{1}, AppliedRevision: 1, Effective: wire.EffectiveOK,
	}}})
	// Long enough for the first attempts to fail: the forward to a dead
	// owner at once, a commit without a leader after the apply timeout.
	waitFor(t, 20*time.Second, func() error {
		if n := s.agents.stats.reports.Load(); n != 0 {
			return fmt.Errorf("%d reports recorded without a majority", n)
		}
		s.agents.mu.Lock()
		defer s.agents.mu.Unlock()
		for sess := range s.agents.sessions {
			sess.mu.Lock()
			retrying := sess.retrying != nil
			sess.mu.Unlock()
			if retrying {
				return nil
			}
		}
		return fmt.Errorf("no session retrying its report yet")
	})
	if n := s.AgentStats().ReportFailures; n == 0 {
		t.Fatal("a report retried while no failure to record it was counted")
	}
	c.restart(1)
	c.restart(2)
	c.waitLeader()
	if ack := expect[*wire.ReportAck](a); ack.Seq != 1 {
		t.Fatalf("report ack %d, want 1", ack.Seq)
	}
	waitFor(t, 10*time.Second, func() error {
		dev, err := client(s).GetDevice(context.Background(), "dev-retry", apiStale)
		if err != nil {
			return err
		}
		if dev.ReportSeq != 1 {
			return fmt.Errorf("device %+v", dev.DeviceSummary)
		}
		return nil
	})
}

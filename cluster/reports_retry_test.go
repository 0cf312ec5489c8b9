package cluster

import (
	"context"
	"fmt"
	"net/http"
	"strings"
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

// hangReports is a peer transport whose forwarded reports never get an
// answer, as when the owner's host vanished without a reset; it says on
// taken when it has one.
type hangReports struct {
	next  http.RoundTripper
	taken chan struct{}
}

func (h hangReports) RoundTrip(r *http.Request) (*http.Response, error) {
	if strings.HasPrefix(r.URL.Path, "/v1/internal/report") {
		select {
		case h.taken <- struct{}{}:
		default:
		}
		<-r.Context().Done()
		return nil, r.Context().Err()
	}
	return h.next.RoundTrip(r)
}

// TestPullAnsweredWhileAnOwnerHangs: a report handed to an owner that
// does not answer holds the session's read loop for reportFirstTry at
// most, not for as long as a forward may take (minutes): the agent's
// Pull behind it is answered, and the report is left to the retries. s1
// is of another region than the device, so its owner is another server
// though s1 holds its session.
func TestPullAnsweredWhileAnOwnerHangs(t *testing.T) {
	pki := newTestPKI(t)
	hang := hangReports{next: http.DefaultTransport, taken: make(chan struct{}, 1)}
	c := newTestCluster(t, 3, func(cfg *Config) {
		pki.withAgents(t)(cfg)
		if cfg.NodeID == "s1" {
			cfg.PeerClient = &http.Client{Transport: hang}
			cfg.Region = "us"
		}
	})
	c.propose(fileIntentN("store", 1, "v0"))
	c.waitConverged()
	s := c.Server(0)
	labels := map[string]string{"region": "eu"}
	var dev string
	waitFor(t, 10*time.Second, func() error {
		for i := range 100 {
			id := fmt.Sprintf("dev-%d", i)
			if o := s.OwnerOf(id, labels); o != "" && o != s.config.NodeID {
				dev = id
				return nil
			}
		}
		return fmt.Errorf("no device owned by another server yet")
	})
	a := dialAgent(t, s.AgentAddr(), pki.deviceTLS(t, dev))
	a.send(hello(labels))
	expect[*wire.Welcome](a)
	a.send(&wire.Report{Seq: 1, DesiredRevision: 1, Full: true, Status: "converged"})
	select {
	case <-hang.taken:
	case <-time.After(30 * time.Second): // a bound: the report goes at once
		t.Fatal("the report was not handed to its owner")
	}
	a.send(&wire.Pull{})
	// A bound well above reportFirstTry and far below the forward's.
	a.stream.SetReadDeadline(time.Now().Add(reportFirstTry + 25*time.Second))
	for {
		m, err := a.r.Read()
		if err != nil {
			t.Fatalf("no Delta for the Pull sent behind a report whose owner does not answer: %v", err)
		}
		if _, ok := m.(*wire.Delta); ok {
			return
		}
	}
}

package agent

import (
	"math"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestResendBackoff(t *testing.T) {
	longest := func(n int64) int64 { return n - 1 } // jitter draws its maximum
	shortest := func(int64) int64 { return 0 }      // and its minimum
	for _, tc := range []struct {
		name     string
		min, max time.Duration
		int64n   func(int64) int64
		want     []time.Duration
	}{
		{"doubles to the cap", time.Second, 8 * time.Second, longest,
			[]time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second, 8 * time.Second}},
		{"jitter halves at most", time.Second, 8 * time.Second, shortest,
			[]time.Duration{500 * time.Millisecond, time.Second, 2 * time.Second, 4 * time.Second, 4 * time.Second}},
		{"cap below min", 2 * time.Second, time.Second, longest,
			[]time.Duration{time.Second, time.Second}},
		{"cap not a power of two", time.Second, 3 * time.Second, longest,
			[]time.Duration{time.Second, 2 * time.Second, 3 * time.Second, 3 * time.Second}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := resendBackoff{min: tc.min, max: tc.max}
			var got []time.Duration
			for range tc.want {
				got = append(got, b.wait(tc.int64n))
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("waits (-want +got):\n%s", diff)
			}
			b.reset()
			if w := b.wait(tc.int64n); w != tc.want[0] {
				t.Errorf("after reset: %v, want %v", w, tc.want[0])
			}
		})
	}
}

// TestSessionResendsUnacknowledgedReport: a server that does not answer a
// report (as one that cannot commit it during an election does not) gets
// it again after a short backoff on the same connection, not a report
// interval (an hour here) later, and not a flood of them; once the server
// answers again the report is applied once and acknowledged.
func TestSessionResendsUnacknowledgedReport(t *testing.T) {
	c := newTestCluster(t)
	s1 := c.startServer("s1")
	c.setDesired(2, upsert(t, "app", 2, fileRes("a", "/etc/a", "A")))
	s1.setMode(serverMode{dropReports: true})
	cfg := c.agentConfig(t, "dev-resend", s1)
	cfg.ReportInterval = time.Hour
	cfg.ReportResendMin = 100 * time.Millisecond
	ag := startAgent(t, cfg)

	const drops = 4
	c.wait(t, waitLong, "the report resent while unacknowledged", func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		return len(c.dropped) >= drops
	})
	s1.setMode(serverMode{})
	c.mu.Lock()
	dropped := append([]droppedReport(nil), c.dropped...)
	c.mu.Unlock()
	// No flood: arrivals k and k+1 are at least half the k-th backoff
	// (100 ms doubling) apart, give or take the transit time of the
	// first. One second of slack keeps this a check of the count, not of
	// the timing.
	window := dropped[len(dropped)-1].at.Sub(dropped[0].at) + time.Second
	limit := 1 + int(math.Ceil(math.Log2(2*float64(window)/float64(cfg.ReportResendMin)+1)))
	if len(dropped) > limit {
		t.Errorf("%d reports sent within %v while unacknowledged, want at most %d", len(dropped), window, limit)
	}
	for i := 1; i < len(dropped); i++ {
		if dropped[i].seq < dropped[i-1].seq {
			t.Errorf("report seq went back from %d to %d", dropped[i-1].seq, dropped[i].seq)
		}
	}

	// Acknowledged on the same connection within a resend, with the
	// report interval an hour away.
	waitFor(t, waitLong, "the resent report acknowledged", func() bool {
		s := ag.Status()
		return s.PendingReports == 0 && s.AckedReportSeq >= dropped[len(dropped)-1].seq
	})
	reports, _, hellos := c.snapshot()
	if len(hellos) != 1 {
		t.Errorf("%d Hellos: the report must be resent without reconnecting", len(hellos))
	}
	for i := 1; i < len(reports); i++ {
		if reports[i].Seq <= reports[i-1].Seq {
			t.Errorf("report %d applied after %d", reports[i].Seq, reports[i-1].Seq)
		}
	}
	if st := ag.Status(); len(reports) == 0 || reports[len(reports)-1].Seq != st.AckedReportSeq {
		t.Errorf("applied reports %d, agent acked seq %d", len(reports), st.AckedReportSeq)
	}
}

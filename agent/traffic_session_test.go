package agent

import (
	"context"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/meteor-edge/meteor/wire"
)

// TestSessionReportsTraffic: reports to a server of protocol 1.3 carry the
// agent's traffic with that server, under its address as configured; the
// agent's status says what the last one carried, and counts on past it.
func TestSessionReportsTraffic(t *testing.T) {
	c := newTestCluster(t)
	s1 := c.startServer("s1")
	c.setDesired(3, upsert(t, "app", 3, fileRes("a", "/etc/app/a.conf", "A\n")))
	ag := startAgent(t, c.agentConfig(t, "dev-1", s1))

	c.wait(t, waitLong, "a converged report at revision 3", reportOf(c, 3, 1, StateConverged))
	server := s1.addr.String()
	var rep *wire.Report
	waitFor(t, waitLong, "the status to name the last report applied", func() bool {
		rep = c.lastReport()
		return ag.Status().ReportedTrafficSeq == rep.Seq
	})
	tr := rep.Traffic
	if tr == nil || len(tr.Servers) != 1 || tr.Servers[0].Server != server {
		t.Fatalf("report %d traffic %+v, want one row for %s", rep.Seq, tr, server)
	}
	if got := tr.Servers[0]; got.SentPackets == 0 || got.RecvPackets == 0 || got.SentBytes < 1200 || got.RecvBytes == 0 {
		t.Fatalf("traffic with %s: %+v", server, got)
	}
	st := ag.Status()
	if st.Traffic.Day != wire.TrafficDayStart(tr.Day) {
		t.Skip("the UTC day changed during the test")
	}
	if diff := cmp.Diff(tr, st.ReportedTraffic); diff != "" {
		t.Fatalf("status's reported traffic (-report +status):\n%s", diff)
	}
	if len(st.Traffic.Today) != 1 {
		t.Fatalf("status traffic %+v", st.Traffic)
	}
	if now, then := st.Traffic.Today[0], tr.Servers[0]; now.SentPackets < then.SentPackets || now.RecvPackets < then.RecvPackets ||
		now.SentBytes < then.SentBytes || now.RecvBytes < then.RecvBytes {
		t.Fatalf("counted now %+v, below what the report carried %+v", now, then)
	}
}

// TestTrafficSurvivesRestart: an agent that stops saves its counters, and
// the next agent on the same data dir counts on from them.
func TestTrafficSurvivesRestart(t *testing.T) {
	c := newTestCluster(t)
	s1 := c.startServer("s1")
	c.setDesired(3, upsert(t, "app", 3, fileRes("a", "/etc/app/a.conf", "A\n")))
	cfg := c.agentConfig(t, "dev-1", s1)
	first, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- first.Run(ctx) }()
	c.wait(t, waitLong, "a converged report at revision 3", reportOf(c, 3, 1, StateConverged))
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	before := first.Status().Traffic
	if len(before.Today) != 1 || before.Today[0].SentPackets == 0 {
		t.Fatalf("the first agent counted %+v", before)
	}

	second := startAgent(t, cfg)
	var after Traffic
	waitFor(t, waitLong, "the second agent to count", func() bool {
		after = second.Status().Traffic
		return len(after.Today) > 0
	})
	if !after.Day.Equal(before.Day) {
		t.Skip("the UTC day changed during the test")
	}
	if len(after.Today) != 1 {
		t.Fatalf("after the restart %+v, before %+v", after, before)
	}
	if b, a := before.Today[0], after.Today[0]; a.Server != b.Server || a.SentBytes < b.SentBytes || a.RecvBytes < b.RecvBytes ||
		a.SentPackets < b.SentPackets || a.RecvPackets < b.RecvPackets {
		t.Fatalf("counted from %+v after the restart; the first agent had %+v", a, b)
	}
}

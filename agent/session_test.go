package agent

import (
	"encoding/hex"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/meteor-edge/meteor/chaos"
	"github.com/meteor-edge/meteor/wire"
)

const waitLong = 15 * time.Second

func reportOf(c *testCluster, rev uint64, n int, status string) func() bool {
	return func() bool {
		r := c.lastReport()
		return r != nil && r.DesiredRevision == rev && len(r.Resources) == n && r.Status == status
	}
}

// TestSessionConverges: Hello, Welcome, Pull, Delta (in several frames),
// Ack, apply, Report, ReportAck; then Notify-driven changes and removals,
// and a stale Delta that must be ignored.
func TestSessionConverges(t *testing.T) {
	c := newTestCluster(t)
	s1 := c.startServer("s1")
	a1 := upsert(t, "app", 3, fileRes("a", "/etc/app/a.conf", "A\n"))
	b1 := upsert(t, "app", 5, fileRes("b", "/etc/app/b.conf", "B\n", "a"))
	c.setDesired(5, a1, b1)
	cfg := c.agentConfig(t, "dev-1", s1)
	ag := startAgent(t, cfg)

	c.wait(t, waitLong, "a converged report at revision 5", reportOf(c, 5, 2, StateConverged))
	_, acks, hellos := c.snapshot()
	if !slices.Equal(acks, []uint64{5}) {
		t.Errorf("acks = %v, want [5]", acks)
	}
	h := hellos[0]
	if h.device != "dev-1" || !h.hello.Inventory || !h.hello.SessionID.IsZero() || h.hello.Labels["site"] != "store-42" {
		t.Errorf("first Hello = %+v from device %q", h.hello, h.device)
	}
	if !c.lastReport().States {
		t.Error("report without typed resource states in a session at minor 1")
	}
	for _, r := range c.lastReport().Resources {
		if r.Effective != wire.EffectiveOK || r.AppliedDigest == (wire.Digest{}) || r.UpdatedAtUnixNano == 0 ||
			r.State != wire.StateConverged || r.Detail != "content and mode match" {
			t.Errorf("reported %+v", r)
		}
	}
	waitFor(t, waitLong, "report acknowledged", func() bool {
		s := ag.Status()
		return s.Connected && s.AckedRevision == 5 && s.PendingReports == 0 && s.AckedReportSeq == s.LastReportSeq
	})
	if got, err := os.ReadFile(filepath.Join(cfg.Root, "/etc/app/b.conf")); err != nil || string(got) != "B\n" {
		t.Errorf("b.conf = %q, %v", got, err)
	}

	// Revision 7 changes b and adds c; the Notify makes the agent pull.
	b2 := upsert(t, "app", 7, fileRes("b", "/etc/app/b.conf", "B2\n", "a"))
	c3 := upsert(t, "app", 7, fileRes("c", "/etc/app/c.conf", "C\n"))
	c.setDesired(7, a1, b2, c3)
	c.wait(t, waitLong, "a converged report at revision 7", reportOf(c, 7, 3, StateConverged))
	for _, r := range c.lastReport().Resources {
		if want := map[string]uint64{"app/a": 3, "app/b": 7, "app/c": 7}[r.Key]; r.AppliedRevision != want {
			t.Errorf("%s applied revision %d, want %d", r.Key, r.AppliedRevision, want)
		}
	}

	// Revision 8 removes c: forgotten, its file left on the device.
	c.setDesired(8, a1, b2)
	c.wait(t, waitLong, "a report at revision 8 without c", reportOf(c, 8, 2, StateConverged))
	if _, err := os.Stat(filepath.Join(cfg.Root, "/etc/app/c.conf")); err != nil {
		t.Errorf("c.conf: %v, want it left in place", err)
	}

	// A server answering with an older revision is ignored: nothing is
	// journaled or acked below 8; the next good Delta goes through.
	s1.setMode(serverMode{staleDelta: 6})
	c.setDesired(9, a1, b2, c3)
	waitFor(t, waitLong, "a stale Delta served", func() bool {
		s1.mu.Lock()
		defer s1.mu.Unlock()
		return s1.stale > 0
	})
	s1.setMode(serverMode{})
	c.setDesired(10, a1, b2)
	c.wait(t, waitLong, "ack of revision 10", func() bool {
		_, acks, _ := c.snapshot()
		return slices.Contains(acks, 10)
	})
	_, acks, _ = c.snapshot()
	if !slices.IsSorted(acks) || slices.Contains(acks, 6) {
		t.Errorf("acks = %v: must increase and never go back", acks)
	}
	if s := ag.Status(); s.DesiredRevision < 8 {
		t.Errorf("desired revision %d after a stale Delta", s.DesiredRevision)
	}
}

// TestSessionReportsToAServerOf10: in a session at protocol 1.0 the agent
// sends Reports without typed states, each resource's state at the start
// of its detail, as a 1.0 server reads it.
func TestSessionReportsToAServerOf10(t *testing.T) {
	c := newTestCluster(t)
	s1 := c.startServer("s1")
	s1.setMode(serverMode{protocol10: true})
	a1 := upsert(t, "app", 3, fileRes("a", "/etc/app/a.conf", "A\n"))
	b1 := upsert(t, "app", 3, fileRes("b", "/etc/app/b.conf", "B\n", "ghost"))
	c.setDesired(3, a1, b1)
	startAgent(t, c.agentConfig(t, "dev-1", s1))

	c.wait(t, waitLong, "a blocked report at revision 3", reportOf(c, 3, 2, StateBlocked))
	rep := c.lastReport()
	if rep.States || rep.Corrections || rep.Traffic != nil {
		t.Fatal("report with typed states, corrections or traffic in a session at minor 0")
	}
	got := map[string]string{}
	for _, r := range rep.Resources {
		if r.State != wire.StateUnknown {
			t.Errorf("%s: state %v in a 1.0 report", r.Key, r.State)
		}
		got[r.Key] = r.Detail
	}
	if d := got["app/a"]; d != "converged: content and mode match" {
		t.Errorf("app/a detail %q", d)
	}
	if d := got["app/b"]; !strings.HasPrefix(d, "blocked: requires app/ghost") {
		t.Errorf("app/b detail %q", d)
	}
}

// TestSessionResumeResendsReports: reports a server did not apply are
// sent again after a reconnect, coalesced into one new full report; the
// session resumes with its token, in 0-RTT.
func TestSessionResumeResendsReports(t *testing.T) {
	c := newTestCluster(t)
	s1 := c.startServer("s1")
	c.setDesired(2, upsert(t, "app", 2, fileRes("a", "/etc/a", "A")))
	s1.setMode(serverMode{dropReports: true})
	ag := startAgent(t, c.agentConfig(t, "dev-7", s1))

	// Converged on the resource itself: the device-level state also reads
	// converged before the first pass, when the agent has nothing.
	waitFor(t, waitLong, "an unacknowledged report", func() bool {
		s := ag.Status()
		return s.State == StateConverged && s.AckedRevision == 2 && len(s.Resources) == 1 &&
			s.Resources[0].State == StateConverged && s.PendingReports == 1 && s.LastReportSeq >= 1
	})
	before := ag.Status()
	// Close first: a report resent on the old connection must not be
	// applied before the reconnect.
	s1.closeSessions()
	s1.setMode(serverMode{})

	c.wait(t, waitLong, "the report resent after the reconnect", func() bool { return c.lastReport() != nil })
	rep := c.lastReport()
	if rep.Seq <= before.LastReportSeq || !rep.Full || rep.Status != StateConverged || len(rep.Resources) != 1 {
		t.Errorf("resent report = seq %d full %v status %q (%d resources); last seq before %d",
			rep.Seq, rep.Full, rep.Status, len(rep.Resources), before.LastReportSeq)
	}
	waitFor(t, waitLong, "the resent report acknowledged", func() bool {
		s := ag.Status()
		return s.PendingReports == 0 && s.AckedReportSeq == rep.Seq
	})
	_, _, hellos := c.snapshot()
	if len(hellos) < 2 {
		t.Fatalf("%d Hellos", len(hellos))
	}
	second := hellos[len(hellos)-1]
	if got := hex.EncodeToString(second.hello.SessionID[:]); got != before.SessionID || len(second.hello.ResumeToken) == 0 {
		t.Errorf("reconnect Hello session %s (token %d bytes), want %s", got, len(second.hello.ResumeToken), before.SessionID)
	}
	if second.hello.AckedRevision != 2 || !second.hello.Inventory || len(second.hello.Applied) != 1 {
		t.Errorf("reconnect Hello = %+v", second.hello)
	}
	// The Hello goes out in 0-RTT data unless the handshake completed
	// before it was written (Early says which; on loopback either can
	// happen); 0-RTT must have been offered and accepted.
	if !raceBuild && !second.used0RTT {
		t.Errorf("reconnect: 0-RTT not used (Hello early %v)", second.hello.Early)
	}
	c.mu.Lock()
	sessions := len(c.sessions)
	c.mu.Unlock()
	if sessions != 1 {
		t.Errorf("%d sessions, want the first one resumed", sessions)
	}
}

// TestSessionLagging: a server that is behind sends the agent elsewhere,
// by GoAway on a Pull or by Reject on the Hello; the agent follows the
// redirect and resumes its session there.
func TestSessionLagging(t *testing.T) {
	for _, tc := range []struct {
		name string
		mode func(redirect string) serverMode
	}{
		{"GoAway", func(r string) serverMode {
			return serverMode{goAwayOnPull: &wire.GoAway{Code: wire.CodeLagging, Reason: "behind", Redirect: []string{r}}}
		}},
		{"Reject", func(r string) serverMode {
			return serverMode{rejectHello: &wire.Reject{Code: wire.CodeLagging, Reason: "behind", Redirect: []string{r}}}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newTestCluster(t)
			s1, s2 := c.startServer("s1"), c.startServer("s2")
			s1.setMode(tc.mode(s2.addr.String()))
			c.setDesired(3, upsert(t, "app", 3, fileRes("a", "/etc/a", "A")))
			ag := startAgent(t, c.agentConfig(t, "dev-3", s1)) // only s1 configured

			c.wait(t, waitLong, "a converged report", reportOf(c, 3, 1, StateConverged))
			waitFor(t, waitLong, "connected to s2", func() bool { s := ag.Status(); return s.Connected && s.ServerID == "s2" })
			_, acks, hellos := c.snapshot()
			if !slices.Equal(acks, []uint64{3}) {
				t.Errorf("acks = %v", acks)
			}
			if hellos[0].server != "s1" || hellos[len(hellos)-1].server != "s2" {
				t.Errorf("Hellos went to %s first and %s last", hellos[0].server, hellos[len(hellos)-1].server)
			}
		})
	}
}

// TestNearestServer: with per-server delays of 5, 60 and 120 ms the agent
// settles on the 5 ms server and stays there; it moves when that server's
// delay grows to 200 ms, and fails over when the next one dies.
func TestNearestServer(t *testing.T) {
	c := newTestCluster(t)
	s1, s2, s3 := c.startServer("s1"), c.startServer("s2"), c.startServer("s3")
	c.setDesired(1, upsert(t, "app", 1, fileRes("a", "/etc/a", "A")))
	cfg := c.agentConfig(t, "dev-9", s1, s2, s3)
	// Probe rounds stay 100 ms apart: this test is about the choice, not
	// the backoff (TestProbeSchedule).
	cfg.RTTProbeInterval, cfg.RTTProbeMaxInterval = 100*time.Millisecond, 100*time.Millisecond
	delay := func(d time.Duration) chaos.LinkProfile {
		return chaos.LinkProfile{Delay: d, Jitter: 2 * time.Millisecond}
	}
	var pc *chaos.PacketConn
	cfg.ListenPacket = func() (net.PacketConn, error) {
		udp, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
		if err != nil {
			return nil, err
		}
		pc = chaos.NewPacketConn(udp, chaos.LinkProfile{}, 1, nil)
		for s, d := range map[*testServer]time.Duration{s1: 5 * time.Millisecond, s2: 60 * time.Millisecond, s3: 120 * time.Millisecond} {
			if err := pc.SetPeerProfile(s.addr, delay(d)); err != nil {
				return nil, err
			}
		}
		return pc, nil
	}
	ag := startAgent(t, cfg)
	on := func(s *testServer) func() bool {
		return func() bool { st := ag.Status(); return st.Connected && st.ServerID == s.id }
	}
	waitFor(t, waitLong, "connected to s1 (5 ms)", on(s1))

	// Stays put under jitter while the others are probed several times.
	waitFor(t, waitLong, "six probe rounds", func() bool { return s2.accepted() >= 7 && s3.accepted() >= 7 })
	if st := ag.Status(); st.ServerID != "s1" || st.Switches != 0 || st.Connects != 1 {
		t.Fatalf("after probes: server %s, %d switches, %d connects", st.ServerID, st.Switches, st.Connects)
	}
	if rtts := ag.Status().ServerRTTs; rtts[s1.addr.String()] >= rtts[s2.addr.String()] || rtts[s2.addr.String()] >= rtts[s3.addr.String()] {
		t.Errorf("measured RTTs %v", rtts)
	}

	// s1 becomes slow: the agent moves to the next nearest, s2.
	if err := pc.SetPeerProfile(s1.addr, delay(200*time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	waitFor(t, waitLong, "moved to s2 (60 ms)", on(s2))
	if st := ag.Status(); st.Switches != 1 {
		t.Errorf("%d switches, want 1", st.Switches)
	}

	// s2 dies (nothing reaches it any more): fail over to s3 (120 ms),
	// nearer than s1 (200 ms).
	if err := pc.SetPeerProfile(s2.addr, chaos.LinkProfile{Loss: 1}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, waitLong, "failed over to s3", on(s3))
	c.wait(t, waitLong, "a converged report", reportOf(c, 1, 1, StateConverged))
	// The ticket of s1 or s2 resumes the session at s3 in 0-RTT: a failed
	// dial to the dead server did not cost the agent its ticket.
	_, _, hellos := c.snapshot()
	if last := hellos[len(hellos)-1]; last.server != "s3" || !raceBuild && !last.used0RTT {
		t.Errorf("Hello at %s: 0-RTT %v, early %v; want 0-RTT at s3", last.server, last.used0RTT, last.hello.Early)
	}
}

// TestIdleAgentProbesByResuming: a converged, idle agent re-measures the
// servers only with resumed handshakes (no certificates sent either way)
// once the first choice is made, and its rounds back off
// (TestProbeSchedule has their spacing). Loopback RTTs on a busy host may
// move it; a move resumes too.
func TestIdleAgentProbesByResuming(t *testing.T) {
	c := newTestCluster(t)
	servers := []*testServer{c.startServer("s1"), c.startServer("s2"), c.startServer("s3")}
	c.setDesired(1, upsert(t, "app", 1, fileRes("a", "/etc/a", "A")))
	cfg := c.agentConfig(t, "dev-8", servers...)
	cfg.RTTProbeInterval, cfg.RTTProbeMaxInterval = 50*time.Millisecond, 400*time.Millisecond
	ag := startAgent(t, cfg)
	c.wait(t, waitLong, "a converged report", reportOf(c, 1, 1, StateConverged))
	waitFor(t, waitLong, "a first probe round", func() bool { return ag.Status().ProbeRounds >= 1 })
	full, accepted := map[*testServer]int{}, 0
	for _, s := range servers {
		full[s] = s.fullHandshakes()
		accepted += s.accepted()
	}
	rounds := ag.Status().ProbeRounds
	waitFor(t, waitLong, "five more probe rounds", func() bool { return ag.Status().ProbeRounds >= rounds+5 })
	for _, s := range servers {
		if n := s.fullHandshakes() - full[s]; n != 0 {
			t.Errorf("%s took %d full handshakes in five probe rounds (the agent is on %s); want every probe resumed", s.id, n, ag.Status().ServerID)
		}
		accepted -= s.accepted()
	}
	// Each round probes the servers other than the agent's own, but on a
	// busy host a probe may time out before its server accepts it, or be
	// closed by the agent (measured) before the server's accept loop
	// counts it: so the rounds are only shown to have probed at all, one
	// accepted probe a round on average, which is what makes the
	// assertion on full handshakes above mean something.
	if -accepted < 5 {
		t.Errorf("%d connections in five probe rounds: the probes did not happen", -accepted)
	}
	if st := ag.Status(); st.Switches > 0 {
		t.Logf("the agent moved %d times (to %s) on loopback", st.Switches, st.ServerID)
	}
}

// TestSession0RTTRejected: a server that cannot use the agent's ticket
// (other ticket keys) refuses its 0-RTT data; the agent sends Hello again
// after the handshake and the session resumes.
func TestSession0RTTRejected(t *testing.T) {
	if raceBuild {
		// quic-go v0.65 writes the peer's transport parameters on its run
		// loop when 0-RTT is rejected while OpenStream reads them: a data
		// race inside quic-go (quic-go/quic-go#4303, open). The agent code
		// under test is the same with and without -race; make test-short
		// runs this test.
		t.Skip("race builds send no early data (see race.go), so 0-RTT is never refused; make test runs this package again without -race")
	}
	c := newTestCluster(t)
	s1 := c.startServer("s1")
	c.setDesired(1, upsert(t, "app", 1, fileRes("a", "/etc/a", "A")))
	ag := startAgent(t, c.agentConfig(t, "dev-5", s1))
	c.wait(t, waitLong, "a converged report", reportOf(c, 1, 1, StateConverged))
	waitFor(t, waitLong, "the report acknowledged", func() bool { return ag.Status().PendingReports == 0 })
	sid := ag.Status().SessionID

	s1.tlsConf.SetSessionTicketKeys(wire.TicketKeys([]byte("another-cluster-secret-0123456789"), time.Now(), time.Hour))
	s1.closeSessions()
	c.wait(t, waitLong, "a second Hello", func() bool { _, _, h := c.snapshot(); return len(h) >= 2 })
	waitFor(t, waitLong, "reconnected", func() bool { s := ag.Status(); return s.Connected && s.Connects == 2 })
	_, _, hellos := c.snapshot()
	second := hellos[1]
	if second.used0RTT || second.hello.Early {
		t.Errorf("second connection: 0-RTT %v, Hello early %v; want a plain Hello after the refused 0-RTT", second.used0RTT, second.hello.Early)
	}
	if got := hex.EncodeToString(second.hello.SessionID[:]); got != sid {
		t.Errorf("second Hello session %s, want %s resumed", got, sid)
	}
	if n := ag.refused0RTT.Load(); n != 1 {
		t.Errorf("%d refusals of 0-RTT seen, want 1", n)
	}
	if s := ag.Status(); s.SessionID != sid || s.State != StateConverged {
		t.Errorf("after reconnect: session %s state %s", s.SessionID, s.State)
	}
}

// TestSessionRollbackToApplied: a change that cannot apply is rolled back
// to what the device already has. The server then sends nothing for the
// resource (the inventory already matches), and the agent goes back to
// the applied body without a step.
func TestSessionRollbackToApplied(t *testing.T) {
	c := newTestCluster(t)
	s1 := c.startServer("s1")
	good := upsert(t, "app", 2, fileRes("a", "/etc/a", "good"))
	c.setDesired(2, good)
	ag := startAgent(t, c.agentConfig(t, "dev-2", s1))
	c.wait(t, waitLong, "converged at 2", reportOf(c, 2, 1, StateConverged))

	bad := upsert(t, "app", 3, fileRes("a", "relative/path", "bad"))
	c.setDesired(3, bad)
	c.wait(t, waitLong, "failed at 3", reportOf(c, 3, 1, StateFailed))
	if r := c.lastReport().Resources[0]; r.AppliedDigest != good.Digest || r.LastError == "" {
		t.Errorf("failed resource reported as %+v", r)
	}

	c.setDesired(4, good)
	c.wait(t, waitLong, "converged at 4", reportOf(c, 4, 1, StateConverged))
	st := ag.Status()
	if len(st.Resources) != 1 {
		t.Fatalf("resources %+v", st.Resources)
	}
	r := st.Resources[0]
	if r.DesiredDigest != hex.EncodeToString(good.Digest[:]) || r.AppliedDigest != r.DesiredDigest || r.Attempts != 0 {
		t.Errorf("after the rollback: %+v", r)
	}
}

package main

import (
	"context"
	"encoding/json"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/meteor-edge/meteor/bench/internal/benchkit"
)

// TestStormTiny runs part 4 end to end at tiny scale: three meteor server
// processes, 30 devices on one of them, SIGKILL, and every device must
// resume its own session on a survivor without a resync.
func TestStormTiny(t *testing.T) {
	bin := meteorForTest(t, "starts meteor server processes")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	modes := "full,0rtt"
	if raceBuild {
		modes = "full"
	}
	out := t.TempDir()
	cfg, err := parseFlags([]string{"-parts", "storm", "-storm-agents", "30", "-storm-modes", modes, "-storm-timeout", "1m",
		"-resources", "5", "-storm-sockets", "2", "-meteor-bin", bin, "-out", out, "-raise-udp-buffers=false"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	var stdout, log strings.Builder
	if err := run(ctx, cfg, &stdout, &log); err != nil {
		t.Fatalf("run: %v\nstdout:\n%s\nlog:\n%s", err, stdout.String(), log.String())
	}
	b, err := os.ReadFile(filepath.Join(out, "sessions.json"))
	if err != nil {
		t.Fatal(err)
	}
	var rep report
	if err := json.Unmarshal(b, &rep); err != nil {
		t.Fatal(err)
	}
	st := rep.Storm
	if st == nil || len(st.Modes) != len(cfg.stormModes) {
		t.Fatalf("storm result %+v", st)
	}
	for _, m := range st.Modes {
		if m.InitialFailed != 0 || m.Opened != 30 || m.Resumed != 30 || m.NewSession != 0 || m.Resyncs != 0 || m.NotOpened != 0 {
			t.Errorf("%s: initial failures %d, opened %d, resumed %d, new sessions %d, resyncs %d, not opened %d; errors %v",
				m.Mode, m.InitialFailed, m.Opened, m.Resumed, m.NewSession, m.Resyncs, m.NotOpened, m.Errors)
		}
		if m.PerServer[m.Victim] != 0 || len(m.PerServer) == 0 || m.ResumedAllms <= 0 || m.Resumed50ms > m.ResumedAllms {
			t.Errorf("%s: per server %v (victim %s), 50%% %v ms, all %v ms", m.Mode, m.PerServer, m.Victim, m.Resumed50ms, m.ResumedAllms)
		}
		if m.RecordedOnSurvivor+m.ClosedAfter != 30 || m.RecordsSec < m.ResumedAllms/1000 {
			t.Errorf("%s: %d devices recorded on a survivor (%d disconnected, %d on the dead server) after %v s",
				m.Mode, m.RecordedOnSurvivor, m.RecordedDisconnected, m.RecordedOnVictim, m.RecordsSec)
		}
		if m.ServerCPUSettleds <= 0 || m.RaftEntries == 0 {
			t.Errorf("%s: survivors' CPU %v s, %d Raft entries", m.Mode, m.ServerCPUSettleds, m.RaftEntries)
		}
		switch m.Key {
		case stormFull:
			if m.TLSResumed != 0 || m.Used0RTT != 0 {
				t.Errorf("full handshakes: %d TLS resumed, %d used 0-RTT", m.TLSResumed, m.Used0RTT)
			}
		case storm0RTT:
			if m.WithTicket != 30 || m.TLSResumed != 30 || m.Used0RTT+m.Rejected0RTT != 30 {
				t.Errorf("0-RTT: %d with ticket, %d TLS resumed, %d used 0-RTT, %d refused", m.WithTicket, m.TLSResumed, m.Used0RTT, m.Rejected0RTT)
			}
		}
	}
	if len(rep.Summary) != 2 {
		t.Fatalf("summary %+v", rep.Summary)
	}
	if len(rep.Elections.Clusters) != len(cfg.stormModes) || rep.Elections.Unknown() != 0 {
		t.Errorf("elections %+v", rep.Elections)
	}
	for _, r := range rep.Summary {
		if r.Bench != stormBench || r.Name != "sessions" || (r.Meteor == "" && !raceBuild) {
			t.Errorf("summary row %+v", r)
		}
	}
}

func TestStormPolicy(t *testing.T) {
	for n, want := range map[int]time.Duration{1: 500 * time.Millisecond, 2: time.Second, 6: 16 * time.Second, 7: 30 * time.Second, 50: 30 * time.Second} {
		if got := backoff(stormBackoffMin, stormBackoffMax, n); got != want {
			t.Errorf("backoff after %d failures = %v, want %v", n, got, want)
		}
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for range 1000 {
		if d := jittered(rng, time.Second); d < 500*time.Millisecond || d > time.Second {
			t.Fatalf("jittered(1s) = %v", d)
		}
	}
}

func TestStormSummaryAndPercentiles(t *testing.T) {
	ms := func(n int) time.Duration { return time.Duration(n) * time.Millisecond }
	var outcomes []stormOutcome
	for i := 1; i <= 100; i++ {
		outcomes = append(outcomes, stormOutcome{ok: true, resumed: true, attempts: 1, welcome: ms(i), delta: ms(10 * i), server: "s1"})
	}
	m := &stormMode{PerServer: map[string]int{}}
	summarizeStorm(m, outcomes)
	if m.Resumed50ms != 500 || m.Resumed99ms != 990 || m.ResumedAllms != 1000 || m.Opened != 100 || m.Retries != 0 || m.PerServer["s1"] != 100 {
		t.Errorf("summary %+v", m)
	}
	// A device that never resumed is the slowest: no 100% figure.
	outcomes[0] = stormOutcome{attempts: 3}
	m = &stormMode{PerServer: map[string]int{}}
	summarizeStorm(m, outcomes)
	if m.ResumedAllms != 0 || m.NotOpened != 1 || m.Retries != 2 || m.Resumed99ms != 1000 || m.allResumed() {
		t.Errorf("with one failure %+v", m)
	}
	z := &stormMode{Key: storm0RTT, Mode: stormModeName(storm0RTT), Opened: 10, ResumedAllms: 2000, ServerCPUSettleds: 4}
	f := &stormMode{Key: stormFull, Mode: stormModeName(stormFull), Opened: 10, ResumedAllms: 3000, ServerCPUSettleds: 6}
	rows := stormSummary(&stormResult{Agents: 10000, Detect: detectKill, Modes: []*stormMode{z, f}})
	if len(rows) != 2 || rows[0].Figure != "time until all 10,000 resumed after their server died" || rows[0].Meteor != "2.00 s" || rows[0].Peer != "3.00 s" ||
		rows[0].Ratio != "1.50x (full / 0-RTT)" || rows[1].Ratio != "1.50x (full / 0-RTT)" || rows[1].PeerName != "full handshakes" {
		t.Errorf("rows %+v", rows)
	}
}

// meteorForTest returns the meteor binary built for this test, which is
// skipped in -short mode (why says what it needs the binary for) and
// outside the module.
func meteorForTest(t *testing.T, why string) string {
	t.Helper()
	if testing.Short() {
		t.Skip(why)
	}
	root, err := benchkit.ModuleRoot()
	if err != nil {
		t.Skip(err)
	}
	return benchkit.MeteorBinaryForTest(t, root)
}

package benchkit

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/meteor-edge/meteor/cluster/api"
)

// durations returns 1..n nanoseconds.
func durations(n int) []time.Duration {
	out := make([]time.Duration, n)
	for i := range out {
		out[i] = time.Duration(i + 1)
	}
	return out
}

func TestPercentileNearestRank(t *testing.T) {
	hundred := make([]time.Duration, 100)
	for i := range hundred {
		hundred[i] = time.Duration(i+1) * time.Millisecond
	}
	tests := []struct {
		name   string
		sorted []time.Duration
		p      float64
		want   time.Duration
	}{
		{"empty", nil, 50, 0},
		{"single p50", []time.Duration{7}, 50, 7},
		{"single p99", []time.Duration{7}, 99, 7},
		{"p50 of 1..100", hundred, 50, 50 * time.Millisecond},
		{"p99 of 1..100", hundred, 99, 99 * time.Millisecond},
		{"p100 is the max", hundred, 100, 100 * time.Millisecond},
		{"p1 of 1..100", hundred, 1, 1 * time.Millisecond},
		{"tiny p is the min", hundred, 0.001, 1 * time.Millisecond},
		{"p50 of four rounds down", []time.Duration{1, 2, 3, 4}, 50, 2},
		{"p51 of four", []time.Duration{1, 2, 3, 4}, 51, 3},
		{"p99 of 200 is the 198th", durations(200), 99, 198},
		{"p99 of ten is the max", durations(10), 99, 10},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Percentile(tt.sorted, tt.p); got != tt.want {
				t.Errorf("Percentile(%d values, %v) = %v, want %v", len(tt.sorted), tt.p, got, tt.want)
			}
		})
	}
}

func TestParseLevels(t *testing.T) {
	got, err := ParseLevels("64, 1,16,16", "clients", 4096)
	if err != nil {
		t.Fatal(err)
	}
	if want := []int{1, 16, 64}; !slices.Equal(got, want) {
		t.Errorf("ParseLevels = %v, want %v", got, want)
	}
	for _, bad := range []string{"", "0", "1,x", "-3", "4097"} {
		if _, err := ParseLevels(bad, "clients", 4096); err == nil {
			t.Errorf("ParseLevels(%q): no error", bad)
		}
	}
	if _, err := ParseLevels("0", "agents", 10); err == nil || !strings.HasPrefix(err.Error(), `-agents "0": "0" is not a count between 1 and 10`) {
		t.Errorf("error %v", err)
	}
}

func TestCPUTimeOfSelf(t *testing.T) {
	if _, err := os.Stat("/proc/self/stat"); err != nil {
		t.Skip("no /proc")
	}
	// Burn CPU until the reading moves: /proc counts in clock ticks, and on
	// a busy host 50 ms of wall time can be less than one tick of CPU.
	deadline := time.Now().Add(30 * time.Second)
	for {
		d, err := CPUTime("self")
		if err != nil {
			t.Fatal(err)
		}
		if d > 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("CPUTime(self) = %v after burning CPU for 30 s", d)
		}
		for end := time.Now().Add(10 * time.Millisecond); time.Now().Before(end); {
		}
	}
}

func TestFreePortsAreDistinct(t *testing.T) {
	for _, udp := range []bool{false, true} {
		ports, err := FreePorts(6, udp)
		if err != nil {
			t.Fatal(err)
		}
		seen := map[int]bool{}
		for _, p := range ports {
			if seen[p] || p <= 0 {
				t.Errorf("udp %v: ports %v", udp, ports)
			}
			seen[p] = true
		}
	}
}

// TestStopAllKillsEveryStraggler: several children ignore SIGTERM; every
// one must be killed once the grace is over, not only the first.
func TestStopAllKillsEveryStraggler(t *testing.T) {
	if _, err := os.Stat("/bin/sh"); err != nil {
		t.Skip("no /bin/sh")
	}
	dir := t.TempDir()
	var g Group
	var procs []*Proc
	for i := range 3 {
		name := fmt.Sprintf("stubborn-%d", i)
		p, err := g.Start(name, "/bin/sh", []string{"-c", `trap "" TERM; echo up; sleep 60`}, nil, dir, filepath.Join(dir, name+".log"))
		if err != nil {
			t.Fatal(err)
		}
		if err := WaitFor(context.Background(), 10*time.Second, 10*time.Millisecond, p, func(context.Context) error {
			if p.LogTail(1) != "up" {
				return errors.New("not up yet")
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		procs = append(procs, p)
	}
	done := make(chan struct{})
	go func() { g.StopAll(50 * time.Millisecond); close(done) }()
	select {
	case <-done:
	case <-time.After(30 * time.Second): // the children would sleep for 60 s
		t.Fatal("StopAll waited for a child that ignored SIGTERM instead of killing it")
	}
	for _, p := range procs {
		if !p.Exited() {
			t.Errorf("%d still running", p.PID())
		}
	}
}

func TestGroupStartsAndStops(t *testing.T) {
	sh, err := os.Stat("/bin/sh")
	if err != nil || sh.IsDir() {
		t.Skip("no /bin/sh")
	}
	dir := t.TempDir()
	var g Group
	// The child ignores SIGTERM, so StopAll has to kill it.
	p, err := g.Start("sleeper", "/bin/sh", []string{"-c", `trap "" TERM; echo "$BENCHKIT_TEST"; sleep 30`}, []string{"BENCHKIT_TEST=hello"}, dir, filepath.Join(dir, "sleeper.log"))
	if err != nil {
		t.Fatal(err)
	}
	if err := WaitFor(context.Background(), 10*time.Second, 10*time.Millisecond, p, func(context.Context) error {
		if p.LogTail(1) != "hello" {
			return errors.New("no output yet")
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if p.Exited() || p.Err() != nil {
		t.Fatal("exited early")
	}
	if _, err := p.CPUTime(); err != nil {
		t.Error(err)
	}
	start := time.Now()
	g.StopAll(100 * time.Millisecond)
	if !p.Exited() || p.Err() == nil {
		t.Errorf("after StopAll: exited %v, err %v", p.Exited(), p.Err())
	}
	if time.Since(start) > 10*time.Second {
		t.Errorf("StopAll took %s", time.Since(start))
	}
	err = WaitFor(context.Background(), time.Second, 10*time.Millisecond, p, func(context.Context) error { return errors.New("never") })
	if err == nil || !strings.Contains(err.Error(), "exited") {
		t.Errorf("WaitFor on an exited process: %v", err)
	}
}

func TestTempDirKeepsOnFailure(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		runErr error
		keep   bool
		kept   bool
	}{{nil, false, false}, {nil, true, true}, {errors.New("boom"), false, true}} {
		dir, finish, err := TempDir(ctx, "benchkit-test-", "stuff", tc.keep, io.Discard)
		if err != nil {
			t.Fatal(err)
		}
		runErr := tc.runErr
		finish(&runErr)
		_, serr := os.Stat(dir)
		if kept := serr == nil; kept != tc.kept {
			t.Errorf("err %v keep %v: kept %v", tc.runErr, tc.keep, kept)
		}
		os.RemoveAll(dir)
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	dir, finish, err := TempDir(cctx, "benchkit-test-", "stuff", false, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	var runErr error
	finish(&runErr)
	if runErr == nil || runErr.Error() != "interrupted" {
		t.Errorf("cancelled run: err %v", runErr)
	}
	if _, err := os.Stat(dir); err == nil {
		t.Error("cancelled run kept its dir")
		os.RemoveAll(dir)
	}
}

func TestWriteResults(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "out")
	if err := WriteResults(dir, "x", map[string]int{"a": 1}, "# x\n"); err != nil {
		t.Fatal(err)
	}
	j, _ := os.ReadFile(filepath.Join(dir, "x.json"))
	m, _ := os.ReadFile(filepath.Join(dir, "x.md"))
	if string(j) != "{\n  \"a\": 1\n}\n" || string(m) != "# x\n" {
		t.Errorf("json %q md %q", j, m)
	}
}

// healthServer answers GET /v1/health with term and status, and a commit
// index ten times the term.
func healthServer(t *testing.T, term uint64, status int) string {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/health" {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		json.NewEncoder(w).Encode(api.Health{Term: term, CommitIndex: 10 * term, Healthy: status == http.StatusOK})
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

func TestRaftTermIsTheHighestAnswered(t *testing.T) {
	ctx := context.Background()
	// A server that does not answer is passed over.
	gone := httptest.NewServer(http.NotFoundHandler())
	goneAddr := gone.Listener.Addr().String()
	gone.Close()
	// A server in an election answers 503 with its term; addresses may
	// be URLs or host:port.
	addrs := []string{
		healthServer(t, 5, http.StatusOK),
		goneAddr,
		healthServer(t, 7, http.StatusServiceUnavailable),
		strings.TrimPrefix(healthServer(t, 6, http.StatusOK), "http://"),
	}
	clients := func(addrs ...string) []*api.Client {
		var out []*api.Client
		for _, a := range addrs {
			out = append(out, api.NewClient(a, nil))
		}
		return out
	}
	got, err := RaftTerm(ctx, clients(addrs...))
	if err != nil {
		t.Fatal(err)
	}
	if got != 7 {
		t.Errorf("RaftTerm = %d, want 7", got)
	}
	if _, err := RaftTerm(ctx, clients(goneAddr)); err == nil {
		t.Error("no error when no server answers")
	}
	if got, err := api.HighestCommitIndex(ctx, clients(addrs...)); err != nil || got != 70 {
		t.Errorf("HighestCommitIndex = %d, %v; want 70", got, err)
	}
	if _, err := api.HighestCommitIndex(ctx, clients(goneAddr)); err == nil {
		t.Error("HighestCommitIndex: no error when no server answers")
	}
}

func TestElections(t *testing.T) {
	for _, tc := range []struct {
		start, end uint64
		want       int
	}{{4, 4, 0}, {4, 7, 3}, {7, 4, 0}} {
		if got := Elections(tc.start, tc.end); got != tc.want {
			t.Errorf("Elections(%d, %d) = %d, want %d", tc.start, tc.end, got, tc.want)
		}
	}
}

func TestThousands(t *testing.T) {
	for n, want := range map[int]string{0: "0", 999: "999", 1000: "1,000", 100000: "100,000", 1234567: "1,234,567", -1234: "-1,234"} {
		if got := Thousands(n); got != want {
			t.Errorf("Thousands(%d) = %q, want %q", n, got, want)
		}
	}
}

func TestTargetLogKeepsTheFirstTimeOfEachTarget(t *testing.T) {
	var l TargetLog
	t0 := time.Unix(100, 0)
	l.Record(3, t0)
	l.Record(3, t0.Add(time.Second)) // a repeat adds nothing
	l.Record(2, t0.Add(2*time.Second))
	l.Record(7, t0.Add(3*time.Second))
	for _, tc := range []struct {
		target uint64
		want   time.Time
		ok     bool
	}{{1, t0, true}, {3, t0, true}, {4, t0.Add(3 * time.Second), true}, {7, t0.Add(3 * time.Second), true}, {8, time.Time{}, false}} {
		if got, ok := l.First(tc.target); ok != tc.ok || !got.Equal(tc.want) {
			t.Errorf("First(%d) = %v, %v; want %v, %v", tc.target, got, ok, tc.want, tc.ok)
		}
	}
	var other TargetLog
	other.Record(9, t0.Add(time.Second))
	if got := TimesSince([]*TargetLog{&l, &other, {}}, 4, t0); len(got) != 2 || got[0] != time.Second || got[1] != 3*time.Second {
		t.Errorf("TimesSince = %v", got)
	}
}

func TestPercentileOfCountsDevicesThatNeverArrived(t *testing.T) {
	sorted := []time.Duration{1, 2, 3, 4, 5, 6, 7, 8, 9}
	if got, ok := PercentileOf(sorted, 10, 50); !ok || got != 5 {
		t.Errorf("p50 of 9 arrivals out of 10 = %v, %v", got, ok)
	}
	if _, ok := PercentileOf(sorted, 10, 99); ok {
		t.Error("p99 with one device missing out of 10: reached")
	}
	if got, ok := PercentileOf(sorted, 9, 100); !ok || got != 9 {
		t.Errorf("p100 of all = %v, %v", got, ok)
	}
}

func TestParseUDPDrops(t *testing.T) {
	text := []byte(`   sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode ref pointer drops
    0: 0100007F:E9CF 00000000:0000 07 00000000:00000000 00:00000000 00000000     0        0 386332 2 000000006cfe84a1 17
    1: 0100007F:A9CF 00000000:0000 07 00000000:00000000 00:00000000 00000000     0        0 383488 2 0000000025f06d51 0
    2: 0100007F:0035 00000000:0000 07 00000000:00000000 00:00000000 00000000     0        0 383488 2 0000000025f06d51 9
`)
	got, err := ParseUDPDrops(text, []int{0xE9CF, 0xA9CF, 4242})
	if err != nil {
		t.Fatal(err)
	}
	if got[0xE9CF] != 17 || got[0xA9CF] != 0 || len(got) != 2 {
		t.Errorf("drops %v", got)
	}
	if n := SumDrops(map[int]uint64{0xE9CF: 5}, got, []int{0xE9CF, 0xA9CF}); n != 12 {
		t.Errorf("SumDrops = %d, want 12", n)
	}
	if _, err := ParseUDPDrops([]byte("garbage\n"), nil); err == nil {
		t.Error("bad header: no error")
	}
}

func TestParseUDPStats(t *testing.T) {
	text := []byte(`Ip: Forwarding DefaultTTL
Ip: 1 64
Udp: InDatagrams NoPorts InErrors OutDatagrams RcvbufErrors SndbufErrors InCsumErrors IgnoredMulti MemErrors
Udp: 79132 1129 40 80228 38 2 0 0 0
UdpLite: InDatagrams NoPorts InErrors OutDatagrams RcvbufErrors SndbufErrors InCsumErrors IgnoredMulti MemErrors
UdpLite: 0 0 0 0 0 0 0 0 0
`)
	got, err := ParseUDPStats(text)
	if err != nil {
		t.Fatal(err)
	}
	if want := (UDPStats{InDatagrams: 79132, RcvbufErrors: 38, SndbufErrors: 2}); got != want {
		t.Errorf("got %+v, want %+v", got, want)
	}
	for _, bad := range []string{"Ip: 1\n", "Udp: InDatagrams RcvbufErrors SndbufErrors\nUdp: 1 2\n", "Udp: A B C\nUdp: 1 2 3\n"} {
		if _, err := ParseUDPStats([]byte(bad)); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}

func TestParseSSBuffers(t *testing.T) {
	text := []byte(`UNCONN 0      0      127.0.0.1:33454   0.0.0.0:*    
	 skmem:(r0,rb14680064,t0,tb14680064,f4096,w0,o0,bl0,d3)
UNCONN 0      0      127.0.0.1:37145   0.0.0.0:*    
	 skmem:(r0,rb8388608,t0,tb212992,f4096,w0,o0,bl0,d0) 
UNCONN 0      0      [::1]:39152   [::]:*    
	 skmem:(r0,rb212992,t0,tb212992,f4096,w0,o0,bl0,d0)  
`)
	got := parseSSBuffers(text, []int{33454, 37145, 39152, 1})
	want := map[int]UDPBuffers{33454: {14680064, 14680064}, 37145: {8388608, 212992}, 39152: {212992, 212992}}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("got %v, want %v", got, want)
	}
	if !got[33454].Granted() || got[37145].Granted() {
		t.Errorf("granted: %v %v", got[33454].Granted(), got[37145].Granted())
	}
	if s := BufferSummary(got, []int{33454}); s != "7.0 MiB receive / 7.0 MiB send on 1 sockets" {
		t.Errorf("summary %q", s)
	}
	if s := BufferSummary(got, []int{33454, 37145}); !strings.Contains(s, " to ") {
		t.Errorf("summary of two sizes %q", s)
	}
	if s := BufferSummary(got, []int{5}); s != "unknown" {
		t.Errorf("summary of none %q", s)
	}
}

func TestUDPDropsString(t *testing.T) {
	d := UDPDrops{Servers: 3, Devices: -1, HostRcvbuf: 5, HostSndbuf: 0, HostDatagrams: 100}
	if s := d.String(); !strings.Contains(s, "3 on the servers'") || !strings.Contains(s, "unknown on the devices'") || !strings.Contains(s, "5 of 100") {
		t.Errorf("%q", s)
	}
}

package main

import (
	"context"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/meteor-edge/meteor/agent/sim"
	"github.com/meteor-edge/meteor/bench/internal/benchkit"
	"github.com/meteor-edge/meteor/fsm/intent"
)

// TestMain makes the test binary a fleet worker when the driver under
// test starts it as one.
func TestMain(m *testing.M) {
	if os.Getenv(workerEnv) == "1" {
		os.Exit(workerMain(os.Args[1:]))
	}
	os.Exit(m.Run())
}

func f64(v float64) *float64 { return &v }

func TestPercentilesOf(t *testing.T) {
	tests := []struct {
		name  string
		times []float64
		n     int
		want  percentiles
	}{
		{"none", nil, 0, percentiles{}},
		{"all of ten", []float64{10, 9, 8, 7, 6, 5, 4, 3, 2, 1}, 10, percentiles{P50: f64(5), P90: f64(9), P99: f64(10), P100: f64(10)}},
		{"nine of ten: no 99 or 100", []float64{1, 2, 3, 4, 5, 6, 7, 8, 9}, 10, percentiles{P50: f64(5), P90: f64(9)}},
		{"one of one", []float64{3}, 1, percentiles{P50: f64(3), P90: f64(3), P99: f64(3), P100: f64(3)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if diff := cmp.Diff(tt.want, percentilesOf(tt.times, tt.n)); diff != "" {
				t.Errorf("percentilesOf (-want +got):\n%s", diff)
			}
		})
	}
}

func TestDevicesSinceTimesFromTheCommit(t *testing.T) {
	commit := time.Date(2026, 1, 1, 0, 0, 10, 0, time.UTC)
	reps := []*sim.Report{
		{Mark: commit.Add(50 * time.Millisecond), DeviceReports: []sim.DeviceReport{
			{ID: "a", Link: "fiber", ConvergedAfter: f64(1.0), Converged: true},
			{ID: "b", Link: "popup", Connected: false},
		}},
		{Mark: commit.Add(-time.Second), DeviceReports: []sim.DeviceReport{
			// Converged before the commit as timed by this worker's
			// mark: counted as at the commit.
			{ID: "c", Link: "fiber", ConvergedAfter: f64(0.5), Connected: true},
		}},
	}
	got := devicesSince(reps, commit)
	if len(got) != 3 || got[0].After == nil || *got[0].After != 1.05 || got[1].After != nil || got[2].After == nil || *got[2].After != 0 {
		t.Errorf("devicesSince = %+v", got)
	}
}

func TestFillChangeCountsTargetedAndReachable(t *testing.T) {
	in := &intent.Intent{Name: "change-2-logging", Selector: map[string]string{"role": "pos-terminal"}}
	pos := map[string]string{"role": "pos-terminal"}
	devs := []deviceTimes{
		{ID: "1", Link: "fiber", Labels: pos, After: f64(1)},
		{ID: "2", Link: "fiber", Labels: pos, After: f64(3)},
		{ID: "3", Link: "fiber", Labels: map[string]string{"role": "store-gateway"}, After: f64(9)},
		{ID: "4", Link: "popup", Labels: pos},                  // offline throughout
		{ID: "5", Link: "popup", Labels: pos, Connected: true}, // online, not yet converged
	}
	var ch retailChange
	fillChange(&ch, in, devs)
	if ch.Targeted != 4 || ch.Converged != 2 || ch.Reachable != 3 {
		t.Errorf("targeted %d converged %d reachable %d, want 4 2 3", ch.Targeted, ch.Converged, ch.Reachable)
	}
	if ch.All.P50 == nil || *ch.All.P50 != 3 || ch.All.P99 != nil {
		t.Errorf("all %+v", ch.All)
	}
	if l := ch.Links["popup"]; l == nil || l.Targeted != 2 || l.Reachable != 1 || l.Converged != 0 {
		t.Errorf("popup %+v", l)
	}
	if got := changeTitle(in.Name); got != "logging" {
		t.Errorf("changeTitle = %q", got)
	}
}

// TestRunTinyFleets runs both parts end to end at a tiny scale: a real
// 3-server cluster of meteor processes, a 50-device fleet in two worker
// processes, and a shrunken retail fleet taking the three retail changes.
func TestRunTinyFleets(t *testing.T) {
	if testing.Short() {
		t.Skip("builds meteor and runs a cluster")
	}
	root, err := benchkit.ModuleRoot()
	if err != nil {
		t.Skip(err)
	}
	bin := benchkit.MeteorBinaryForTest(t, root)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	out := t.TempDir()
	cfg, err := parseFlags([]string{
		"-sizes", "50", "-dials", "16", "-sockets", "4", "-sample-every", "200ms", "-settle", "0",
		"-change-timeout", "60s", "-connect-timeout", "60s",
		"-retail-devices", "40", "-retail-time-scale", "0.05", "-retail-timeout", "30s",
		"-changes", filepath.Join(root, "docs", "examples", "retail"),
		"-meteor-bin", bin, "-out", out, "-sim-dir", t.TempDir(), "-raise-udp-buffers=false",
	}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if err := run(ctx, cfg, io.Discard, tlog{t}); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(out, "fleet.json"))
	if err != nil {
		t.Fatal(err)
	}
	var rep report
	if err := json.Unmarshal(b, &rep); err != nil {
		t.Fatal(err)
	}
	if len(rep.Scale) != 1 || !rep.Scale[0].Held || rep.Scale[0].ChangeConverged != 50 {
		t.Fatalf("scale levels %+v", rep.Scale)
	}
	for _, s := range rep.Scale[0].Servers {
		if s.Connected.RSSKiB <= 0 {
			t.Errorf("server %s: no memory reading", s.ID)
		}
	}
	if rep.Retail == nil || len(rep.Retail.Changes) != 3 {
		t.Fatalf("retail %+v", rep.Retail)
	}
	for _, c := range rep.Retail.Changes {
		if c.Targeted == 0 || c.Converged == 0 {
			t.Errorf("%s: %d of %d targeted devices converged", c.Name, c.Converged, c.Targeted)
		}
	}
	if l := rep.Scale[0]; l.Kind != kindLight || l.ConnectSec == nil || l.Connect.P100 == nil || l.ConnectCPUms <= 0 || l.SimKiBPerDevice <= 0 || l.ConnectUDP == nil || l.ChangeUDP == nil || l.ChangeApplied.P99 == nil {
		t.Errorf("light level %+v", l)
	}
	rows, keys := map[int]int{}, map[string]bool{}
	for _, r := range rep.Summary {
		rows[r.Bench]++
		keys[r.Key] = true
	}
	if rows[4] != 2 || rows[5] != 3 || !keys["fleet-converge"] || !keys["fleet-connect"] {
		t.Errorf("summary rows by bench: %v, keys %v", rows, keys)
	}
	if len(rep.Elections.Clusters) != 2 || rep.Elections.Unknown() != 0 {
		t.Errorf("elections %+v", rep.Elections)
	}
}

// tlog routes the driver's log to t.Log.
type tlog struct{ t *testing.T }

func (l tlog) Write(p []byte) (int, error) {
	l.t.Log(string(p))
	return len(p), nil
}

func TestScaleRowsSayWhatLimitsThem(t *testing.T) {
	r := &report{Machine: benchkit.Machine{NProc: 2}, Params: paramInfo{DevicesKind: kindLight, Dials: 256, Sockets: 64, MemTotalMiB: 24 << 10}}
	r.Scale = []*scaleLevel{
		{Devices: 10000, Kind: kindLight, Held: true, Connected: 10000, ConnectSec: f64(50), Change: percentiles{P99: f64(8), P100: f64(9)}, ChangeApplied: percentiles{P99: f64(5)},
			ConnectCPUms: 4, SimConnectCPUms: 2, TotalKiBPerDevice: 150, SimKiBPerDevice: 80, MemAvailMinMiB: 10 << 10},
		{Devices: 100000, Kind: kindLight, Connected: 52766, Failure: "connect: not done after 5m0s", Connect: percentiles{P50: f64(270)},
			ConnectCPUms: 5, SimConnectCPUms: 3, TotalKiBPerDevice: 148, SimKiBPerDevice: 100, MemAvailMinMiB: 10 << 10, ConnectElections: 1},
	}
	r.finish()
	if len(r.Summary) != 2 {
		t.Fatalf("rows %+v", r.Summary)
	}
	conv, conn := r.Summary[0], r.Summary[1]
	if conv.Key != "fleet-converge" || conv.Meteor != "10,000 devices in 8.0 s" || *conv.Met ||
		!strings.Contains(conv.Note, "100,000 devices did not hold: connect: not done after 5m0s") ||
		!strings.Contains(conv.Note, "so 100,000 connects need at least 400 s of this machine's 2 cores") {
		t.Errorf("converge row %+v", conv)
	}
	if conn.Key != "fleet-connect" || conn.Meteor != "52,766 of 100,000 devices, not all" || *conn.Met || *conn.Elections != 1 ||
		!strings.Contains(conn.Note, "50 % after 270.0 s, 99 % after not reached") ||
		!strings.Contains(conn.Note, "the simulator 100 KiB (its RSS over the 52,766 connected; the 47,234 others'") {
		t.Errorf("connect row %+v", conn)
	}
}

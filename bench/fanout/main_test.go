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

	"github.com/meteor-edge/meteor/bench/internal/benchkit"
	"github.com/meteor-edge/meteor/fsm/intent"
	"github.com/meteor-edge/meteor/wire"
)

func TestDesiredBodiesHaveOneSizeAndCarryTheVersion(t *testing.T) {
	d, err := newDesired(300)
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range []int{1, 2, 999999} {
		b, err := d.body(v)
		if err != nil {
			t.Fatal(err)
		}
		if len(b) != 300 {
			t.Errorf("version %d: body is %d bytes, want 300", v, len(b))
		}
		if got, ok := versionOf(b); !ok || got != v {
			t.Errorf("versionOf(body of %d) = %d, %v", v, got, ok)
		}
		doc, err := d.intentDoc(v)
		if err != nil {
			t.Fatal(err)
		}
		in, err := intent.Parse(doc)
		if err != nil {
			t.Fatalf("intent at version %d does not parse: %v\n%s", v, err, doc)
		}
		if !in.Matches(deviceLabels(7, 10)) {
			t.Errorf("the intent does not select device 7")
		}
	}
	if _, err := newDesired(minBodySize - 1); err == nil {
		t.Error("a body below the minimum: no error")
	}
	if _, ok := versionOf([]byte("no marker")); ok {
		t.Error("versionOf without a marker: ok")
	}
}

func TestConfirmLogKeepsTheFirstConfirmOfEachTarget(t *testing.T) {
	var l confirmLog
	t0 := time.Unix(100, 0)
	l.record(3, t0)
	l.record(3, t0.Add(time.Second)) // a repeat adds nothing
	l.record(2, t0.Add(2*time.Second))
	l.record(7, t0.Add(3*time.Second))
	for _, tc := range []struct {
		target uint64
		want   time.Time
		ok     bool
	}{{1, t0, true}, {3, t0, true}, {4, t0.Add(3 * time.Second), true}, {7, t0.Add(3 * time.Second), true}, {8, time.Time{}, false}} {
		if got, ok := l.first(tc.target); ok != tc.ok || !got.Equal(tc.want) {
			t.Errorf("first(%d) = %v, %v; want %v, %v", tc.target, got, ok, tc.want, tc.ok)
		}
	}
}

func TestPercentileOfCountsDevicesThatNeverArrived(t *testing.T) {
	sorted := []time.Duration{1, 2, 3, 4, 5, 6, 7, 8, 9}
	if got, ok := percentileOf(sorted, 10, 50); !ok || got != 5 {
		t.Errorf("p50 of 9 arrivals out of 10 = %v, %v", got, ok)
	}
	if _, ok := percentileOf(sorted, 10, 99); ok {
		t.Error("p99 with one device missing out of 10: reached")
	}
	if got, ok := percentileOf(sorted, 9, 100); !ok || got != 9 {
		t.Errorf("p100 of all = %v, %v", got, ok)
	}
}

func TestDeviceConfirmsOnlyAcknowledgedReports(t *testing.T) {
	d := &device{applied: map[string]wire.AppliedResource{}}
	body := []byte("body")
	frame := &wire.Delta{TargetRevision: 5, Complete: true, Upserts: []wire.Upsert{{Key: "fanout/config", Digest: wire.DigestOf(body), Revision: 5, Body: body}}}
	if !d.take([]*wire.Delta{frame}) || d.acked != 5 {
		t.Fatalf("take: acked %d", d.acked)
	}
	r := d.report()
	if r.Seq != 1 || r.DesiredRevision != 5 || len(r.Resources) != 1 || r.Resources[0].Effective != wire.EffectiveOK {
		t.Fatalf("report %+v", r)
	}
	if d.take([]*wire.Delta{frame}) {
		t.Error("the same Delta moved the revision again")
	}
	at := time.Unix(200, 0)
	d.acknowledged(0, at)
	if _, ok := d.log.first(5); ok {
		t.Error("confirmed before the ReportAck")
	}
	d.acknowledged(1, at)
	if got, ok := d.log.first(5); !ok || !got.Equal(at) {
		t.Errorf("after ReportAck: %v, %v", got, ok)
	}
	if len(d.unacked) != 0 {
		t.Errorf("unacked %v", d.unacked)
	}
}

func TestParseFlags(t *testing.T) {
	c, err := parseFlags([]string{"-loss", "5, 0,5", "-systems", "mosquitto"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if len(c.loss) != 2 || c.loss[0] != 0 || c.loss[1] != 5 || !c.has(sysMosquitto) || c.has(sysMeteor) {
		t.Errorf("config %+v", c)
	}
	for _, bad := range [][]string{{"-loss", "x"}, {"-loss", "60"}, {"-systems", "etcd"}, {"-groups", "0"}, {"-devices", "5", "-groups", "6"}, {"-body-size", "10"}} {
		if _, err := parseFlags(bad, io.Discard); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}

// TestRunTinyFleet runs the whole driver with 20 devices on a clean link
// against both systems and checks that the report holds together.
func TestRunTinyFleet(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a 3-server cluster and a broker")
	}
	mosq := lookMosquitto()
	if mosq == "" {
		t.Skip("mosquitto is not installed (bench/install-mosquitto.sh installs it); the test does not install it")
	}
	root, err := benchkit.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	// METEOR_BIN, if set, is a meteor binary to use instead of building
	// ./cmd/meteor.
	bin := os.Getenv("METEOR_BIN")
	if bin == "" {
		if bin, err = benchkit.BuildMeteor(ctx, root, t.TempDir()); err != nil {
			t.Fatal(err)
		}
	}
	out := t.TempDir()
	cfg, err := parseFlags([]string{"-devices", "20", "-groups", "3", "-loss", "0", "-settle", "0s", "-timeout", "60s",
		"-meteor-bin", bin, "-mosquitto-bin", mosq, "-install-mosquitto=false", "-out", out}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	var stdout strings.Builder
	if err := run(ctx, cfg, &stdout, tlog{t}); err != nil {
		t.Fatal(err)
	}
	t.Log(stdout.String())
	b, err := os.ReadFile(filepath.Join(out, "fanout.json"))
	if err != nil {
		t.Fatal(err)
	}
	var rep report
	if err := json.Unmarshal(b, &rep); err != nil {
		t.Fatal(err)
	}
	if len(rep.Results) != 2 {
		t.Fatalf("%d results, want meteor and mosquitto on a clean link", len(rep.Results))
	}
	for _, r := range rep.Results {
		if r.Devices != 20 || r.Reached != 20 || r.LossPct != 0 {
			t.Errorf("%s: devices %d reached %d loss %d", r.System, r.Devices, r.Reached, r.LossPct)
		}
		if r.P50s == nil || r.P99s == nil || r.P100s == nil || !(0 < *r.P50s && *r.P50s <= *r.P99s && *r.P99s <= *r.P100s) {
			t.Errorf("%s: percentiles %s %s %s out of order", r.System, fmtS(r.P50s), fmtS(r.P99s), fmtS(r.P100s))
		}
	}
	if m := find(rep.Results, sysMeteor, 0); m == nil || m.Server == nil || m.Server.Targeted != 20 || m.Server.Converged != 20 || m.Server.Acknowledged != 20 {
		t.Errorf("the cluster's view disagrees with the devices': %+v", m.Server)
	}
	if len(rep.Ratios) != 1 || rep.Ratios[0].P99 == nil {
		t.Errorf("ratios %+v", rep.Ratios)
	}
	if len(rep.Summary) != 1 {
		t.Fatalf("summary %+v", rep.Summary)
	}
	s := rep.Summary[0]
	if s.Bench != 2 || s.Name != "fanout" || s.Meteor == "" || s.Peer == "" || !strings.HasPrefix(s.PeerName, "Mosquitto 2") || s.Ratio == "" {
		t.Errorf("summary row %+v", s)
	}
	md, err := os.ReadFile(filepath.Join(out, "fanout.md"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(md), "| meteor | clean link | 20 | 20 |") || !strings.Contains(string(md), "| mosquitto | clean link | 20 | 20 |") {
		t.Errorf("markdown lacks the rows:\n%s", md)
	}
}

// tlog routes the driver's log to t.Log.
type tlog struct{ t *testing.T }

func (w tlog) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

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
// against the three systems and checks that the report holds together.
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
	// METEOR_BIN, if set, is a meteor binary to use instead of building
	// ./cmd/meteor.
	bin := benchkit.MeteorBinaryForTest(t, root)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	out := t.TempDir()
	cfg, err := parseFlags([]string{"-devices", "20", "-groups", "3", "-loss", "0", "-settle", "0s", "-timeout", "60s",
		"-meteor-bin", bin, "-mosquitto-bin", mosq, "-install-mosquitto=false", "-raise-udp-buffers=false", "-out", out}, io.Discard)
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
	if len(rep.Results) != 3 {
		t.Fatalf("%d results, want meteor, mosquitto and mosquitto-tls on a clean link", len(rep.Results))
	}
	for _, r := range rep.Results {
		if r.Devices != 20 || r.Reached != 20 || r.LossPct != 0 {
			t.Errorf("%s: devices %d reached %d loss %d", r.System, r.Devices, r.Reached, r.LossPct)
		}
		if r.P50s == nil || r.P99s == nil || r.P100s == nil || !(0 < *r.P50s && *r.P50s <= *r.P99s && *r.P99s <= *r.P100s) {
			t.Errorf("%s: percentiles %s %s %s out of order", r.System, fmtS(r.P50s), fmtS(r.P99s), fmtS(r.P100s))
		}
		if r.AppliedP99s == nil || *r.AppliedP99s > *r.P99s {
			t.Errorf("%s: applied p99 %s after reported p99 %s", r.System, fmtS(r.AppliedP99s), fmtS(r.P99s))
		}
		// The median of three changes, the other two beside it.
		if len(r.Others) != 2 || r.Others[0].AppliedP99s == nil || r.Others[1].AppliedP99s == nil ||
			min(*r.Others[0].AppliedP99s, *r.Others[1].AppliedP99s) > *r.AppliedP99s || max(*r.Others[0].AppliedP99s, *r.Others[1].AppliedP99s) < *r.AppliedP99s {
			t.Errorf("%s: applied p99 %s is not the median of its changes %+v", r.System, fmtS(r.AppliedP99s), r.Others)
		}
	}
	if !strings.Contains(rep.Summary[0].Note, "median of 3 changes") {
		t.Errorf("the summary row does not say it is a median: %q", rep.Summary[0].Note)
	}
	m := find(rep.Results, sysMeteor, 0)
	if m == nil || m.Server == nil || m.Server.Targeted != 20 || m.Server.Converged != 20 || m.Server.Acknowledged != 20 {
		t.Errorf("the cluster's view disagrees with the devices': %+v", m.Server)
	}
	if m.DurableP99s == nil || m.DurableP100s == nil || m.DurableReads == 0 || *m.DurableP99s < *m.AppliedP99s {
		t.Errorf("durable p99 %s (after %d reads), applied p99 %s", fmtS(m.DurableP99s), m.DurableReads, fmtS(m.AppliedP99s))
	}
	if m.UDP == nil || m.UDP.Servers < 0 || m.UDP.Devices < 0 {
		t.Errorf("UDP drops not counted: %+v", m.UDP)
	}
	if len(rep.Ratios) != 2 || rep.Ratios[0].Durable == nil {
		t.Errorf("ratios %+v", rep.Ratios)
	}
	if rep.Elections.Total != 0 || len(rep.Elections.Clusters) != 1 {
		t.Errorf("elections %+v", rep.Elections)
	}
	if len(rep.Summary) != 2 {
		t.Fatalf("summary %+v", rep.Summary)
	}
	for i, key := range []string{"fanout-applied", "fanout-durable"} {
		s := rep.Summary[i]
		if s.Bench != 2 || s.Key != key || s.Meteor == "" || s.Peer == "" || !strings.HasPrefix(s.PeerName, "Mosquitto 2") || !strings.Contains(s.PeerName, "TLS") || s.Ratio == "" || s.Met == nil || s.Elections == nil {
			t.Errorf("summary row %+v", s)
		}
	}
	md, err := os.ReadFile(filepath.Join(out, "fanout.md"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(md), "| meteor | clean link | 20 | 20 |") || !strings.Contains(string(md), "| mosquitto | clean link | 20 | 20 |") || !strings.Contains(string(md), "| mosquitto-tls | clean link | 20 | 20 |") {
		t.Errorf("markdown lacks the rows:\n%s", md)
	}
}

// TestMedianChange: the median by 99 % applied, a change that did not
// reach 99 % counting as the slowest, the others kept in order.
func TestMedianChange(t *testing.T) {
	f := func(v float64) *float64 { return &v }
	a, b, c := &levelResult{AppliedP99s: f(3)}, &levelResult{AppliedP99s: nil}, &levelResult{AppliedP99s: f(1)}
	m := medianChange([]*levelResult{a, b, c})
	if m != a || len(m.Others) != 2 || m.Others[0].AppliedP99s != nil || *m.Others[1].AppliedP99s != 1 {
		t.Errorf("median %+v, others %+v; want the 3 s change, then the others in order", m, m.Others)
	}
	one := &levelResult{AppliedP99s: f(2)}
	if m := medianChange([]*levelResult{one}); m != one || m.Others != nil {
		t.Errorf("a single change: %+v", m)
	}
}

// tlog routes the driver's log to t.Log.
type tlog struct{ t *testing.T }

func (w tlog) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

package sim

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/meteor-edge/meteor/agent"
	"github.com/meteor-edge/meteor/cluster"
	"github.com/meteor-edge/meteor/cluster/api"
	"github.com/meteor-edge/meteor/cluster/pki"
	"github.com/meteor-edge/meteor/scheduler"
)

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Helper()
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

func testLogger(t *testing.T, name string) hclog.Logger {
	return hclog.New(&hclog.LoggerOptions{Name: name, Level: hclog.Warn, Output: testWriter{t}})
}

// testServer starts a single-node development server serving agents with
// a CA written to the returned PKI directory, as `meteor dev` lays it out.
func testServer(t *testing.T) (*cluster.Server, string) {
	t.Helper()
	ca, err := pki.NewCA("sim test CA", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	pki := t.TempDir()
	certPEM, keyPEM, err := ca.PEM()
	if err != nil {
		t.Fatal(err)
	}
	for name, b := range map[string][]byte{CACertFile: certPEM, CAKeyFile: keyPEM} {
		if err := os.WriteFile(filepath.Join(pki, name), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	cert, err := ca.IssueServer("solo", []string{"127.0.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	cfg := cluster.DefaultConfig()
	cfg.NodeID, cfg.Region, cfg.Dev = "solo", "eu-west", true
	cfg.DataDir = filepath.Join(t.TempDir(), "solo")
	cfg.HTTPAddr, cfg.RaftAddr, cfg.GossipAddr, cfg.AgentAddr = "127.0.0.1:0", "127.0.0.1:0", "127.0.0.1:0", "127.0.0.1:0"
	cfg.AgentTLS = &cluster.AgentTLS{ClientCAs: ca.Pool(), Certificate: cert}
	cfg.DeviceCA = ca // signs enrollments (TestEnrolledFleet)
	cfg.ClusterSecret = []byte("0123456789abcdef0123456789abcdef")
	classes := scheduler.DefaultClasses()
	for name, cl := range classes {
		// The agents' cadences (fastAgents), which the server pushes.
		cl.PullInterval, cl.ProbeInterval, cl.ReportInterval = 2*time.Second, time.Second, time.Second
		cl.RetryBase, cl.RetryMax, cl.RetryJitter = 50*time.Millisecond, 500*time.Millisecond, 0
		cl.UnreachableAfter = 10 * time.Second
		classes[name] = cl
	}
	cfg.Classes = classes
	cfg.StatusEvalInterval = 200 * time.Millisecond
	cfg.StatusBatchInterval = 20 * time.Millisecond
	cfg.Logger = testLogger(t, "server")
	s, err := cluster.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.Shutdown(); err != nil {
			t.Errorf("shutdown: %v", err)
		}
	})
	return s, pki
}

// fastAgents shortens the agents' cadences for tests.
func fastAgents(cfg *agent.Config) {
	cfg.PullInterval = 2 * time.Second
	cfg.ReportInterval = time.Second
	cfg.ProbeInterval = time.Second
	cfg.BackoffMin, cfg.BackoffMax = 50*time.Millisecond, time.Second
	cfg.RetryMin, cfg.RetryMax = 50*time.Millisecond, 500*time.Millisecond
}

// waitFor polls cond every 100 ms until it holds or timeout passes.
func waitFor(t *testing.T, timeout time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		ok, state := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v; last: %s", what, timeout, state)
		}
		<-tick.C
	}
}

const kioskIntent = `name: kiosk-sim-test
selector:
  role: kiosk
  link: cellular
resources:
  - id: firmware-channel
    type: sim
    spec:
      value: stable-2024.11
      applyTime: 100ms
  - id: catalogue
    type: sim
    requires: [firmware-channel]
    spec:
      value: 20241127
`

// TestCellularFleetConverges runs 30 real agents on cellular links with
// 5 % loss in each direction (and outages scaled to every 1.8 s) against a
// real server, applies an intent with two sim resources through the HTTP
// API, and checks that every device converges and that the fleet's count
// agrees with the server's GET /v1/status.
func TestCellularFleetConverges(t *testing.T) {
	const n = 30
	srv, pki := testServer(t)
	var summary syncBuffer
	opts := DefaultOptions()
	opts.Servers = []string{srv.AgentAddr()}
	opts.PKIDir = pki
	opts.BaseDir = t.TempDir()
	opts.Devices = n
	opts.Profile = LinkCellular
	opts.Seed = 42
	opts.Loss = 0.05
	opts.TimeScale = 0.01
	opts.RampBatch, opts.RampEvery = 10, 100*time.Millisecond
	opts.SampleEvery = 50 * time.Millisecond
	opts.SummaryEvery = 500 * time.Millisecond
	opts.Summary = &summary
	opts.Logger = testLogger(t, "sim")
	opts.Agent = fastAgents
	f, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	runErr := make(chan error, 1)
	go func() { runErr <- f.Run(ctx) }()
	stopped := false
	stop := func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		if err := <-runErr; err != nil {
			t.Errorf("Run: %v", err)
		}
	}
	t.Cleanup(stop)

	waitFor(t, 30*time.Second, "every device connected", func() (bool, string) {
		s := f.Summary()
		return s.Connected == n, s.String()
	})

	c := api.NewClient(srv.HTTPAddr(), nil)
	wr, err := c.PutIntent(ctx, "kiosk-sim-test", []byte(kioskIntent), nil)
	if err != nil {
		t.Fatal(err)
	}
	f.Mark(wr.Revision)

	waitFor(t, 40*time.Second, "every agent converged", func() (bool, string) {
		s := f.Summary()
		return s.Converged == n, s.String()
	})
	waitFor(t, 20*time.Second, "the server sees every device converged", func() (bool, string) {
		st, err := c.Status(ctx, api.ReadOptions{})
		if err != nil {
			return false, err.Error()
		}
		return st.ByStatus[scheduler.StatusConverged] == n, mustJSON(st.ByStatus)
	})
	if s := f.Summary(); s.Converged != n {
		t.Fatalf("fleet converged %d after the server saw %d", s.Converged, n)
	}

	stop()
	rep := f.Report()
	lr := rep.Links[LinkCellular]
	if lr == nil || lr.Devices != n || lr.Converged != n {
		t.Fatalf("report links: %s", mustJSON(rep.Links))
	}
	p := lr.TimeToConverged
	if p.P50 == nil || p.P90 == nil || p.P99 == nil || p.P100 == nil || *p.P50 > *p.P100 || *p.P100 <= 0 {
		t.Fatalf("time to converged: %s", mustJSON(p))
	}
	if lr.SentBytes.Mean <= 0 || lr.ReceivedBytes.Mean <= 0 {
		t.Fatalf("bytes: sent %+v received %+v", lr.SentBytes, lr.ReceivedBytes)
	}
	var dropped uint64
	for _, d := range rep.DeviceReports {
		if d.ConvergedAfter == nil || d.SentBytes == 0 || d.Labels["role"] != "kiosk" {
			t.Fatalf("device %s: %s", d.ID, mustJSON(d))
		}
		dropped += d.DroppedOut + d.DroppedIn
	}
	if dropped == 0 {
		t.Fatal("a lossy link dropped nothing")
	}
	var buf bytes.Buffer
	if _, err := rep.WriteTo(&buf); err != nil {
		t.Fatal(err)
	}
	var back Report
	if err := json.Unmarshal(buf.Bytes(), &back); err != nil {
		t.Fatalf("report JSON: %v", err)
	}
	if !strings.Contains(summary.String(), "cellular 30: conn") {
		t.Fatalf("summary lines: %q", summary.String())
	}
	t.Logf("time to converged (s): 50%% %.2f  90%% %.2f  100%% %.2f; bytes per device sent %.0f received %.0f; dropped packets %d",
		*p.P50, *p.P90, *p.P100, lr.SentBytes.Mean, lr.ReceivedBytes.Mean, dropped)
}

// TestEnrolledFleet runs a fleet of one region whose devices enroll with
// a token, as real devices do, from a PKI dir holding only the CA's
// certificate: every device gets its certificate from the server and the
// token's control-plane labels, takes an intent selecting a label only the
// token gives, and a second run of the fleet from the same base dir, the
// token used up, loads the certificates it enrolled for.
func TestEnrolledFleet(t *testing.T) {
	const n = 6
	srv, pkiDir := testServer(t)
	caOnly := t.TempDir()
	caPEM, err := os.ReadFile(filepath.Join(pkiDir, CACertFile))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(caOnly, CACertFile), caPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	c := api.NewClient(srv.HTTPAddr(), nil)
	tok, err := c.CreateToken(ctx, api.CreateTokenRequest{
		Policy: "enroll", EnrollLabels: map[string]string{"region": "us-east", "fleet": "enrolled"}, Uses: n, TTL: "10m",
	})
	if err != nil {
		t.Fatal(err)
	}
	opts := DefaultOptions()
	opts.Servers, opts.ServerRegions = []string{srv.AgentAddr()}, []string{"us-east"}
	opts.Region, opts.IDPrefix = "us-east", "us"
	opts.PKIDir, opts.EnrollToken = caOnly, tok.Secret
	opts.BaseDir = t.TempDir()
	opts.Devices, opts.Profile = n, LinkFiber
	opts.RampBatch, opts.RampEvery = n, 100*time.Millisecond
	opts.SampleEvery = 50 * time.Millisecond
	opts.Logger = testLogger(t, "sim")
	opts.Agent = fastAgents
	if _, err := New(Options{Servers: opts.Servers, ServerRegions: []string{"a", "b"}, PKIDir: caOnly, BaseDir: opts.BaseDir}); err == nil {
		t.Error("two server regions for one server accepted")
	}

	wr, err := c.PutIntent(ctx, "enrolled-only", []byte(`name: enrolled-only
selector:
  fleet: enrolled
resources:
  - id: setting
    type: sim
    spec:
      value: on
`), nil)
	if err != nil {
		t.Fatal(err)
	}
	for run := 1; run <= 2; run++ {
		f, err := New(opts)
		if err != nil {
			t.Fatal(err)
		}
		f.Mark(wr.Revision)
		rctx, cancel := context.WithCancel(ctx)
		runErr := make(chan error, 1)
		go func() { runErr <- f.Run(rctx) }()
		waitFor(t, 30*time.Second, fmt.Sprintf("run %d: every device converged", run), func() (bool, string) {
			s := f.Summary()
			return s.Converged == n, s.String()
		})
		cancel()
		if err := <-runErr; err != nil {
			t.Fatalf("run %d: %v", run, err)
		}
		for _, d := range f.Report().DeviceReports {
			if !strings.HasPrefix(d.ID, "us-fiber-") || d.Labels["region"] != "us-east" {
				t.Errorf("device %s reports labels %v", d.ID, d.Labels)
			}
		}
	}
	devs, err := c.QueryDevices(ctx, api.DeviceQuery{Selector: "fleet=enrolled"}, api.ReadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(devs.Devices) != n {
		t.Fatalf("%d devices with the token's labels, want %d: %s", len(devs.Devices), n, mustJSON(devs))
	}
}

func mustJSON(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return err.Error()
	}
	return string(b)
}

// syncBuffer is a bytes.Buffer safe for one writer and one reader.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

const popupIntent = `name: popup-sim-test
selector:
  link: popup
resources:
  - id: till-config
    type: sim
    spec:
      value: v2
      applyTime: 300ms
`

// TestPopupPowerLoss runs pop-up devices whose offline periods are scaled
// to about a second, half of them power losses: agents are stopped
// abruptly and restarted from their journals, and every device still
// converges.
func TestPopupPowerLoss(t *testing.T) {
	const n = 6
	srv, pki := testServer(t)
	c := api.NewClient(srv.HTTPAddr(), nil)
	c.RetryNoLeader = 10 * time.Second
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	wr, err := c.PutIntent(ctx, "popup-sim-test", []byte(popupIntent), nil)
	if err != nil {
		t.Fatal(err)
	}
	opts := DefaultOptions()
	opts.Servers = []string{srv.AgentAddr()}
	opts.PKIDir = pki
	opts.BaseDir = t.TempDir()
	opts.Devices = n
	opts.Profile = LinkPopup
	opts.Seed = 3
	opts.TimeScale = 0.001 // online ~1.2 s, offline ~1.8 s
	opts.SampleEvery = 50 * time.Millisecond
	opts.Logger = testLogger(t, "sim")
	opts.Agent = fastAgents
	f, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	f.Mark(wr.Revision)
	runErr := make(chan error, 1)
	go func() { runErr <- f.Run(ctx) }()
	waitFor(t, 30*time.Second, "every device converged and some lost power", func() (bool, string) {
		r := f.Report()
		l := r.Links[LinkPopup]
		done := 0
		for _, d := range r.DeviceReports {
			if d.ConvergedAfter != nil {
				done++
			}
		}
		return done == n && l.Restarts > 0, mustJSON(l)
	})
	cancel()
	if err := <-runErr; err != nil {
		t.Fatalf("Run: %v", err)
	}
	if l := f.Report().Links[LinkPopup]; l.TimeToConverged.P100 == nil {
		t.Fatalf("report: %s", mustJSON(l))
	}
}

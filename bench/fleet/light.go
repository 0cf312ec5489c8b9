package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"runtime/pprof"
	"time"

	"github.com/meteor-edge/meteor/agent/sim"
	"github.com/meteor-edge/meteor/bench/internal/benchkit"
	"github.com/meteor-edge/meteor/bench/internal/wiredev"
	clusterpki "github.com/meteor-edge/meteor/cluster/pki"
)

// The kinds of devices the scale part can run (-scale-devices).
const (
	// kindLight: the wire-level devices of bench/internal/wiredev, in
	// this process: each with its certificate, session and real QUIC
	// connection, sharing -sockets UDP sockets; light enough for 100,000
	// beside the servers.
	kindLight = "light"
	// kindAgent: full agents (package agent through agent/sim) in
	// simulator processes, each with its own socket and journal.
	kindAgent = "agent"
)

// scaleFleet is the devices of one scale level.
type scaleFleet interface {
	// summary counts the devices: started, in session, and converged:
	// (light) reported converged at rev with the report acknowledged,
	// (agent) converged on their current desired state as the agents see
	// it.
	summary(ctx context.Context, rev uint64) (sim.Summary, error)
	// mark tells the fleet that rev was committed now.
	mark(ctx context.Context, rev uint64) error
	// sessions counts the devices in session by their server's agent
	// address.
	sessions(ctx context.Context) (map[string]int, error)
	// converged returns, in seconds after commit, when each device that
	// did converged on rev, and (light) when each applied it.
	converged(ctx context.Context, rev uint64, commit time.Time) (reported, applied []float64, err error)
	// connectTimes returns, in seconds after start, when each device
	// first had a session; nil where not known (agent).
	connectTimes(start time.Time) []float64
	// usage is the simulator's memory (KiB), goroutines and CPU seconds.
	usage(ctx context.Context) (rssKiB int64, goroutines int, cpuSec float64, err error)
	// ports are the devices' UDP ports to count drops on; nil: not
	// counted (each agent has a socket of its own).
	ports() []int
	// stop stops the devices (and returns once they are gone).
	stop()
}

// lightFleet is a wiredev.Fleet in this process.
type lightFleet struct {
	fl     *wiredev.Fleet
	cancel context.CancelFunc
	// cpu0 is this process's CPU time when the fleet started: the
	// devices' CPU is this process's since then.
	cpu0 time.Duration
}

// lightIDs names the light devices of a level of n.
func lightIDs(n int) []string {
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("light-%06d", i)
	}
	return ids
}

// loadCA loads the cluster CA made by benchkit.InitMeteorCA in dir.
func loadCA(dir string) (*clusterpki.CA, error) {
	caPEM, err1 := os.ReadFile(benchkit.MeteorCAFile(dir))
	caKey, err2 := os.ReadFile(filepath.Join(dir, "ca-key.pem"))
	if err := errors.Join(err1, err2); err != nil {
		return nil, fmt.Errorf("read the CA: %w", err)
	}
	return clusterpki.LoadCA(caPEM, caKey)
}

// startLight starts a level's light devices against the cluster, device i
// with ids[i] and certs[i] (issued from ca): it is in region
// sim.Regions()[i mod 3] and dials that region's server first, where its
// owner is.
func startLight(ctx context.Context, cl *cluster, ca *clusterpki.CA, ids []string, certs []tls.Certificate, sockets, dials int) (*lightFleet, error) {
	cfg := wiredev.Config{Roots: ca.Pool(), Sockets: sockets, Dials: dials}
	for _, a := range cl.AgentAddrs() {
		ua, err := net.ResolveUDPAddr("udp", a)
		if err != nil {
			return nil, err
		}
		cfg.Servers = append(cfg.Servers, ua)
	}
	regions := sim.Regions()
	labels := make([]map[string]string, len(regions))
	for r, name := range regions {
		labels[r] = map[string]string{"region": name}
	}
	devs := make([]*wiredev.Device, len(certs))
	for i, c := range certs {
		devs[i] = wiredev.NewDevice(ids[i], c, labels[i%len(labels)])
	}
	cfg.Home = func(i int) int { return i % len(regions) }
	fl, err := wiredev.NewFleet(cfg, devs)
	if err != nil {
		return nil, err
	}
	cpu0, err := benchkit.CPUTime("self")
	if err != nil {
		fl.Close()
		return nil, err
	}
	fctx, cancel := context.WithCancel(ctx)
	fl.Start(fctx)
	return &lightFleet{fl: fl, cancel: cancel, cpu0: cpu0}, nil
}

func (f *lightFleet) summary(_ context.Context, rev uint64) (sim.Summary, error) {
	return sim.Summary{Devices: f.fl.Len(), Started: f.fl.Attempted(), Connected: f.fl.Connected(), Converged: f.fl.CountReported(rev)}, nil
}

func (f *lightFleet) mark(context.Context, uint64) error { return nil }

func (f *lightFleet) sessions(context.Context) (map[string]int, error) {
	return f.fl.SessionsByServer(), nil
}

func (f *lightFleet) converged(_ context.Context, rev uint64, commit time.Time) (reported, applied []float64, err error) {
	since := func(logs []*benchkit.TargetLog) []float64 {
		var out []float64
		for _, d := range benchkit.TimesSince(logs, rev, commit) {
			out = append(out, max(d.Seconds(), 0))
		}
		return out
	}
	return since(f.fl.ReportedLogs()), since(f.fl.AppliedLogs()), nil
}

func (f *lightFleet) connectTimes(start time.Time) []float64 {
	var out []float64
	for _, d := range f.fl.FirstSessions(start) {
		out = append(out, d.Seconds())
	}
	return out
}

func (f *lightFleet) usage(context.Context) (int64, int, float64, error) {
	rss, err := selfRSSKiB()
	cpu, cerr := benchkit.CPUTime("self")
	return rss, runtime.NumGoroutine(), (cpu - f.cpu0).Seconds(), errors.Join(err, cerr)
}

func (f *lightFleet) ports() []int { return f.fl.Ports() }

func (f *lightFleet) stop() {
	f.cancel()
	f.fl.Wait()
	f.fl.Close()
}

// selfRSSKiB is this process's VmRSS.
func selfRSSKiB() (int64, error) {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0, err
	}
	return statusField(b, "VmRSS")
}

// settledRSSKiB collects garbage and returns what is unused to the OS
// first, so that the reading is of what is live.
func settledRSSKiB() (int64, error) {
	runtime.GC()
	debug.FreeOSMemory()
	return selfRSSKiB()
}

// writeHeapProfile writes this process's heap profile to path.
func writeHeapProfile(path string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	runtime.GC()
	if err := pprof.WriteHeapProfile(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// agentFleet is full agents in simulator processes (shards).
type agentFleet struct {
	sh *shards
}

func (f *agentFleet) summary(ctx context.Context, _ uint64) (sim.Summary, error) {
	s, _, err := f.sh.Summary(ctx)
	return s, err
}

func (f *agentFleet) mark(ctx context.Context, rev uint64) error { return f.sh.Mark(ctx, rev) }

func (f *agentFleet) sessions(ctx context.Context) (map[string]int, error) {
	reps, err := f.sh.Reports(ctx)
	if err != nil {
		return nil, err
	}
	out := map[string]int{}
	for _, r := range reps {
		for _, d := range r.DeviceReports {
			out[d.Server]++
		}
	}
	return out, nil
}

func (f *agentFleet) converged(ctx context.Context, _ uint64, commit time.Time) (reported, applied []float64, err error) {
	reps, err := f.sh.Reports(ctx)
	if err != nil {
		return nil, nil, err
	}
	for _, d := range devicesSince(reps, commit) {
		if d.After != nil {
			reported = append(reported, *d.After)
		}
	}
	return reported, nil, nil
}

func (f *agentFleet) connectTimes(time.Time) []float64 { return nil }

func (f *agentFleet) usage(ctx context.Context) (int64, int, float64, error) {
	var rss int64
	var cpu float64
	var errs []error
	for _, p := range f.sh.Procs() {
		st, err := readProc(p)
		errs = append(errs, err)
		rss += st.RSSKiB
		cpu += st.CPUSec
	}
	_, goroutines, err := f.sh.Summary(ctx)
	errs = append(errs, err)
	return rss, goroutines, cpu, errors.Join(errs...)
}

func (f *agentFleet) ports() []int { return nil }

func (f *agentFleet) stop() {}

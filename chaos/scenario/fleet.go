package scenario

import (
	"context"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/meteor-edge/meteor/agent"
	"github.com/meteor-edge/meteor/cluster"
	"github.com/meteor-edge/meteor/fsm/intent"
	"github.com/meteor-edge/meteor/scheduler"
)

// FleetSpec puts simulated devices (package agent/sim: real agents, real
// QUIC sessions on loopback, links with faults in user space) under a
// scenario. The fleet's intent changes every ChangeEvery while the faults
// run; after healing, one last change must reach every device.
type FleetSpec struct {
	// Devices is the fleet's size.
	Devices int
	// Link is the sim link every device uses (sim.LinkFiber,
	// sim.LinkCellular, sim.LinkPopup).
	Link string
	// Loss, when positive, replaces the lossy links' random loss.
	Loss float64
	// TimeScale shrinks the links' outage and offline periods (see
	// sim.Options.TimeScale); 0 means 1.
	TimeScale float64
	// ChangeEvery is how often the fleet's intent changes under faults;
	// 0 means 2 s.
	ChangeEvery time.Duration
	// Converge bounds the time from the last change to every device
	// reporting it, after the faults are healed; 0 means 30 s.
	Converge time.Duration
	// ApplyTime is each sim resource's apply time; 0 means 50 ms. Longer
	// applies make power losses land mid-apply more often.
	ApplyTime time.Duration
	// NeverUnreachable makes any unreachable status in a device's
	// timeline a violation: for fleets whose links never go silent for
	// the classes' threshold, an unreachable verdict is a false one.
	NeverUnreachable bool
}

// fleetIntent is the intent the fleet workload writes: two sim resources,
// the second requiring the first, on every device.
const fleetIntent = "chaos-fleet"

func fleetDocument(version int, apply time.Duration) []byte {
	in := &intent.Intent{
		Name:     fleetIntent,
		Selector: map[string]string{"region": "*"},
		Resources: []intent.Resource{
			{ID: "config", Type: "sim", Class: "config", Spec: map[string]any{"value": fmt.Sprintf("config-v%d", version), "applyTime": apply.String()}},
			{ID: "restart", Type: "sim", Class: "config", Requires: []string{"config"}, Spec: map[string]any{"value": fmt.Sprintf("restarted-v%d", version), "applyTime": (apply / 2).String()}},
		},
	}
	b, err := in.Canonical()
	if err != nil {
		panic(fmt.Sprintf("encode the fleet intent: %v", err)) // a fixed, valid document
	}
	return b
}

// fastAgent shrinks an agent's cadences and backoffs like the scenarios
// shrink the links' outages, so that a device back online retries within
// its online window. The resend of an unacknowledged report is shrunk
// too: at the default (1 s doubling to 60 s) a report whose commits failed
// a few times on a busy host was sent again only after 30 s or more, and
// its server showed the device's earlier status for that long while the
// device, connected and converged, waited (TestSimulatedFleetOf200 gives
// each server 30 s to agree with the simulator).
func fastAgent(c *agent.Config) {
	c.PullInterval, c.ReportInterval = 2*time.Second, time.Second
	c.BackoffMax = 2 * time.Second
	c.RetryMin, c.RetryMax = 200*time.Millisecond, 2*time.Second
	c.ReportResendMin, c.ReportResendMax = 200*time.Millisecond, 2*time.Second
}

// fleetRun is a fleet running under a scenario, with its workload and
// its watch over device revisions. The devices run in a child process
// (fleetProcess), as they would on machines of their own: in the servers'
// process, hundreds of agents took the CPU the servers' Raft heartbeats
// needed (fleetNice).
type fleetRun struct {
	spec   FleetSpec
	h      *Harness
	fleet  *fleetProcess
	logger hclog.Logger

	mu         sync.Mutex
	version    int                                   // guarded by mu; last version written
	acked      map[*cluster.Server]map[string]uint64 // guarded by mu
	violations []string                              // guarded by mu
}

// startFleet starts the devices and waits until every one has converged
// on the fleet intent's first version, so that faults hit a fleet at rest.
// The fleet process's errors go to stderr.
func startFleet(ctx context.Context, h *Harness, spec FleetSpec, seed uint64, dir string, logger hclog.Logger, stderr io.Writer) (*fleetRun, error) {
	if spec.ChangeEvery <= 0 {
		spec.ChangeEvery = 2 * time.Second
	}
	if spec.Converge <= 0 {
		spec.Converge = 30 * time.Second
	}
	if spec.ApplyTime <= 0 {
		spec.ApplyTime = 50 * time.Millisecond
	}
	ps := fleetProcessSpec{
		Servers: h.AgentAddrs(), BaseDir: filepath.Join(dir, "devices"),
		Devices: spec.Devices, Profile: spec.Link, Seed: seed, Loss: spec.Loss, TimeScale: spec.TimeScale,
		IDPrefix:  "chaos",
		RampBatch: 25, RampEvery: 100 * time.Millisecond, SampleEvery: 100 * time.Millisecond,
		FastAgent: true,
	}
	proc, err := startFleetProcess(h.CA(), ps, dir, stderr)
	if err != nil {
		return nil, fmt.Errorf("fleet: %w", err)
	}
	f := &fleetRun{spec: spec, h: h, fleet: proc, logger: logger.Named("fleet"),
		acked: map[*cluster.Server]map[string]uint64{}}
	rev, err := f.change(ctx, 20*time.Second)
	if err == nil {
		err = proc.Mark(rev)
	}
	if err == nil {
		err = f.waitConverged(ctx, 60*time.Second)
		if err != nil {
			err = fmt.Errorf("fleet did not converge before the faults: %w", err)
		}
	}
	if err != nil {
		return nil, errors.Join(err, f.close())
	}
	return f, nil
}

// change writes the fleet intent's next version through any running
// server, retrying until one acknowledges it or limit passes, and returns
// the revision.
func (f *fleetRun) change(ctx context.Context, limit time.Duration) (uint64, error) {
	f.mu.Lock()
	f.version++
	v := f.version
	f.mu.Unlock()
	deadline := time.Now().Add(limit)
	var last error
	for i := 0; time.Now().Before(deadline) && ctx.Err() == nil; i++ {
		alive := f.h.Alive()
		if len(alive) == 0 {
			sleep(ctx, 100*time.Millisecond)
			continue
		}
		cl := f.h.Client(alive[i%len(alive)])
		cl.RetryNoLeader = 0
		wctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		res, err := cl.PutIntent(wctx, fleetIntent, fleetDocument(v, f.spec.ApplyTime), nil)
		cancel()
		if err == nil {
			return res.Revision, nil
		}
		last = err
		sleep(ctx, 100*time.Millisecond)
	}
	return 0, fmt.Errorf("fleet intent version %d not acknowledged within %v: %v", v, limit, last)
}

// run changes the fleet's intent every ChangeEvery and samples the
// devices' acknowledged revisions on every server until ctx ends.
func (f *fleetRun) run(ctx context.Context) {
	next := time.Now().Add(f.spec.ChangeEvery)
	for ctx.Err() == nil {
		f.sample()
		if time.Now().After(next) {
			// Under faults a write may fail; the next one will do.
			f.change(ctx, f.spec.ChangeEvery)
			next = time.Now().Add(f.spec.ChangeEvery)
		}
		sleep(ctx, 50*time.Millisecond)
	}
}

// sample records each device's acknowledged revision as every running
// server's replica has it: it must never go backwards. A restarted server
// is a new instance, rebuilt from its snapshot and log, tracked afresh.
func (f *fleetRun) sample() {
	for _, s := range f.h.Servers() {
		if s == nil {
			continue
		}
		recs, err := s.State().Read().Devices(nil)
		if err != nil {
			continue
		}
		f.mu.Lock()
		seen := f.acked[s]
		if seen == nil {
			seen = map[string]uint64{}
			f.acked[s] = seen
		}
		for _, r := range recs {
			if prev := seen[r.ID]; r.AckedRevision < prev {
				f.violations = append(f.violations, fmt.Sprintf("device %s: acknowledged revision went backwards on %s: %d after %d", r.ID, s.ID(), r.AckedRevision, prev))
			}
			seen[r.ID] = max(seen[r.ID], r.AckedRevision)
		}
		f.mu.Unlock()
	}
}

// waitConverged waits until every device's agent has reported the marked
// revision converged at least once since the mark (a pop-up device may
// have lost power again since).
func (f *fleetRun) waitConverged(ctx context.Context, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for {
		rep, err := f.fleet.Report()
		if err != nil {
			return fmt.Errorf("the fleet: %w", err)
		}
		var done, connected, restarts int
		for _, d := range rep.DeviceReports {
			if d.ConvergedAfter != nil {
				done++
			}
			if d.Connected {
				connected++
			}
			restarts += d.Restarts
		}
		if done == rep.Devices {
			f.logger.Info("fleet converged", "revision", rep.MarkRevision, "after", time.Since(rep.Mark), "power_losses", restarts)
			return nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("%d of %d devices converged (%d connected now, %d power losses so far) after %v", done, rep.Devices, connected, restarts, limit)
		}
		sleep(ctx, 100*time.Millisecond)
	}
}

// finish runs after the cluster healed: one last change, which every
// device must apply and report within the spec's bound, and every
// server's replica must then show every device converged. It returns the
// time the fleet took and the violations found.
func (f *fleetRun) finish(ctx context.Context) (time.Duration, []string) {
	var out []string
	rev, err := f.change(ctx, 20*time.Second)
	if err != nil {
		return 0, append(f.result(), fmt.Sprintf("fleet: %v", err))
	}
	if err := f.fleet.Mark(rev); err != nil {
		return 0, append(f.result(), fmt.Sprintf("fleet: %v", err))
	}
	start := time.Now()
	if err := f.waitConverged(ctx, f.spec.Converge); err != nil {
		detail := ""
		if serr := f.serversConverged(rev); serr != nil {
			detail = "; servers: " + serr.Error()
		}
		out = append(out, fmt.Sprintf("fleet: revision %d: %v%s", rev, err, detail))
	}
	took := time.Since(start)
	if len(out) == 0 {
		// The agents' word is in; every server's replica must agree once
		// the owners' batched transitions are committed.
		if err := f.waitServersConverged(ctx, rev, 15*time.Second); err != nil {
			out = append(out, fmt.Sprintf("fleet: %v", err))
		}
	}
	f.sample()
	if f.spec.NeverUnreachable {
		out = append(out, f.falseUnreachable()...)
	}
	return took, append(f.result(), out...)
}

func (f *fleetRun) waitServersConverged(ctx context.Context, rev uint64, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for {
		err := f.serversConverged(rev)
		if err == nil || time.Now().After(deadline) || ctx.Err() != nil {
			return err
		}
		sleep(ctx, 100*time.Millisecond)
	}
}

func (f *fleetRun) serversConverged(rev uint64) error {
	for _, s := range f.h.Servers() {
		if s == nil {
			continue
		}
		recs, err := s.State().Read().Devices(nil)
		if err != nil {
			return err
		}
		if len(recs) < f.fleet.Len() {
			return fmt.Errorf("%s knows %d of %d devices", s.ID(), len(recs), f.fleet.Len())
		}
		var off []string
		for _, r := range recs {
			// A device offline since it converged may be called
			// unreachable; one connected must be converged.
			ok := r.Status == scheduler.StatusConverged || (!r.Connected && r.Status == scheduler.StatusUnreachable)
			if r.AckedRevision < rev || !ok {
				off = append(off, fmt.Sprintf("%s %s at %d (%s)", r.ID, r.Status, r.AckedRevision, r.StatusReason))
			}
		}
		if len(off) > 0 {
			sort.Strings(off)
			return fmt.Errorf("%s: %d devices not converged at revision %d: %s", s.ID(), len(off), rev, strings.Join(off[:min(len(off), 5)], ", "))
		}
	}
	return nil
}

// falseUnreachable lists the devices whose timeline (on a running
// server) says they were unreachable.
func (f *fleetRun) falseUnreachable() []string {
	var s *cluster.Server
	for _, x := range f.h.Servers() {
		if x != nil {
			s = x
			break
		}
	}
	if s == nil {
		return nil
	}
	read := s.State().Read()
	recs, err := read.Devices(nil)
	if err != nil {
		return []string{fmt.Sprintf("fleet: read devices: %v", err)}
	}
	var out []string
	for _, r := range recs {
		tl, err := read.Timeline(nil, r.ID)
		if err != nil {
			return append(out, fmt.Sprintf("fleet: timeline of %s: %v", r.ID, err))
		}
		for _, e := range tl {
			if e.Status == scheduler.StatusUnreachable {
				out = append(out, fmt.Sprintf("device %s was declared unreachable (%s, owner %s) though its link never went silent that long", r.ID, e.Reason, e.Owner))
				break
			}
		}
	}
	return out
}

func (f *fleetRun) result() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.violations...)
}

// powerLosses returns the power losses so far and the steps they left in
// flight (interrupted mid-apply), summed over the fleet.
func (f *fleetRun) powerLosses() (losses, interrupted int) {
	rep, err := f.fleet.Report()
	if err != nil {
		f.logger.Warn("count power losses", "error", err)
		return 0, 0
	}
	for _, d := range rep.DeviceReports {
		losses += d.Restarts
		interrupted += d.Interrupted
	}
	return losses, interrupted
}

// close stops every device and waits for them.
func (f *fleetRun) close() error { return f.fleet.stop() }

package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"time"

	"github.com/meteor-edge/meteor/agent/sim"
	"github.com/meteor-edge/meteor/bench/internal/benchkit"
	"github.com/meteor-edge/meteor/bench/internal/wiredev"
)

// scaleIntent is the intent of the scale part: one sim resource on every
// device; version v changes its value.
const scaleIntent = "fleet-scale"

func scaleDoc(version int) []byte {
	return fmt.Appendf(nil, `{"name":%q,"selector":{"region":"*"},"resources":[{"id":"scale-config","type":"sim","class":"config","spec":{"value":"scale-v%d","applyTime":"100ms"}}]}`, scaleIntent, version)
}

// scaleLevel is one fleet size of the scale part.
type scaleLevel struct {
	Devices int    `json:"devices"`
	Kind    string `json:"devices_kind"`
	Workers int    `json:"sim_workers,omitempty"`
	// Held says whether every device connected and converged on the first
	// intent and 99 % converged on the change within the bounds; Failure
	// says what did not.
	Held    bool   `json:"held"`
	Failure string `json:"failure,omitempty"`
	// ConnectSec is the time from starting the fleet until every device
	// had a session, ConvergeFirstSec until every device had converged on
	// the first intent (written before the fleet started). Connect has
	// (light) the percentiles of each device's first session.
	Connected        int         `json:"connected"`
	ConnectSec       *float64    `json:"connect_s"`
	Connect          percentiles `json:"connect_times_s"`
	ConvergedFirst   int         `json:"converged_first"`
	ConvergeFirstSec *float64    `json:"converge_first_s"`
	// ConnectCPUms is the three servers' CPU time while the fleet
	// connected, per device that connected; ConnectCPUSec the total.
	ConnectCPUSec float64 `json:"servers_connect_cpu_s"`
	ConnectCPUms  float64 `json:"servers_cpu_ms_per_connect"`
	// SimConnectCPUms is the simulator's CPU time while connecting, per
	// device that connected.
	SimConnectCPUms float64 `json:"sim_cpu_ms_per_connect"`
	// ConnectElections counts the leader elections the cluster held, won
	// or not, from starting the fleet until it had connected and
	// converged (or failed to); Elections the same from writing the
	// change until the wait for it ended.
	ConnectElections int `json:"leader_elections_connect"`
	Elections        int `json:"leader_elections"`
	// ElectionsUnknown is set when no server answered the reading of the
	// Raft term after the phase (a cluster too busy to answer GET
	// /v1/health within its bound): the phase's count is then unknown, not
	// 0, and the level fails with that.
	ElectionsUnknown bool `json:"leader_elections_unknown,omitempty"`
	// ConnectUDP and ChangeUDP count the datagrams dropped by full
	// receive buffers while connecting and during the change.
	ConnectUDP *benchkit.UDPDrops `json:"udp_drops_connect,omitempty"`
	ChangeUDP  *benchkit.UDPDrops `json:"udp_drops_change,omitempty"`
	// The change: time from the write's answer (commit) until 50, 90, 99
	// and 100 % of the fleet had converged on it: (light) its report
	// acknowledged, the status committed through Raft; (agent) as the
	// agents see it. ChangeApplied (light) until they applied it.
	ChangeRevision  uint64      `json:"change_revision"`
	ChangeConverged int         `json:"change_converged"`
	Change          percentiles `json:"change_s"`
	ChangeApplied   percentiles `json:"change_applied_s"`
	ChangeCPUSec    float64     `json:"servers_change_cpu_s"`
	// ServerConverged is the change's progress as the servers see it
	// (GET /v1/intents/NAME/progress) when the wait ended.
	ServerTargeted  int `json:"server_targeted"`
	ServerConverged int `json:"server_converged"`
	// Servers has per-server memory and CPU.
	Servers []serverScale `json:"servers"`
	// TotalKiBPerDevice is the servers' added RSS, summed, over the fleet.
	TotalKiBPerDevice float64 `json:"total_rss_kib_per_device"`
	// SimRSSMiB and SimGoroutines are the simulator's (this process for
	// light devices, the workers for agents) once connected (or when the
	// level stopped), SimKiBPerDevice its RSS added by the devices over
	// the devices connected; SimCPUSec its CPU time over the whole level.
	SimRSSMiB       float64 `json:"sim_rss_mib"`
	SimKiBPerDevice float64 `json:"sim_rss_kib_per_device"`
	// SimHeapMiB and SimStacksMiB (light devices) are this process's Go
	// heap in use and goroutine stacks once connected.
	SimHeapMiB     float64 `json:"sim_heap_inuse_mib,omitempty"`
	SimStacksMiB   float64 `json:"sim_stacks_mib,omitempty"`
	SimGoroutines  int     `json:"sim_goroutines"`
	SimCPUSec      float64 `json:"sim_cpu_s"`
	MemAvailMinMiB float64 `json:"mem_available_min_mib"`
	WallSec        float64 `json:"wall_s"`
	LoadAvg        string  `json:"loadavg_end"`
}

// serverScale is one server's figures at one fleet size.
type serverScale struct {
	ID string `json:"id"`
	// Sessions is the devices whose session was on this server once
	// connected.
	Sessions      int        `json:"sessions"`
	Before        procStatus `json:"before"`
	Connected     procStatus `json:"connected"`
	AfterChange   procStatus `json:"after_change"`
	KiBPerSession float64    `json:"rss_kib_per_session"`
	// CPU seconds while the fleet connected and during the change.
	ConnectCPUSec float64 `json:"connect_cpu_s"`
	ChangeCPUSec  float64 `json:"change_cpu_s"`
}

type percentiles struct {
	P50  *float64 `json:"50"`
	P90  *float64 `json:"90"`
	P99  *float64 `json:"99"`
	P100 *float64 `json:"100"`
}

// percentilesOf returns the times by which 50/90/99/100 % of n devices
// had converged, given the times of those that did (nil where not
// reached).
func percentilesOf(times []float64, n int) percentiles {
	slices.Sort(times)
	at := func(pct float64) *float64 {
		k := int((pct*float64(n) + 99) / 100) // ceil(pct/100*n)
		k = max(k, 1)
		if n == 0 || k > len(times) {
			return nil
		}
		v := times[k-1]
		return &v
	}
	return percentiles{P50: at(50), P90: at(90), P99: at(99), P100: at(100)}
}

// runScale runs the fleet sizes in order and stops at the first that does
// not hold.
func runScale(ctx context.Context, cfg *config, g *benchkit.Group, bin, self, pkiDir, dir, simDir string, elections *benchkit.ElectionLog, out, log io.Writer) ([]*scaleLevel, error) {
	var levels []*scaleLevel
	for _, n := range cfg.sizes {
		name := fmt.Sprintf("n%d", n)
		lvl, err := runScaleLevel(ctx, cfg, g, bin, self, pkiDir, filepath.Join(dir, name), filepath.Join(simDir, name), n, elections, log)
		g.StopAll(5 * time.Second)
		// The next size starts from scratch: free the journals' memory
		// (tmpfs) at once.
		if rerr := os.RemoveAll(filepath.Join(simDir, name)); rerr != nil {
			fmt.Fprintf(log, "remove the devices' journals: %v\n", rerr)
		}
		if err != nil {
			return levels, err
		}
		levels = append(levels, lvl)
		scaleLine(out, lvl)
		if !lvl.Held {
			break
		}
	}
	return levels, nil
}

// errLevel ends a level that did not hold; its message is the failure.
type errLevel struct{ msg string }

func (e *errLevel) Error() string { return e.msg }

func levelFailed(format string, args ...any) error { return &errLevel{fmt.Sprintf(format, args...)} }

// termUnread notes that the Raft term could not be read after phase: the
// level's elections are unknown, and the level fails with it rather than
// the run (the next size is not tried; the cluster's elections over its
// life say unknown too if it still does not answer when it stops).
func (l *scaleLevel) termUnread(phase string, err error) error {
	l.ElectionsUnknown = true
	return levelFailed("leader elections during %s unknown: %v", phase, err)
}

// startScaleFleet starts the devices of a level of n on cl: light devices
// in this process, or agents in simulator processes. base is the
// simulator's RSS before (light: this process's, settled), in KiB.
func startScaleFleet(ctx context.Context, cfg *config, g *benchkit.Group, cl *cluster, self, pkiDir, dir, simDir string, n int, lvl *scaleLevel, log io.Writer) (f scaleFleet, base int64, err error) {
	if cfg.devicesKind == kindLight {
		ca, err := loadCA(pkiDir)
		if err != nil {
			return nil, 0, err
		}
		if base, err = settledRSSKiB(); err != nil {
			return nil, 0, err
		}
		fmt.Fprintf(log, "scale %d: issuing %d device certificates\n", n, n)
		ids := lightIDs(n)
		certs, err := wiredev.Issue(ca, ids)
		if err != nil {
			return nil, 0, err
		}
		fmt.Fprintf(log, "scale %d: starting %d light devices (%d dials in flight, %d UDP sockets)\n", n, n, cfg.dials, cfg.sockets)
		lf, err := startLight(ctx, cl, ca, ids, certs, cfg.sockets, cfg.dials)
		return lf, base, err
	}
	spec := fleetSpec{
		devices: n, profile: sim.LinkFiber, seed: cfg.seed, prefix: "s", timeScale: 1,
		rampEvery: 100 * time.Millisecond, sampleEvery: cfg.sampleEvery, rttProbe: cfg.rttProbe, perWorker: cfg.perWorker,
	}
	lvl.Workers = spec.workerCount()
	spec.rampBatch = max(cfg.rampRate/10/lvl.Workers, 1)
	fmt.Fprintf(log, "scale %d: starting %d sim workers (%d devices/s)\n", n, lvl.Workers, spec.rampBatch*10*lvl.Workers)
	sh, err := startShards(ctx, g, self, simDir, filepath.Join(dir, "fleet"), cl.AgentAddrs(), pkiDir, spec)
	if err != nil {
		return nil, 0, err
	}
	return &agentFleet{sh: sh}, 0, nil
}

func runScaleLevel(ctx context.Context, cfg *config, g *benchkit.Group, bin, self, pkiDir, dir, simDir string, n int, elections *benchkit.ElectionLog, log io.Writer) (*scaleLevel, error) {
	start := time.Now()
	lvl := &scaleLevel{Devices: n, Kind: cfg.devicesKind, MemAvailMinMiB: float64(memAvailableKiB()) / 1024}
	fmt.Fprintf(log, "scale %d: starting a %d-server cluster\n", n, serverCount)
	cl, err := startCluster(ctx, g, bin, pkiDir, filepath.Join(dir, "cluster"), cfg.raftMultiplier)
	if err != nil {
		return nil, err
	}
	// The level ends in this order: its elections recorded while the
	// servers still answer, the servers killed, and only then the
	// devices stopped. Devices that leave a running cluster all at once
	// make every server record the end of each session through Raft: at
	// 100,000 devices (2026-12-07, 83,426 connected at the bound) the
	// servers grew by 0.5 GB and this process by 0.25 GB in the seconds
	// the devices took to leave, on a machine the level had left with
	// 4.1 GiB; an earlier run, left with 2.4 GiB, had the kernel kill
	// this process before it wrote its results.
	var fl scaleFleet
	defer func() {
		elections.Record(context.WithoutCancel(ctx), fmt.Sprintf("scale %d", n), cl.MeteorCluster)
		for _, s := range cl.Servers {
			_ = s.Proc.Kill()
		}
		for _, s := range cl.Servers {
			<-s.Proc.Done()
		}
		if fl != nil {
			fl.stop()
		}
	}()
	rev1, err := cl.put(ctx, scaleIntent, scaleDoc(1))
	if err != nil {
		return nil, err
	}
	if err := cl.WaitRevision(ctx, rev1); err != nil {
		return nil, err
	}
	time.Sleep(cfg.settle) // let the servers' heaps settle before the baseline
	for _, s := range cl.Servers {
		st, err := readProc(s.Proc)
		if err != nil {
			return nil, err
		}
		lvl.Servers = append(lvl.Servers, serverScale{ID: s.ID, Before: st})
	}

	connectTerm, err := cl.RaftTerm(ctx)
	if err != nil {
		return nil, err
	}
	fl, simBase, err := startScaleFleet(ctx, cfg, g, cl, self, pkiDir, dir, simDir, n, lvl, log)
	if err != nil {
		return nil, err
	}
	fleetStart := time.Now()
	udp := benchkit.WatchUDP(cl.AgentPorts(), fl.ports())
	defer func() {
		if _, _, cpu, err := fl.usage(ctx); err == nil {
			lvl.SimCPUSec = cpu
		}
		lvl.WallSec = time.Since(start).Seconds()
		lvl.LoadAvg = benchkit.LoadAvg()
	}()
	serversCPU := func() float64 {
		d, _ := cl.CPUTime()
		return d.Seconds()
	}
	cpu0 := serversCPU()

	// Connect and converge on the first intent. Agents ramp up at
	// -ramp-rate, which the bound allows for; light devices dial at once.
	connectBound := cfg.connectTimeout
	if cfg.devicesKind == kindAgent {
		connectBound += time.Duration(n/max(cfg.rampRate, 1)) * time.Second
	}
	summary := func(ctx context.Context) (sim.Summary, error) { return fl.summary(ctx, rev1) }
	err = watch(ctx, cl, summary, lvl, cfg.memFloorMiB<<10, connectBound, fmt.Sprintf("scale %d connect", n), log, func(s sim.Summary) bool {
		since := time.Since(fleetStart).Seconds()
		if s.Connected > lvl.Connected {
			lvl.Connected = s.Connected
		}
		if s.Connected == n && lvl.ConnectSec == nil {
			lvl.ConnectSec = &since
		}
		lvl.ConvergedFirst = max(lvl.ConvergedFirst, s.Converged)
		if s.Converged == n && lvl.ConvergeFirstSec == nil {
			lvl.ConvergeFirstSec = &since
		}
		return lvl.ConnectSec != nil && lvl.ConvergeFirstSec != nil
	})
	lvl.ConnectCPUSec = serversCPU() - cpu0
	if lvl.Connected > 0 {
		lvl.ConnectCPUms = lvl.ConnectCPUSec * 1000 / float64(lvl.Connected)
		if _, _, simCPU, err := fl.usage(ctx); err == nil {
			lvl.SimConnectCPUms = simCPU * 1000 / float64(lvl.Connected)
		}
	}
	lvl.Connect = percentilesOf(fl.connectTimes(fleetStart), n)
	drops := udp.Drops()
	lvl.ConnectUDP = &drops
	connectElections, terr := cl.ElectionsSince(ctx, connectTerm)
	lvl.ConnectElections = connectElections
	if err == nil && terr != nil {
		err = lvl.termUnread("connecting", terr)
	}
	if err != nil {
		// Measure what the level reached before it stopped.
		readScaleMemory(ctx, cl, fl, lvl, simBase, log)
		return finishLevel(lvl, err)
	}
	time.Sleep(cfg.settle)
	if err := readScaleMemory(ctx, cl, fl, lvl, simBase, log); err != nil {
		return nil, err
	}
	if cfg.memProfile != "" && cfg.devicesKind == kindLight {
		if err := writeHeapProfile(cfg.memProfile); err != nil {
			return nil, err
		}
		fmt.Fprintf(log, "scale %d: heap profile in %s\n", n, cfg.memProfile)
	}

	// The change.
	fmt.Fprintf(log, "scale %d: writing the change\n", n)
	changeTerm, err := cl.RaftTerm(ctx)
	if err != nil {
		return nil, err
	}
	udp = benchkit.WatchUDP(cl.AgentPorts(), fl.ports())
	cpu1 := serversCPU()
	rev, err := cl.put(ctx, scaleIntent, scaleDoc(2))
	if err != nil {
		return nil, err
	}
	commit := time.Now()
	lvl.ChangeRevision = rev
	if err := fl.mark(ctx, rev); err != nil {
		return nil, err
	}
	summary = func(ctx context.Context) (sim.Summary, error) { return fl.summary(ctx, rev) }
	err = watch(ctx, cl, summary, lvl, cfg.memFloorMiB<<10, cfg.changeTimeout, fmt.Sprintf("scale %d change", n), log, func(s sim.Summary) bool {
		lvl.ChangeConverged = s.Converged
		return s.Converged == n
	})
	var lerr *errLevel
	if err != nil && !errors.As(err, &lerr) {
		return nil, err
	}
	lvl.ChangeCPUSec = serversCPU() - cpu1
	drops = udp.Drops()
	lvl.ChangeUDP = &drops
	lvl.Elections, err = cl.ElectionsSince(ctx, changeTerm)
	var unread error
	if err != nil {
		unread = lvl.termUnread("the change", err)
	}
	for i, s := range cl.Servers {
		if st, err := readProc(s.Proc); err == nil {
			lvl.Servers[i].AfterChange = st
			lvl.Servers[i].ChangeCPUSec = st.CPUSec - lvl.Servers[i].Connected.CPUSec
		}
	}
	reported, applied, err := fl.converged(ctx, rev, commit)
	if err != nil {
		return nil, err
	}
	lvl.ChangeConverged = len(reported)
	lvl.Change = percentilesOf(reported, n)
	lvl.ChangeApplied = percentilesOf(applied, n)
	if p, err := cl.Servers[0].API.IntentProgress(ctx, scaleIntent, apiStale); err == nil {
		lvl.ServerTargeted, lvl.ServerConverged = p.Targeted, p.Converged
	}
	also := ""
	if unread != nil {
		also = "; " + unread.Error()
	}
	switch {
	case lvl.Change.P99 == nil:
		return finishLevel(lvl, levelFailed("%d of %d devices converged on the change within %s%s", lvl.ChangeConverged, n, cfg.changeTimeout, also))
	case *lvl.Change.P99 > cfg.changeTimeout.Seconds():
		return finishLevel(lvl, levelFailed("99 %% converged after %.1f s, past the %s bound%s", *lvl.Change.P99, cfg.changeTimeout, also))
	case unread != nil:
		return finishLevel(lvl, unread)
	}
	lvl.Held = true
	return lvl, nil
}

// readScaleMemory reads each server's memory and CPU once the fleet has
// connected (or stopped trying), the sessions each holds, and the
// simulator's memory over simBase.
func readScaleMemory(ctx context.Context, cl *cluster, fl scaleFleet, lvl *scaleLevel, simBase int64, log io.Writer) error {
	sessions, err := fl.sessions(ctx)
	if err != nil {
		return err
	}
	var added int64
	for i, s := range cl.Servers {
		st, err := readProc(s.Proc)
		if err != nil {
			return err
		}
		ss := &lvl.Servers[i]
		ss.Connected, ss.Sessions = st, sessions[s.AgentAddr]
		ss.ConnectCPUSec = st.CPUSec - ss.Before.CPUSec
		if ss.Sessions > 0 {
			ss.KiBPerSession = float64(st.RSSKiB-ss.Before.RSSKiB) / float64(ss.Sessions)
		}
		added += st.RSSKiB - ss.Before.RSSKiB
	}
	if lvl.Connected > 0 {
		lvl.TotalKiBPerDevice = float64(added) / float64(lvl.Connected)
	}
	rss, goroutines, _, err := fl.usage(ctx)
	if err != nil {
		fmt.Fprintf(log, "scale %d: simulator usage: %v\n", lvl.Devices, err)
	}
	lvl.SimRSSMiB, lvl.SimGoroutines = float64(rss)/1024, goroutines
	if _, ok := fl.(*lightFleet); ok {
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		lvl.SimHeapMiB, lvl.SimStacksMiB = float64(ms.HeapInuse)/(1<<20), float64(ms.StackInuse)/(1<<20)
	}
	if lvl.Connected > 0 {
		// Over the devices connected: those still dialling cost less
		// (a certificate and a goroutine). simBase is 0 for agents: the
		// workers' whole RSS is theirs.
		lvl.SimKiBPerDevice = float64(rss-simBase) / float64(lvl.Connected)
	}
	return nil
}

// finishLevel turns a level failure into lvl.Failure; other errors end
// the run.
func finishLevel(lvl *scaleLevel, err error) (*scaleLevel, error) {
	var lerr *errLevel
	if errors.As(err, &lerr) {
		lvl.Failure = lerr.msg
		return lvl, nil
	}
	return nil, err
}

// watch polls the fleet's summary every second, printing a progress line
// to log, until done returns true, bound passes, a server exits or the
// machine's MemAvailable falls below floorKiB (-mem-floor, so that the
// benchmark never drives the shared machine into the OOM killer; the last
// three fail the level).
func watch(ctx context.Context, cl *cluster, summary func(context.Context) (sim.Summary, error), lvl *scaleLevel, floorKiB int64, bound time.Duration, what string, log io.Writer, done func(sim.Summary) bool) error {
	deadline := time.Now().Add(bound)
	start := time.Now()
	for {
		if err := cl.Exited(); err != nil {
			return levelFailed("%s: %v", what, err)
		}
		avail := memAvailableKiB()
		if lvl != nil && avail >= 0 {
			lvl.MemAvailMinMiB = min(lvl.MemAvailMinMiB, float64(avail)/1024)
		}
		if avail >= 0 && avail < floorKiB {
			return levelFailed("%s: stopped with %d MiB of memory available on the machine", what, avail>>10)
		}
		s, err := summary(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return levelFailed("%s: simulator: %v", what, err)
		}
		fmt.Fprintf(log, "%s %5.0fs  started %d/%d  connected %d  converged %d  mem avail %d MiB  load %s\n",
			what, time.Since(start).Seconds(), s.Started, s.Devices, s.Connected, s.Converged, avail>>10, benchkit.LoadAvg())
		if done(s) {
			return nil
		}
		if time.Now().After(deadline) {
			return levelFailed("%s: not done after %s (connected %d, converged %d of %d)", what, bound, s.Connected, s.Converged, s.Devices)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Second):
		}
	}
}

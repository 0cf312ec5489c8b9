package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/meteor-edge/meteor/agent/sim"
	"github.com/meteor-edge/meteor/cluster/api"
	"github.com/meteor-edge/meteor/fsm/intent"
)

// A change has converged once this share of the devices it targets has
// converged on its revision; it is given up after changeTimeout. The
// changes roll out in gated waves, each waiting for most of its devices:
// beside two busy loops on this 2-core machine, where the simulated fleet
// gets little CPU, the three took 83 s, 66 s and 93 s (and up to 293 s
// before its sampling was made cheap).
const (
	changeConvergedPct = 99
	changeTimeout      = 5 * time.Minute
	fleetConnectWait   = 3 * time.Minute
	staleAfter         = 3 * time.Second
)

// fleetNice is the scheduling priority of the simulator process. The
// simulated devices stand in for machines with CPUs of their own; at the
// same priority their thousands of goroutines would take the CPU the
// servers' Raft heartbeats need, and the cluster would elect leaders
// because its host is busy, not because a server failed.
const fleetNice = 10

// runDevFleet runs a simulated fleet against the dev cluster in a
// 'meteor sim' child process, applies the intents in o.changes one after
// another (each once the previous one has converged on 99 % of the
// devices it targets, or after a bound), and redraws the fleet status,
// as the servers record it, every second. Once every change has converged
// or been given up it prints a final line and returns (an error if a
// change did not converge), unless o.keepRunning; Ctrl-C stops it at any
// time.
func runDevFleet(ctx context.Context, out io.Writer, cl *devCluster, o devOptions, logger hclog.Logger) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	devices := o.fleetDevices
	if devices == 0 && o.fleet == sim.MixRetail {
		devices = sim.RetailDevices
	}
	if devices <= 0 {
		return fmt.Errorf("--fleet %s: give the number of devices with --fleet-devices", o.fleet)
	}
	proc, err := startFleet(cl, o, devices)
	if err != nil {
		return err
	}
	defer func() {
		if err := proc.stop(); err != nil {
			fmt.Fprintf(out, "fleet simulator: %v (log: %s)\n", err, proc.logPath)
		}
	}()

	var docs []*intent.Intent
	if o.changes != "" {
		if docs, err = readIntents(o.changes); err != nil {
			return err
		}
	}
	changes := newChangeRun(docs)
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	wg.Add(1)
	go func() {
		defer wg.Done()
		changes.run(ctx, cl.client, devices, logger)
	}()

	view := &fleetView{cl: cl, o: o, devices: devices, fleetLog: proc.logPath, changes: changes, start: time.Now()}
	ticker := time.NewTicker(time.Second)
	defer ticker.Stop()
	for {
		view.refresh(ctx)
		if _, err := out.Write(view.render()); err != nil {
			// Whoever watched is gone (a closed pipe, a closed terminal):
			// stop, and let the deferred clean-up run.
			logger.Warn("stopping: cannot write to the screen", "error", err)
			return nil
		}
		if changes.finished() && !o.keepRunning {
			line, ok := changes.summary(view.elections())
			fmt.Fprintf(out, "\n%s\n", line)
			if !ok {
				return errors.New("not every change converged")
			}
			return nil
		}
		select {
		case <-ctx.Done():
			return nil
		case <-proc.done:
			return fmt.Errorf("fleet simulator exited early: %v (log: %s)", proc.err, proc.logPath)
		case <-ticker.C:
		}
	}
}

// fleetProc is the 'meteor sim' child process.
type fleetProc struct {
	cmd     *exec.Cmd
	logPath string
	log     *os.File
	done    chan struct{} // closed once the process has exited
	err     error         // its exit status, set before done closes
}

func startFleet(cl *devCluster, o devOptions, devices int) (*fleetProc, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("find the meteor binary to run the fleet simulator: %w", err)
	}
	p := &fleetProc{logPath: filepath.Join(o.dataDir, "fleet.log"), done: make(chan struct{})}
	if p.log, err = os.Create(p.logPath); err != nil {
		return nil, err
	}
	p.cmd = exec.Command(exe, "sim",
		"--servers", strings.Join(cl.agentAddrs, ","), "--pki", cl.pkiDir,
		"--profile", o.fleet, "--devices", strconv.Itoa(devices), "--seed", "1",
		"--base-dir", filepath.Join(o.dataDir, "fleet"),
		"--report", filepath.Join(o.dataDir, "fleet-report.json"),
		// The screen shows the servers' counts, not the simulator's: its
		// samples only time the devices in its report, and at five a
		// second they were a third of its CPU.
		"--sample-every", "1s")
	if o.logs.JSON {
		p.cmd.Args = append(p.cmd.Args, "--log-json")
	}
	p.cmd.Stdout, p.cmd.Stderr = p.log, p.log
	setChildAttrs(p.cmd)
	if err := p.cmd.Start(); err != nil {
		p.log.Close()
		return nil, fmt.Errorf("start the fleet simulator: %w", err)
	}
	if err := lowerPriority(p.cmd.Process.Pid, fleetNice); err != nil {
		fmt.Fprintf(p.log, "meteor dev: could not lower the simulator's priority: %v\n", err)
	}
	go func() {
		p.err = p.cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

// stop asks the simulator to stop (SIGINT: it writes its report), and
// kills it if it has not exited after 15 s.
func (p *fleetProc) stop() error {
	defer p.log.Close()
	select {
	case <-p.done:
		return p.err
	default:
	}
	_ = p.cmd.Process.Signal(os.Interrupt)
	select {
	case <-p.done:
	case <-time.After(15 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
		return errors.New("did not stop within 15 s after an interrupt; killed")
	}
	var exit *exec.ExitError
	if errors.As(p.err, &exit) {
		if ws, ok := exit.Sys().(syscall.WaitStatus); ok && ws.Signaled() && ws.Signal() == os.Interrupt {
			return nil
		}
	}
	return p.err
}

// changeRun applies the changes one after another and records how each
// went; the view reads it.
type changeRun struct {
	mu      sync.Mutex
	changes []*change // guarded by mu, as are the changes' fields
	done    bool
}

type change struct {
	doc       *intent.Intent
	state     string // waiting, applying, rolling out, converged, not converged, failed
	revision  uint64
	appliedAt time.Time
	took      time.Duration // from the commit to convergence
	retries   int
	lastErr   string
	progress  api.IntentCounts
	rollout   *api.RolloutStatus // the last status of its rollout read
}

func newChangeRun(docs []*intent.Intent) *changeRun {
	r := &changeRun{}
	for _, d := range docs {
		r.changes = append(r.changes, &change{doc: d, state: "waiting"})
	}
	return r
}

func (r *changeRun) update(ch *change, f func(*change)) {
	r.mu.Lock()
	defer r.mu.Unlock()
	f(ch)
}

func (r *changeRun) finished() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.done
}

// run waits for the fleet to register, then applies each change and waits
// for it to converge.
func (r *changeRun) run(ctx context.Context, c *api.Client, devices int, logger hclog.Logger) {
	defer func() {
		r.mu.Lock()
		r.done = true
		r.mu.Unlock()
	}()
	if len(r.changes) == 0 {
		<-ctx.Done()
		return
	}
	// The first change goes out once the fleet has registered, so that
	// its time measures the roll-out, not the devices' start-up.
	deadline := time.Now().Add(fleetConnectWait)
	for time.Now().Before(deadline) {
		if st, err := c.Status(ctx, api.ReadOptions{Stale: true}); err == nil && st.Devices*100 >= devices*changeConvergedPct {
			break
		}
		if !sleepCtx(ctx, time.Second) {
			return
		}
	}
	for _, ch := range r.changes {
		body, err := json.Marshal(ch.doc)
		if err != nil {
			r.update(ch, func(ch *change) { ch.state, ch.lastErr = "failed", err.Error() })
			return
		}
		r.update(ch, func(ch *change) { ch.state = "applying" })
		res, err := c.ApplyIntent(ctx, ch.doc.Name, body, func(err error) {
			logger.Info("retrying a change", "intent", ch.doc.Name, "error", err)
			r.update(ch, func(ch *change) { ch.retries++; ch.lastErr = err.Error() })
		})
		if err != nil {
			if ctx.Err() == nil {
				logger.Error("apply change", "intent", ch.doc.Name, "error", err)
				r.update(ch, func(ch *change) { ch.state, ch.lastErr = "failed", err.Error() })
			}
			return
		}
		applied := time.Now()
		r.update(ch, func(ch *change) { ch.state, ch.revision, ch.appliedAt = "rolling out", res.Revision, applied })
		for {
			ro, err := c.Rollout(ctx, ch.doc.Name, api.ReadOptions{Stale: true})
			if err == nil && ro.Revision == res.Revision {
				r.update(ch, func(ch *change) { ch.rollout = ro })
				switch ro.State {
				case "paused", "aborted", "reverted", "superseded":
					r.update(ch, func(ch *change) { ch.state, ch.lastErr = "rollout "+ro.State, ro.Reason })
					return
				}
			}
			p, err := c.IntentProgress(ctx, ch.doc.Name, api.ReadOptions{Stale: true})
			if err == nil && p.Revision == res.Revision {
				r.update(ch, func(ch *change) { ch.progress = p.IntentCounts })
				// Converged once its rollout has completed (every wave
				// passed its gate) and 99 % of the devices have.
				done := ch.rollout == nil || ch.rollout.Revision != res.Revision || ch.rollout.State == "completed"
				if done && p.Targeted > 0 && p.Converged*100 >= p.Targeted*changeConvergedPct {
					r.update(ch, func(ch *change) { ch.state, ch.took = "converged", time.Since(applied) })
					break
				}
			}
			if time.Since(applied) > changeTimeout {
				r.update(ch, func(ch *change) { ch.state = "not converged" })
				break
			}
			if !sleepCtx(ctx, 500*time.Millisecond) {
				return
			}
		}
	}
}

// summary is the final line: how long each change took to converge, and
// the elections held meanwhile.
func (r *changeRun) summary(elections uint64) (string, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	var took, missed []string
	for _, ch := range r.changes {
		if ch.state == "converged" {
			took = append(took, fmt.Sprintf("%.0f s", ch.took.Seconds()))
			continue
		}
		missed = append(missed, fmt.Sprintf("%s %s (%d of %s converged)", ch.doc.Name, ch.state, ch.progress.Converged, nDevices(ch.progress.Targeted)))
	}
	el := plural(elections, "election", "elections")
	if len(missed) == 0 {
		return fmt.Sprintf("all %s converged: %s (%s)", plural(uint64(len(r.changes)), "change", "changes"), strings.Join(took, ", "), el), true
	}
	return fmt.Sprintf("%d of %s converged; %s (%s)", len(took), plural(uint64(len(r.changes)), "change", "changes"), strings.Join(missed, "; "), el), false
}

// fleetView is what the screen shows; every count on it comes from the
// servers' records (the fleet status and each server's health), read
// once a second.
type fleetView struct {
	cl       *devCluster
	o        devOptions
	devices  int
	fleetLog string
	changes  *changeRun
	start    time.Time

	status   *api.FleetStatus // the last status read, nil before the first
	statusAt time.Time
	readErr  error
	term     uint64 // the highest term any server reported
	leader   string
}

func (v *fleetView) refresh(ctx context.Context) {
	rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if st, err := v.cl.client.Status(rctx, api.ReadOptions{Stale: true}); err == nil {
		v.status, v.statusAt, v.readErr = st, time.Now(), nil
	} else {
		v.readErr = err
	}
	if term, leader := v.cl.Term(rctx); term > 0 {
		v.term, v.leader = max(v.term, term), leader
	}
}

// elections counts the elections since the cluster first had a leader.
func (v *fleetView) elections() uint64 {
	if v.term < v.cl.startTerm {
		return 0
	}
	return v.term - v.cl.startTerm
}

func (v *fleetView) render() []byte {
	var b bytes.Buffer
	fmt.Fprintf(&b, "\033[H\033[2JMeteor dev: %d-device %s fleet on a %d-server cluster, %s  (Ctrl-C stops everything)\n",
		v.devices, v.o.fleet, v.cl.Size(), time.Since(v.start).Round(time.Second))
	fmt.Fprintf(&b, "HTTP API: %s   data: %s\nlogs: %s (servers), %s (simulator)\n", v.cl.client.Addr(), v.o.dataDir, v.cl.logPath, v.fleetLog)
	if v.cl.console != "" {
		keep := ""
		if !v.o.keepRunning {
			keep = " (until the last change converges; DEMO_FLAGS=--keep-running keeps it)"
		}
		fmt.Fprintf(&b, "console: %s%s\nCA to trust in the browser: %s\n", v.cl.console, keep, filepath.Join(v.cl.pkiDir, caCertFile))
	}
	leader := v.leader
	if leader == "" {
		leader = "none (election in progress)"
	}
	fmt.Fprintf(&b, "Leader: %s, term %d, %s since start\n\n", leader, v.term, plural(v.elections(), "election", "elections"))
	switch {
	case v.status == nil && v.readErr != nil:
		fmt.Fprintf(&b, "cannot read the fleet status: %v\n", v.readErr)
	case v.status == nil:
		fmt.Fprintln(&b, "waiting for the fleet status...")
	default:
		if age := time.Since(v.statusAt); age > staleAfter {
			fmt.Fprintf(&b, "STATUS IS %.0f s OLD: cannot read a newer one: %v\n", age.Seconds(), v.readErr)
		}
		printStatus(&b, v.status)
	}
	v.changes.mu.Lock()
	defer v.changes.mu.Unlock()
	if len(v.changes.changes) > 0 {
		fmt.Fprintf(&b, "\nChanges, applied in order, each once the previous one's rollout completed and %d %% converged:\n", changeConvergedPct)
		tw := table(&b)
		fmt.Fprintln(tw, "  CHANGE\tREVISION\tSTATE\tTOOK\tRETRIES")
		for _, ch := range v.changes.changes {
			rev, took := "-", "-"
			if ch.revision > 0 {
				rev = strconv.FormatUint(ch.revision, 10)
			}
			switch {
			case ch.state == "converged":
				took = fmt.Sprintf("%.1f s", ch.took.Seconds())
			case !ch.appliedAt.IsZero():
				took = fmt.Sprintf("%.0f s so far", time.Since(ch.appliedAt).Seconds())
			}
			state := ch.state
			if ch.lastErr != "" && ch.state != "converged" && ch.state != "rolling out" {
				state += " (" + ch.lastErr + ")"
			}
			fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%d\n", ch.doc.Name, rev, state, took, ch.retries)
		}
		tw.Flush()
		// The waves of the change rolling out, or of the last one.
		var cur *change
		for _, ch := range v.changes.changes {
			if ch.rollout != nil {
				cur = ch
			}
		}
		if cur != nil {
			printWaves(&b, cur.doc.Name, cur.rollout)
		}
	}
	return b.Bytes()
}

// printWaves shows a rollout's waves, as the servers judge them.
func printWaves(w io.Writer, name string, ro *api.RolloutStatus) {
	fmt.Fprintf(w, "\nRollout of %s revision %d: %s", name, ro.Revision, ro.State)
	switch {
	case ro.WaitingFor != "":
		fmt.Fprintf(w, " (%s)", ro.WaitingFor)
	case ro.Reason != "":
		fmt.Fprintf(w, " (%s)", ro.Reason)
	}
	fmt.Fprintln(w)
	if len(ro.Waves) == 0 {
		return
	}
	tw := table(w)
	fmt.Fprintln(tw, "  WAVE\tNAME\tSTATE\tDEVICES\tRELEASED\tCONVERGED\tFAILED")
	for _, wv := range ro.Waves {
		fmt.Fprintf(tw, "  %d\t%s\t%s\t%d\t%d\t%d\t%d\n", wv.Number, wv.Name, wv.State, wv.Devices, wv.Released, wv.Converged, wv.Failed)
	}
	tw.Flush()
}

func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

package scenario

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/hashicorp/go-hclog"
	"go.uber.org/goleak"

	"github.com/meteor-edge/meteor/chaos"
)

// Options configure a run.
type Options struct {
	// Seed drives the fault schedule, the clients' choices and the
	// network's random drops.
	Seed uint64
	// Duration is how long the workload runs under faults, at least: see
	// MinOps.
	Duration time.Duration
	// MinOps is the number of operations with a definite outcome the
	// workload must complete under faults: if it has fewer once Duration
	// has passed (a busy host, a cluster mostly between leaders), faults
	// and workload go on until it has them or MaxDuration has passed. 0
	// means 50; negative, Duration is the whole run.
	MinOps int
	// MaxDuration caps a run that goes on for MinOps; 0 means Duration
	// plus 30 s.
	MaxDuration time.Duration
	// Dir holds the servers' data dirs and, if a check fails, the report
	// folder.
	Dir string
	// Log receives the servers' logs (warnings and errors) and the run's
	// progress; nil discards them.
	Log io.Writer
	// Clients is the number of concurrent clients; 0 means 4.
	Clients int
	// Intents is the number of intents they use; 0 means 4.
	Intents int
	// CheckTimeout bounds the linearizability check; 0 means 30 s.
	CheckTimeout time.Duration
	// RecheckTimeout bounds a second check of the same history when the
	// first ran out of time (porcupine's Unknown); 0 means 4 times
	// CheckTimeout, negative no second check. A history still not judged
	// is a violation: an inconclusive run proves nothing.
	RecheckTimeout time.Duration
	// StaleReads makes the clients read with ?stale=true, which is not
	// linearizable: under partitions the checker should flag it. It exists
	// to show that the checkers can fail.
	StaleReads bool
	// SkipLeakCheck leaves out the goroutine leak check (for callers that
	// run scenarios in parallel, where other runs' goroutines come and go).
	SkipLeakCheck bool
}

// Result is what a run found.
type Result struct {
	Scenario string
	Seed     uint64
	// Faults is the number of faults the schedule injected (network
	// changes and crashes; heals and restarts not counted).
	Faults int
	// Ops is the number of operations in the checked history; Unknown of
	// them had an unknown outcome and Dropped operations that certainly
	// had no effect were left out of it.
	Ops     int
	Unknown int
	Dropped int
	// Completed is the number of operations with a definite outcome while
	// the faults ran, and Ran how long they ran (more than the duration
	// asked for if the workload went on for its minimum of operations).
	Completed int
	Ran       time.Duration
	// Linearizability is porcupine's verdict: Ok, Illegal or Unknown (the
	// check ran out of time, twice if it was rechecked; a violation).
	Linearizability porcupine.CheckResult
	// CheckTime is how long the linearizability check took, both tries
	// if the first ran out of time (Rechecked).
	CheckTime time.Duration
	Rechecked bool
	// Violations lists every failed check; empty means the run passed.
	Violations []string
	// Reconverge is how long the cluster took, after the faults were
	// healed and stopped servers restarted, to agree on one state.
	Reconverge time.Duration
	// Devices is the size of the scenario's fleet (0 without one);
	// FleetConverge how long, after healing, the fleet took to apply and
	// report one last change.
	Devices       int
	FleetConverge time.Duration
	// PowerLosses counts the fleet's power losses and Interrupted the
	// steps they left in flight (mid-apply), which restarted agents
	// resolved from their journals.
	PowerLosses, Interrupted int
	// Report is the folder written for a failing run, or "".
	Report string
}

// Run starts a cluster, runs the workload for opts.Duration while the
// scenario injects faults, heals, waits for the cluster to converge and
// checks it. The error reports a run that could not be carried out (the
// cluster did not start); failed checks are Result.Violations.
func Run(ctx context.Context, sc Scenario, opts Options) (Result, error) {
	res := Result{Scenario: sc.Name, Seed: opts.Seed}
	if opts.Clients <= 0 {
		opts.Clients = 4
	}
	if opts.Intents <= 0 {
		opts.Intents = 4
	}
	length := newRunLength(opts.Duration, opts.MaxDuration, opts.MinOps)
	if opts.CheckTimeout <= 0 {
		opts.CheckTimeout = 30 * time.Second
	}
	if opts.RecheckTimeout == 0 {
		opts.RecheckTimeout = 4 * opts.CheckTimeout
	}
	if opts.Log == nil {
		opts.Log = io.Discard
	}
	if opts.Dir == "" {
		return res, errors.New("scenario: Options.Dir must be set")
	}
	var leakOpts []goleak.Option
	if !opts.SkipLeakCheck {
		leakOpts = append(leakOpts, goleak.IgnoreCurrent())
	}
	logger := hclog.New(&hclog.LoggerOptions{Name: "scenario", Level: hclog.Info, Output: opts.Log}).
		With("scenario", sc.Name, "seed", opts.Seed)

	faults := chaos.NewFaultLog()
	startCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	h, err := NewHarness(startCtx, HarnessConfig{
		Servers: sc.Servers,
		Dir:     filepath.Join(opts.Dir, "data"),
		Seed:    opts.Seed,
		Faults:  faults,
		Log:     opts.Log,
		Agents:  sc.Fleet != nil,
	})
	cancel()
	if err != nil {
		return res, fmt.Errorf("scenario %s: %w", sc.Name, err)
	}
	closed := false
	defer func() {
		if !closed {
			h.Close()
		}
	}()

	names := make([]string, opts.Intents)
	for i := range names {
		names[i] = fmt.Sprintf("chaos-%d", i)
	}
	wl := newWorkload(h, h.TLSConfig(), h.AdminToken(), opts.Seed, opts.Clients, names)
	wl.stale = opts.StaleReads
	defer wl.close()
	watch := &revisionWatch{h: h}
	watchCtx, stopWatch := context.WithCancel(ctx)
	var watchWG sync.WaitGroup
	watchWG.Add(1)
	go func() { defer watchWG.Done(); watch.run(watchCtx) }()
	defer func() { stopWatch(); watchWG.Wait() }()

	var fleet *fleetRun
	if sc.Fleet != nil {
		res.Devices = sc.Fleet.Devices
		fleet, err = startFleet(ctx, h, *sc.Fleet, opts.Seed, opts.Dir, logger, opts.Log)
		if err != nil {
			return res, fmt.Errorf("scenario %s: %w", sc.Name, err)
		}
		defer func() {
			if fleet != nil {
				fleet.close()
			}
		}()
	}

	// Faults and workload run together for the duration, and on until
	// the workload has its minimum of operations.
	logger.Info("running", "servers", sc.Servers, "duration", opts.Duration, "min_ops", length.minOps)
	inj := &Injector{H: h, Rng: rand.New(rand.NewPCG(opts.Seed, 0x5eed))}
	runCtx, stopRun := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); sc.Inject(runCtx, inj) }()
	go func() { defer wg.Done(); wl.run(runCtx) }()
	if fleet != nil {
		wg.Add(1)
		go func() { defer wg.Done(); fleet.run(runCtx) }()
	}
	res.Ran = length.wait(runCtx, logger, wl.completedOps)
	stopRun()
	wg.Wait()
	res.Faults = inj.Count()
	res.Completed = wl.completedOps()

	// Heal, restart what is down, and let the cluster settle.
	h.Network().Heal()
	for i, s := range h.Servers() {
		if s == nil {
			if err := h.Restart(i); err != nil {
				res.Violations = append(res.Violations, fmt.Sprintf("restart after the run: %v", err))
			}
		}
	}
	healed := time.Now()
	var stacks []byte // every goroutine's, if the servers did not converge
	convCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	err = waitConverged(convCtx, h)
	cancel()
	res.Reconverge = time.Since(healed)
	if err != nil {
		res.Violations = append(res.Violations, fmt.Sprintf("servers did not converge within 30 s of healing: %v", err))
		// Read where the servers stand before anything shuts them down:
		// Raft's figures and its loops' stacks say what a cluster that
		// made no progress was waiting on.
		stacks = allStacks()
		logger.Error("servers did not converge after healing; their Raft:\n" + raftStates(h) +
			"the goroutines in Raft's loops (every goroutine is in the report, goroutines.txt):\n" + raftLoopStacks(stacks))
	} else {
		lctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		li, lerr := h.Leader(lctx)
		cancel()
		if lerr == nil {
			lerr = wl.finalReads(ctx, h.HTTPURL(li))
		}
		if lerr != nil {
			res.Violations = append(res.Violations, fmt.Sprintf("after convergence: %v", lerr))
		}
	}
	stopWatch()
	watchWG.Wait()
	logger.Info("healed", "reconverge", res.Reconverge, "faults", faults.String())

	// Checks.
	ops, unknown, dropped := wl.history()
	res.Ops, res.Unknown, res.Dropped = len(ops), unknown, dropped
	lin := checkLinearizable(porcupineCheck, ops, opts.CheckTimeout, opts.RecheckTimeout)
	lin.record(&res, logger)
	if err == nil {
		res.Violations = append(res.Violations, checkAcknowledged(h, ops)...)
	}
	revViolations, _ := watch.result()
	res.Violations = append(res.Violations, revViolations...)
	if fleet != nil {
		if err == nil {
			var fv []string
			res.FleetConverge, fv = fleet.finish(ctx)
			res.Violations = append(res.Violations, fv...)
			res.PowerLosses, res.Interrupted = fleet.powerLosses()
			logger.Info("fleet checked", "devices", res.Devices, "converged in", res.FleetConverge,
				"power_losses", res.PowerLosses, "interrupted_steps", res.Interrupted)
		}
		if ferr := fleet.close(); ferr != nil {
			res.Violations = append(res.Violations, fmt.Sprintf("fleet: %v", ferr))
		}
		fleet = nil
	}

	closed = true
	if err := h.Close(); err != nil {
		res.Violations = append(res.Violations, fmt.Sprintf("shutdown: %v", err))
	}
	wl.close()
	if !opts.SkipLeakCheck {
		if err := findLeaks(leakOpts); err != nil {
			res.Violations = append(res.Violations, fmt.Sprintf("goroutines leaked: %v", err))
		}
	}
	logger.Info("checked", "ops", res.Ops, "unknown", res.Unknown, "dropped", res.Dropped,
		"linearizability", res.Linearizability, "check_time", res.CheckTime, "violations", len(res.Violations))

	if len(res.Violations) > 0 {
		dir := filepath.Join(opts.Dir, fmt.Sprintf("report-%s-%d", sc.Name, opts.Seed))
		if err := writeReport(dir, res, faults, ops, lin.verdict, lin.info, stacks); err != nil {
			return res, fmt.Errorf("scenario %s: write report: %w", sc.Name, err)
		}
		res.Report = dir
		logger.Error("run failed", "report", dir, "violations", strings.Join(res.Violations, "; "))
	}
	return res, nil
}

// writeReport writes a failing run's folder: the result with the seed,
// the fault log as JSON lines, the history, and porcupine's visualization.
func writeReport(dir string, res Result, faults *chaos.FaultLog, ops []porcupine.Operation, verdict porcupine.CheckResult, info porcupine.LinearizationInfo, stacks []byte) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	if stacks != nil {
		if err := os.WriteFile(filepath.Join(dir, "goroutines.txt"), stacks, 0o644); err != nil {
			return err
		}
	}
	res.Report = dir
	b, err := json.MarshalIndent(res, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "result.json"), b, 0o644); err != nil {
		return err
	}
	f, err := os.Create(filepath.Join(dir, "faults.jsonl"))
	if err != nil {
		return err
	}
	werr := faults.WriteJSONL(f)
	if err := errors.Join(werr, f.Close()); err != nil {
		return err
	}
	type op struct {
		Client int    `json:"client"`
		Input  Input  `json:"input"`
		Output Output `json:"output"`
		Call   int64  `json:"call_ns"`
		Return int64  `json:"return_ns"`
	}
	hist := make([]op, len(ops))
	for i, o := range ops {
		hist[i] = op{o.ClientId, o.Input.(Input), o.Output.(Output), o.Call, o.Return}
	}
	if b, err = json.MarshalIndent(hist, "", " "); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "history.json"), b, 0o644); err != nil {
		return err
	}
	if verdict != porcupine.Ok {
		if err := porcupine.VisualizePath(Model, info, filepath.Join(dir, "linearizability.html")); err != nil {
			return fmt.Errorf("visualize: %w", err)
		}
	}
	return nil
}

// findLeaks looks for goroutines started during the run that outlive it.
// Some stop shortly after shutdown on their own (a memberlist probe waits
// for its ack timer), so it looks again for a few seconds before judging.
func findLeaks(opts []goleak.Option) error {
	// hashicorp/raft never answers a log future still queued on its apply
	// channel when it shuts down (logFuture has no shutdown channel, see
	// raft's future.go), so the goroutine a proposal waits in stays. It is
	// raft's, one per proposal in flight at a crash, and ends with the
	// process; everything else must be gone.
	opts = append(opts, goleak.IgnoreTopFunction("github.com/hashicorp/raft.(*deferError).Error"))
	deadline := time.Now().Add(5 * time.Second)
	for {
		err := goleak.Find(opts...)
		if err == nil || time.Now().After(deadline) {
			return err
		}
		time.Sleep(200 * time.Millisecond)
	}
}

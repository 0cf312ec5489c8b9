package scenario

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/meteor-edge/meteor/chaos"
)

var (
	seedFlag     = flag.Uint64("chaos.seed", 0, "seed for every scenario (0: each scenario's own fixed seed)")
	durationFlag = flag.Duration("chaos.duration", 5*time.Second, "how long each scenario runs its workload under faults")
	checkFlag    = flag.Duration("chaos.check-timeout", 30*time.Second, "budget of a scenario's linearizability check (a check that runs out of it is run again with 4 times as much)")
)

// TestScenarios runs every scenario once, with one fixed seed each, for a
// few seconds. Other seeds and longer runs are for -chaos.seed=N
// -chaos.duration=1m, and for `meteor chaos matrix` (make chaos), which
// runs every scenario with several seeds.
func TestScenarios(t *testing.T) {
	if testing.Short() {
		t.Skip("chaos scenarios start real clusters")
	}
	for i, sc := range All() {
		seed := uint64(i + 1)
		if *seedFlag != 0 {
			seed = *seedFlag
		}
		t.Run(fmt.Sprintf("%s/seed=%d", sc.Name, seed), func(t *testing.T) {
			runScenario(t, sc, seed)
		})
	}
}

// minOps is the number of operations with a definite outcome a scenario's
// workload must complete under faults for its history to prove something.
const minOps = 50

func runScenario(t *testing.T, sc Scenario, seed uint64) {
	res, err := Run(context.Background(), sc, Options{
		Seed:     seed,
		Duration: *durationFlag,
		MinOps:   minOps,
		// A loaded host (the suite's other packages and two busy loops
		// on two cores) once completed 30 operations under faults in the
		// default 30 s beyond Duration: give it longer. A run stops as
		// soon as it has them, so only a slow host uses the time.
		MaxDuration:  *durationFlag + 90*time.Second,
		Dir:          t.TempDir(),
		Log:          newTestWriter(t),
		CheckTimeout: *checkFlag,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%s seed %d: %d faults in %v, %d ops (%d completed under faults, %d unknown, %d dropped), linearizability %s (checked in %v), reconverged in %v",
		res.Scenario, res.Seed, res.Faults, res.Ran.Round(time.Millisecond), res.Ops, res.Completed, res.Unknown, res.Dropped,
		res.Linearizability, res.CheckTime.Round(time.Millisecond), res.Reconverge.Round(time.Millisecond))
	if res.Devices > 0 {
		t.Logf("%s seed %d: %d devices converged on the last change in %v after healing; %d power losses, %d steps interrupted mid-apply",
			res.Scenario, res.Seed, res.Devices, res.FleetConverge.Round(time.Millisecond), res.PowerLosses, res.Interrupted)
	}
	for _, v := range res.Violations {
		t.Errorf("violation: %s", v)
	}
	if res.Report != "" {
		t.Errorf("report written to %s", res.Report)
	}
	if res.Faults == 0 {
		t.Error("no fault injected")
	}
	if res.Completed < minOps {
		t.Errorf("only %d operations completed under faults in %v (want %d; %d in the history, %d unknown, %d dropped)",
			res.Completed, res.Ran.Round(time.Millisecond), minOps, res.Ops, res.Unknown, res.Dropped)
	}
	if res.Linearizability == porcupine.Unknown {
		t.Errorf("linearizability of %d operations not decided in %v of checking (rechecked: %v); rerun with a longer -chaos.check-timeout and -chaos.seed=%d",
			res.Ops, res.CheckTime.Round(time.Millisecond), res.Rechecked, res.Seed)
	}
}

// TestCheckerCatchesStaleReads runs leader-isolated with stale reads,
// which an isolated old leader answers from its outdated replica: the run
// must fail the linearizability check and write a complete report.
func TestCheckerCatchesStaleReads(t *testing.T) {
	if testing.Short() {
		t.Skip("chaos scenarios start real clusters")
	}
	dir := t.TempDir()
	res, err := Run(context.Background(), LeaderIsolated, Options{
		Seed:       1,
		Duration:   *durationFlag,
		Dir:        dir,
		Log:        newTestWriter(t),
		StaleReads: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("stale reads: %d ops, linearizability %s, violations %q", res.Ops, res.Linearizability, res.Violations)
	if res.Linearizability != porcupine.Illegal {
		t.Fatalf("linearizability = %s with stale reads under partition, want Illegal", res.Linearizability)
	}
	if res.Report == "" {
		t.Fatal("no report written for a failing run")
	}
	for _, f := range []string{"result.json", "faults.jsonl", "history.json", "linearizability.html"} {
		if fi, err := os.Stat(filepath.Join(res.Report, f)); err != nil || fi.Size() == 0 {
			t.Errorf("report %s: %v", f, err)
		}
	}
	fl, err := os.Open(filepath.Join(res.Report, "faults.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	defer fl.Close()
	faults, err := chaos.ReadFaultLog(fl)
	if err != nil || len(faults) == 0 {
		t.Errorf("fault log: %d faults, %v", len(faults), err)
	}
}

// TestCheckDeployment checks a running cluster from the outside, as an
// operator would check theirs, while a server is crashed and restarted.
func TestCheckDeployment(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a real cluster")
	}
	ctx := context.Background()
	h, err := NewHarness(ctx, HarnessConfig{Servers: 3, Dir: t.TempDir(), Seed: 21, Log: newTestWriter(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	addrs := []string{h.HTTPURL(0), h.HTTPURL(1), h.HTTPURL(2)}
	var crash sync.WaitGroup
	var crashed string
	var crashErr error
	crash.Go(func() { crashed, crashErr = crashLeader(ctx, h) })
	defer crash.Wait() // before h.Close
	res, err := CheckDeployment(ctx, addrs, DeploymentOptions{TLS: h.TLSConfig(), Seed: 21, Duration: 4 * time.Second, Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	crash.Wait()
	if crashErr != nil {
		t.Fatalf("crash of the leader: %v", crashErr)
	}
	t.Logf("crashed and restarted the leader %s", crashed)
	if res.Completed < 50 || len(res.Violations) > 0 || res.Linearizability != porcupine.Ok {
		t.Fatalf("deployment check: %d ops (%d completed in %s), %v, violations %v",
			res.Ops, res.Completed, res.Ran.Round(time.Millisecond), res.Linearizability, res.Violations)
	}
	t.Logf("deployment check: %d ops (%d unknown, %d dropped), reconverged in %s", res.Ops, res.Unknown, res.Dropped, res.Reconverge)
}

// crashLeader crashes the leader a second into the workload, as an
// operator would, and restarts it a second later. Both waits let the
// workload run (the fault's timing, not a synchronisation); the leader is
// waited for.
func crashLeader(ctx context.Context, h *Harness) (string, error) {
	sleep(ctx, time.Second)
	lctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	i, err := h.Leader(lctx)
	cancel()
	if err != nil {
		return "", err
	}
	if err := h.Kill(i); err != nil {
		return h.ID(i), fmt.Errorf("crash %s: %w", h.ID(i), err)
	}
	sleep(ctx, time.Second)
	if err := h.Restart(i); err != nil {
		return h.ID(i), fmt.Errorf("restart %s: %w", h.ID(i), err)
	}
	return h.ID(i), nil
}

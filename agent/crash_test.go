package agent

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/meteor-edge/meteor/agent/driver"
	"github.com/meteor-edge/meteor/agent/journal"
)

// The power-loss test runs the agent's reconciler in a child process (this
// test binary re-executed) over a five-step apply with the file driver.
// The child dies with os.Exit at a chosen point, as a power loss would: no
// deferred cleanup, no journal Close. The parent restarts the reconciler
// on the same journal and files.

const (
	envCrashAt   = "METEOR_AGENT_CRASH_AT" // "<event>-<n>": after the n-th step's event
	envCrashDir  = "METEOR_AGENT_CRASH_DIR"
	envCrashRoot = "METEOR_AGENT_CRASH_ROOT"
)

// fiveFiles is the desired set of the power-loss test, at revision 1.
func fiveFiles(t testing.TB) []journal.DesiredResource {
	var out []journal.DesiredResource
	for i := 1; i <= 5; i++ {
		out = append(out, desired(t, "pos", 1, fileRes(fmt.Sprintf("f%d", i), fmt.Sprintf("/etc/pos/%d.conf", i), fmt.Sprintf("setting=%d\n", i))))
	}
	return out
}

// crashRig is a reconciler on the journal and root of a crash test.
func crashRig(t testing.TB, dir, root string, hook func(event, key string)) (*reconciler, *journal.Journal) {
	j, err := journal.Open(dir, journal.Options{})
	if err != nil {
		t.Fatal(err)
	}
	reg, err := driver.NewRegistry(driver.Config{Root: root})
	if err != nil {
		t.Fatal(err)
	}
	cfg := DefaultConfig().withDefaults()
	log := testLogger(t)
	st := newStatusStore("dev-1")
	book := newSettingsBook(&cfg)
	rec := newReconciler(&cfg, j, reg, st, newReporter(j, st, cfg.Clock, book.reportInterval, log), book, log)
	rec.hook = hook
	return rec, j
}

// TestHelperAgentCrash is the child. It is skipped in a normal run.
func TestHelperAgentCrash(t *testing.T) {
	at := os.Getenv(envCrashAt)
	if at == "" {
		t.Skip("helper process of TestPowerLossMidApply")
	}
	steps := map[string]int{}
	rec, j := crashRig(t, os.Getenv(envCrashDir), os.Getenv(envCrashRoot), func(event, key string) {
		steps[event]++
		if fmt.Sprintf("%s-%d", event, steps[event]) == at {
			os.Exit(1) // power loss: no Close, no deferred calls
		}
	})
	if err := j.RecordDesired(1, fiveFiles(t)); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(3)
	}
	_, err := rec.pass(context.Background())
	fmt.Fprintln(os.Stderr, "helper did not crash:", err)
	os.Exit(3)
}

func TestPowerLossMidApply(t *testing.T) {
	keys := func(from, to int) []string {
		var ks []string
		for i := from; i <= to; i++ {
			ks = append(ks, fmt.Sprintf("pos/f%d", i))
		}
		return ks
	}
	for _, tc := range []struct {
		crashAt  string
		applied  []string // per the journal after the crash
		inFlight []string
		onDisk   int      // files the child wrote
		begun    []string // steps the restarted agent takes
	}{
		// Power lost between step 2 and step 3: exactly two applied, the
		// other three applied after the restart.
		{crashAt: "end-2", applied: keys(1, 2), onDisk: 2, begun: keys(3, 5)},
		// Lost after the third file was written, before its EndStep: the
		// re-check finds it in place and it is not written again.
		{crashAt: "apply-3", applied: keys(1, 2), inFlight: keys(3, 3), onDisk: 3, begun: keys(4, 5)},
		// Lost after BeginStep 3, before the driver ran: the re-check
		// finds nothing and the step runs again.
		{crashAt: "begin-3", applied: keys(1, 2), inFlight: keys(3, 3), onDisk: 2, begun: keys(3, 5)},
	} {
		t.Run(tc.crashAt, func(t *testing.T) {
			dir, root := t.TempDir(), t.TempDir()
			cmd := exec.Command(os.Args[0], "-test.run=^TestHelperAgentCrash$", "-test.count=1")
			cmd.Env = append(os.Environ(), envCrashAt+"="+tc.crashAt, envCrashDir+"="+dir, envCrashRoot+"="+root)
			out, err := cmd.CombinedOutput()
			if exitErr, ok := errors.AsType[*exec.ExitError](err); !ok || exitErr.ExitCode() != 1 {
				t.Fatalf("child: %v, want exit status 1; output:\n%s", err, out)
			}

			var begun []string
			rec, j := crashRig(t, dir, root, func(event, key string) {
				if event == "begin" {
					begun = append(begun, key)
				}
			})
			defer j.Close()
			p, err := j.Progress()
			if err != nil {
				t.Fatal(err)
			}
			var inFlight []string
			for _, st := range p.InFlight {
				inFlight = append(inFlight, st.Key)
			}
			if diff := cmp.Diff(tc.applied, p.Applied); diff != "" {
				t.Errorf("applied after the power loss (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.inFlight, inFlight); diff != "" {
				t.Errorf("in flight after the power loss (-want +got):\n%s", diff)
			}
			if got := len(fileMtimes(t, root)); got != tc.onDisk {
				t.Errorf("%d files on disk after the power loss, want %d", got, tc.onDisk)
			}

			// Restart: resolve, then apply only what is missing.
			if _, err := rec.pass(t.Context()); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.begun, begun); diff != "" {
				t.Errorf("steps after the restart (-want +got):\n%s", diff)
			}
			p, err = j.Progress()
			if err != nil || len(p.Applied) != 5 || len(p.InFlight)+len(p.Pending)+len(p.Failed) != 0 {
				t.Fatalf("progress after the restart = %+v, %v; want all five applied", p, err)
			}
			if got := rec.st.snapshot().Interrupted; got != len(tc.inFlight) {
				t.Errorf("status counts %d interrupted steps, want %d", got, len(tc.inFlight))
			}
			for _, s := range rec.st.snapshot().Resources {
				if s.State != StateConverged {
					t.Errorf("%s: %s (%s)", s.Key, s.State, s.Detail)
				}
			}
			if tc.crashAt == "begin-3" {
				if a, _, _ := j.Applied("pos/f3"); a.Attempts != 2 || a.LastError != "" {
					t.Errorf("f3 after an interrupted step = %+v, want 2 attempts", a)
				}
			}

			// A second pass changes nothing.
			begun = nil
			mtimes := fileMtimes(t, root)
			before, err := j.AppliedAll()
			if err != nil {
				t.Fatal(err)
			}
			if _, err := rec.pass(t.Context()); err != nil {
				t.Fatal(err)
			}
			if len(begun) != 0 {
				t.Errorf("second pass began %v", begun)
			}
			after, err := j.AppliedAll()
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(before, after); diff != "" {
				t.Errorf("second pass changed applied records (-before +after):\n%s", diff)
			}
			if diff := cmp.Diff(mtimes, fileMtimes(t, root)); diff != "" {
				t.Errorf("second pass touched files (-before +after):\n%s", diff)
			}
		})
	}
}

package journal_test

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/meteor-edge/meteor/agent/driver"
	"github.com/meteor-edge/meteor/agent/journal"
	"github.com/meteor-edge/meteor/fsm/intent"
	"github.com/meteor-edge/meteor/wire"
)

// The crash tests run a five-step apply in a child process (this test
// binary re-executed) that dies with os.Exit at a chosen point, as a
// power loss would: no deferred cleanup, no Close. The parent then reopens
// the journal and checks that it says exactly what happened.

const (
	envHelper = "METEOR_JOURNAL_CRASH_AT" // crash point, see crashPoints
	envDir    = "METEOR_JOURNAL_DIR"
	envRoot   = "METEOR_JOURNAL_ROOT"
)

// errInterrupted ends a step that a crash interrupted before it changed
// the device.
var errInterrupted = errors.New("step interrupted by a crash")

// fiveFiles is the desired set of the crash tests, at revision 1.
func fiveFiles(t testing.TB) []journal.DesiredResource {
	var out []journal.DesiredResource
	for i := 1; i <= 5; i++ {
		r := intent.Resource{ID: fmt.Sprintf("f%d", i), Type: "file", Spec: map[string]any{
			"path": fmt.Sprintf("/etc/app/%d.conf", i), "content": fmt.Sprintf("setting=%d\n", i),
		}}
		b := intent.ResourceBody{Intent: "app", Resource: r}
		body, err := b.Canonical()
		if err != nil {
			t.Fatal(err)
		}
		sum := wire.DigestOf(body)
		out = append(out, journal.DesiredResource{Key: b.Key(), Digest: hex.EncodeToString(sum[:]), Revision: 1, Body: body})
	}
	return out
}

// reconcile is a minimal agent pass over the journal's desired set. It
// first resolves in-flight steps by re-reading the device, then applies
// every resource whose applied digest differs from the desired one,
// journaling each step around the driver. hook, when set, is called after
// each journal write with an event name and the step's 1-based index. It
// returns how many steps it began.
func reconcile(ctx context.Context, j *journal.Journal, reg *driver.Registry, hook func(event string, n int)) (begun int, err error) {
	set, err := j.Desired()
	if err != nil {
		return 0, err
	}
	byKey := make(map[string]journal.DesiredResource, len(set.Resources))
	for _, d := range set.Resources {
		byKey[d.Key] = d
	}
	inFlight, err := j.InFlight()
	if err != nil {
		return 0, err
	}
	for _, st := range inFlight {
		d, ok := byKey[st.Key]
		if !ok || d.Digest != st.Digest {
			if err := j.EndStep(st.Key, st.Digest, st.Revision, errInterrupted); err != nil {
				return 0, err
			}
			continue
		}
		r, drv, err := decode(reg, d)
		if err != nil {
			return 0, err
		}
		cur, err := drv.Current(ctx, r)
		if err != nil {
			return 0, err
		}
		diff, err := drv.Diff(r, cur)
		if err != nil {
			return 0, err
		}
		var outcome error
		if diff.Changed {
			outcome = errInterrupted
		}
		if err := j.EndStep(st.Key, st.Digest, st.Revision, outcome); err != nil {
			return 0, err
		}
	}
	for i, d := range set.Resources {
		a, _, err := j.Applied(d.Key)
		if err != nil {
			return begun, err
		}
		if a.Digest == d.Digest {
			continue
		}
		r, drv, err := decode(reg, d)
		if err != nil {
			return begun, err
		}
		if err := j.BeginStep(d.Key, d.Digest, d.Revision); err != nil {
			return begun, err
		}
		begun++
		call(hook, "begin", i+1)
		applyErr := drv.Apply(ctx, r)
		call(hook, "apply", i+1)
		if err := j.EndStep(d.Key, d.Digest, d.Revision, applyErr); err != nil {
			return begun, err
		}
		call(hook, "end", i+1)
		if applyErr != nil {
			return begun, applyErr
		}
	}
	return begun, nil
}

func call(hook func(string, int), event string, n int) {
	if hook != nil {
		hook(event, n)
	}
}

func decode(reg *driver.Registry, d journal.DesiredResource) (intent.Resource, driver.Driver, error) {
	b, err := intent.DecodeResourceBody(d.Body)
	if err != nil {
		return intent.Resource{}, nil, fmt.Errorf("decode %q: %w", d.Key, err)
	}
	drv, err := reg.Lookup(b.Resource.Type)
	return b.Resource, drv, err
}

// TestHelperProcess is the child: it runs the five-step apply and exits
// with status 1 at the crash point. It is skipped in a normal test run.
func TestHelperProcess(t *testing.T) {
	at := os.Getenv(envHelper)
	if at == "" {
		t.Skip("helper process for the crash tests")
	}
	j, err := journal.Open(os.Getenv(envDir), journal.Options{})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(3)
	}
	reg, err := driver.NewRegistry(driver.Config{Root: os.Getenv(envRoot)})
	if err == nil {
		err = j.RecordDesired(1, fiveFiles(t))
	}
	if err == nil {
		_, err = reconcile(context.Background(), j, reg, func(event string, n int) {
			if fmt.Sprintf("%s-%d", event, n) == at {
				os.Exit(1) // power loss: no Close, no deferred calls
			}
		})
	}
	fmt.Fprintln(os.Stderr, "helper did not crash:", err)
	os.Exit(3)
}

// runCrashingChild runs the helper and requires it to die at crashAt.
func runCrashingChild(t *testing.T, dir, root, crashAt string) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperProcess$", "-test.count=1")
	cmd.Env = append(os.Environ(), envHelper+"="+crashAt, envDir+"="+dir, envRoot+"="+root)
	out, err := cmd.CombinedOutput()
	var exitErr *exec.ExitError
	if !errors.As(err, &exitErr) || exitErr.ExitCode() != 1 {
		t.Fatalf("child: %v, want exit status 1; output:\n%s", err, out)
	}
}

func TestCrashMidApplyResumesExactly(t *testing.T) {
	desired := fiveFiles(t)
	keys := func(from, to int) []string {
		var ks []string
		for _, d := range desired[from:to] {
			ks = append(ks, d.Key)
		}
		return ks
	}
	for _, tc := range []struct {
		crashAt       string
		applied       []string // per the journal after the crash
		inFlight      []string
		onDisk        int // files the child wrote
		begunToFinish int // steps the parent begins to converge
	}{
		// The brief's case: power lost right after step 2 was journaled.
		{crashAt: "end-2", applied: keys(0, 2), onDisk: 2, begunToFinish: 3},
		// Lost after step 3 changed the device but before EndStep: the
		// re-check finds it applied and does not redo it.
		{crashAt: "apply-3", applied: keys(0, 2), inFlight: keys(2, 3), onDisk: 3, begunToFinish: 2},
		// Lost after BeginStep 3, before the driver ran: the re-check
		// finds nothing done and the step runs again.
		{crashAt: "begin-3", applied: keys(0, 2), inFlight: keys(2, 3), onDisk: 2, begunToFinish: 3},
	} {
		t.Run(tc.crashAt, func(t *testing.T) {
			dir, root := t.TempDir(), t.TempDir()
			runCrashingChild(t, dir, root, tc.crashAt)

			j, err := journal.Open(dir, journal.Options{})
			if err != nil {
				t.Fatal(err)
			}
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
				t.Errorf("applied after crash (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.inFlight, inFlight); diff != "" {
				t.Errorf("in flight after crash (-want +got):\n%s", diff)
			}
			if got := countFiles(t, root); got != tc.onDisk {
				t.Errorf("files on disk after crash = %d, want %d", got, tc.onDisk)
			}

			reg, err := driver.NewRegistry(driver.Config{Root: root})
			if err != nil {
				t.Fatal(err)
			}
			begun, err := reconcile(t.Context(), j, reg, nil)
			if err != nil || begun != tc.begunToFinish {
				t.Fatalf("finishing pass began %d steps (%v), want %d", begun, err, tc.begunToFinish)
			}
			p, err = j.Progress()
			if err != nil || len(p.Applied) != 5 || len(p.InFlight)+len(p.Pending)+len(p.Failed) != 0 {
				t.Fatalf("progress after finishing = %+v, %v; want all 5 applied", p, err)
			}

			// Applying the same desired state again changes nothing.
			mtimes := fileMtimes(t, root)
			appliedBefore, err := j.AppliedAll()
			if err != nil {
				t.Fatal(err)
			}
			begun, err = reconcile(t.Context(), j, reg, nil)
			if err != nil || begun != 0 {
				t.Errorf("second full pass began %d steps (%v), want 0", begun, err)
			}
			appliedAfter, err := j.AppliedAll()
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(appliedBefore, appliedAfter); diff != "" {
				t.Errorf("second pass changed applied records (-before +after):\n%s", diff)
			}
			if diff := cmp.Diff(mtimes, fileMtimes(t, root)); diff != "" {
				t.Errorf("second pass touched files (-before +after):\n%s", diff)
			}
		})
	}
}

func countFiles(t *testing.T, root string) int {
	return len(fileMtimes(t, root))
}

// fileMtimes maps each regular file under root to its modification time.
func fileMtimes(t *testing.T, root string) map[string]time.Time {
	t.Helper()
	out := map[string]time.Time{}
	err := filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		out[p] = fi.ModTime()
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

package agent

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/meteor-edge/meteor/agent/journal"
	"github.com/meteor-edge/meteor/fsm/intent"
)

// The orphan test runs an agent's reconciler in a child process (this test
// binary again) applying an exec step, and kills the child with SIGKILL
// once the step's command has started: the command, in a process group of
// its own, survives as an orphan. The parent then restarts the reconciler
// on the same journal, as a restarted agent would.

const (
	envOrphanDir  = "METEOR_AGENT_ORPHAN_DIR"
	envOrphanWork = "METEOR_AGENT_ORPHAN_WORK"
	envOrphanTime = "METEOR_AGENT_ORPHAN_TIMEOUT"
)

// orphanResource is an exec step whose apply command records each run in
// WORK/log ("start", then "end"), and "overlap" if it starts while an
// earlier run still runs; the first run waits until WORK/go exists,
// later ones not.
func orphanResource(work, timeout string) intent.Resource {
	// An earlier run still runs if its process exists and is not a
	// zombie (an orphan ended, not reaped yet).
	script := fmt.Sprintf(`cd %q
if [ -f pid ]; then
  st=$(sed -e 's/^.*) //' "/proc/$(cat pid)/stat" 2>/dev/null | cut -d' ' -f1)
  if [ -n "$st" ] && [ "$st" != Z ] && [ "$st" != X ]; then echo overlap >> log; fi
fi
echo $$ > pid
echo start >> log
if [ ! -e slept ]; then touch slept; while [ ! -e go ]; do sleep 0.05; done; fi
touch done
echo end >> log`, work)
	return intent.Resource{ID: "restart-till", Type: "exec", Spec: map[string]any{
		"check": []any{"/bin/sh", "-c", "test -e " + filepath.Join(work, "done")},
		"apply": []any{"/bin/sh", "-c", script}, "timeout": timeout,
	}}
}

// TestHelperOrphanedExec is the child: it applies the exec step and, once
// its command started (and was journaled), says so and waits to be
// killed. It is skipped in a normal run.
func TestHelperOrphanedExec(t *testing.T) {
	dir := os.Getenv(envOrphanDir)
	if dir == "" {
		t.Skip("helper process of TestOrphanedExecChildNeverOverlaps")
	}
	work, timeout := os.Getenv(envOrphanWork), os.Getenv(envOrphanTime)
	commands := 0
	rec, j := crashRig(t, dir, t.TempDir(), func(event, key string) {
		// The step runs check, then apply: kill once apply started.
		if event == "started" {
			if commands++; commands == 2 {
				fmt.Fprintln(os.Stderr, "STARTED")
				select {} // killed here
			}
		}
	})
	if err := j.RecordDesired(1, []journal.DesiredResource{desired(t, "pos", 1, orphanResource(work, timeout))}); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(3)
	}
	_, err := rec.pass(context.Background())
	fmt.Fprintln(os.Stderr, "helper was not killed:", err)
	os.Exit(3)
}

// TestOrphanedExecChildNeverOverlaps kills an agent (kill -9) while an
// exec step's command runs. The restarted agent finds the command still
// running (by the process group and marker its journal holds) and waits
// for it before it re-checks the step: the command, let go once the agent
// waits, completes the step, which is not run again. When the command
// outlives the step's time budget (three times its timeout, from when the
// step began), the agent ends its process group first and then applies
// the step again. Either way the command never runs twice at once.
func TestOrphanedExecChildNeverOverlaps(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("finding a step's processes after a crash needs /proc")
	}
	for _, tc := range []struct {
		name, timeout string
		runs          int // starts of the command in all
		child, how    string
	}{
		{"waits for the orphan", "30s", 1, "waited for", "already applied"},
		{"ends the orphan past its budget", "1s", 2, "ended", "applied again"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dir, work := t.TempDir(), t.TempDir()
			cmd := exec.Command(os.Args[0], "-test.run=^TestHelperOrphanedExec$", "-test.count=1")
			cmd.Env = append(os.Environ(), envOrphanDir+"="+dir, envOrphanWork+"="+work, envOrphanTime+"="+tc.timeout)
			stderr, err := cmd.StderrPipe()
			if err != nil {
				t.Fatal(err)
			}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			sc := bufio.NewScanner(stderr)
			started := false
			var out []string
			for sc.Scan() {
				out = append(out, sc.Text())
				if sc.Text() == "STARTED" {
					started = true
					break
				}
			}
			if !started {
				cmd.Process.Kill()
				cmd.Wait()
				t.Fatalf("the child never started the step:\n%s", strings.Join(out, "\n"))
			}
			if err := cmd.Process.Kill(); err != nil { // kill -9
				t.Fatal(err)
			}
			cmd.Wait()

			letGo := tc.timeout != "1s" // the orphan past its budget is never let go
			rec, j := crashRig(t, dir, t.TempDir(), func(event, key string) {
				if event == "orphan" && letGo {
					if err := os.WriteFile(filepath.Join(work, "go"), nil, 0o644); err != nil {
						t.Error(err)
					}
				}
			})
			defer j.Close()
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			if _, err := rec.pass(ctx); err != nil {
				t.Fatal(err)
			}
			log, err := os.ReadFile(filepath.Join(work, "log"))
			if err != nil {
				t.Fatal(err)
			}
			lines := strings.Fields(string(log))
			if strings.Contains(string(log), "overlap") || strings.Count(string(log), "start") != tc.runs || lines[len(lines)-1] != "end" {
				t.Fatalf("runs of the command:\n%s\nwant %d start(s), the last ended, never an overlap", log, tc.runs)
			}
			if got := rec.recovered; len(got) != 1 || got[0].Child != tc.child || got[0].Outcome != tc.how {
				t.Fatalf("recovered %+v, want the orphan %s and the step %s", got, tc.child, tc.how)
			}
			if st := rec.st.snapshot().Resources; len(st) != 1 || st[0].State != StateConverged {
				t.Fatalf("after the restart: %+v", st)
			}
		})
	}
}

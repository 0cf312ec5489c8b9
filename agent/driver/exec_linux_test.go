package driver

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/meteor-edge/meteor/fsm/intent"
)

// requireExited waits, without polling, until process pid has exited (a
// pidfd becomes readable on exit, zombie or reaped), failing after limit.
func requireExited(t *testing.T, pid int, limit time.Duration) {
	t.Helper()
	fd, err := unix.PidfdOpen(pid, 0)
	if errors.Is(err, unix.ESRCH) {
		return // already exited and reaped
	}
	if err != nil {
		t.Skipf("pidfd_open unavailable: %v", err)
	}
	defer unix.Close(fd)
	fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
	for {
		n, err := unix.Poll(fds, int(limit.Milliseconds()))
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			t.Fatalf("poll pidfd of %d: %v", pid, err)
		}
		if n == 0 {
			t.Fatalf("process %d still running %v after the timeout: left behind", pid, limit)
		}
		return
	}
}

func TestExecTimeoutKillsProcessGroup(t *testing.T) {
	dir := t.TempDir()
	d := NewExec(Config{Logger: testLogger(t)})
	r := intent.Resource{ID: "slow", Type: "exec", Spec: map[string]any{
		"check": script(t, dir, "check.sh", "test -f marker"),
		// The shell forks sleep and waits: killing only the shell would
		// leave sleep behind.
		"apply":   script(t, dir, "apply.sh", "echo $$ > sh.pid\nsleep 5 &\necho $! > sleep.pid\nwait"),
		"timeout": "100ms",
	}}
	start := time.Now()
	err := d.Apply(t.Context(), r)
	took := time.Since(start)
	if err == nil || !strings.Contains(err.Error(), "timed out after 100ms") {
		t.Fatalf("Apply = %v, want timeout error", err)
	}
	if took > 3*time.Second {
		t.Errorf("Apply took %v, want well under the 5s sleep", took)
	}
	for _, name := range []string{"sh.pid", "sleep.pid"} {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			// The group was killed before the script got this far.
			t.Logf("%s not written: %v", name, err)
			continue
		}
		pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		requireExited(t, pid, 5*time.Second)
	}
}

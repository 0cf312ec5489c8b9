package benchkit

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// killGroupOnCancel makes cmd's cancellation kill its whole process group
// (cmd must run with ChildAttr).
func killGroupOnCancel(cmd *exec.Cmd) {
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
}

// BuildMeteor compiles ./cmd/meteor from the module at root into
// dir/bin/meteor and returns its path.
func BuildMeteor(ctx context.Context, root, dir string) (string, error) {
	bin := filepath.Join(dir, "bin", "meteor")
	cmd := exec.CommandContext(ctx, "go", "build", "-o", bin, "./cmd/meteor")
	cmd.Dir = root
	cmd.SysProcAttr = ChildAttr()
	// Stop the whole build (the go command and its compilers) on Ctrl-C.
	killGroupOnCancel(cmd)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("go build ./cmd/meteor: %w\n%s", err, out.String())
	}
	return bin, nil
}

// testBuildTimeout bounds the build of MeteorBinaryForTest. A clean build
// beside the rest of the suite (which compiles and runs its own packages
// on the same two cores) has taken minutes.
const testBuildTimeout = 10 * time.Minute

// MeteorBinaryForTest returns the meteor binary a test runs the drivers
// with: $METEOR_BIN if set, else ./cmd/meteor of the module at root built
// into a temporary directory of t. The build is timed on its own, not out
// of the time the test gives its run, so that a loaded host's slow build
// does not fail a run that would have finished in time.
func MeteorBinaryForTest(t testing.TB, root string) string {
	t.Helper()
	if bin := os.Getenv("METEOR_BIN"); bin != "" {
		return bin
	}
	ctx, cancel := context.WithTimeout(context.Background(), testBuildTimeout)
	defer cancel()
	start := time.Now()
	bin, err := BuildMeteor(ctx, root, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("built %s in %s", bin, time.Since(start).Round(time.Millisecond))
	return bin
}

// RunCmd runs bin with args to completion and returns its combined
// output; cancelling ctx kills it and everything it started.
func RunCmd(ctx context.Context, bin string, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.SysProcAttr = ChildAttr()
	killGroupOnCancel(cmd)
	cmd.WaitDelay = 5 * time.Second
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return out.Bytes(), err
}

package benchkit

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"syscall"
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

package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/meteor-edge/meteor/bench/internal/benchkit"
)

// perfRecorder samples one server process with Linux perf while a level
// runs, so a slow leader can be profiled without changing the server.
type perfRecorder struct {
	cmd     *exec.Cmd
	data    string
	logPath string
}

// startPerf attaches `perf record` to pid, writing dir/perf-NAME.data.
func startPerf(dir, name string, pid int) (*perfRecorder, error) {
	bin, err := exec.LookPath("perf")
	if err != nil {
		return nil, fmt.Errorf("-perf-leader needs perf (apt-get install linux-perf): %w", err)
	}
	r := &perfRecorder{data: filepath.Join(dir, "perf-"+name+".data"), logPath: filepath.Join(dir, "perf-"+name+".log")}
	logFile, err := os.Create(r.logPath)
	if err != nil {
		return nil, err
	}
	defer logFile.Close()
	r.cmd = exec.Command(bin, "record", "-F", "499", "-g", "-p", strconv.Itoa(pid), "-o", r.data)
	r.cmd.Stdout, r.cmd.Stderr = logFile, logFile
	r.cmd.SysProcAttr = benchkit.ChildAttr()
	if err := r.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start perf: %w", err)
	}
	return r, nil
}

// stop ends the recording (perf writes its file on SIGINT) and writes a
// text summary next to the data; it returns the summary's path.
func (r *perfRecorder) stop(ctx context.Context) (string, error) {
	_ = r.cmd.Process.Signal(syscall.SIGINT)
	done := make(chan error, 1)
	go func() { done <- r.cmd.Wait() }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		_ = syscall.Kill(-r.cmd.Process.Pid, syscall.SIGKILL)
		<-done
		return "", fmt.Errorf("perf did not stop; see %s", r.logPath)
	}
	summary := r.data + ".txt"
	out, err := os.Create(summary)
	if err != nil {
		return "", err
	}
	defer out.Close()
	// Inclusive percentages show which part of the write path costs
	// what (HTTP handling, parsing, Raft, the FSM, GC). Debian's etcd
	// is stripped, so its profile shows addresses only.
	rep := exec.CommandContext(ctx, "perf", "report", "-i", r.data, "--stdio", "--children",
		"--sort", "symbol", "--percent-limit", "1.5", "-g", "none")
	rep.Stdout, rep.Stderr = out, out
	if err := rep.Run(); err != nil {
		return "", fmt.Errorf("perf report: %w (see %s)", err, summary)
	}
	return summary, nil
}

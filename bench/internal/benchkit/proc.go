package benchkit

import (
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Group owns the server processes of a run. Each child gets its own
// process group (so a terminal's Ctrl-C reaches only the driver, which
// then stops the children in order) and SIGKILL as its parent-death
// signal (so a driver killed outright takes its children along). The zero
// value is ready to use.
type Group struct {
	mu    sync.Mutex // guards procs
	procs []*Proc
}

// Proc is one started child process.
type Proc struct {
	Name    string
	LogPath string    // where its stdout and stderr go
	Started time.Time // when it was started

	cmd  *exec.Cmd
	done chan struct{} // closed when the process has exited
	err  error         // exit status; valid once done is closed
}

// ChildAttr puts a child in its own process group and has it killed when
// the driver dies.
func ChildAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}

// Start runs bin with args in dir, its stdout and stderr appended to
// logPath. The child inherits the driver's environment plus env, if any.
func (g *Group) Start(name, bin string, args, env []string, dir, logPath string) (*Proc, error) {
	logFile, err := os.OpenFile(logPath, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	cmd := exec.Command(bin, args...)
	cmd.Dir = dir
	if len(env) > 0 {
		cmd.Env = append(os.Environ(), env...)
	}
	cmd.Stdout = logFile
	cmd.Stderr = logFile
	cmd.SysProcAttr = ChildAttr()
	if err := cmd.Start(); err != nil {
		logFile.Close()
		return nil, fmt.Errorf("start %s (%s): %w", name, bin, err)
	}
	p := &Proc{Name: name, LogPath: logPath, Started: time.Now(), cmd: cmd, done: make(chan struct{})}
	g.mu.Lock()
	g.procs = append(g.procs, p)
	g.mu.Unlock()
	go func() {
		p.err = cmd.Wait()
		logFile.Close()
		close(p.done)
	}()
	return p, nil
}

// PID returns the process ID.
func (p *Proc) PID() int { return p.cmd.Process.Pid }

// Kill sends SIGKILL to the process's group.
func (p *Proc) Kill() error { return syscall.Kill(-p.PID(), syscall.SIGKILL) }

// Signal sends sig to the process alone (not its group).
func (p *Proc) Signal(sig syscall.Signal) error { return p.cmd.Process.Signal(sig) }

// Done returns a channel closed once the process has exited.
func (p *Proc) Done() <-chan struct{} { return p.done }

// Exited reports whether the process has exited.
func (p *Proc) Exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// Err returns the exit status; it is nil while the process runs.
func (p *Proc) Err() error {
	if !p.Exited() {
		return nil
	}
	return p.err
}

// LogTail returns the last n lines of the process's log.
func (p *Proc) LogTail(n int) string {
	b, err := os.ReadFile(p.LogPath)
	if err != nil {
		return fmt.Sprintf("(cannot read %s: %v)", p.LogPath, err)
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// CPUTime returns the CPU time (user + system) the process has used so
// far, read from /proc/PID/stat.
func (p *Proc) CPUTime() (time.Duration, error) {
	return CPUTime(strconv.Itoa(p.PID()))
}

// StopAll stops every process: SIGTERM to its process group, then SIGKILL
// to the group after grace. It returns once all have exited.
func (g *Group) StopAll(grace time.Duration) {
	g.mu.Lock()
	procs := g.procs
	g.procs = nil
	g.mu.Unlock()
	for _, p := range procs {
		if !p.Exited() {
			_ = syscall.Kill(-p.PID(), syscall.SIGTERM)
		}
	}
	// One deadline for all: a single time.After channel would fire for
	// the first process still running and leave the next waiting forever.
	deadline := time.NewTimer(grace)
	defer deadline.Stop()
	expired := false
	for _, p := range procs {
		if expired {
			break
		}
		select {
		case <-p.done:
		case <-deadline.C:
			expired = true
		}
	}
	for _, p := range procs {
		// Kill the group even if the leader exited: nothing it started
		// may outlive the run.
		_ = syscall.Kill(-p.PID(), syscall.SIGKILL)
		<-p.done
	}
}

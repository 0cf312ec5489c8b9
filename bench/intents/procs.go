package main

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// procGroup owns the server processes of a run. Each child gets its own
// process group (so a terminal's Ctrl-C reaches only the driver, which
// then stops the children in order) and SIGKILL as its parent-death
// signal (so a driver killed outright takes its children along).
type procGroup struct {
	mu    sync.Mutex // guards procs
	procs []*proc
}

// proc is one started child process.
type proc struct {
	name    string
	logPath string
	cmd     *exec.Cmd
	done    chan struct{} // closed when the process has exited
	err     error         // exit status; valid once done is closed
}

func childAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}

// start runs bin with args in dir, its stdout and stderr appended to
// logPath.
func (g *procGroup) start(name, bin string, args []string, dir, logPath string) (*proc, error) {
	logFile, err := os.OpenFile(logPath, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	cmd := exec.Command(bin, args...)
	cmd.Dir = dir
	cmd.Stdout = logFile
	cmd.Stderr = logFile
	cmd.SysProcAttr = childAttr()
	if err := cmd.Start(); err != nil {
		logFile.Close()
		return nil, fmt.Errorf("start %s (%s): %w", name, bin, err)
	}
	p := &proc{name: name, logPath: logPath, cmd: cmd, done: make(chan struct{})}
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

// pid returns the process ID.
func (p *proc) pid() int { return p.cmd.Process.Pid }

// exited reports whether the process has exited.
func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// logTail returns the last n lines of the process's log.
func (p *proc) logTail(n int) string {
	b, err := os.ReadFile(p.logPath)
	if err != nil {
		return fmt.Sprintf("(cannot read %s: %v)", p.logPath, err)
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// cpuTime returns the CPU time (user + system) the process has used so far,
// read from /proc/PID/stat.
func (p *proc) cpuTime() (time.Duration, error) {
	return procCPUTime(strconv.Itoa(p.pid()))
}

// clockTicks is USER_HZ, the unit of /proc/PID/stat times; it is 100 on
// every Linux architecture Go supports.
const clockTicks = 100

// procCPUTime reads utime+stime of /proc/<id>/stat ("self" works).
func procCPUTime(id string) (time.Duration, error) {
	b, err := os.ReadFile("/proc/" + id + "/stat")
	if err != nil {
		return 0, err
	}
	// The command name, field 2, is in parentheses and may hold spaces:
	// fields are counted after the last ')'.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, fmt.Errorf("parse /proc/%s/stat: no ')'", id)
	}
	f := strings.Fields(string(b[i+1:]))
	// f[0] is field 3 (state); utime and stime are fields 14 and 15.
	if len(f) < 13 {
		return 0, fmt.Errorf("parse /proc/%s/stat: %d fields", id, len(f))
	}
	ut, err1 := strconv.ParseInt(f[11], 10, 64)
	st, err2 := strconv.ParseInt(f[12], 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return 0, fmt.Errorf("parse /proc/%s/stat: %w", id, err)
	}
	return time.Duration(ut+st) * time.Second / clockTicks, nil
}

// stopAll stops every process: SIGTERM to its process group, then SIGKILL
// to the group after grace. It returns once all have exited.
func (g *procGroup) stopAll(grace time.Duration) {
	g.mu.Lock()
	procs := g.procs
	g.procs = nil
	g.mu.Unlock()
	for _, p := range procs {
		if !p.exited() {
			_ = syscall.Kill(-p.pid(), syscall.SIGTERM)
		}
	}
	deadline := time.After(grace)
	for _, p := range procs {
		select {
		case <-p.done:
		case <-deadline:
		}
	}
	for _, p := range procs {
		// Kill the group even if the leader exited: nothing it started
		// may outlive the run.
		_ = syscall.Kill(-p.pid(), syscall.SIGKILL)
		<-p.done
	}
}

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
	started time.Time
	done    chan struct{} // closed when the process has exited
	err     error         // exit status; valid once done is closed
}

func childAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}

// start runs bin with args and extra environment in dir, its stdout and
// stderr appended to logPath.
func (g *procGroup) start(name, bin string, args, env []string, dir, logPath string) (*proc, error) {
	logFile, err := os.OpenFile(logPath, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	cmd := exec.Command(bin, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout = logFile
	cmd.Stderr = logFile
	cmd.SysProcAttr = childAttr()
	if err := cmd.Start(); err != nil {
		logFile.Close()
		return nil, fmt.Errorf("start %s (%s): %w", name, bin, err)
	}
	p := &proc{name: name, logPath: logPath, cmd: cmd, started: time.Now(), done: make(chan struct{})}
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

// memory is a reading of a process's /proc/PID/status.
type memory struct {
	RSSKiB     int64 `json:"vm_rss_kib"`
	HWMKiB     int64 `json:"vm_hwm_kib"`
	AnonKiB    int64 `json:"rss_anon_kib"`
	Threads    int64 `json:"threads"`
	HeapLiveMB int   `json:"go_heap_live_mb"`
	StacksMB   int   `json:"go_stacks_mb"`
	// GCAgeSec is how long before the reading the GC cycle that measured
	// HeapLiveMB ended; -1 if none had run.
	GCAgeSec float64 `json:"gc_age_s"`
}

// readMemory reads the process's resident memory and, from its log
// (GODEBUG=gctrace=1), the live heap of its last GC cycle.
func (p *proc) readMemory() (memory, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(p.pid()) + "/status")
	if err != nil {
		return memory{}, err
	}
	var m memory
	var errs []error
	for name, dst := range map[string]*int64{"VmRSS": &m.RSSKiB, "VmHWM": &m.HWMKiB, "RssAnon": &m.AnonKiB} {
		var err error
		*dst, err = procStatusKB(b, name)
		errs = append(errs, err)
	}
	if t, err := procStatusKB(b, "Threads"); err == nil {
		m.Threads = t
	}
	m.GCAgeSec = -1
	if log, err := os.ReadFile(p.logPath); err == nil {
		if g, ok := lastGCTrace(log); ok {
			m.HeapLiveMB, m.StacksMB = g.HeapLiveMB, g.StacksMB
			m.GCAgeSec = (time.Since(p.started) - g.At).Seconds()
		}
	}
	return m, errors.Join(errs...)
}

// clockTicks is USER_HZ, the unit of /proc/PID/stat times; it is 100 on
// every Linux architecture Go supports.
const clockTicks = 100

// cpuTime returns the CPU time (user + system) the process has used.
func (p *proc) cpuTime() (time.Duration, error) {
	id := strconv.Itoa(p.pid())
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

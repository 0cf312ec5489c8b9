package main

import (
	"sync"
	"syscall"
	"time"

	"github.com/meteor-edge/meteor/bench/internal/benchkit"
)

// group is a benchkit.Group whose StopAll gives every process the whole
// grace period. benchkit.Group.StopAll waits on one time.After channel for
// all of them, so a second process still running when the grace ends
// blocks it until that process exits on its own; a `meteor server`
// holding thousands of sessions may take minutes to exit on SIGTERM.
type group struct {
	benchkit.Group
	mu    sync.Mutex
	procs []*benchkit.Proc // guarded by mu
}

// Start starts a process as benchkit.Group.Start does and remembers it.
func (g *group) Start(name, bin string, args, env []string, dir, logPath string) (*benchkit.Proc, error) {
	p, err := g.Group.Start(name, bin, args, env, dir, logPath)
	if err == nil {
		g.mu.Lock()
		g.procs = append(g.procs, p)
		g.mu.Unlock()
	}
	return p, err
}

// StopAll sends SIGTERM to every process group, waits until all exited or
// grace passed, then kills what is left and returns once all exited.
func (g *group) StopAll(grace time.Duration) {
	g.mu.Lock()
	procs := g.procs
	g.procs = nil
	g.mu.Unlock()
	for _, p := range procs {
		if !p.Exited() {
			_ = syscall.Kill(-p.PID(), syscall.SIGTERM)
		}
	}
	deadline := time.Now().Add(grace)
	for _, p := range procs {
		for !p.Exited() && time.Now().Before(deadline) {
			time.Sleep(20 * time.Millisecond)
		}
	}
	for _, p := range procs {
		_ = syscall.Kill(-p.PID(), syscall.SIGKILL)
	}
	g.Group.StopAll(grace) // every process has exited or been killed: returns at once
}

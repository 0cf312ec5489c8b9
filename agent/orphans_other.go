//go:build unix && !linux

package agent

import (
	"syscall"

	"github.com/meteor-edge/meteor/agent/journal"
)

// survivors returns the live process group of a step outside Linux: the
// recorded group, if any of it runs (its members cannot be told from a
// later group given the same ID there).
func survivors(p *journal.StepProcess) []int {
	if p.PGID > 1 && syscall.Kill(-p.PGID, 0) == nil {
		return []int{p.PGID}
	}
	return nil
}

// procStart is not known outside Linux.
func procStart(int) uint64 { return 0 }

// signalGroups ends the process groups of pids.
func signalGroups(pids []int, kill bool) {
	sig := syscall.SIGTERM
	if kill {
		sig = syscall.SIGKILL
	}
	for _, pid := range pids {
		syscall.Kill(-pid, sig)
	}
}

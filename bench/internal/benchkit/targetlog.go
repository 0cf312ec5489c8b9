package benchkit

import (
	"math"
	"slices"
	"sync"
	"time"
)

// TargetLog is one device's log of the targets it reached (a revision it
// applied, a version its report of was confirmed...), in increasing target
// order, each with the moment it was first reached. It is safe for
// concurrent use; the zero value is ready to use.
type TargetLog struct {
	mu      sync.Mutex
	entries []reached // guarded by mu
}

type reached struct {
	target uint64
	at     time.Time
}

// Record notes that target was reached at at; a target at or below one
// already recorded adds nothing.
func (l *TargetLog) Record(target uint64, at time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if n := len(l.entries); n > 0 && l.entries[n-1].target >= target {
		return
	}
	l.entries = append(l.entries, reached{target, at})
}

// First returns when target or a later one was first reached.
func (l *TargetLog) First(target uint64) (time.Time, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, e := range l.entries {
		if e.target >= target {
			return e.at, true
		}
	}
	return time.Time{}, false
}

// TimesSince returns, sorted, how long after start each log first reached
// target, for the logs that did.
func TimesSince(logs []*TargetLog, target uint64, start time.Time) []time.Duration {
	var out []time.Duration
	for _, l := range logs {
		if at, ok := l.First(target); ok {
			out = append(out, at.Sub(start))
		}
	}
	slices.Sort(out)
	return out
}

// PercentileOf returns the nearest-rank p-th percentile of the times of
// all n devices, of which sorted are those that arrived; false if the
// rank is beyond them (a device that never arrived counts as later than
// every one that did).
func PercentileOf(sorted []time.Duration, n int, p float64) (time.Duration, bool) {
	if n == 0 {
		return 0, false
	}
	rank := min(max(int(math.Ceil(p/100*float64(n))), 1), n)
	if rank > len(sorted) {
		return 0, false
	}
	return sorted[rank-1], true
}

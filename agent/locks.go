package agent

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/meteor-edge/meteor/agent/journal"
	"github.com/meteor-edge/meteor/fsm/intent"
	"github.com/meteor-edge/meteor/wire"
)

// Workload locks: a workload on the device that must not be interrupted
// (a till's end-of-day sync, a backup) holds a lock, and the steps whose
// resource requires it (requires: [lock:NAME]) wait until it is released,
// while the rest of the plan goes on. A workload takes one through the
// agent's control socket (meteor agent lock acquire NAME --max-hold 2h),
// or by creating a lock file named NAME in the agent's lock directory
// (Config.LockDir), whose modification time is when it was taken and
// whose lines may say "holder=..." and "max-hold=2h". A lock held past its
// maximum hold is stale: it still holds, and is reported so; an operator
// breaks it from the control plane (meteor device unlock), so that no lock
// wedges a device for good.

// heldLock is a workload lock held on the device.
type heldLock struct {
	name, holder string
	since        time.Time
	maxHold      time.Duration // 0: no limit
	source       wire.LockSource
	path         string // the lock file; "" for a lock taken through the agent
}

// stale reports whether the lock is held past its maximum hold at now.
func (l heldLock) stale(now time.Time) bool { return l.maxHold > 0 && now.Sub(l.since) > l.maxHold }

// text says who holds the lock since when, and whether it is stale.
func (l heldLock) text(now time.Time) string {
	s := fmt.Sprintf("lock %s held by %s since %s", l.name, l.holder, l.since.UTC().Format(time.RFC3339))
	switch {
	case l.stale(now):
		s += fmt.Sprintf(" (stale: past its %v maximum hold; an operator can break it: meteor device unlock DEVICE %s)", l.maxHold, l.name)
	case l.maxHold > 0:
		s += fmt.Sprintf(" (at most %v)", l.maxHold)
	}
	return s
}

// hold is the lock hold of a step waiting for l.
func (l heldLock) hold() wire.Hold {
	h := wire.Hold{Kind: wire.HoldLock, Since: l.since.UnixNano(), Holder: l.holder, Note: l.name}
	if l.maxHold > 0 {
		h.Until = l.since.Add(l.maxHold).UnixNano()
	}
	return h
}

// lockBook reads the device's workload locks. Safe for concurrent use.
type lockBook struct {
	j *journal.Journal
	// dir is the lock directory; "" for none. fileMaxHold is the maximum
	// hold of a lock file that names none.
	dir         string
	fileMaxHold time.Duration
}

// held returns the locks held now, by name. A lock taken through the
// agent wins over a lock file of the same name.
func (b *lockBook) held() (map[string]heldLock, error) {
	out := map[string]heldLock{}
	if b.dir != "" {
		entries, err := os.ReadDir(b.dir)
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("lock directory: %w", err)
		}
		for _, e := range entries {
			if !e.Type().IsRegular() {
				continue
			}
			if _, err := intent.ParseRequirement("lock:" + e.Name()); err != nil {
				continue // not a lock's name
			}
			if l, err := b.readFile(e.Name()); err == nil {
				out[l.name] = l
			}
		}
	}
	agentLocks, err := b.j.Locks()
	if err != nil {
		return nil, err
	}
	for name, l := range agentLocks {
		out[name] = heldLock{name: name, holder: l.Holder, since: l.Since, maxHold: l.MaxHold, source: wire.LockAgent}
	}
	return out, nil
}

// readFile reads the lock file name.
func (b *lockBook) readFile(name string) (heldLock, error) {
	path := filepath.Join(b.dir, name)
	f, err := os.Open(path)
	if err != nil {
		return heldLock{}, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return heldLock{}, err
	}
	l := heldLock{name: name, holder: "lock file " + path, since: fi.ModTime(), maxHold: b.fileMaxHold, source: wire.LockFile, path: path}
	sc := bufio.NewScanner(io.LimitReader(f, 4096))
	for sc.Scan() {
		k, v, _ := strings.Cut(strings.TrimSpace(sc.Text()), "=")
		switch k {
		case "holder":
			if v != "" {
				l.holder = v
			}
		case "max-hold":
			if d, err := time.ParseDuration(v); err == nil && d >= 0 {
				l.maxHold = d
			}
		}
	}
	return l, nil
}

// breakLock breaks l: a lock file is removed, a lock taken through the
// agent dropped. ok is false if it was not held as l says any more.
func (b *lockBook) breakLock(l heldLock) (ok bool, err error) {
	if l.path != "" {
		cur, err := b.readFile(l.name)
		if errors.Is(err, fs.ErrNotExist) || err == nil && !cur.since.Equal(l.since) {
			return false, nil
		}
		if err != nil {
			return false, err
		}
		if err := os.Remove(l.path); err != nil {
			return false, err
		}
		return true, nil
	}
	_, ok, err = b.j.ReleaseLock(l.name, l.since)
	return ok, err
}

// wireLocks returns the locks as a report carries them, sorted by name.
func wireLocks(locks map[string]heldLock) []wire.Lock {
	var out []wire.Lock
	for _, name := range slices.Sorted(maps.Keys(locks)) {
		l := locks[name]
		out = append(out, wire.Lock{Name: truncate(name, wire.MaxNameLen), Holder: truncate(l.holder, wire.MaxNameLen), Since: l.since.UnixNano(), MaxHold: l.maxHold, Source: l.source})
		if len(out) == wire.MaxLocks {
			break
		}
	}
	return out
}

// unlockOutcomes maps the journal's outcome names to the wire's.
var unlockOutcomes = map[string]wire.UnlockOutcome{
	wire.UnlockBroken.String(): wire.UnlockBroken, wire.UnlockNotHeld.String(): wire.UnlockNotHeld, wire.UnlockRetaken.String(): wire.UnlockRetaken,
}

// handleUnlocks carries out the lock breaks the control plane ordered
// and this agent has not handled: each breaks the lock it names if that
// lock is still held since the time the order says, and no later
// acquisition of it. locks is updated.
func (r *reconciler) handleUnlocks(locks map[string]heldLock) error {
	s := r.book.settings()
	if s == nil || len(s.Unlocks) == 0 {
		return nil
	}
	done, err := r.j.Unlocks()
	if err != nil {
		return err
	}
	for _, u := range s.Unlocks {
		if u.Index <= done.Last {
			continue
		}
		outcome := wire.UnlockNotHeld
		if l, ok := locks[u.Lock]; ok {
			outcome = wire.UnlockRetaken
			if l.since.UnixNano() == u.Since {
				broke, err := r.locks.breakLock(l)
				if err != nil {
					return fmt.Errorf("break lock %s: %w", u.Lock, err)
				}
				if broke {
					outcome = wire.UnlockBroken
					delete(locks, u.Lock)
				}
			}
		}
		r.log.Warn("lock break ordered by the control plane", "lock", u.Lock, "by", u.Actor, "reason", u.Reason, "outcome", outcome)
		if err := r.j.RecordUnlock(journal.UnlockResult{Index: u.Index, Lock: u.Lock, Outcome: outcome.String(), At: r.cfg.Clock.Now()}); err != nil {
			return err
		}
	}
	return nil
}

// wireUnlocked returns the outcomes of lock breaks a report carries.
func wireUnlocked(l journal.UnlockLog) []wire.UnlockResult {
	var out []wire.UnlockResult
	for _, r := range l.Results {
		out = append(out, wire.UnlockResult{Index: r.Index, Lock: truncate(r.Lock, wire.MaxNameLen), Outcome: unlockOutcomes[r.Outcome], At: r.At.UnixNano()})
	}
	return out
}

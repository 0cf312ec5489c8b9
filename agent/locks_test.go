package agent

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/meteor-edge/meteor/agent/journal"
	"github.com/meteor-edge/meteor/wire"
)

// TestLockBlocksOneStep: a step that requires a workload lock waits while
// the lock is held, saying by whom and since when, while the rest of the
// plan goes on; past its maximum hold the lock is reported stale; a break
// ordered for a later acquisition than the one held is refused, and one
// for this acquisition breaks it, the step then taken in the same pass. A
// lock file holds a step the same way until it is removed. On the
// reconciler's manual clock.
func TestLockBlocksOneStep(t *testing.T) {
	r := newRig(t)
	r.rec.locks.dir = t.TempDir()
	r.book.set(testSettings(1, class("default", time.Minute, time.Minute)))
	since := r.clock.Now()
	if err := r.j.AcquireLock(journal.Lock{Name: "pos-sync", Holder: "end-of-day sync", Since: since, MaxHold: 2 * time.Hour}); err != nil {
		t.Fatal(err)
	}
	if err := r.j.AcquireLock(journal.Lock{Name: "pos-sync", Holder: "someone else", Since: since}); err == nil {
		t.Fatal("a held lock was taken again")
	}
	r.record(1,
		desired(t, "pos", 1, simRes("config", "v2", nil)),
		desired(t, "pos", 1, simRes("restart", "v2", nil, "lock:pos-sync")),
		desired(t, "pos", 1, simRes("after", "v2", nil, "restart")))
	if begun := r.pass(); len(begun) != 1 || begun[0] != "pos/config" {
		t.Fatalf("steps while the lock is held: %v", begun)
	}
	got := r.status("pos/restart")
	want := wire.Hold{Kind: wire.HoldLock, Since: since.UnixNano(), Until: since.Add(2 * time.Hour).UnixNano(), Holder: "end-of-day sync", Note: "pos-sync"}
	if got.State != StateBlocked || got.Hold != want || got.Detail != "waits for lock pos-sync held by end-of-day sync since "+since.UTC().Format(time.RFC3339)+" (at most 2h0m0s)" {
		t.Fatalf("pos/restart: %+v", got)
	}
	if got := r.status("pos/after"); got.State != StateBlocked {
		t.Errorf("pos/after: %+v", got)
	}
	if rep := r.st.report(); len(rep.Locks) != 1 || rep.Locks[0] != (wire.Lock{Name: "pos-sync", Holder: "end-of-day sync", Since: since.UnixNano(), MaxHold: 2 * time.Hour, Source: wire.LockAgent}) {
		t.Errorf("reported locks %+v", rep.Locks)
	}
	r.clock.Advance(2*time.Hour + time.Minute)
	r.pass()
	if got := r.status("pos/restart"); !strings.Contains(got.Detail, "(stale: past its 2h0m0s maximum hold; an operator can break it: meteor device unlock DEVICE pos-sync)") {
		t.Fatalf("past its maximum hold: %+v", got)
	}
	// A break of another acquisition is refused; one of this one breaks it.
	r.book.set(&wire.Settings{Seq: 2, Classes: []wire.SettingsClass{class("default", time.Minute, time.Minute)},
		Unlocks: []wire.Unlock{{Index: 9, Lock: "pos-sync", Since: since.Add(-time.Hour).UnixNano(), Reason: "old", Actor: "alice"}}})
	if begun := r.pass(); len(begun) != 0 {
		t.Fatalf("steps after a refused break: %v", begun)
	}
	r.book.set(&wire.Settings{Seq: 3, Classes: []wire.SettingsClass{class("default", time.Minute, time.Minute)},
		Unlocks: []wire.Unlock{{Index: 9, Lock: "pos-sync"}, {Index: 12, Lock: "pos-sync", Since: since.UnixNano(), Reason: "sync hung", Actor: "alice"}}})
	if begun := r.pass(); len(begun) != 2 || begun[0] != "pos/restart" {
		t.Fatalf("steps once the lock is broken: %v", begun)
	}
	rep := r.st.report()
	if len(rep.Locks) != 0 || len(rep.Unlocked) != 2 || rep.Unlocked[0].Outcome != wire.UnlockRetaken || rep.Unlocked[1] != (wire.UnlockResult{Index: 12, Lock: "pos-sync", Outcome: wire.UnlockBroken, At: r.clock.Now().UnixNano()}) {
		t.Fatalf("after the break: locks %+v, unlocked %+v", rep.Locks, rep.Unlocked)
	}

	// A lock file.
	file := filepath.Join(r.rec.locks.dir, "backup")
	if err := os.WriteFile(file, []byte("holder=nightly backup\nmax-hold=1h\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	r.record(2, desired(t, "pos", 2, simRes("config", "v3", nil, "lock:backup")))
	next, err := r.rec.pass(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if got := r.status("pos/config"); got.State != StateBlocked || got.Hold.Holder != "nightly backup" || got.Hold.Note != "backup" {
		t.Fatalf("pos/config behind a lock file: %+v", got)
	}
	if wait := next.Sub(r.clock.Now()); wait > 15*time.Second {
		t.Errorf("next look at the lock file in %v, want at most 15s", wait)
	}
	if err := os.Remove(file); err != nil {
		t.Fatal(err)
	}
	r.clock.Advance(15 * time.Second)
	if begun := r.pass(); len(begun) != 1 || begun[0] != "pos/config" {
		t.Fatalf("steps once the lock file is gone: %v", begun)
	}
}

// TestPreconditions: a step requiring a control-plane label waits until
// the control plane gives the device that label; one requiring more free
// space than the disk has waits, saying what the disk has.
func TestPreconditions(t *testing.T) {
	r := newRig(t)
	r.book.set(testSettings(1, class("default", time.Minute, time.Minute)))
	r.record(1,
		desired(t, "pos", 1, simRes("upgrade", "v2", nil, "label:store-open=no")),
		desired(t, "pos", 1, simRes("big", "v2", nil, "disk:/>=1000TiB")))
	if begun := r.pass(); len(begun) != 0 {
		t.Fatalf("steps with unmet preconditions: %v", begun)
	}
	if got := r.status("pos/upgrade"); got.State != StateBlocked || got.Hold.Kind != wire.HoldPrecondition || got.Detail != "requires label store-open=no; it has none" {
		t.Fatalf("pos/upgrade: %+v", got)
	}
	if got := r.status("pos/big"); got.State != StateBlocked || !strings.HasPrefix(got.Detail, "requires 1000TiB free on /; it has ") {
		t.Fatalf("pos/big: %+v", got)
	}
	s := testSettings(2, class("default", time.Minute, time.Minute))
	s.Labels = map[string]string{"store-open": "no"}
	r.book.set(s)
	if begun := r.pass(); len(begun) != 1 || begun[0] != "pos/upgrade" {
		t.Fatalf("steps once labelled: %v", begun)
	}
}

package agent

import (
	"strings"
	"testing"
	"time"

	"github.com/meteor-edge/meteor/agent/journal"
	"github.com/meteor-edge/meteor/wire"
)

// TestFightBacksOff: a resource rewritten on the device every second,
// checked every second, is corrected three times, then reported fighting
// with the count and corrected only as the backoff allows (1 min, then
// 2 min); once a correction has held for the fight window the fight is
// over. On the reconciler's manual clock.
func TestFightBacksOff(t *testing.T) {
	r := newRig(t)
	r.book.set(testSettings(1, class("default", time.Second, time.Minute)))
	r.record(1, desired(t, "pos", 1, simRes("motd", "v1", nil)))
	r.pass()
	corrections := 0
	tamper := func(seconds int) {
		t.Helper()
		for range seconds {
			if err := r.sim.Set("motd", "by hand"); err != nil {
				t.Fatal(err)
			}
			r.clock.Advance(time.Second)
			corrections += len(r.pass())
		}
	}
	start := r.clock.Now()
	tamper(20)
	if corrections != 3 {
		t.Fatalf("%d corrections in 20 s of a fight, want 3 then backing off", corrections)
	}
	got := r.status("pos/motd")
	if got.State != StateDrifted || got.Hold.Kind != wire.HoldFighting || got.Hold.Count != 3 ||
		got.Hold.Since != start.Add(time.Second).UnixNano() || got.Hold.Until != start.Add(3*time.Second+time.Minute).UnixNano() ||
		!strings.HasPrefix(got.Detail, "fighting: drift corrected 3 times since") {
		t.Fatalf("during the fight: %+v", got)
	}
	tamper(60) // to 80 s: one more correction at 63 s, then 2 min
	if corrections != 4 {
		t.Fatalf("%d corrections in 80 s, want 4", corrections)
	}
	if got := r.status("pos/motd"); got.Hold.Count != 4 || got.Hold.Until != start.Add(63*time.Second+2*time.Minute).UnixNano() {
		t.Fatalf("after the backoff: %+v", got.Hold)
	}
	// Left alone: the next correction holds; the fight lasts until it has
	// held for the window (10 min).
	r.clock.Advance(2 * time.Minute)
	if begun := r.pass(); len(begun) != 1 {
		t.Fatalf("the correction after the backoff: %v", begun)
	}
	if got := r.status("pos/motd"); got.State != StateConverged || got.Hold.Kind != wire.HoldFighting {
		t.Fatalf("corrected, fight not settled: %+v", got)
	}
	for range 10 {
		r.clock.Advance(time.Minute)
		r.pass()
	}
	if got := r.status("pos/motd"); got.State != StateConverged || got.Hold.Kind != wire.HoldNone || got.Corrections != 5 {
		t.Fatalf("after the fight: %+v", got)
	}
}

// TestOverrideThenCorrection: a local override pins a drifted resource
// (no correction, no new desired state) and is reported with its reason
// and expiry; at expiry the agent corrects it again and drops the
// override. On the reconciler's manual clock.
func TestOverrideThenCorrection(t *testing.T) {
	r := newRig(t)
	r.book.set(testSettings(1, class("default", time.Second, time.Minute)))
	r.record(1, desired(t, "pos", 1, simRes("motd", "v1", nil)))
	r.pass()
	now := r.clock.Now()
	o := journal.Override{Key: "pos/motd", Reason: "vendor hotfix on this till", Until: now.Add(24 * time.Hour), By: "uid 0 (root), pid 7", At: now}
	if err := r.j.SetOverride(o); err != nil {
		t.Fatal(err)
	}
	if err := r.sim.Set("motd", "hotfix"); err != nil {
		t.Fatal(err)
	}
	r.clock.Advance(time.Second)
	if begun := r.pass(); len(begun) != 0 {
		t.Fatalf("an overridden resource was corrected: %v", begun)
	}
	want := wire.Hold{Kind: wire.HoldOverride, Since: now.UnixNano(), Until: now.Add(24 * time.Hour).UnixNano(), Holder: o.By, Note: o.Reason}
	got := r.status("pos/motd")
	if got.State != StateOverridden || got.Hold != want || !strings.HasPrefix(got.Detail, "local override by uid 0 (root), pid 7 until ") {
		t.Fatalf("overridden: %+v", got)
	}
	// A new desired state waits for the override too.
	r.record(2, desired(t, "pos", 2, simRes("motd", "v2", nil)))
	r.clock.Advance(time.Hour)
	if begun := r.pass(); len(begun) != 0 {
		t.Fatalf("a new desired state of an overridden resource was applied: %v", begun)
	}
	if got := r.status("pos/motd"); got.State != StateOverridden || !strings.Contains(got.Detail, "the desired change waits for it to end") {
		t.Fatalf("new desired state while overridden: %+v", got)
	}
	next, err := r.rec.pass(t.Context())
	if err != nil || next.After(o.Until) {
		t.Fatalf("next pass at %v (%v), after the override ends at %v", next, err, o.Until)
	}
	r.clock.now = o.Until
	if begun := r.pass(); len(begun) != 1 {
		t.Fatalf("at expiry: steps %v, want the correction", begun)
	}
	if got := r.status("pos/motd"); got.State != StateConverged || got.Hold.Kind != wire.HoldNone {
		t.Fatalf("after expiry: %+v", got)
	}
	if all, _ := r.j.Overrides(); len(all) != 0 {
		t.Errorf("expired override kept: %+v", all)
	}
}

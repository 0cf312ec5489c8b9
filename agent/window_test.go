package agent

import (
	"strings"
	"testing"
	"time"

	"github.com/meteor-edge/meteor/wire"
)

// TestDisruptiveStepWaitsForItsWindow: with a maintenance window of
// weeknights 22:00-05:00 in New York, a disruptive step is blocked,
// saying until when, while the rest of the plan goes on; at 23:00 UTC
// (18:00 in New York, inside the window were it read in UTC) it still
// waits; it is taken when the window opens at 22:00 New York time; a
// drift of it outside the window is corrected only when the window opens
// again. On the reconciler's manual clock.
func TestDisruptiveStepWaitsForItsWindow(t *testing.T) {
	r := newRig(t)
	r.clock.now = time.Date(2026, 1, 2, 15, 0, 0, 0, time.UTC) // Friday 10:00 in New York
	r.book.set(&wire.Settings{Seq: 1, Zone: "America/New_York", Classes: []wire.SettingsClass{class("default", time.Minute, time.Minute)},
		Windows: []wire.MaintenanceWindow{{Name: "store-nights", Spans: []wire.Span{{Days: 0x1f, Start: 22 * 60, End: 5 * 60}}}}})
	restart := simRes("restart", "v2", nil)
	restart.Disruptive = true
	r.record(1, desired(t, "pos", 1, simRes("config", "v2", nil)), desired(t, "pos", 1, restart),
		desired(t, "pos", 1, simRes("after", "v2", nil, "restart")))
	opens := time.Date(2026, 1, 3, 3, 0, 0, 0, time.UTC) // Friday 22:00 in New York
	if begun := r.pass(); len(begun) != 1 || begun[0] != "pos/config" {
		t.Fatalf("steps outside the window: %v, want only pos/config", begun)
	}
	got := r.status("pos/restart")
	want := wire.Hold{Kind: wire.HoldWindow, Until: opens.UnixNano(), Holder: "store-nights", Note: "America/New_York"}
	if got.State != StateBlocked || got.Hold != want || got.Detail != "held for maintenance window store-nights: opens at 2026-01-03T03:00:00Z (America/New_York)" {
		t.Fatalf("pos/restart outside the window: %+v", got)
	}
	if got := r.status("pos/after"); got.State != StateBlocked || !strings.Contains(got.Detail, "requires pos/restart, which is blocked") {
		t.Errorf("pos/after: %+v", got)
	}
	if st := r.st.snapshot(); st.State != StateBlocked || !strings.HasPrefix(st.BlockedReason, "pos/after: ") {
		t.Errorf("device: %s (%s)", st.State, st.BlockedReason)
	}
	r.clock.now = time.Date(2026, 1, 2, 23, 0, 0, 0, time.UTC)
	if begun := r.pass(); len(begun) != 0 {
		t.Fatalf("steps at 18:00 in New York: %v", begun)
	}
	r.clock.now = opens
	if begun := r.pass(); len(begun) != 2 || begun[0] != "pos/restart" || begun[1] != "pos/after" {
		t.Fatalf("steps when the window opens: %v", begun)
	}
	r.clock.now = opens.Add(3 * time.Hour) // 01:00, still open
	r.pass()
	if got := r.status("pos/restart"); got.State != StateConverged || got.Hold.Kind != wire.HoldNone {
		t.Fatalf("pos/restart in the window: %+v", got)
	}

	// Saturday 10:00 in New York: someone changes it; the correction waits.
	r.clock.now = time.Date(2026, 1, 3, 15, 0, 0, 0, time.UTC)
	if err := r.sim.Set("restart", "hand-edited"); err != nil {
		t.Fatal(err)
	}
	if begun := r.pass(); len(begun) != 0 {
		t.Fatalf("drift of a disruptive resource corrected outside the window: %v", begun)
	}
	monday := time.Date(2026, 1, 6, 3, 0, 0, 0, time.UTC) // Monday 22:00 in New York
	if got := r.status("pos/restart"); got.State != StateDrifted || got.Hold.Until != monday.UnixNano() || !strings.HasPrefix(got.Detail, "drift correction held for maintenance window store-nights") {
		t.Fatalf("pos/restart drifted outside the window: %+v", got)
	}
	next, _ := r.rec.pass(t.Context())
	if next.After(monday) {
		t.Errorf("next pass at %v, after the window opens at %v", next, monday)
	}
	r.clock.now = monday
	if begun := r.pass(); len(begun) != 1 || begun[0] != "pos/restart" {
		t.Fatalf("correction when the window opens: %v", begun)
	}
}

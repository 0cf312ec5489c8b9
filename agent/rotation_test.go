package agent

import (
	"strings"
	"testing"
	"time"

	"github.com/meteor-edge/meteor/fsm/intent"
	"github.com/meteor-edge/meteor/wire"
)

// TestRotationWindow: a change whose rotation window has not opened takes
// no step, is reported pending with a schedule hold until its notBefore,
// and wakes the reconciler then; applied after its deadline it says so.
// On the reconciler's manual clock.
func TestRotationWindow(t *testing.T) {
	r := newRig(t)
	now := r.clock.Now()
	res := func(id string, nb, dl time.Time) intent.Resource {
		x := simRes(id, "v7", nil)
		x.Rotation = &intent.Rotation{NotBefore: nb.Format(time.RFC3339), Deadline: dl.Format(time.RFC3339)}
		return x
	}
	r.record(1, desired(t, "pos", 1, res("tls", now.Add(time.Hour), now.Add(2*time.Hour))))
	next, err := r.rec.pass(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if got := r.status("pos/tls"); got.State != StatePending || got.AppliedDigest != "" ||
		got.Hold != (wire.Hold{Kind: wire.HoldSchedule, Until: now.Add(time.Hour).UnixNano()}) ||
		got.Detail != "rotation window opens at "+now.Add(time.Hour).UTC().Format(time.RFC3339) {
		t.Fatalf("pos/tls before its window: %+v", got)
	}
	if !next.Equal(now.Add(time.Hour)) {
		t.Errorf("next pass at %v, want the window's opening %v", next, now.Add(time.Hour))
	}
	r.clock.Advance(time.Hour)
	if begun := r.pass(); len(begun) != 1 || begun[0] != "pos/tls" {
		t.Fatalf("steps when the window opens: %v", begun)
	}
	if got := r.status("pos/tls"); got.State != StateConverged || got.Hold.Kind != wire.HoldNone {
		t.Errorf("pos/tls in its window: %+v", got)
	}

	// A change past its deadline is applied all the same; while it fails
	// its detail says the deadline passed.
	sim, _ := r.reg.Lookup("sim")
	r.reg.Register("sim", &countingDriver{Driver: sim, checks: map[string]int{}, fail: map[string]bool{"late": true}})
	now = r.clock.Now()
	r.record(2, desired(t, "pos", 2, res("late", now.Add(-3*time.Hour), now.Add(-time.Hour))))
	if begun := r.pass(); len(begun) != 1 || begun[0] != "pos/late" {
		t.Fatalf("steps past the deadline: %v", begun)
	}
	if got := r.status("pos/late"); got.State != StateFailed || !strings.Contains(got.Detail, "(rotation deadline "+now.Add(-time.Hour).UTC().Format(time.RFC3339)+" passed)") {
		t.Errorf("pos/late: %+v", got)
	}
}

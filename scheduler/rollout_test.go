package scheduler

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/meteor-edge/meteor/fsm"
	"github.com/meteor-edge/meteor/fsm/intent"
)

func spec(t *testing.T, m map[string]any) *intent.Rollout {
	t.Helper()
	r, err := intent.ParseRollout(m)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func targets(n int, label func(i int) map[string]string) []Target {
	out := make([]Target, n)
	for i := range out {
		out[i] = Target{ID: fmt.Sprintf("d%03d", i), Labels: label(i)}
	}
	return out
}

func TestAssign(t *testing.T) {
	sp := spec(t, map[string]any{"waves": []any{int64(2), "50%", "site=kiosk", "100%"}})
	ts := targets(20, func(i int) map[string]string {
		if i%5 == 0 {
			return map[string]string{"site": "kiosk"}
		}
		return map[string]string{"site": "store"}
	})
	got := Assign("net", sp, ts)
	count := map[int]int{}
	for i, w := range got {
		count[w]++
		if kiosk := i%5 == 0; kiosk != (w == 2) {
			t.Fatalf("%s (kiosk %v) in wave %d", ts[i].ID, kiosk, w+1)
		}
	}
	// 16 stores: 2, then up to 50% (8), then the rest; 4 kiosks.
	if fmt.Sprint(count) != "map[0:2 1:6 2:4 3:8]" {
		t.Fatalf("devices per wave %v", count)
	}
	// Stable: the same again, and a device released in a wave stays in it
	// whatever the fleet does.
	again := Assign("net", sp, ts)
	if fmt.Sprint(again) != fmt.Sprint(got) {
		t.Fatal("assignment is not deterministic")
	}
	ts[1].Release = &fsm.ReleaseRecord{Wave: 3}
	if w := Assign("net", sp, ts)[1]; w != 3 {
		t.Fatalf("released device moved to wave %d", w+1)
	}
	// Another intent picks another pilot set.
	other := Assign("logging", sp, ts)
	if fmt.Sprint(other) == fmt.Sprint(got) {
		t.Error("two intents chose the same pilots")
	}
}

// decideRig holds a rollout record and its targets, and applies each
// decision the way the state machine would, as far as Decide can see.
type decideRig struct {
	t    *testing.T
	now  time.Time
	ro   *fsm.RolloutRecord
	spec *intent.Rollout
	ts   []Target
}

func newDecideRig(t *testing.T, n int, m map[string]any) *decideRig {
	sp := spec(t, m)
	return &decideRig{
		t: t, now: time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC), spec: sp,
		ro: &fsm.RolloutRecord{Intent: "net", Revision: 7, Stable: 3, State: fsm.RolloutProgressing, Waves: make([]fsm.WaveState, max(1, len(sp.Waves))), Seq: 1},
		ts: targets(n, func(int) map[string]string { return nil }),
	}
}

// decide runs Decide and applies its step; converge sets the progress of
// every released device.
func (r *decideRig) decide(progress string) Decision {
	for i := range r.ts {
		if r.ts[i].Release != nil {
			r.ts[i].Progress, r.ts[i].Acked = progress, true
		}
	}
	d := Decide(Input{Now: r.now, Rollout: r.ro, Spec: r.spec, Targets: r.ts})
	if s := d.Step; s != nil {
		for _, id := range s.Release {
			for i := range r.ts {
				if r.ts[i].ID == id {
					r.ts[i].Release = &fsm.ReleaseRecord{Device: id, Revision: 7, Wave: s.ReleaseWave, Time: s.Time}
				}
			}
		}
		next := *r.ro
		next.State, next.Reason, next.Wave, next.Waves, next.Seq = s.State, s.Reason, s.Wave, s.Waves, r.ro.Seq+1
		r.ro = &next
	}
	return d
}

func (r *decideRig) released() int {
	n := 0
	for _, t := range r.ts {
		if t.Release != nil {
			n++
		}
	}
	return n
}

func TestDecideWindow(t *testing.T) {
	r := newDecideRig(t, 10, map[string]any{"waves": []any{"100%"}, "window": "22:00-06:00"})
	d := r.decide(ProgressConverged)
	if r.released() != 0 {
		t.Fatal("released outside the window")
	}
	if want := "wave 1 waits for the window 22:00-06:00 UTC (opens 2026-12-01T22:00:00Z)"; d.Waiting != want || r.ro.Reason != want {
		t.Fatalf("waiting %q, reason %q, want %q", d.Waiting, r.ro.Reason, want)
	}
	// The same wait commits nothing again.
	if d := r.decide(ProgressConverged); d.Step != nil {
		t.Fatalf("a second pass committed %+v", d.Step)
	}
	r.now = time.Date(2026, 12, 1, 23, 30, 0, 0, time.UTC)
	r.decide(ProgressConverged)
	if r.released() != 10 {
		t.Fatalf("inside the window %d of 10 released", r.released())
	}
}

// TestDecideMaintenanceWindows: a rollout released in the devices'
// maintenance windows releases only the devices whose window is open (and
// those no window selects), and says which window it waits for.
func TestDecideMaintenanceWindows(t *testing.T) {
	r := newDecideRig(t, 4, map[string]any{"waves": []any{"100%"}, "window": "maintenance"})
	opens := r.now.Add(5 * time.Hour)
	r.ts[0].Window = &TargetWindow{Open: true, Name: "store-nights"}
	r.ts[1].Window = &TargetWindow{Opens: opens, Name: "store-nights"}
	r.ts[2].Window = &TargetWindow{Opens: opens.Add(time.Hour), Name: "kiosk-nights"}
	// r.ts[3]: no window selects it.
	r.decide(ProgressConverged)
	if r.ts[0].Release == nil || r.ts[3].Release == nil || r.ts[1].Release != nil || r.ts[2].Release != nil {
		t.Fatalf("released %d: want the device in its window and the one without", r.released())
	}
	d := r.decide(ProgressConverged)
	if want := "wave 1 waits for its devices' maintenance windows (store-nights, the next to open, opens 2026-12-01T17:00:00Z)"; d.Waiting != want {
		t.Fatalf("waiting %q, want %q", d.Waiting, want)
	}
	r.ts[1].Window.Open, r.ts[2].Window.Open = true, true
	r.decide(ProgressConverged)
	if r.released() != 4 {
		t.Fatalf("%d of 4 released once the windows opened", r.released())
	}
}

func TestDecideGateHoldAndTimeout(t *testing.T) {
	r := newDecideRig(t, 10, map[string]any{
		"waves": []any{int64(2), "100%"},
		"gate":  map[string]any{"converged": "100%", "hold": "1m", "timeout": "10m"},
	})
	r.decide(ProgressApplying)
	if r.released() != 2 {
		t.Fatalf("%d released, want the pilot of 2", r.released())
	}
	// Converged: the gate holds for a minute before the next wave.
	r.now = r.now.Add(time.Second)
	r.decide(ProgressConverged)
	since := r.ro.Waves[0].GateSince
	if since == 0 || r.ro.Wave != 0 {
		t.Fatalf("gate not met: %+v", r.ro.Waves[0])
	}
	r.now = r.now.Add(30 * time.Second)
	r.decide(ProgressConverged)
	if r.ro.Wave != 0 || r.released() != 2 {
		t.Fatal("the gate did not hold for its minute")
	}
	// The share drops: the hold starts over.
	r.decide(ProgressApplying)
	if r.ro.Waves[0].GateSince != 0 {
		t.Fatal("the gate still holds after the share dropped")
	}
	r.now = r.now.Add(time.Second)
	r.decide(ProgressConverged)
	r.now = r.now.Add(59 * time.Second)
	r.decide(ProgressConverged)
	if r.ro.Wave != 0 || r.ro.Waves[0].GateSince == since {
		t.Fatalf("the hold did not start over: %+v", r.ro.Waves[0])
	}
	r.now = r.now.Add(time.Second)
	r.decide(ProgressConverged)
	if r.ro.Wave != 1 || r.released() != 10 {
		t.Fatalf("after the hold: wave %d, %d released", r.ro.Wave+1, r.released())
	}
	// A device turning unhealthy after its wave passed still pauses.
	r.decide(ProgressUnhealthy)
	if r.ro.State != fsm.RolloutPaused || !strings.Contains(r.ro.Reason, "wave 1: 2 of 2 (100%) devices failed, stuck or unhealthy, above the 0% threshold") {
		t.Fatalf("unhealthy pilot: %s (%s)", r.ro.State, r.ro.Reason)
	}

	// A gate not met within its timeout pauses.
	r = newDecideRig(t, 10, map[string]any{
		"waves":     []any{int64(2), "100%"},
		"gate":      map[string]any{"timeout": "10m"},
		"onFailure": map[string]any{"threshold": "100%"},
	})
	r.decide(ProgressApplying)
	r.now = r.now.Add(11 * time.Minute)
	r.decide(ProgressApplying)
	if r.ro.State != fsm.RolloutPaused || !strings.HasPrefix(r.ro.Reason, "wave 1 gate not met within 10m0s: 0 of 2 (0%) converged, need 100%") {
		t.Fatalf("after the timeout: %s (%s)", r.ro.State, r.ro.Reason)
	}
}

func TestDecideProgressDeadlineMakesStuck(t *testing.T) {
	r := newDecideRig(t, 4, map[string]any{
		"waves":            []any{int64(2), "100%"},
		"progressDeadline": "5m",
		"onFailure":        map[string]any{"threshold": "60%"},
	})
	r.decide(ProgressPending)
	r.now = r.now.Add(6 * time.Minute)
	d := r.decide(ProgressPending)
	if d.Waves[0].Stuck != 2 {
		t.Fatalf("wave 1 = %+v, want 2 stuck", d.Waves[0])
	}
	if r.ro.State != fsm.RolloutPaused || !strings.Contains(r.ro.Reason, "(stuck)") {
		t.Fatalf("stuck pilot: %s (%s)", r.ro.State, r.ro.Reason)
	}
}

func TestDecideCompletesAndPausedDecidesNothing(t *testing.T) {
	r := newDecideRig(t, 30, map[string]any{"waves": []any{int64(3), "100%"}})
	for range 5 {
		r.decide(ProgressConverged)
		r.now = r.now.Add(time.Second)
	}
	if r.ro.State != fsm.RolloutCompleted || r.released() != 30 {
		t.Fatalf("%s (%s) with %d released", r.ro.State, r.ro.Reason, r.released())
	}
	p := newDecideRig(t, 30, map[string]any{"waves": []any{int64(3), "100%"}})
	p.ro.State, p.ro.Reason = fsm.RolloutPaused, "paused by alice"
	if d := p.decide(ProgressConverged); d.Step != nil || p.released() != 0 || d.Waiting != "paused by alice" {
		t.Fatalf("a paused rollout decided %+v", d)
	}
}

func TestJudge(t *testing.T) {
	res := &Resource{Key: "net/policy"}
	res.Digest[0] = 1
	digest := "01" + strings.Repeat("00", 31)
	rec := func(rs ...fsm.ResourceStatus) *fsm.DeviceRecord { return &fsm.DeviceRecord{Resources: rs} }
	for _, c := range []struct {
		name  string
		rec   *fsm.DeviceRecord
		acked bool
		want  string
	}{
		{"nothing yet", rec(), false, ProgressPending},
		{"acked", rec(), true, ProgressApplying},
		{"applied, probe ok", rec(fsm.ResourceStatus{Key: "net/policy", AppliedDigest: digest, Effective: "ok"}), true, ProgressConverged},
		{"applied, no probe yet", rec(fsm.ResourceStatus{Key: "net/policy", AppliedDigest: digest, Effective: "unknown"}), true, ProgressApplying},
		{"applied, probe disagrees", rec(fsm.ResourceStatus{Key: "net/policy", AppliedDigest: digest, Effective: "mismatch"}), true, ProgressUnhealthy},
		{"apply failed", rec(fsm.ResourceStatus{Key: "net/policy", AppliedDigest: "ff", LastError: "exit 1"}), true, ProgressFailed},
		{"dropped resource still held", rec(fsm.ResourceStatus{Key: "net/policy", AppliedDigest: digest, Effective: "ok"}, fsm.ResourceStatus{Key: "net/old", Effective: "ok"}), true, ProgressApplying},
		{"other intents ignored", rec(fsm.ResourceStatus{Key: "net/policy", AppliedDigest: digest, Effective: "ok"}, fsm.ResourceStatus{Key: "log/x", LastError: "boom"}), true, ProgressConverged},
	} {
		if got := Judge("net", []*Resource{res}, c.rec, c.acked); got != c.want {
			t.Errorf("%s: %s, want %s", c.name, got, c.want)
		}
	}
}

// A device out of contact or failed holds no maxParallel slot: the rest of
// the wave goes on, and the gate still waits for it.
func TestDecideUnreachableHoldsNoSlot(t *testing.T) {
	r := newDecideRig(t, 10, map[string]any{"waves": []any{"100%"}, "maxParallel": int64(2), "onFailure": map[string]any{"threshold": "50%"}})
	r.decide(ProgressApplying)
	if r.released() != 2 {
		t.Fatalf("%d released, want 2", r.released())
	}
	if d := r.decide(ProgressApplying); d.Step != nil || r.released() != 2 {
		t.Fatalf("released beyond maxParallel: %d", r.released())
	}
	d := r.decide(ProgressUnreachable)
	if r.released() != 4 {
		t.Fatalf("with the first two out of contact %d released, want 4", r.released())
	}
	if d.Waves[0].Unreachable != 2 {
		t.Fatalf("wave = %+v", d.Waves[0])
	}
	for range 5 {
		r.decide(ProgressUnreachable)
	}
	if r.released() != 10 || r.ro.State != fsm.RolloutProgressing || r.ro.Waves[0].DoneAt != 0 {
		t.Fatalf("all released: %d, %s, wave %+v; the gate must still wait", r.released(), r.ro.State, r.ro.Waves[0])
	}
}

package scheduler

import (
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/meteor-edge/meteor/fsm"
)

// TestRecheck checks DeviceStatus.Recheck against Classify itself: judged
// again at any time before Recheck, with the progress mark carried as the
// status owner carries it, a device gets the same status and resource
// statuses; at Recheck (when it is later than now) its status changes;
// and a device with no Recheck is judged the same however much later.
// An owner passes a device over until its Recheck on this promise.
func TestRecheck(t *testing.T) {
	keys := []string{fw, motd, pkg}
	reported := []func(string) *fsm.ResourceStatus{
		func(string) *fsm.ResourceStatus { return nil },
		func(k string) *fsm.ResourceStatus { r := converged(k); return &r },
		func(k string) *fsm.ResourceStatus { r := applied(k); return &r },
		func(k string) *fsm.ResourceStatus { r := notApplied(k); return &r },
		func(k string) *fsm.ResourceStatus {
			r := failing(k, "exit status 1", 2, t0.Add(-time.Minute))
			return &r
		},
		func(k string) *fsm.ResourceStatus {
			r := withState(converged(k), "drifted", "drifted", "changed on the device")
			return &r
		},
		func(k string) *fsm.ResourceStatus {
			r := withState(converged(k), "ok", "overridden", "held locally")
			return &r
		},
	}
	rapid.Check(t, func(rt *rapid.T) {
		const rev = 7
		var desired []string
		intended := map[string]Intended{}
		rec := fsm.DeviceRecord{
			Connected:     rapid.Bool().Draw(rt, "connected"),
			AckedRevision: uint64(rapid.IntRange(rev-1, rev).Draw(rt, "acked")),
		}
		windowed := false
		for _, k := range keys {
			if !rapid.Bool().Draw(rt, "desired "+k) {
				continue
			}
			desired = append(desired, k)
			in := testClassOf[k]
			switch rapid.IntRange(0, 9).Draw(rt, "window "+k) {
			case 0:
				in.NotBefore = t0.Add(time.Duration(rapid.IntRange(-60, 60).Draw(rt, "opens")) * time.Minute)
				windowed = true
			case 1:
				in.Deadline = t0.Add(time.Duration(rapid.IntRange(-60, 240).Draw(rt, "due")) * time.Minute)
				windowed = true
			}
			intended[k] = in
			if r := reported[rapid.IntRange(0, len(reported)-1).Draw(rt, "reported "+k)](k); r != nil {
				rec.Resources = append(rec.Resources, *r)
			}
		}
		if rapid.IntRange(0, 3).Draw(rt, "seen") > 0 {
			rec.LastSeen = t0.Add(-time.Duration(rapid.IntRange(0, 7200).Draw(rt, "silent s")) * time.Second).UnixNano()
		}
		if rapid.IntRange(0, 5).Draw(rt, "blocked") == 0 {
			rec.BlockedReason = "maintenance lock held"
		}
		var prev ProgressMark
		if rapid.Bool().Draw(rt, "marked") {
			prev.At = t0.Add(-time.Duration(rapid.IntRange(0, 7200).Draw(rt, "progress s")) * time.Second)
			prev.Revision = rec.AckedRevision
		}
		view := Compare(desiredAt(rev, desired...), &rec)
		judge := func(mark ProgressMark, at time.Time) (DeviceStatus, ProgressMark) {
			mark = NextProgressMark(mark, view, &rec, at)
			return Classify(view, &rec, nil, intended, at, mark), mark
		}
		st, mark := judge(prev, t0)
		same := func(a, b DeviceStatus) bool {
			if a.Status != b.Status || len(a.Resources) != len(b.Resources) {
				return false
			}
			for i := range a.Resources {
				if a.Resources[i].Status != b.Resources[i].Status {
					return false
				}
			}
			return true
		}
		switch {
		case windowed:
			if !st.Recheck.Equal(t0) {
				rt.Fatalf("a resource has a rotation window or deadline: Recheck %v, want now (%v)", st.Recheck, t0)
			}
		case st.Recheck.IsZero():
			later := t0.Add(time.Duration(rapid.Int64Range(1, int64(1000*time.Hour)).Draw(rt, "later")))
			if got, _ := judge(mark, later); !same(st, got) {
				rt.Fatalf("no Recheck, yet judged %s at %v and %s %v later", st.Status, t0, got.Status, later.Sub(t0))
			}
		default:
			if !st.Recheck.After(t0) {
				rt.Fatalf("Recheck %v is not after now (%v)", st.Recheck, t0)
			}
			before := t0.Add(time.Duration(rapid.Int64Range(0, int64(st.Recheck.Sub(t0))-1).Draw(rt, "before")))
			if got, _ := judge(mark, before); !same(st, got) {
				rt.Fatalf("judged %s at %v, %s at %v, before Recheck %v", st.Status, t0, got.Status, before, st.Recheck)
			}
			if got, _ := judge(mark, st.Recheck); got.Status == st.Status {
				rt.Fatalf("still %s at Recheck %v: Recheck is too early", st.Status, st.Recheck)
			}
		}
	})
}

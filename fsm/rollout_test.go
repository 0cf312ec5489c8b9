package fsm

import (
	"bytes"
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/meteor-edge/meteor/fsm/intent"
)

// rolledIntent is testIntent with a rollout block of two waves.
func rolledIntent(name, value string) *intent.Intent {
	in := testIntent(name, value)
	in.Rollout = map[string]any{"waves": []any{int64(1), "100%"}}
	return in
}

func (a *applier) assigned(name, device string) uint64 {
	a.t.Helper()
	read := a.f.Read()
	rec, err := read.Intent(nil, name)
	if err != nil {
		a.t.Fatal(err)
	}
	rev, err := read.AssignedRevision(rec, device)
	if err != nil {
		a.t.Fatal(err)
	}
	return rev
}

func (a *applier) rollout(name string) *RolloutRecord {
	a.t.Helper()
	ro, err := a.f.Read().Rollout(nil, name)
	if err != nil {
		a.t.Fatal(err)
	}
	return ro
}

// step builds a worker step on the rollout's current record.
func (a *applier) step(name string, release ...string) *RolloutStepRequest {
	ro := a.rollout(name)
	return &RolloutStepRequest{Intent: name, Revision: ro.Revision, Basis: ro.Seq, Time: 100,
		Release: release, State: RolloutProgressing, Wave: ro.Wave, Waves: ro.Waves}
}

func TestRolloutReleasesAndStableRevision(t *testing.T) {
	a := newApplier(t, Config{HistoryLimit: 2})
	// Without a rollout block a revision reaches every device at once.
	r1 := a.ok(PutIntentType, &PutIntentRequest{Intent: testIntent("net", "v1"), Time: 1}).Revision
	if _, err := a.f.Read().Rollout(nil, "net"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("rollout of an intent without a block: %v", err)
	}
	if got := a.assigned("net", "d1"); got != r1 {
		t.Fatalf("assigned %d, want %d", got, r1)
	}
	// With one, devices keep r1 until released.
	r2 := a.ok(PutIntentType, &PutIntentRequest{Intent: rolledIntent("net", "v2"), Time: 2, Actor: alice}).Revision
	ro := a.rollout("net")
	if ro.Revision != r2 || ro.Stable != r1 || ro.State != RolloutProgressing || len(ro.Waves) != 2 {
		t.Fatalf("rollout = %+v", ro)
	}
	if a.assigned("net", "d1") != r1 || a.assigned("net", "d2") != r1 {
		t.Fatal("a device not released does not keep the stable revision")
	}
	before := a.f.Read().Revision()
	res := a.ok(RolloutStepType, a.step("net", "d1"))
	if res.Revision != before+1 {
		t.Fatalf("a release bumped the revision to %d, want %d", res.Revision, before+1)
	}
	if a.assigned("net", "d1") != r2 || a.assigned("net", "d2") != r1 {
		t.Fatalf("after releasing d1: d1 %d, d2 %d", a.assigned("net", "d1"), a.assigned("net", "d2"))
	}
	rel, _ := a.f.Read().Release("net", "d1")
	if rel == nil || rel.DesiredRevision != res.Revision {
		t.Fatalf("release = %+v, want desired revision %d", rel, res.Revision)
	}

	// A step judged on an older record changes nothing, and a device is
	// never released twice.
	stale := a.step("net", "d2")
	stale.Basis--
	a.refused(RolloutStepType, stale, ErrStaleStep)
	res = a.ok(RolloutStepType, a.step("net", "d1"))
	if res.Revision != a.f.Read().Revision() || a.rollout("net").Released[r2] != 1 {
		t.Fatalf("releasing d1 again: %+v, released %v", res, a.rollout("net").Released)
	}

	// The history limit keeps the revisions devices hold.
	r3 := a.ok(PutIntentType, &PutIntentRequest{Intent: rolledIntent("net", "v3"), Time: 3}).Revision
	r4 := a.ok(PutIntentType, &PutIntentRequest{Intent: rolledIntent("net", "v4"), Time: 4}).Revision
	hist, _ := a.f.Read().History("net")
	var kept []uint64
	for _, h := range hist {
		kept = append(kept, h.Revision)
	}
	// r1 is stable and r2 released to d1; r3 superseded with nothing
	// released is dropped.
	if want := []uint64{r1, r2, r4}; !cmp.Equal(kept, want) {
		t.Fatalf("history kept %v, want %v", kept, want)
	}
	if _, err := a.f.Read().IntentAt("net", r3); !errors.Is(err, ErrCompacted) {
		t.Fatalf("IntentAt(%d) in the gap: %v, want ErrCompacted", r3, err)
	}
	if h, err := a.f.Read().IntentAt("net", r2); err != nil || h.Revision != r2 {
		t.Fatalf("IntentAt(%d): %+v, %v", r2, h, err)
	}
	if a.assigned("net", "d1") != r2 || a.assigned("net", "d2") != r1 {
		t.Fatal("a newer revision moved devices before releasing them")
	}
	outs, _ := a.f.Read().RolloutOutcomes("net")
	if len(outs) != 2 || outs[0].Revision != r2 || outs[0].State != RolloutSuperseded || outs[1].Revision != r3 {
		t.Fatalf("outcomes = %+v", outs)
	}

	// Completing makes the revision stable and drops the releases.
	done := a.step("net", "d2")
	done.Complete, done.State = true, RolloutCompleted
	a.ok(RolloutStepType, done)
	ro = a.rollout("net")
	if ro.State != RolloutCompleted || ro.Stable != r4 || len(ro.Released) != 0 {
		t.Fatalf("completed rollout = %+v", ro)
	}
	if rels, _ := a.f.Read().Releases("net"); len(rels) != 0 || a.assigned("net", "d1") != r4 {
		t.Fatalf("after completion: releases %v, d1 at %d", rels, a.assigned("net", "d1"))
	}
	// Ended: no more steps.
	a.refused(RolloutStepType, a.step("net", "d3"), ErrStaleStep)

	// A new intent with a rollout gives unreleased devices nothing.
	a.ok(PutIntentType, &PutIntentRequest{Intent: rolledIntent("new", "v1"), Time: 5})
	if got := a.assigned("new", "d1"); got != 0 {
		t.Fatalf("an unreleased device of a new intent holds %d", got)
	}
}

func TestUnchangedPutMakesNoRevision(t *testing.T) {
	a := newApplier(t, Config{})
	r1 := a.ok(PutIntentType, &PutIntentRequest{Intent: rolledIntent("net", "v1"), Time: 1}).Revision
	before := a.state()
	res := a.ok(PutIntentType, &PutIntentRequest{Intent: rolledIntent("net", "v1"), Time: 2})
	if !res.Unchanged || res.Revision != r1 {
		t.Fatalf("re-put: %+v, want unchanged at %d", res, r1)
	}
	if after := a.state(); after != before {
		t.Fatalf("an unchanged put changed the state:\n%s", cmp.Diff(before, after))
	}
	// If-Match still applies.
	a.refused(PutIntentType, &PutIntentRequest{Intent: rolledIntent("net", "v1"), IfMatch: u64(r1 + 5), Time: 3}, "expected revision")
}

func TestRolloutControl(t *testing.T) {
	a := newApplier(t, Config{})
	r1 := a.ok(PutIntentType, &PutIntentRequest{Intent: testIntent("net", "v1"), Time: 1}).Revision
	a.ok(PutIntentType, &PutIntentRequest{Intent: rolledIntent("net", "v2"), Time: 2})
	a.ok(RolloutStepType, a.step("net", "d1"))

	// A pause makes the worker's next step (judged before it) stale.
	inFlight := a.step("net", "d2")
	a.ok(RolloutControlType, &RolloutControlRequest{Intent: "net", Action: RolloutPause, Reason: "checking the pilot", Time: 3, Actor: alice})
	a.refused(RolloutStepType, inFlight, ErrStaleStep)
	ro := a.rollout("net")
	if ro.State != RolloutPaused || ro.Reason != "paused by alice (00000000000000a1): checking the pilot" {
		t.Fatalf("paused rollout = %+v", ro)
	}
	// Approving a wave that has started is refused; approving the next is
	// recorded.
	a.refused(RolloutControlType, &RolloutControlRequest{Intent: "net", Action: RolloutApprove, Wave: 3, Time: 4}, "waves 1 to 2")
	a.ok(RolloutControlType, &RolloutControlRequest{Intent: "net", Action: RolloutApprove, Wave: 2, Time: 4, Actor: alice})
	if ro := a.rollout("net"); !ro.Waves[1].Approved || ro.Waves[1].ApprovedBy == "" {
		t.Fatalf("approval not recorded: %+v", ro.Waves)
	}
	a.ok(RolloutControlType, &RolloutControlRequest{Intent: "net", Action: RolloutResume, Time: 5, Actor: alice})
	if ro := a.rollout("net"); ro.State != RolloutProgressing {
		t.Fatalf("resumed rollout = %+v", ro)
	}
	// Abort sends the released devices back to the stable revision.
	a.ok(RolloutControlType, &RolloutControlRequest{Intent: "net", Action: RolloutAbort, Reason: "bad policy", Time: 6, Actor: alice})
	if got := a.assigned("net", "d1"); got != r1 {
		t.Fatalf("aborted: d1 holds %d, want %d", got, r1)
	}
	a.refused(RolloutControlType, &RolloutControlRequest{Intent: "net", Action: RolloutPause, Time: 7}, "nothing to pause")
	a.refused(RolloutControlType, &RolloutControlRequest{Intent: "net", Action: "explode", Time: 7}, "must be approve")
	a.refused(RolloutControlType, &RolloutControlRequest{Intent: "other", Action: RolloutPause, Time: 7}, ErrNotFound)
	// Resume after an abort rolls the revision out again from wave 1.
	a.ok(RolloutControlType, &RolloutControlRequest{Intent: "net", Action: RolloutResume, Time: 8})
	if ro := a.rollout("net"); ro.State != RolloutProgressing || ro.Wave != 0 || ro.Waves[0] != (WaveState{}) {
		t.Fatalf("resumed after abort = %+v", ro)
	}
	evs, _ := a.f.Read().RolloutEvents(nil, "net")
	var kinds []string
	for _, e := range evs {
		kinds = append(kinds, e.Kind)
	}
	want := []string{EventStarted, EventRelease, EventPaused, EventApproved, EventResumed, EventAborted, EventResumed}
	if !cmp.Equal(kinds, want) {
		t.Fatalf("events %v, want %v", kinds, want)
	}
	audit, _ := a.f.Read().Audit(nil, AuditQuery{})
	if len(audit) == 0 || audit[0].Action != "rollout-resume" {
		t.Fatalf("audit does not record the control: %+v", audit)
	}
}

func TestRolloutRevertAndDelete(t *testing.T) {
	a := newApplier(t, Config{})
	a.ok(PutIntentType, &PutIntentRequest{Intent: rolledIntent("net", "v1"), Time: 1})
	a.ok(RolloutStepType, a.step("net", "d1", "d2"))
	rev := a.step("net")
	rev.Revert, rev.State, rev.Reason = true, RolloutReverted, "wave 1: 2 of 2 failed"
	a.ok(RolloutStepType, rev)
	if got := a.assigned("net", "d1"); got != 0 {
		t.Fatalf("reverted first revision: d1 holds %d, want none", got)
	}
	if ro := a.rollout("net"); ro.State != RolloutReverted || ro.EndedAt == 0 {
		t.Fatalf("reverted = %+v", ro)
	}
	a.ok(RolloutControlType, &RolloutControlRequest{Intent: "net", Action: RolloutResume, Time: 2})
	a.ok(RolloutStepType, a.step("net", "d1"))
	a.ok(DeleteIntentType, &DeleteIntentRequest{Name: "net", Time: 3})
	if _, err := a.f.Read().Rollout(nil, "net"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("rollout after delete: %v", err)
	}
	if rels, _ := a.f.Read().Releases("net"); len(rels) != 0 {
		t.Fatalf("releases after delete: %v", rels)
	}
	outs, _ := a.f.Read().RolloutOutcomes("net")
	if len(outs) != 1 || outs[0].State != RolloutAborted {
		t.Fatalf("outcomes after delete: %+v", outs)
	}
}

func TestRolloutSnapshotRoundTrip(t *testing.T) {
	a := newApplier(t, Config{})
	a.ok(PutIntentType, &PutIntentRequest{Intent: testIntent("net", "v1"), Time: 1})
	a.ok(PutIntentType, &PutIntentRequest{Intent: rolledIntent("net", "v2"), Time: 2})
	a.ok(RolloutStepType, a.step("net", "d1"))
	a.ok(PutIntentType, &PutIntentRequest{Intent: rolledIntent("net", "v3"), Time: 3})
	snap := snapshotBytes(t, a.f)
	b := newTestFSM(t, 0)
	if err := b.Restore(bytes.NewReader(snap)); err != nil {
		t.Fatal(err)
	}
	if again := snapshotBytes(t, b); !bytes.Equal(snap, again) {
		t.Fatalf("restored state differs:\n%s", cmp.Diff(string(snap), string(again)))
	}
	for _, table := range []string{`"rollout":`, `"release":`, `"rollout_event":`, `"rollout_outcome":`} {
		if !bytes.Contains(snap, []byte(table)) {
			t.Errorf("snapshot has no %s entry", table)
		}
	}
}

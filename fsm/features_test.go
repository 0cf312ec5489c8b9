package fsm

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/meteor-edge/meteor/fsm/intent"
)

// TestActiveLevel: until the log raises the cluster's active level to 3,
// a replica applies existing commands as a replica of level 2 does (no
// link history, no edge report data, no intent with a rotation window),
// so replicas of both releases store the same state from the same log;
// from the entry that raises it on, it records them. The level travels
// in snapshots (version 3), which a replica of level 2 refuses.
func TestActiveLevel(t *testing.T) {
	f, err := New(Config{})
	if err != nil {
		t.Fatal(err)
	}
	if l := f.Read().ActiveLevel(); l != LevelOperatorRestore {
		t.Fatalf("a new replica's active level: %d", l)
	}
	index := uint64(0)
	apply := func(typ MessageType, req any) ApplyResult {
		t.Helper()
		index++
		return f.Apply(index, mustEncode(t, typ, req))
	}
	session := func(connected bool, at int64) {
		t.Helper()
		if res := apply(DeviceSessionType, &DeviceSessionRequest{ID: "kiosk-1", SessionID: "s", Server: "s1", Conn: "c", Connected: connected, Time: at}); res.Err != nil {
			t.Fatal(res.Err)
		}
	}
	report := func(seq uint64) {
		t.Helper()
		if res := apply(StatusBatchType, &StatusBatchRequest{Owner: "s1", Transitions: []StatusTransition{{
			Device: "kiosk-1", Seq: seq, Time: 10, Status: "blocked", Edge: true,
			Resources: []ResourceStatus{{Key: "app/a", Hold: &ResourceHold{Kind: "lock", Holder: "pos"}}},
			Locks:     []DeviceLock{{Name: "pos", Holder: "till", Since: 5, Source: "agent"}},
		}}}); res.Err != nil {
			t.Fatal(res.Err)
		}
	}
	rotating := testIntent("certs", "v1")
	rotating.Resources[0].Rotation = &intent.Rotation{Deadline: "2099-01-01T00:00:00Z"}

	session(true, 1)
	session(false, 2)
	session(true, 5)
	report(1)
	rec, _ := f.Read().Device(nil, "kiosk-1")
	if rec.Link != nil || rec.Locks != nil || rec.Resources[0].Hold != nil {
		t.Fatalf("at level 2: link %+v, locks %+v, hold %+v; want none", rec.Link, rec.Locks, rec.Resources[0].Hold)
	}
	var fle *FeatureLevelError
	if res := apply(PutIntentType, &PutIntentRequest{Intent: rotating, Time: 1}); !errors.As(res.Err, &fle) || fle.Level != LevelEdge {
		t.Fatalf("an intent with a rotation window at level 2: %v", res.Err)
	}

	if res := apply(SetFeatureLevelType, &SetFeatureLevelRequest{Level: LevelEdge, Time: 1}); res.Err != nil {
		t.Fatal(res.Err)
	}
	if res := apply(SetFeatureLevelType, &SetFeatureLevelRequest{Level: LevelEdge, Time: 1}); res.Err == nil {
		t.Fatal("the same level raised twice")
	}
	if l := f.Read().ActiveLevel(); l != LevelEdge {
		t.Fatalf("active level %d after raising it", l)
	}
	session(false, 20)
	session(true, 50)
	report(2)
	rec, _ = f.Read().Device(nil, "kiosk-1")
	if rec.Link == nil || len(rec.Link.Gaps) != 1 || len(rec.Locks) != 1 || rec.Resources[0].Hold == nil {
		t.Fatalf("at level 3: link %+v, locks %+v, hold %+v", rec.Link, rec.Locks, rec.Resources[0].Hold)
	}
	if res := apply(PutIntentType, &PutIntentRequest{Intent: rotating, Time: 1}); res.Err != nil {
		t.Fatalf("an intent with a rotation window at level 3: %v", res.Err)
	}

	snap := snapshotBytes(t, f)
	if hdr := snap[:bytes.IndexByte(snap, '\n')]; !bytes.Contains(hdr, []byte(`"version":3`)) || !bytes.Contains(hdr, []byte(`"active_level":3`)) {
		t.Fatalf("snapshot header %s", hdr)
	}
	g, _ := New(Config{})
	if err := g.Restore(bytes.NewReader(snap)); err != nil || g.Read().ActiveLevel() != LevelEdge {
		t.Fatalf("restored: %v, active level %d", err, g.Read().ActiveLevel())
	}
	old, _ := New(Config{FeatureLevel: 2})
	if err := old.Restore(bytes.NewReader(snap)); err == nil || !strings.Contains(err.Error(), "version 3 is not supported") {
		t.Fatalf("a level 2 replica restoring a level 3 state: %v", err)
	}
	func() {
		defer func() {
			if r := recover(); r == nil || !strings.Contains(fmt.Sprint(r), "unknown command type 21") {
				t.Fatalf("a level 2 replica applying set-feature-level: panic %v", r)
			}
		}()
		old.Apply(1, mustEncode(t, SetFeatureLevelType, &SetFeatureLevelRequest{Level: LevelEdge}))
	}()
}

// TestAckWithStatus: from active level 4 on, a status transition records
// the revision the device acknowledged, never lowering it and even when its
// status is stale; below it, replicas of level 3 and 4 both drop it, and a
// replica of level 3 stops rather than raise the level, and refuses to
// restore a level-4 state.
func TestAckWithStatus(t *testing.T) {
	newReplica := func(level uint16) (*FSM, func(MessageType, any) ApplyResult) {
		f, err := New(Config{FeatureLevel: level})
		if err != nil {
			t.Fatal(err)
		}
		index := uint64(0)
		return f, func(typ MessageType, req any) ApplyResult {
			t.Helper()
			index++
			return f.Apply(index, mustEncode(t, typ, req))
		}
	}
	cur, apply := newReplica(0)
	old, applyOld := newReplica(LevelEdge)
	both := func(typ MessageType, req any) {
		t.Helper()
		for _, a := range []func(MessageType, any) ApplyResult{apply, applyOld} {
			if res := a(typ, req); res.Err != nil {
				t.Fatal(res.Err)
			}
		}
	}
	acked := func(f *FSM) uint64 {
		t.Helper()
		rec, err := f.Read().Device(nil, "kiosk-1")
		if err != nil {
			t.Fatal(err)
		}
		return rec.AckedRevision
	}
	transition := func(owner string, seq, ackedRev, basis uint64) *StatusBatchRequest {
		return &StatusBatchRequest{Owner: owner, Transitions: []StatusTransition{{
			Device: "kiosk-1", Seq: seq, Time: int64(seq), Status: "converged", AckedRevision: ackedRev, Basis: basis,
		}}}
	}
	both(DeviceSessionType, &DeviceSessionRequest{ID: "kiosk-1", SessionID: "s", Server: "s1", Conn: "c", Connected: true, AckedRevision: 3, Time: 1})
	both(SetFeatureLevelType, &SetFeatureLevelRequest{Level: LevelEdge, Time: 1})
	both(StatusBatchType, transition("s1", 1, 7, 0))
	if a, b := acked(cur), acked(old); a != 3 || b != 3 {
		t.Fatalf("at level 3 the transition's ack is dropped: acked %d and %d, want 3", a, b)
	}

	func() {
		defer func() {
			if r := recover(); r == nil || !strings.Contains(fmt.Sprint(r), "this server runs level 3") {
				t.Fatalf("a level 3 replica raising the active level to 4: panic %v", r)
			}
		}()
		applyOld(SetFeatureLevelType, &SetFeatureLevelRequest{Level: LevelAckWithStatus, Time: 2})
	}()
	if res := apply(SetFeatureLevelType, &SetFeatureLevelRequest{Level: LevelAckWithStatus, Time: 2}); res.Err != nil {
		t.Fatal(res.Err)
	}
	if res := apply(StatusBatchType, transition("s1", 2, 9, 0)); res.Err != nil {
		t.Fatal(res.Err)
	}
	if a := acked(cur); a != 9 {
		t.Fatalf("at level 4: acked %d, want 9", a)
	}
	if res := apply(StatusBatchType, transition("s1", 3, 8, 0)); res.Err != nil || acked(cur) != 9 {
		t.Fatalf("a lower ack: %v, acked %d, want 9", res.Err, acked(cur))
	}
	// Another owner's transition judged on an older status: its status is
	// not applied, the device's acknowledgement is.
	if res := apply(StatusBatchType, transition("s2", 4, 12, 0)); res.Err != nil {
		t.Fatal(res.Err)
	}
	if rec, _ := cur.Read().Device(nil, "kiosk-1"); rec.AckedRevision != 12 || rec.StatusOwner != "s1" {
		t.Fatalf("a stale transition: acked %d, status owner %s; want 12 and s1", rec.AckedRevision, rec.StatusOwner)
	}
	if res := apply(DeviceSessionType, &DeviceSessionRequest{ID: "kiosk-1", SessionID: "s", Server: "s1", Conn: "c", Connected: true, AckedRevision: 10, Time: 5}); res.Err != nil || acked(cur) != 12 {
		t.Fatalf("a session record behind the ack: %v, acked %d, want 12", res.Err, acked(cur))
	}

	snap := snapshotBytes(t, cur)
	if hdr := snap[:bytes.IndexByte(snap, '\n')]; !bytes.Contains(hdr, []byte(`"active_level":4`)) {
		t.Fatalf("snapshot header %s", hdr)
	}
	if err := old.Restore(bytes.NewReader(snap)); err == nil || !strings.Contains(err.Error(), "active feature level 4") {
		t.Fatalf("a level 3 replica restoring a level 4 state: %v", err)
	}
}

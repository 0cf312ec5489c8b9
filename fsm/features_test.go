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

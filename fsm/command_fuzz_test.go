package fsm

import (
	"bytes"
	"fmt"
	"maps"
	mrand "math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/meteor-edge/meteor/fsm/intent"
)

// FuzzCommand applies an arbitrary command, of any type byte, to two
// replicas holding the same state (randomLog). Every type in the dispatch
// table is seeded with a valid body, so none goes uncovered when a type is
// added. A type Apply does not know panics, naming it, unless it carries
// IgnoreUnknownTypeFlag (then only the index moves); a body that does not
// decode stops the server (the panic Apply raises for a corrupt entry);
// anything else applies or is rejected the same way on both replicas,
// without any other panic.
func FuzzCommand(f *testing.F) {
	seeds := map[MessageType]any{
		PutIntentType:          &PutIntentRequest{Intent: testIntent("intent-1", "x"), IfMatch: u64(0), Time: 1},
		DeleteIntentType:       &DeleteIntentRequest{Name: "intent-2", IfMatch: u64(3), Time: 1},
		UpsertDeviceType:       &UpsertDeviceRequest{ID: "dev-1", Labels: map[string]string{"region": "us"}, Time: 1},
		DeviceSessionType:      &DeviceSessionRequest{ID: "dev-2", SessionID: "s", Server: "s1"},
		StatusBatchType:        &StatusBatchRequest{Owner: "s2", Transitions: []StatusTransition{{Device: "dev-3", Seq: 99, Status: "drifted", Full: true}}},
		DeviceSessionBatchType: &DeviceSessionBatchRequest{Sessions: []DeviceSessionRequest{{ID: "dev-4", SessionID: "t", Server: "s3"}}},
		RolloutStepType:        &RolloutStepRequest{Intent: "intent-1", Revision: 1, Basis: 1, Release: []string{"dev-1"}, State: RolloutProgressing, Waves: make([]WaveState, 3)},
		RolloutControlType:     &RolloutControlRequest{Intent: "intent-1", Action: RolloutPause, Reason: "x"},
		SetFeatureLevelType:    &SetFeatureLevelRequest{Level: 3, Time: 1},
		AuditOperationType:     &OperationRequest{Action: "snapshot-save", Target: "snapshot/ab12", Summary: "x", Time: 1},
		PutClassType:           &PutClassRequest{Class: ptr(intent.BuiltinClasses()["network-policy"]), Time: 1},
		DeviceUnlockType:       &DeviceUnlockRequest{ID: "dev-1", Lock: "pos-sync", Since: 5, Reason: "hung", Time: 1},
		PutWindowType:          &PutWindowRequest{Window: &intent.MaintenanceWindow{Name: "nights", Spans: []intent.WindowSpan{{Days: 0x1f, Start: 1320, End: 300}}}, Time: 1},
	}
	seeded := map[MessageType]bool{}
	add := func(cmd []byte) {
		seeded[MessageType(cmd[0])] = true
		f.Add(cmd[0], cmd[1:])
	}
	for typ, req := range seeds {
		add(mustEncode(f, typ, req))
	}
	for _, cmd := range randomLog(f, 3, 16) {
		add(cmd)
	}
	rng := mrand.New(mrand.NewPCG(5, 5))
	for i := range 16 {
		add(securityCommand(f, rng, i))
	}
	for _, typ := range slices.Sorted(maps.Keys(handlers)) {
		if !seeded[typ] {
			f.Fatalf("FuzzCommand has no seed of command type %s: add one", typ)
		}
	}
	f.Add(byte(200), []byte(`{}`))
	f.Add(byte(IgnoreUnknownTypeFlag|100), []byte(`{"x":1}`))
	f.Add(byte(0), []byte(nil))
	// The state both replicas start from, restored for each input.
	base := newTestFSM(f, 4)
	for j, e := range randomLog(f, 9, 40) {
		base.Apply(uint64(j+1), e)
	}
	start := snapshotBytes(f, base)
	const next = 41
	f.Fuzz(func(t *testing.T, typ byte, body []byte) {
		cmd := append([]byte{typ}, body...)
		_, known := handlers[MessageType(typ)&^IgnoreUnknownTypeFlag]
		var states [2][]byte
		var results [2]ApplyResult
		for i := range states {
			r := newTestFSM(t, 4)
			if err := r.Restore(bytes.NewReader(start)); err != nil {
				t.Fatal(err)
			}
			if !known {
				applyUnknown(t, r, next, cmd, start)
				return
			}
			if !applyOrDecodePanic(t, r, next, cmd, &results[i]) {
				return
			}
			states[i] = snapshotBytes(t, r)
		}
		if !bytes.Equal(states[0], states[1]) || (results[0].Err == nil) != (results[1].Err == nil) {
			t.Fatalf("replicas differ after type %d body %q", typ, body)
		}
	})
}

// applyUnknown applies a command of a type Apply does not know to f,
// holding the state start: it must panic naming the type and change
// nothing, or, for a type flagged ignorable, only move the index.
func applyUnknown(t *testing.T, f *FSM, index uint64, cmd, start []byte) {
	ignorable := MessageType(cmd[0])&IgnoreUnknownTypeFlag != 0
	rev := f.Read().Revision()
	func() {
		defer func() {
			p := recover()
			msg, _ := p.(string)
			switch {
			case ignorable && p != nil:
				t.Fatalf("ignorable type %d panicked: %v", cmd[0], p)
			case !ignorable && !strings.Contains(msg, fmt.Sprintf("unknown command type %d", cmd[0])):
				t.Fatalf("unknown type %d: panic %v, want one naming the type", cmd[0], p)
			}
		}()
		f.Apply(index, cmd)
	}()
	got := f.Read()
	switch {
	case got.Revision() != rev:
		t.Fatalf("type %d moved the revision from %d to %d", cmd[0], rev, got.Revision())
	case ignorable && got.Index() != index:
		t.Fatalf("ignorable type %d: index %d, want %d", cmd[0], got.Index(), index)
	case !ignorable && !bytes.Equal(snapshotBytes(t, f), start):
		t.Fatalf("unknown type %d changed the state", cmd[0])
	}
}

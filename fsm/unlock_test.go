package fsm

import (
	"errors"
	"strings"
	"testing"
)

// TestDeviceUnlock: an order to break a lock is recorded on the device
// (audited, in its timeline); the agent's outcome, which a status
// transition carries, is recorded on it once; the locks a 1.4 report
// carries replace the record's.
func TestDeviceUnlock(t *testing.T) {
	f := newTestFSM(t, 0)
	if res := f.Apply(1, mustEncode(t, DeviceUnlockType, &DeviceUnlockRequest{ID: "kiosk-1", Lock: "pos-sync", Time: 1})); !errors.Is(res.Err, ErrNotFound) {
		t.Fatalf("unlock of an unknown device: %v", res.Err)
	}
	f.Apply(2, mustEncode(t, DeviceSessionType, &DeviceSessionRequest{ID: "kiosk-1", SessionID: "s", Server: "s1", Connected: true, Time: 2}))
	f.Apply(3, mustEncode(t, StatusBatchType, &StatusBatchRequest{Owner: "s1", Transitions: []StatusTransition{{
		Device: "kiosk-1", Seq: 1, Time: 3, Status: "blocked", Edge: true,
		Locks: []DeviceLock{{Name: "pos-sync", Holder: "sync", Since: 100, MaxHold: 7200e9, Source: "agent"}},
	}}}))
	alice := Actor{Name: "alice", Accessor: "a1"}
	if res := f.Apply(4, mustEncode(t, DeviceUnlockType, &DeviceUnlockRequest{ID: "kiosk-1", Lock: "pos-sync", Since: 100, Reason: "sync hung", Actor: alice, Time: 4})); res.Err != nil {
		t.Fatal(res.Err)
	}
	rec, _ := f.Read().Device(nil, "kiosk-1")
	if len(rec.Locks) != 1 || len(rec.Unlocks) != 1 || rec.Unlocks[0].Index != 4 || rec.Unlocks[0].Outcome != "" {
		t.Fatalf("record after the order: locks %+v, unlocks %+v", rec.Locks, rec.Unlocks)
	}
	for range 2 { // the outcome, twice: recorded once
		f.Apply(f.Read().Index()+1, mustEncode(t, StatusBatchType, &StatusBatchRequest{Owner: "s1", Transitions: []StatusTransition{{
			Device: "kiosk-1", Seq: rec.ReportSeq + 1, Time: 5, Status: "converged", Edge: true,
			Unlocked: []UnlockResult{{Index: 4, Lock: "pos-sync", Outcome: "broken", At: 5}},
		}}}))
		rec, _ = f.Read().Device(nil, "kiosk-1")
	}
	if len(rec.Locks) != 0 || rec.Unlocks[0].Outcome != "broken" || rec.Unlocks[0].OutcomeAt != 5 {
		t.Fatalf("record after the outcome: locks %+v, unlocks %+v", rec.Locks, rec.Unlocks)
	}
	tl, _ := f.Read().Timeline(nil, "kiosk-1")
	var reasons []string
	for _, e := range tl {
		reasons = append(reasons, e.Reason)
	}
	joined := strings.Join(reasons, "\n")
	if strings.Count(joined, "the device reports lock pos-sync broken (order of alice (a1))") != 1 ||
		!strings.Contains(joined, "operator ordered: break lock pos-sync held since 1970-01-01T00:00:00Z: sync hung") {
		t.Errorf("timeline:\n%s", joined)
	}
	audit, _ := f.Read().Audit(nil, AuditQuery{})
	if len(audit) != 1 || audit[0].Action != "unlock-device" || audit[0].Target != "device/kiosk-1" {
		t.Errorf("audit %+v", audit)
	}
}

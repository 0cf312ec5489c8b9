package fsm

import (
	"bytes"
	"slices"
	"testing"

	"github.com/hashicorp/go-memdb"

	"github.com/meteor-edge/meteor/fsm/intent"
)

// TestWatchJudgementCoversTheSchema: every table is either watched whole
// by WatchJudgement or one of those it leaves out on purpose, so a table
// added later is not silently left out of what owners re-judge devices
// on.
func TestWatchJudgementCoversTheSchema(t *testing.T) {
	left := []string{tableDevices, tableAudit, tableMeta}
	for name := range schema().Tables {
		if !slices.Contains(judgementTables, name) && !slices.Contains(left, name) {
			t.Errorf("table %q is neither watched by WatchJudgement nor left out of it on purpose", name)
		}
	}
	for _, name := range judgementTables {
		if _, ok := schema().Tables[name]; !ok {
			t.Errorf("WatchJudgement watches %q, which is not in the schema", name)
		}
	}
}

// TestWatchJudgement: a device's session and status commits leave the
// watch quiet; a class, an intent and a restore fire it.
func TestWatchJudgement(t *testing.T) {
	f := newTestFSM(t, 0)
	apply := mustApplier(t, f)
	apply(DeviceSessionType, &DeviceSessionRequest{ID: "d1", Labels: map[string]string{"region": "eu"}, SessionID: "s", Server: "srv1", Connected: true, Time: 1})
	watch := func() memdb.WatchSet {
		t.Helper()
		ws := memdb.NewWatchSet()
		if err := f.Read().WatchJudgement(ws); err != nil {
			t.Fatal(err)
		}
		return ws
	}
	fired := func(ws memdb.WatchSet) bool {
		for ch := range ws {
			select {
			case <-ch:
				return true
			default:
			}
		}
		return false
	}

	ws := watch()
	rev := f.Read().Revision()
	apply(DeviceSessionType, &DeviceSessionRequest{ID: "d1", SessionID: "s", Server: "srv1", Connected: true, AckedRevision: 1, Time: 2})
	apply(StatusBatchType, &StatusBatchRequest{Owner: "srv1", Transitions: []StatusTransition{{Device: "d1", Seq: 1, Status: "converged", Time: 3}}})
	if fired(ws) {
		t.Fatal("a device's own session and status fired the judgement watch")
	}
	// A device enrolled and another's labels changed move the cluster
	// revision, and change no other device's judgement.
	apply(DeviceSessionType, &DeviceSessionRequest{ID: "d2", Labels: map[string]string{"region": "eu"}, SessionID: "s2", Server: "srv1", Connected: true, Time: 3})
	apply(DeviceSessionType, &DeviceSessionRequest{ID: "d1", Labels: map[string]string{"region": "us"}, SessionID: "s", Server: "srv1", Connected: true, Time: 3})
	if f.Read().Revision() != rev+2 {
		t.Fatalf("revision %d after a device enrolled and another relabelled, want %d", f.Read().Revision(), rev+2)
	}
	if fired(ws) {
		t.Fatal("a device enrolled, or another's labels changed, fired the judgement watch")
	}
	np := intent.BuiltinClasses()["network-policy"]
	np.UnreachableAfter *= 2
	apply(PutClassType, &PutClassRequest{Class: &np, Time: 4})
	if !fired(ws) {
		t.Fatal("a class written did not fire the judgement watch")
	}
	ws = watch()
	apply(PutIntentType, &PutIntentRequest{Intent: &intent.Intent{Name: "motd", Resources: []intent.Resource{{ID: "m", Type: "file", Spec: map[string]any{"path": "/etc/motd", "content": "hi"}}}}, Time: 5})
	if !fired(ws) {
		t.Fatal("an intent written did not fire the judgement watch")
	}
	var snap bytes.Buffer
	if _, err := f.Snapshot().WriteTo(&snap); err != nil {
		t.Fatal(err)
	}
	g := newTestFSM(t, 0)
	ws = memdb.NewWatchSet()
	if err := g.Read().WatchJudgement(ws); err != nil {
		t.Fatal(err)
	}
	if err := g.Restore(bytes.NewReader(snap.Bytes())); err != nil {
		t.Fatal(err)
	}
	if !fired(ws) {
		t.Fatal("a restore did not fire the judgement watch")
	}
}

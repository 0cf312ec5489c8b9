package fsm

import (
	"errors"
	"testing"
	"time"

	"github.com/meteor-edge/meteor/fsm/intent"
)

func ptr[T any](v T) *T { return &v }

// TestClasses writes, replaces and deletes classes, and checks that the
// classes in effect are the built-in set with the written ones in place,
// that the audit log has each change, and that a snapshot keeps them.
func TestClasses(t *testing.T) {
	f := newTestFSM(t, 0)
	builtin := intent.BuiltinClasses()
	np := builtin["network-policy"]
	np.ProbeInterval = 5 * time.Second
	fast := intent.Class{Name: "pos-critical", PullInterval: time.Minute, ProbeInterval: 10 * time.Second, ReportInterval: time.Hour,
		RetryBase: time.Second, RetryMax: 10 * time.Second, UnreachableAfter: time.Minute, ProgressDeadline: 2 * time.Minute}
	alice := Actor{Name: "alice", Accessor: "a1"}
	for i, req := range []PutClassRequest{
		{Class: &np, Actor: alice, Time: 1},
		{Class: &fast, Actor: alice, Time: 2},
	} {
		if res := f.Apply(uint64(i+1), mustEncode(t, PutClassType, &req)); res.Err != nil {
			t.Fatalf("put %s: %v", req.Class.Name, res.Err)
		}
	}
	if res := f.Apply(3, mustEncode(t, PutClassType, &PutClassRequest{Class: &np, Time: 3})); res.Err != nil || !res.Unchanged {
		t.Errorf("putting the same class again = %+v, want unchanged", res)
	}
	bad := fast
	bad.Name, bad.ProbeInterval = "too-fast", 10*time.Millisecond
	if res := f.Apply(4, mustEncode(t, PutClassType, &PutClassRequest{Class: &bad, Time: 4})); res.Err == nil {
		t.Error("a class probing every 10ms was accepted")
	}
	eff, err := f.Read().EffectiveClasses(nil, builtin)
	if err != nil {
		t.Fatal(err)
	}
	if eff["network-policy"].ProbeInterval != 5*time.Second || eff["pos-critical"] != fast || eff["package"] != builtin["package"] || len(eff) != len(builtin)+1 {
		t.Errorf("effective classes: %+v", eff)
	}

	g := restored(t, f)
	if got, _ := g.Read().Classes(nil); len(got) != 2 || got[0].Class != np || got[1].Actor != alice {
		t.Errorf("classes after a restore: %+v", got)
	}

	if res := f.Apply(5, mustEncode(t, PutClassType, &PutClassRequest{Delete: "network-policy", Actor: alice, Time: 5})); res.Err != nil {
		t.Fatal(res.Err)
	}
	if res := f.Apply(6, mustEncode(t, PutClassType, &PutClassRequest{Delete: "package", Time: 6})); !errors.Is(res.Err, ErrNotFound) {
		t.Errorf("deleting a built-in class never written: %v, want not found", res.Err)
	}
	eff, _ = f.Read().EffectiveClasses(nil, builtin)
	if eff["network-policy"] != builtin["network-policy"] {
		t.Errorf("after the delete network-policy is %+v, want the built-in", eff["network-policy"])
	}
	recs, err := f.Read().Audit(nil, AuditQuery{})
	if err != nil {
		t.Fatal(err)
	}
	var actions []string // newest first
	for _, r := range recs {
		actions = append(actions, r.Action+" "+r.Target)
	}
	if want := []string{"delete-class class/network-policy", "put-class class/pos-critical", "put-class class/network-policy"}; !equalStrings(actions, want) {
		t.Errorf("audit %v, want %v", actions, want)
	}
}

func equalStrings(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestMaintenanceWindows writes, replaces and deletes windows: unchanged
// writes change nothing, invalid ones are refused, a snapshot keeps them.
func TestMaintenanceWindows(t *testing.T) {
	f := newTestFSM(t, 0)
	w := intent.MaintenanceWindow{Name: "store-nights", Selector: map[string]string{"role": "pos-gateway"},
		Spans: []intent.WindowSpan{{Days: 0x1f, Start: 22 * 60, End: 5 * 60}}}
	if res := f.Apply(1, mustEncode(t, PutWindowType, &PutWindowRequest{Window: &w, Time: 1})); res.Err != nil {
		t.Fatal(res.Err)
	}
	same := w
	same.Selector = map[string]string{"role": "pos-gateway"}
	if res := f.Apply(2, mustEncode(t, PutWindowType, &PutWindowRequest{Window: &same, Time: 2})); !res.Unchanged {
		t.Errorf("the same window again: %+v", res)
	}
	bad := w
	bad.Spans = nil
	if res := f.Apply(3, mustEncode(t, PutWindowType, &PutWindowRequest{Window: &bad, Time: 3})); res.Err == nil {
		t.Error("a window without spans was accepted")
	}
	g := restored(t, f)
	if got, _ := g.Read().Windows(nil); len(got) != 1 || got[0].Window.Spans[0] != w.Spans[0] || got[0].CreateIndex != 1 {
		t.Errorf("windows after a restore: %+v", got)
	}
	if res := f.Apply(4, mustEncode(t, PutWindowType, &PutWindowRequest{Delete: "store-nights", Time: 4})); res.Err != nil {
		t.Fatal(res.Err)
	}
	if got, _ := f.Read().Windows(nil); len(got) != 0 {
		t.Errorf("after the delete: %+v", got)
	}
}

package agent

import (
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/meteor-edge/meteor/wire"
)

// TestWireStates: every resource state of the agent has a wire encoding.
func TestWireStates(t *testing.T) {
	for _, state := range slices.Sorted(maps.Keys(stateRank)) {
		s, ok := wire.ParseResourceState(state)
		if !ok || s.String() != state || wireState(state) != s {
			t.Errorf("state %q: wire %v, %v", state, s, ok)
		}
	}
}

// TestReportStates: a report carries each resource's state typed and its
// detail as plain text; for a 1.0 session legacyReport moves the state to
// the start of the detail, as agents of 1.0 wrote it.
func TestReportStates(t *testing.T) {
	st := newStatusStore("dev-1")
	st.setResources(4, []ResourceStatus{
		{Key: "app/a", State: StateConverged, Effective: wire.EffectiveOK, Detail: "content and mode match"},
		{Key: "app/b", State: StateBlocked, Detail: "requires app/db, which is failed"},
		{Key: "app/c", State: StatePending},
	}, time.Unix(100, 0))
	rep := st.report()
	if !rep.States {
		t.Fatal("report without typed states")
	}
	type res struct {
		State  wire.ResourceState
		Detail string
	}
	got := func(rep *wire.Report) map[string]res {
		m := map[string]res{}
		for _, r := range rep.Resources {
			m[r.Key] = res{r.State, r.Detail}
		}
		return m
	}
	want := map[string]res{
		"app/a": {wire.StateConverged, "content and mode match"},
		"app/b": {wire.StateBlocked, "requires app/db, which is failed"},
		"app/c": {wire.StatePending, ""},
	}
	if diff := cmp.Diff(want, got(rep)); diff != "" {
		t.Errorf("typed report (-want +got):\n%s", diff)
	}

	// Through the journal's encoding and back, as the session sends it.
	var queued wire.Report
	if err := queued.Decode(rep.Append(nil)); err != nil {
		t.Fatal(err)
	}
	old := legacyReport(&queued)
	if old.States {
		t.Fatal("legacy report keeps the states flag")
	}
	want = map[string]res{
		"app/a": {wire.StateUnknown, "converged: content and mode match"},
		"app/b": {wire.StateUnknown, "blocked: requires app/db, which is failed"},
		"app/c": {wire.StateUnknown, "pending"},
	}
	if diff := cmp.Diff(want, got(old)); diff != "" {
		t.Errorf("legacy report (-want +got):\n%s", diff)
	}
	if queued.Resources[1].State != wire.StateBlocked || strings.Contains(queued.Resources[1].Detail, ":") {
		t.Errorf("legacyReport changed its input: %+v", queued.Resources[1])
	}
	if again := legacyReport(old); again != old {
		t.Error("a report of 1.0 form is rewritten again")
	}
	var dec wire.Report
	if err := dec.Decode(old.Append(nil)); err != nil || dec.States {
		t.Errorf("legacy report decodes to States %v, %v", dec.States, err)
	}
}

package cluster

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/meteor-edge/meteor/cluster/api"
)

// TestFleetStatusServedAgainUntilTheReplicaMoves: GET /v1/status is
// computed once for a state of the replica and served again while the
// replica applies nothing, and computed afresh after a command, and after
// a snapshot restore that leaves the index where it was.
func TestFleetStatusServedAgainUntilTheReplicaMoves(t *testing.T) {
	r := newRolloutRig(t, 30, func(i int) map[string]string {
		return map[string]string{"region": []string{"eu", "us"}[i%2]}
	})
	r.put(netIntent("v1", nil))
	r.fleet.react()
	h := r.api()
	handler := h.handler()
	get := func() api.FleetStatus {
		t.Helper()
		w := httptest.NewRecorder()
		handler.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/v1/status?stale=true", nil))
		if w.Code != http.StatusOK {
			t.Fatalf("GET /v1/status: %d %s", w.Code, w.Body)
		}
		var out api.FleetStatus
		if err := json.Unmarshal(w.Body.Bytes(), &out); err != nil {
			t.Fatal(err)
		}
		return out
	}
	fresh := func() api.FleetStatus {
		t.Helper()
		out, err := r.api().fleetStatus(r.p.state.Read())
		if err != nil {
			t.Fatal(err)
		}
		// Through JSON, as the handler's answers are compared.
		b, _ := json.Marshal(out)
		var back api.FleetStatus
		if err := json.Unmarshal(b, &back); err != nil {
			t.Fatal(err)
		}
		return back
	}

	first := get()
	if len(first.Intents) != 1 || first.Intents[0].Targeted != 15 || first.Intents[0].Converged != 15 {
		t.Fatalf("first answer %+v", first.Intents)
	}
	if diff := cmp.Diff(first, get()); diff != "" {
		t.Fatalf("the same state answered otherwise (-first +second):\n%s", diff)
	}
	// The answer a state gets, by identity: the one kept, or a new one.
	answer := func() *api.FleetStatus {
		t.Helper()
		out, err := h.fleetStatus(r.p.state.Read())
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	kept := answer()
	if answer() != kept {
		t.Fatal("an answer computed again for a state the replica has not moved from")
	}

	r.put(netIntent("v2", nil)) // the devices have not taken it yet
	third := get()
	if answer() == kept {
		t.Fatal("the answer kept served after a command")
	}
	if third.Index == first.Index || third.Intents[0].Converged != 0 {
		t.Fatalf("after a new revision: index %d (was %d), %+v", third.Index, first.Index, third.Intents)
	}
	if diff := cmp.Diff(fresh(), third); diff != "" {
		t.Fatalf("answer served against one computed afresh (-fresh +served):\n%s", diff)
	}

	// A restore of the state as it is: same index, another state.
	kept = answer()
	var snap bytes.Buffer
	if _, err := r.p.state.Snapshot().WriteTo(&snap); err != nil {
		t.Fatal(err)
	}
	if err := r.p.state.Restore(&snap); err != nil {
		t.Fatal(err)
	}
	if r.p.state.Read().Index() != third.Index {
		t.Fatalf("the restore moved the index to %d from %d", r.p.state.Read().Index(), third.Index)
	}
	if answer() == kept {
		t.Fatal("the answer kept served after a restore")
	}
}

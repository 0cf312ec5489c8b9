package cluster

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/meteor-edge/meteor/cluster/api"
	"github.com/meteor-edge/meteor/scheduler"
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

// TestFleetStatusComputedAgainIsFresh: GET /v1/status computed again from
// the parts of the devices whose records have not changed is the answer
// computed afresh, through changes of records alone (some devices
// reporting, failing, acknowledging), of intents, and of rollouts.
func TestFleetStatusComputedAgainIsFresh(t *testing.T) {
	const n = 60
	r := newRolloutRig(t, n, func(i int) map[string]string {
		return map[string]string{"region": []string{"eu", "us"}[i%2], "site-type": []string{"store", "store", "kiosk"}[i%3]}
	})
	failing := map[string]bool{}
	r.fleet.behave = func(device string, res *scheduler.Resource) (bool, string, string) {
		if failing[device] {
			return false, "", "disk full"
		}
		return true, "ok", ""
	}
	h := r.api()
	check := func(step string) {
		t.Helper()
		read := r.p.state.Read()
		got, err := h.fleetStatus(read)
		if err != nil {
			t.Fatal(err)
		}
		want, err := r.api().fleetStatus(read)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Fatalf("%s: computed again against afresh (-fresh +again):\n%s", step, diff)
		}
	}
	rng := rand.New(rand.NewPCG(7, 12))
	value := 0
	put := func(rollout map[string]any) {
		value++
		r.put(netIntent(fmt.Sprintf("v%d", value), rollout))
	}
	put(nil)
	check("first intent")
	r.fleet.react()
	check("converged")
	for step := range 40 {
		switch rng.IntN(5) {
		case 0:
			put(nil)
		case 1:
			put(map[string]any{"waves": []any{
				map[string]any{"name": "pilot", "count": int64(3)},
				map[string]any{"name": "rest", "percent": "100%"},
			}})
		case 2:
			if err := r.w.pass(context.Background()); err != nil {
				t.Fatal(err)
			}
		default:
			// A few devices change what they report; the others keep
			// their records.
			for range 3 {
				id := r.fleet.ids[rng.IntN(n)]
				failing[id] = !failing[id]
			}
		}
		check(fmt.Sprintf("step %d, before the fleet acts", step))
		r.fleet.react()
		r.clock.advance(time.Second)
		check(fmt.Sprintf("step %d", step))
	}
}

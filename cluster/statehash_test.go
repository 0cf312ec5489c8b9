package cluster

import (
	"encoding/json"
	"net/http"
	"testing"

	"github.com/meteor-edge/meteor/fsm"
)

// TestStateHashEndpoint: every server answers GET /v1/internal/state-hash
// with the hash of its whole state and the index it reflects; converged
// servers agree, and a write changes the hash.
func TestStateHashEndpoint(t *testing.T) {
	c := newTestCluster(t, 3, nil)
	c.propose(simpleIntent("motd", "v1"))
	want := c.waitConverged()
	get := func(s *Server) fsm.StateHash {
		t.Helper()
		resp := internalGet(t, s, s, "/v1/internal/state-hash")
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("%s: status %d", s.ID(), resp.StatusCode)
		}
		var st fsm.StateHash
		if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
			t.Fatal(err)
		}
		return st
	}
	var first fsm.StateHash
	for i, s := range c.alive() {
		st := get(s)
		if st.Hash != want || st.Index == 0 || st.Revision == 0 {
			t.Fatalf("%s: %+v, want hash %s at a non-zero index and revision", s.ID(), st, want)
		}
		if i > 0 && st != first {
			t.Fatalf("%s: %+v, %s: %+v", s.ID(), st, c.alive()[0].ID(), first)
		}
		first = st
	}
	c.propose(simpleIntent("motd", "v2"))
	if again := c.waitConverged(); again == want {
		t.Fatal("a write left the state hash unchanged")
	}
	if st := get(c.alive()[0]); st.Index <= first.Index || st.Revision <= first.Revision {
		t.Fatalf("after a write: %+v, before: %+v", st, first)
	}
}

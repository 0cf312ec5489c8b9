package cluster

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/hashicorp/go-hclog"

	"github.com/meteor-edge/meteor/cluster/api"
	"github.com/meteor-edge/meteor/fsm"
	"github.com/meteor-edge/meteor/scheduler"
)

// fakeLeader is a leaderNode that leads, or not, and whose reads are
// confirmed, or not, as the test says.
type fakeLeader struct {
	leads   bool
	readErr error
}

func (f *fakeLeader) IsLeader() bool   { return f.leads }
func (f *fakeLeader) leaderID() string { return "s1" }
func (f *fakeLeader) leaderHTTP() (string, string, error) {
	return "", "", ErrNoLeader
}
func (f *fakeLeader) ConsistentRead(context.Context) error { return f.readErr }
func (f *fakeLeader) proposeRaw(context.Context, fsm.MessageType, []byte) (fsm.ApplyResult, uint64, error) {
	return fsm.ApplyResult{}, 0, ErrNotLeader
}
func (f *fakeLeader) proposeBatch(_ context.Context, cmds []batchCommand, _ []*api.Error, outs chan<- indexedOutcome) {
	for i := range cmds {
		outs <- indexedOutcome{i: i, batchOutcome: batchOutcome{err: ErrNotLeader}}
	}
}

// TestHTTPAPIWithoutCluster serves the API from an in-memory state
// machine: a write goes through the proposer, a stale read is served from
// the replica, a linearizable read only once the leader confirmed it, and
// a linearizable read that reaches a follower with no leader known is
// refused as retryable.
func TestHTTPAPIWithoutCluster(t *testing.T) {
	p := newLocalProposer(t)
	cfg := DefaultConfig()
	cfg.NodeID = "s1"
	node := &fakeLeader{leads: true}
	h := &httpAPI{
		cfg: &cfg, logger: hclog.NewNullLogger(), clock: SystemClock{}, state: p.state, propose: p,
		node: node, owners: fixedOwners{{ID: "s1", Region: "eu"}}, planner: scheduler.NewPlanner(),
	}
	handler := h.handler()
	do := func(method, path string, body []byte) *httptest.ResponseRecorder {
		t.Helper()
		w := httptest.NewRecorder()
		handler.ServeHTTP(w, httptest.NewRequest(method, path, bytes.NewReader(body)))
		return w
	}

	w := do(http.MethodPut, "/v1/intents/motd", putDoc(t, simpleIntent("motd", "v1")))
	if w.Code != http.StatusOK {
		t.Fatalf("put: %d %s", w.Code, w.Body)
	}
	if n := p.committed(fsm.PutIntentType); n != 1 {
		t.Fatalf("%d intent writes committed, want 1", n)
	}

	for _, tc := range []struct {
		path, consistency string
	}{
		{"/v1/intents/motd?stale=true", "stale"},
		{"/v1/intents/motd", "linearizable"},
	} {
		w = do(http.MethodGet, tc.path, nil)
		var got api.IntentResponse
		if err := json.Unmarshal(w.Body.Bytes(), &got); err != nil || w.Code != http.StatusOK {
			t.Fatalf("get %s: %d %s", tc.path, w.Code, w.Body)
		}
		if got.Name != "motd" || got.Revision != 1 || w.Header().Get(api.HeaderConsistency) != tc.consistency || w.Header().Get(api.HeaderLeader) != "s1" {
			t.Fatalf("get %s: %+v, headers %v", tc.path, got, w.Header())
		}
	}

	node.readErr = ErrNotReady
	if w = do(http.MethodGet, "/v1/intents/motd", nil); w.Code != http.StatusServiceUnavailable || w.Header().Get("Retry-After") == "" {
		t.Fatalf("read before the leader is ready: %d %s", w.Code, w.Body)
	}
	node.leads = false
	if w = do(http.MethodGet, "/v1/intents/motd", nil); w.Code != http.StatusServiceUnavailable {
		t.Fatalf("linearizable read on a follower with no leader: %d %s", w.Code, w.Body)
	}
	if w = do(http.MethodGet, "/v1/intents/motd?stale=true", nil); w.Code != http.StatusOK {
		t.Fatalf("stale read on a follower: %d %s", w.Code, w.Body)
	}
}

// TestWrongMethodIs405: a path the API serves for other methods answers
// 405 naming them in Allow; a path it does not serve answers 404; a bad
// ?stale is a 400.
func TestWrongMethodIs405(t *testing.T) {
	p := newLocalProposer(t)
	cfg := DefaultConfig()
	cfg.NodeID = "s1"
	h := &httpAPI{
		cfg: &cfg, logger: hclog.NewNullLogger(), clock: SystemClock{}, state: p.state, propose: p,
		node: &fakeLeader{leads: true}, owners: fixedOwners{{ID: "s1", Region: "eu"}}, planner: scheduler.NewPlanner(),
	}
	handler := h.handler()
	for _, tc := range []struct {
		method, path string
		code         int
		allow        string
	}{
		{http.MethodPost, "/v1/intents", http.StatusMethodNotAllowed, "GET"},
		{http.MethodPost, "/v1/intents/motd", http.StatusMethodNotAllowed, "GET, PUT, DELETE"},
		{http.MethodDelete, "/v1/status", http.StatusMethodNotAllowed, "GET"},
		{http.MethodGet, "/v1/rollouts/motd/approve", http.StatusMethodNotAllowed, "POST"},
		{http.MethodGet, "/v1/nothing-here", http.StatusNotFound, ""},
		// A read's consistency is never guessed.
		{http.MethodGet, "/v1/intents?stale=maybe", http.StatusBadRequest, ""},
	} {
		w := httptest.NewRecorder()
		handler.ServeHTTP(w, httptest.NewRequest(tc.method, tc.path, nil))
		if w.Code != tc.code || w.Header().Get("Allow") != tc.allow {
			t.Errorf("%s %s: %d, Allow %q (%s); want %d, Allow %q", tc.method, tc.path, w.Code, w.Header().Get("Allow"), w.Body, tc.code, tc.allow)
		}
		if tc.code == http.StatusMethodNotAllowed && !strings.Contains(w.Body.String(), api.CodeMethod) {
			t.Errorf("%s %s: body %s, want code %s", tc.method, tc.path, w.Body, api.CodeMethod)
		}
	}
}

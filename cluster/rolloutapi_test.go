package cluster

import (
	"context"
	"encoding/hex"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/meteor-edge/meteor/cluster/api"
	"github.com/meteor-edge/meteor/fsm"
	"github.com/meteor-edge/meteor/fsm/acl"
	"github.com/meteor-edge/meteor/scheduler"
)

// fakeFleet registers devices in a cluster and reports for them through
// the state machine, as their sessions and owners would: no agents.
type fakeFleet struct {
	t   *testing.T
	s   *Server
	seq atomic.Uint64
}

func (f *fakeFleet) apply(mt fsm.MessageType, req any) {
	f.t.Helper()
	res, _, err := f.s.apply(context.Background(), mt, req)
	if err == nil {
		err = res.Err
	}
	if err != nil {
		f.t.Fatal(err)
	}
}

// add registers a device with these labels, connected to a server that
// is not in the cluster, acknowledging revision acked.
func (f *fakeFleet) add(id string, labels map[string]string, acked uint64) {
	f.t.Helper()
	f.apply(fsm.DeviceSessionType, &fsm.DeviceSessionRequest{
		ID: id, Labels: labels, SessionID: "sess-" + id, Server: "elsewhere", Conn: "c",
		Connected: true, AckedRevision: acked, Time: time.Now().UnixNano(),
	})
}

// converge has device id acknowledge the cluster's revision and report
// its whole desired state applied, the effective probes agreeing.
func (f *fakeFleet) converge(id string) {
	f.report(id, scheduler.StatusConverged, func(r *scheduler.Resource) fsm.ResourceStatus {
		return fsm.ResourceStatus{Key: r.Key, AppliedDigest: hex.EncodeToString(r.Digest[:]), AppliedRevision: r.Revision, Effective: "ok", State: "converged"}
	})
}

// report has device id acknowledge the cluster's revision and report each
// resource of its desired state as status says, with the device status
// given.
func (f *fakeFleet) report(id, deviceStatus string, status func(*scheduler.Resource) fsm.ResourceStatus) {
	f.t.Helper()
	read := f.s.State().Read()
	rec, err := read.Device(nil, id)
	if err != nil {
		f.t.Fatal(err)
	}
	desired, err := f.s.devicePlanner().Desired(read, id, f.s.config.recordSelection(rec))
	if err != nil {
		f.t.Fatal(err)
	}
	var rs []fsm.ResourceStatus
	for _, r := range desired.Resources {
		rs = append(rs, status(r))
	}
	f.add(id, rec.Labels, desired.Revision)
	f.apply(fsm.StatusBatchType, &fsm.StatusBatchRequest{Owner: "test", Transitions: []fsm.StatusTransition{{
		Device: id, Seq: f.seq.Add(1), Time: time.Now().UnixNano(), Revision: desired.Revision,
		Status: deviceStatus, Full: true, Resources: rs,
	}}})
}

func putYAML(t *testing.T, cl *api.Client, name, doc string) *api.WriteResponse {
	t.Helper()
	res, err := cl.PutIntent(context.Background(), name, []byte(doc), nil)
	if err != nil {
		t.Fatalf("put %s: %v", name, err)
	}
	return res
}

// netDoc is an intent of one file for region eu, with an optional rollout
// block (YAML, indented by two).
func netDoc(content, rollout string) string {
	doc := "name: store-net\nselector: {region: eu}\nresources:\n  - id: motd\n    type: file\n    spec: {path: /etc/motd, content: " + content + "}\n"
	if rollout != "" {
		doc += "rollout:\n" + rollout
	}
	return doc
}

func rolloutOf(t *testing.T, cl *api.Client, name string) *api.RolloutStatus {
	t.Helper()
	st, err := cl.Rollout(context.Background(), name, api.ReadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// TestRolloutStatusAndControls walks a rollout through the API: the status
// of an intent without a rollout, of one waiting for approval (the
// numbers scheduler.Decide gives on the same state), each control and its
// refusals, the events and the history of what happened, and undo.
func TestRolloutStatusAndControls(t *testing.T) {
	c := newTestCluster(t, 1, nil)
	s := c.waitLeader()
	f := &fakeFleet{t: t, s: s}
	cl := client(s)
	ctx := context.Background()
	eu := map[string]string{"region": "eu"}
	var ids []string
	for i := range 6 {
		id := fmt.Sprintf("dev-%d", i)
		ids = append(ids, id)
		f.add(id, eu, 0)
	}
	v1 := putYAML(t, cl, "store-net", netDoc("v1", "")).Revision
	for _, id := range ids {
		f.converge(id)
	}
	st := rolloutOf(t, cl, "store-net")
	if st.State != api.RolloutCompleted || st.Reason != noRolloutReason || st.Revision != v1 ||
		st.Counts != (api.RolloutCounts{Targeted: 6, Released: 6, Acknowledged: 6, Converged: 6}) {
		t.Fatalf("status without a rollout: %+v", st)
	}

	// Revision 2: a pilot of one device, then the rest after approval.
	v2 := putYAML(t, cl, "store-net", netDoc("v2", "  waves:\n    - {name: pilot, count: 1}\n    - {name: rest, percent: 100, approval: true}\n")).Revision
	var pilot string
	waitFor(t, 10*time.Second, func() error {
		rels, err := s.State().Read().Releases("store-net")
		if err != nil || len(rels) != 1 {
			return fmt.Errorf("releases %v, %v", rels, err)
		}
		pilot = rels[0].Device
		return nil
	})
	f.converge(pilot)
	waitFor(t, 10*time.Second, func() error {
		if st := rolloutOf(t, cl, "store-net"); st.State != api.RolloutWaitingApproval {
			return fmt.Errorf("state %s (%s)", st.State, st.WaitingFor)
		}
		return nil
	})
	// The status is what the worker decides on, from the same state.
	read := s.State().Read()
	ro, err := read.Rollout(nil, "store-net")
	if err != nil {
		t.Fatal(err)
	}
	in, err := judgeRollout(read, &s.config, s.devicePlanner(), ro, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	d := scheduler.Decide(in)
	st = rolloutOf(t, cl, "store-net")
	if st.Counts != apiCounts(d.Counts) || st.WaitingFor != d.Waiting || st.Revision != v2 || st.StableRevision != v1 || st.Wave != 2 {
		t.Fatalf("status %+v, decision counts %+v waiting %q", st, d.Counts, d.Waiting)
	}
	wantWaves := []api.RolloutWave{
		{Number: 1, Name: "pilot", State: scheduler.WaveDone, Devices: 1, Released: 1, Converged: 1},
		{Number: 2, Name: "rest", State: scheduler.WaveWaitingApproval, Devices: 5, Approval: true, WaitingFor: d.Waiting},
	}
	if diff := cmp.Diff(wantWaves, st.Waves); diff != "" {
		t.Fatalf("waves (-want +got):\n%s", diff)
	}
	for i, v := range d.Waves {
		if w := st.Waves[i]; w.State != v.State || w.Devices != v.Devices || w.Released != v.Released || w.Converged != v.Converged || w.Failed != v.Failed {
			t.Errorf("wave %d: %+v, decision %+v", i+1, w, v)
		}
	}
	if !strings.Contains(st.WaitingFor, "meteor rollout approve store-net --wave 2") {
		t.Errorf("waiting for %q: no command to approve", st.WaitingFor)
	}
	list, err := cl.Rollouts(ctx, api.ReadOptions{})
	if err != nil || len(list.Rollouts) != 1 || list.Rollouts[0].Counts != st.Counts {
		t.Fatalf("rollout list %+v, %v", list, err)
	}

	control := func(action string, body string) (int, api.Error) {
		t.Helper()
		code, e, _ := call(t, s, "", http.MethodPost, "/v1/rollouts/store-net/"+action, []byte(body), nil)
		return code, e
	}
	expect := func(action, body string, wantCode int, wantMsg string) {
		t.Helper()
		code, e := control(action, body)
		if code != wantCode || !strings.Contains(e.Message, wantMsg) {
			t.Fatalf("%s %s: %d %q, want %d with %q", action, body, code, e.Message, wantCode, wantMsg)
		}
	}
	expect("approve", `{"wave": 1}`, http.StatusConflict, "wave 1 has started already")
	expect("approve", `{"wave": 3}`, http.StatusConflict, "waves 1 to 2")
	expect("approve", `{"wave": -1}`, http.StatusBadRequest, "count from 1")
	expect("pause", `{"wave": 2}`, http.StatusBadRequest, "only approve takes a wave")
	expect("approve", `{"revision": 1}`, http.StatusConflict, fmt.Sprintf("is of revision %d, not 1", v2))
	expect("approve", `{"bogus": 1}`, http.StatusBadRequest, "unknown field")
	if code, e, _ := call(t, s, "", http.MethodPost, "/v1/rollouts/nothing/pause", nil, nil); code != http.StatusNotFound {
		t.Fatalf("pause of an unknown intent: %d %s", code, e.Message)
	}

	st, err = cl.ControlRollout(ctx, "store-net", api.RolloutPause, api.RolloutControl{Reason: "store opening hours"})
	if err != nil || st.State != api.RolloutPaused || st.Reason != "paused by system: store opening hours" {
		t.Fatalf("pause: %+v, %v", st, err)
	}
	if st, err = cl.ControlRollout(ctx, "store-net", api.RolloutResume, api.RolloutControl{}); err != nil || st.State == api.RolloutPaused {
		t.Fatalf("resume: %+v, %v", st, err)
	}
	if st, err = cl.ControlRollout(ctx, "store-net", api.RolloutApprove, api.RolloutControl{}); err != nil || st.Waves[1].ApprovedBy != "system" {
		t.Fatalf("approve: %+v, %v", st, err)
	}
	// The worker releases the rest.
	waitFor(t, 10*time.Second, func() error {
		if st := rolloutOf(t, cl, "store-net"); st.Counts.Released != 6 {
			return fmt.Errorf("%d released", st.Counts.Released)
		}
		return nil
	})
	if st, err = cl.ControlRollout(ctx, "store-net", api.RolloutAbort, api.RolloutControl{Reason: "wrong motd"}); err != nil || st.State != api.RolloutAborted || st.Counts.Released != 0 {
		t.Fatalf("abort: %+v, %v", st, err)
	}
	for _, action := range []string{"pause", "abort", "approve"} {
		expect(action, "", http.StatusConflict, "is aborted: nothing to "+action)
	}

	// The timeline has every decision, each of revision 2.
	evs, err := cl.RolloutEvents(ctx, "store-net", api.ReadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var kinds []string
	for _, e := range evs.Events {
		if e.Revision != v2 {
			t.Errorf("event %+v of revision %d", e, e.Revision)
		}
		if e.Kind != fsm.EventSample && (len(kinds) == 0 || kinds[len(kinds)-1] != e.Kind) {
			kinds = append(kinds, e.Kind)
		}
	}
	for _, k := range []string{fsm.EventStarted, fsm.EventRelease, fsm.EventWaiting, fsm.EventPaused, fsm.EventResumed, fsm.EventApproved, fsm.EventAborted} {
		if !slices.Contains(kinds, k) {
			t.Errorf("no %s event in %v", k, kinds)
		}
	}
	if evs, err := cl.RolloutEvents(ctx, "store-net", api.ReadOptions{Revision: v1}); err != nil || len(evs.Events) != 0 {
		t.Fatalf("events of revision %d: %+v, %v", v1, evs, err)
	}

	// Undo goes back to the stable revision of the aborted rollout, as a
	// new revision without a rollout block.
	undo, err := cl.UndoRollout(ctx, "store-net", api.UndoRequest{})
	if err != nil {
		t.Fatal(err)
	}
	v3 := undo.Revision
	if undo.FromRevision != v1 || v3 <= v2 || undo.Unchanged {
		t.Fatalf("undo: %+v", undo)
	}
	got, err := cl.GetIntent(ctx, "store-net", api.ReadOptions{})
	if err != nil || got.Revision != v3 || got.Intent.Resources[0].Spec["content"] != "v1" {
		t.Fatalf("intent after undo: %+v, %v", got, err)
	}
	if st := rolloutOf(t, cl, "store-net"); st.State != api.RolloutCompleted || st.Revision != v3 {
		t.Fatalf("status after undo: %+v", st)
	}
	// With no rollout left, undo goes back to the revision before: 2's
	// document, rolled out by its own rollout block again.
	undo, err = cl.UndoRollout(ctx, "store-net", api.UndoRequest{})
	if err != nil || undo.FromRevision != v2 {
		t.Fatalf("second undo: %+v, %v", undo, err)
	}
	v4 := undo.Revision
	waitFor(t, 10*time.Second, func() error {
		if st := rolloutOf(t, cl, "store-net"); st.Revision != v4 || st.Counts.Released != 1 {
			return fmt.Errorf("status %+v", st)
		}
		return nil
	})
	if code, e, _ := call(t, s, "", http.MethodPost, "/v1/rollouts/store-net/undo", fmt.Appendf(nil, `{"to_revision": %d}`, v4), nil); code != http.StatusConflict || !strings.Contains(e.Message, "current revision") {
		t.Fatalf("undo to the current revision: %d %s", code, e.Message)
	}
	if code, e, _ := call(t, s, "", http.MethodPost, "/v1/rollouts/store-net/undo", []byte(`{"to_revision": 999}`), nil); code != http.StatusBadRequest {
		t.Fatalf("undo to a future revision: %d %s", code, e.Message)
	}

	hist, err := cl.RolloutHistory(ctx, "store-net", api.ReadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	type line struct {
		Rev     uint64
		Current bool
		State   string
	}
	var lines []line
	for _, r := range hist.Revisions {
		if r.Rollout == nil || r.AppliedBy != "system" {
			t.Fatalf("history entry %+v", r)
		}
		lines = append(lines, line{r.Revision, r.Current, r.Rollout.State})
	}
	want := []line{{v1, false, api.RolloutCompleted}, {v2, false, api.RolloutAborted}, {v3, false, api.RolloutCompleted}, {v4, true, api.RolloutProgressing}}
	if diff := cmp.Diff(want, lines); diff != "" {
		t.Fatalf("history (-want +got):\n%s", diff)
	}
	if r := hist.Revisions[1].Rollout; r.Reason != "aborted by system: wrong motd" || r.EndedAt == nil {
		t.Errorf("outcome of revision %d: %+v", v2, r)
	}
	if r := hist.Revisions[0].Rollout; r.Reason != noRolloutReason {
		t.Errorf("outcome of revision %d: %+v", v1, r)
	}

	// An intent without a rollout has nothing to pause.
	putYAML(t, cl, "plain", "name: plain\nresources:\n  - {id: a, type: sim, spec: {value: 1}}\n")
	if code, e, _ := call(t, s, "", http.MethodPost, "/v1/rollouts/plain/pause", nil, nil); code != http.StatusConflict || !strings.Contains(e.Message, "has no rollout") {
		t.Fatalf("pause without a rollout: %d %s", code, e.Message)
	}
}

// TestRolloutUndoRefusals: undo of an intent whose revision before is a
// deletion, to a revision the history no longer keeps, and of an intent
// with no earlier revision, each say why.
func TestRolloutUndoRefusals(t *testing.T) {
	c := newTestCluster(t, 1, nil)
	s := c.waitLeader()
	cl := client(s)
	ctx := context.Background()
	undo := func(name string, to uint64) (int, string) {
		t.Helper()
		code, e, _ := call(t, s, "", http.MethodPost, "/v1/rollouts/"+name+"/undo", fmt.Appendf(nil, `{"to_revision": %d}`, to), nil)
		return code, e.Message
	}

	first := putYAML(t, cl, "once", "name: once\nresources:\n  - {id: a, type: sim, spec: {value: 1}}\n").Revision
	if code, msg := undo("once", 0); code != http.StatusConflict || !strings.Contains(msg, "nothing before it") {
		t.Fatalf("undo of a first revision: %d %s", code, msg)
	}
	if code, msg := undo("missing", 0); code != http.StatusNotFound {
		t.Fatalf("undo of an unknown intent: %d %s", code, msg)
	}

	gone := putYAML(t, cl, "gone", "name: gone\nresources:\n  - {id: a, type: sim, spec: {value: 1}}\n").Revision
	del, err := cl.DeleteIntent(ctx, "gone", nil)
	if err != nil {
		t.Fatal(err)
	}
	putYAML(t, cl, "gone", "name: gone\nresources:\n  - {id: a, type: sim, spec: {value: 2}}\n")
	if code, msg := undo("gone", 0); code != http.StatusConflict || !strings.Contains(msg, fmt.Sprintf("deletion at revision %d", del.Revision)) {
		t.Fatalf("undo onto a deletion: %d %s", code, msg)
	}
	if code, msg := undo("gone", del.Revision); code != http.StatusConflict || !strings.Contains(msg, "deleted") {
		t.Fatalf("undo to a deleted revision: %d %s", code, msg)
	}
	if code, msg := undo("gone", first); code != http.StatusNotFound || !strings.Contains(msg, "did not exist") {
		t.Fatalf("undo to before the intent existed: %d %s", code, msg)
	}
	// Back to the first version of gone, by revision.
	res, err := cl.UndoRollout(ctx, "gone", api.UndoRequest{ToRevision: gone})
	if err != nil || res.FromRevision != gone {
		t.Fatalf("undo to revision %d: %+v, %v", gone, res, err)
	}

	// Past the history limit a revision is compacted.
	var revs []uint64
	for i := range fsm.DefaultHistoryLimit + 2 {
		revs = append(revs, putYAML(t, cl, "busy", fmt.Sprintf("name: busy\nresources:\n  - {id: a, type: sim, spec: {value: %d}}\n", i)).Revision)
	}
	if code, msg := undo("busy", revs[0]); code != http.StatusNotFound || !strings.Contains(msg, "compacted") || !strings.Contains(msg, "meteor rollout history busy") {
		t.Fatalf("undo to a compacted revision: %d %s", code, msg)
	}
}

// TestRolloutACL: a read-only token reads rollouts but may not approve,
// pause, undo or plan (403), and changes nothing; an operator may.
func TestRolloutACL(t *testing.T) {
	c := newACLCluster(t, 1, nil)
	s := c.waitLeader()
	admin := tokenClient(s, c.admin)
	putYAML(t, admin, "store-net", netDoc("v1", ""))
	putYAML(t, admin, "store-net", netDoc("v2", "  waves:\n    - {count: 1, approval: true}\n"))
	reader := c.token(api.CreateTokenRequest{Name: "viewer", Policy: acl.PolicyRead}).Secret
	operator := c.token(api.CreateTokenRequest{Name: "ops", Policy: acl.PolicyOperator}).Secret
	waitFor(t, 10*time.Second, func() error {
		if st := rolloutOf(t, tokenClient(s, reader), "store-net"); st.State != api.RolloutWaitingApproval {
			return fmt.Errorf("state %s", st.State)
		}
		return nil
	})
	before := s.State().Read().Revision()
	for _, path := range []string{"/v1/rollouts/store-net/approve", "/v1/rollouts/store-net/pause", "/v1/rollouts/store-net/abort", "/v1/rollouts/store-net/undo"} {
		code, e, _ := call(t, s, reader, http.MethodPost, path, nil, nil)
		if code != http.StatusForbidden || !strings.Contains(e.Message, "write-intent") {
			t.Errorf("POST %s with a read token: %d %s", path, code, e.Message)
		}
	}
	if code, e, _ := call(t, s, reader, http.MethodPost, "/v1/plan", []byte(netDoc("v3", "")), nil); code != http.StatusForbidden {
		t.Errorf("plan with a read token: %d %s", code, e.Message)
	}
	for _, ep := range []struct{ method, path string }{
		{"GET", "/v1/rollouts"}, {"GET", "/v1/rollouts/store-net"}, {"GET", "/v1/rollouts/store-net/history"},
		{"GET", "/v1/rollouts/store-net/events"}, {"POST", "/v1/rollouts/store-net/approve"},
		{"POST", "/v1/rollouts/store-net/resume"}, {"POST", "/v1/rollouts/store-net/undo"}, {"POST", "/v1/plan"},
	} {
		if code, _, _ := call(t, s, "", ep.method, ep.path, nil, nil); code != http.StatusUnauthorized {
			t.Errorf("%s %s without a token: %d, want 401", ep.method, ep.path, code)
		}
	}
	// An operator whose scope does not cover the intent's selector may
	// not steer its rollout.
	usOnly := c.token(api.CreateTokenRequest{Name: "us-ops", Policy: acl.PolicyOperator, Scope: map[string]string{"region": "us"}}).Secret
	if code, e, _ := call(t, s, usOnly, http.MethodPost, "/v1/rollouts/store-net/approve", nil, nil); code != http.StatusForbidden || !strings.Contains(e.Message, "scope") {
		t.Errorf("approve by an operator scoped elsewhere: %d %s", code, e.Message)
	}
	if got := s.State().Read().Revision(); got != before {
		t.Fatalf("refused requests moved the revision from %d to %d", before, got)
	}
	st, err := tokenClient(s, operator).ControlRollout(context.Background(), "store-net", api.RolloutApprove, api.RolloutControl{})
	if err != nil || st.Waves[0].ApprovedBy == "" || !strings.HasPrefix(st.Waves[0].ApprovedBy, "ops") {
		t.Fatalf("approve by an operator: %+v, %v", st, err)
	}
	if _, err := tokenClient(s, operator).UndoRollout(context.Background(), "store-net", api.UndoRequest{}); err != nil {
		t.Fatalf("undo by an operator: %v", err)
	}
	if _, err := tokenClient(s, operator).Plan(context.Background(), []byte(netDoc("v3", "")), api.ReadOptions{}); err != nil {
		t.Fatalf("plan by an operator: %v", err)
	}
}

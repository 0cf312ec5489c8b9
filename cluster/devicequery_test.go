package cluster

import (
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/hashicorp/go-hclog"

	"github.com/meteor-edge/meteor/cluster/api"
	"github.com/meteor-edge/meteor/fsm"
	"github.com/meteor-edge/meteor/scheduler"
)

// TestDeviceQueries runs every filter and grouping of GET /v1/devices on
// a known fleet of 40 devices, 30 of them in the intent's region, in the
// middle of a rollout whose pilot of 5 holds revision 2 while the others
// keep revision 1; one device fails every apply, one took three attempts,
// one is out of contact. Each answer is checked against what the test
// worked out from the fleet it built.
func TestDeviceQueries(t *testing.T) {
	r := newRolloutRig(t, 40, func(i int) map[string]string {
		region := "eu"
		if i >= 30 {
			region = "us"
		}
		site := "store"
		if i%10 == 0 {
			site = "kiosk"
		}
		return map[string]string{"region": region, "site-type": site}
	})
	r.fleet.behave = func(device string, _ *scheduler.Resource) (bool, string, string) {
		if device == "dev-003" {
			return false, "unknown", "exit status 1"
		}
		return true, "ok", ""
	}
	r.fleet.attempts = map[string]uint32{"dev-004": 3}
	rollout := map[string]any{"waves": []any{
		map[string]any{"name": "pilot", "count": int64(5)},
		map[string]any{"name": "rest", "percent": "100%", "approval": true},
	}, "onFailure": map[string]any{"threshold": "100%"}}
	v1 := r.put(netIntent("v1", nil)) // everywhere at once
	r.tick()
	v2 := r.put(netIntent("v2", rollout))
	r.until(20, "the pilot of revision 2", func(ro *fsm.RolloutRecord) bool { return ro.State == fsm.RolloutWaitingApproval }, nil)
	r.fleet.react()
	pilot := r.fleet.holding("net", v2)
	if len(pilot) != 5 {
		t.Fatalf("%d devices hold revision 2, want the pilot of 5", len(pilot))
	}
	// dev-012 goes out of contact.
	r.fleet.commit(fsm.DeviceSessionBatchType, &fsm.DeviceSessionBatchRequest{Sessions: []fsm.DeviceSessionRequest{
		{ID: "dev-012", Labels: r.fleet.labels["dev-012"], SessionID: "s-dev-012", Server: "s1", Connected: false, Time: 3},
	}})
	r.fleet.commit(fsm.StatusBatchType, &fsm.StatusBatchRequest{Owner: "s1", Transitions: []fsm.StatusTransition{
		{Device: "dev-012", Time: 4, Status: scheduler.StatusUnreachable, Reason: "no contact for 9m (default allows 5m)"},
	}})

	handler := r.api().handler()
	get := func(query string, want int) *api.DeviceList {
		t.Helper()
		w := httptest.NewRecorder()
		handler.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/v1/devices?stale=true&"+query, nil))
		if w.Code != want {
			t.Fatalf("?%s: %d %s, want %d", query, w.Code, w.Body, want)
		}
		var out api.DeviceList
		if want == http.StatusOK {
			if err := json.Unmarshal(w.Body.Bytes(), &out); err != nil {
				t.Fatal(err)
			}
		} else {
			out.Next = w.Body.String() // the error, for the caller to read
		}
		return &out
	}
	ids := func(l *api.DeviceList) []string {
		var out []string
		for _, d := range l.Devices {
			out = append(out, d.ID)
		}
		return out
	}
	eu, notPilot := []string{}, []string{}
	for i, id := range r.fleet.ids {
		if i < 30 {
			eu = append(eu, id)
			if !pilot[id] {
				notPilot = append(notPilot, id)
			}
		}
	}

	// The questions.
	all := get("intent=net", http.StatusOK)
	if diff := cmp.Diff(eu, ids(all)); diff != "" || all.Matched != 30 {
		t.Errorf("intent=net: %d matched (-want +got):\n%s", all.Matched, diff)
	}
	for _, d := range all.Devices {
		want := v2
		if !pilot[d.ID] {
			want = v1
		}
		if d.Intent == nil || d.Intent.Revision != want || d.Intent.CurrentRevision != v2 {
			t.Errorf("%s on net: %+v, want revision %d of %d", d.ID, d.Intent, want, v2)
		}
	}
	if got := ids(get("intent=net&intent_state=not-released", http.StatusOK)); !cmp.Equal(got, notPilot) {
		t.Errorf("not released: %v, want %v", got, notPilot)
	}
	wantFailed := []string(nil)
	if pilot["dev-003"] {
		wantFailed = []string{"dev-003"}
	}
	if got := ids(get("intent=net&intent_state=failed", http.StatusOK)); !cmp.Equal(got, wantFailed) {
		t.Errorf("failed on net: %v, want %v", got, wantFailed)
	}
	notConverged := get("intent=net&intent_state=not-converged", http.StatusOK)
	if want := len(notPilot) + len(wantFailed); notConverged.Matched != want {
		t.Errorf("not converged on net: %v, want %d devices", ids(notConverged), want)
	}
	if got := ids(get("intent=net&retried=true", http.StatusOK)); !cmp.Equal(got, []string{"dev-004"}) {
		t.Errorf("retried: %v, want [dev-004]", got)
	}

	// Old and new content side by side, by applied digest.
	// A device's desired state holds the content of the revision
	// released to it.
	digests := map[uint64]string{}
	for _, id := range eu {
		d, err := r.fleet.planner.Desired(r.p.state.Read(), id, r.fleet.labels[id])
		if err != nil {
			t.Fatal(err)
		}
		digests[d.Resources[0].Revision] = hex.EncodeToString(d.Resources[0].Digest[:])
	}
	digest := func(rev uint64) string {
		t.Helper()
		if digests[rev] == "" {
			t.Fatalf("no device holds revision %d", rev)
		}
		return digests[rev]
	}
	wantGroups := map[string]int{}
	for _, id := range eu {
		switch {
		case id == "dev-003":
			wantGroups["none"]++
		case pilot[id]:
			wantGroups[digest(v2)]++
		default:
			wantGroups[digest(v1)]++
		}
	}
	grouped := get("intent=net&resource=net/policy&group_by=applied-digest", http.StatusOK)
	gotGroups := map[string]int{}
	for _, g := range grouped.Groups {
		gotGroups[g.Value] = g.Count
		if len(g.Sample) != min(g.Count, groupSample) {
			t.Errorf("group %s of %d names %d devices", g.Value, g.Count, len(g.Sample))
		}
	}
	if diff := cmp.Diff(wantGroups, gotGroups); diff != "" || grouped.Matched != 30 || len(grouped.Devices) != 0 {
		t.Errorf("grouped by applied digest, %d matched (-want +got):\n%s", grouped.Matched, diff)
	}
	if got := get("resource=net/policy&applied_digest="+digest(v2)[:8], http.StatusOK); got.Matched != wantGroups[digest(v2)] {
		t.Errorf("applied digest %s…: %v", digest(v2)[:8], ids(got))
	}
	if got := ids(get("resource=net/policy&applied_digest=none", http.StatusOK)); !cmp.Equal(got, []string{"dev-003"}) {
		t.Errorf("never applied: %v", got)
	}

	// Record filters, and group counts that agree with them.
	for _, tc := range []struct {
		query string
		want  []string
	}{
		{"status=unreachable", []string{"dev-012"}},
		{"reason=NO+CONTACT", []string{"dev-012"}},
		{"connected=false", []string{"dev-012"}},
		{"selector=region=eu,site-type=kiosk", []string{"dev-000", "dev-010", "dev-020"}},
		// The devices outside the region have no resources: nothing for
		// them to acknowledge.
		{"acked_below=1", r.fleet.ids[30:]},
	} {
		if got := ids(get(tc.query, http.StatusOK)); !cmp.Equal(got, tc.want) {
			t.Errorf("?%s: %v, want %v", tc.query, got, tc.want)
		}
	}
	everyone := get("", http.StatusOK)
	var pilotAcked uint64
	for _, d := range everyone.Devices {
		if pilot[d.ID] {
			pilotAcked = d.AckedRevision
		}
	}
	var below []string
	for _, d := range everyone.Devices {
		if d.AckedRevision < pilotAcked {
			below = append(below, d.ID)
		}
	}
	if got := ids(get(fmt.Sprintf("acked_below=%d", pilotAcked), http.StatusOK)); len(below) == 0 || !cmp.Equal(got, below) {
		t.Errorf("acknowledged below %d: %v, want %v", pilotAcked, got, below)
	}
	byRegion := get("group_by=region", http.StatusOK)
	if diff := cmp.Diff([]api.DeviceGroup{
		{Value: "eu", Count: 30, Sample: []string{"dev-000", "dev-001", "dev-002", "dev-003", "dev-004"}},
		{Value: "us", Count: 10, Sample: []string{"dev-030", "dev-031", "dev-032", "dev-033", "dev-034"}},
	}, byRegion.Groups); diff != "" {
		t.Errorf("by region (-want +got):\n%s", diff)
	}
	if got := get("region=us&owner=s2", http.StatusOK); got.Matched != 10 {
		t.Errorf("region us owned by s2: %v", ids(got))
	}
	byStatus := get("intent=net&group_by=status", http.StatusOK)
	sum := 0
	for _, g := range byStatus.Groups {
		sum += g.Count
		if n := get("intent=net&status="+g.Value, http.StatusOK).Matched; n != g.Count {
			t.Errorf("status %s: group of %d, filter of %d", g.Value, g.Count, n)
		}
	}
	if sum != 30 {
		t.Errorf("statuses of net's devices add up to %d, want 30", sum)
	}

	// Pages: every device once, in ID order.
	var paged []string
	for after, pages := "", 0; ; pages++ {
		q := "limit=7"
		if after != "" {
			q += "&after=" + after
		}
		page := get(q, http.StatusOK)
		if len(page.Devices) > 7 || page.Matched != 40-len(paged) {
			t.Fatalf("page %d: %d devices, %d matched", pages, len(page.Devices), page.Matched)
		}
		paged = append(paged, ids(page)...)
		if page.Next == "" {
			break
		}
		after = page.Next
	}
	if !cmp.Equal(paged, r.fleet.ids) {
		t.Errorf("pages gave %v", paged)
	}

	// Refusals name the parameter.
	for _, tc := range []struct {
		query string
		code  int
		says  string
	}{
		{"site-type=store", http.StatusBadRequest, `unknown query parameter \"site-type\"`},
		{"status=sleepy", http.StatusBadRequest, "status="},
		{"intent_state=failed", http.StatusBadRequest, "intent_state needs intent"},
		{"resource=net/policy&applied_digest=xyz", http.StatusBadRequest, "applied_digest="},
		{"group_by=colour", http.StatusBadRequest, "group_by="},
		{"group_by=applied-digest", http.StatusBadRequest, "needs resource"},
		{"limit=0", http.StatusBadRequest, "limit="},
		{"connected=maybe", http.StatusBadRequest, "connected="},
		{"status=failed&status=stuck", http.StatusBadRequest, "given 2 times"},
		{"intent=nope", http.StatusNotFound, "nope"},
	} {
		if got := get(tc.query, tc.code); !strings.Contains(got.Next, tc.says) {
			t.Errorf("?%s: %s, want it to say %q", tc.query, got.Next, tc.says)
		}
	}
	if !slices.IsSorted(r.fleet.ids) {
		t.Fatal("the fleet's IDs are not in order; the page check assumes they are")
	}
}

// api is the HTTP API of server s1 of two (s2 in the us) over the rig's
// state machine, taking the labels devices report.
func (r *rolloutRig) api() *httpAPI {
	cfg := DefaultConfig()
	cfg.NodeID, cfg.TrustReportedLabels = "s1", true
	return &httpAPI{
		cfg: &cfg, logger: hclog.NewNullLogger(), clock: SystemClock{}, state: r.p.state, propose: r.p,
		node: &fakeLeader{leads: true}, owners: fixedOwners{{ID: "s1", Region: "eu"}, {ID: "s2", Region: "us"}}, planner: scheduler.NewPlanner(),
	}
}

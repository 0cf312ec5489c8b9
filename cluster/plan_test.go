package cluster

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/meteor-edge/meteor/cluster/api"
	"github.com/meteor-edge/meteor/fsm/intent"
	"github.com/meteor-edge/meteor/scheduler"
)

// TestPlanNamesWhatTheApplyChanges: on a small fleet the plan names
// exactly the devices and resources whose delta is not empty once the
// document is applied; the same document again plans no change and its
// put makes no revision; the waves of a document with a rollout block are
// the waves the rollout releases; conflicts name the other intent.
func TestPlanNamesWhatTheApplyChanges(t *testing.T) {
	c := newTestCluster(t, 1, nil)
	s := c.waitLeader()
	f := &fakeFleet{t: t, s: s}
	cl := client(s)
	ctx := context.Background()
	fileDoc := func(name, selector string, files ...string) string {
		doc := "name: " + name + "\nselector: " + selector + "\nresources:\n"
		for i := 0; i < len(files); i += 2 {
			doc += fmt.Sprintf("  - id: %s\n    type: file\n    spec: {path: /etc/net/%s, content: %q}\n", files[i], files[i], files[i+1])
		}
		return doc
	}
	for i := range 4 {
		f.add(fmt.Sprintf("eu-%d", i), map[string]string{"region": "eu"}, 0)
	}
	for i := range 2 {
		f.add(fmt.Sprintf("us-%d", i), map[string]string{"region": "us"}, 0)
	}
	v1 := putYAML(t, cl, "store-net", fileDoc("store-net", "{region: eu}", "a", "1", "b", "2")).Revision
	putYAML(t, cl, "banner", fileDoc("banner", "{region: us}", "c", "banner"))
	for _, id := range []string{"eu-0", "eu-1", "eu-2", "us-0", "us-1"} { // eu-3 never reported
		f.converge(id)
	}

	v2doc := fileDoc("store-net", `{region: "*"}`, "a", "1", "b", "3", "c", "4")
	plan, err := cl.Plan(ctx, []byte(v2doc), api.ReadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(plan.Intents) != 1 {
		t.Fatalf("plan: %+v", plan)
	}
	p := plan.Intents[0]
	if p.Action != api.PlanUpdate || p.CurrentRevision != v1 || p.Targeted != 6 || p.Changed != 6 || p.Rollout != intent.StrategyImmediate {
		t.Fatalf("plan: %+v", p)
	}
	planned := map[string][]string{}
	for _, d := range p.Devices {
		for _, ch := range d.Changes {
			planned[d.ID] = append(planned[d.ID], ch.Action+" "+ch.Key)
		}
	}
	wantConflicts := []api.PlanConflict{{Key: "store-net/c", OtherIntent: "banner", OtherKey: "banner/c", Target: "file /etc/net/c", Devices: 2, Sample: []string{"us-0", "us-1"}}}
	if diff := cmp.Diff(wantConflicts, p.Conflicts); diff != "" {
		t.Errorf("conflicts (-want +got):\n%s", diff)
	}

	if res := putYAML(t, cl, "store-net", v2doc); res.Unchanged {
		t.Fatalf("put of a changed document: %+v", res)
	}
	// What each device then has to do: its delta against what it reports.
	read := s.State().Read()
	devs, err := read.Devices(nil)
	if err != nil {
		t.Fatal(err)
	}
	actual := map[string][]string{}
	for _, d := range devs {
		desired, err := s.devicePlanner().Desired(read, d.ID, s.config.recordSelection(d))
		if err != nil {
			t.Fatal(err)
		}
		var have []scheduler.Applied
		reported := map[string]bool{}
		for _, r := range d.Resources {
			var dg []byte
			if dg, err = hex.DecodeString(r.AppliedDigest); err != nil {
				t.Fatal(err)
			}
			var a scheduler.Applied
			a.Key = r.Key
			copy(a.Digest[:], dg)
			have = append(have, a)
			reported[r.Key] = true
		}
		delta := scheduler.ComputeDelta(desired, have)
		for _, r := range delta.Upserts {
			action := api.ChangeAdd
			if reported[r.Key] {
				action = api.ChangeChange
			}
			actual[d.ID] = append(actual[d.ID], action+" "+r.Key)
		}
		for _, k := range delta.Deletes {
			actual[d.ID] = append(actual[d.ID], api.ChangeRemove+" "+k)
		}
	}
	if diff := cmp.Diff(actual, planned); diff != "" {
		t.Fatalf("planned changes differ from what the apply changes (-apply +plan):\n%s", diff)
	}

	// The same document again: nothing to change, and no new revision.
	plan, err = cl.Plan(ctx, []byte(v2doc), api.ReadOptions{})
	if err != nil || plan.Intents[0].Action != api.PlanUnchanged || plan.Intents[0].Changed != 0 {
		t.Fatalf("plan of the current document: %+v, %v", plan, err)
	}
	cur := s.State().Read().Revision()
	res, err := cl.PutIntent(ctx, "store-net", []byte(v2doc), nil)
	if err != nil || !res.Unchanged || s.State().Read().Revision() != cur {
		t.Fatalf("put of the current document: %+v, %v (cluster revision %d -> %d)", res, err, cur, s.State().Read().Revision())
	}

	// With a rollout block: the plan's first wave is what the rollout
	// releases first.
	for _, id := range []string{"eu-0", "eu-1", "eu-2", "eu-3", "us-0", "us-1"} {
		f.converge(id)
	}
	v3doc := strings.Replace(v2doc, `content: "4"`, `content: "5"`, 1) + "rollout:\n  waves:\n    - {name: pilot, count: 2}\n    - {name: rest, percent: 100, approval: true}\n"
	plan, err = cl.Plan(ctx, []byte(v3doc), api.ReadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	p = plan.Intents[0]
	if diff := cmp.Diff([]api.PlanWave{{Number: 1, Name: "pilot", Devices: 2}, {Number: 2, Name: "rest", Devices: 4}}, p.Waves); diff != "" {
		t.Fatalf("waves (-want +got):\n%s", diff)
	}
	var pilots []string
	for _, d := range p.Devices {
		if d.Wave == 1 {
			pilots = append(pilots, d.ID)
		}
		if len(d.Changes) != 1 || d.Changes[0].Key != "store-net/c" || d.Changes[0].Action != api.ChangeChange {
			t.Errorf("device %s: changes %+v, want store-net/c changed", d.ID, d.Changes)
		}
	}
	putYAML(t, cl, "store-net", v3doc)
	waitFor(t, 10*time.Second, func() error {
		rels, err := s.State().Read().Releases("store-net")
		if err != nil {
			return err
		}
		var released []string
		for _, r := range rels {
			released = append(released, r.Device)
		}
		if !slices.Equal(released, pilots) {
			return fmt.Errorf("released %v, the plan's pilot wave %v", released, pilots)
		}
		return nil
	})
}

// TestPlanRejectsBadDocuments: invalid documents are 400s naming the field
// and the line, in a stream too.
func TestPlanRejectsBadDocuments(t *testing.T) {
	c := newTestCluster(t, 1, nil)
	s := c.waitLeader()
	for _, tc := range []struct{ doc, want string }{
		{netDoc("v1", "  waves:\n    - {percent: 200}\n"), "rollout.waves[0].percent"},
		{netDoc("v1", "  window: 25:00-99:00\n"), "rollout.window"},
		{"name: a\nresources:\n  - {id: x, type: sim, spec: {value: 1}}\n---\nname: b\nresources:\n  - {id: x, type: file, spec: {path: relative, content: x}}\n", "resources[0].spec.path"},
	} {
		code, e, _ := call(t, s, "", http.MethodPost, "/v1/plan", []byte(tc.doc), nil)
		if code != http.StatusBadRequest || !strings.Contains(e.Message, tc.want) || !strings.Contains(e.Message, "(line ") {
			t.Errorf("plan of %q: %d %q, want 400 naming %s and its line", tc.doc, code, e.Message, tc.want)
		}
	}
}

// TestPlanApplyUnchangedThroughFollower: a put of an unchanged document
// through a follower (forwarded to the leader as a command) says so.
func TestPlanApplyUnchangedThroughFollower(t *testing.T) {
	c := newTestCluster(t, 3, nil)
	fl := c.follower()
	doc := netDoc("v1", "")
	first := putYAML(t, client(fl), "store-net", doc)
	again := putYAML(t, client(fl), "store-net", doc)
	if first.Unchanged || !again.Unchanged || again.Revision != first.Revision {
		t.Fatalf("puts: %+v then %+v", first, again)
	}
	b, _ := json.Marshal(again)
	if !strings.Contains(string(b), `"unchanged":true`) {
		t.Fatalf("write response %s", b)
	}
}

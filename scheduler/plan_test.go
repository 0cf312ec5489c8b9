package scheduler

import (
	"encoding/hex"
	"fmt"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/meteor-edge/meteor/fsm"
	"github.com/meteor-edge/meteor/fsm/intent"
)

// planDigest returns the hex digest the planner sends for resource id of a
// document.
func planDigest(t *testing.T, doc *intent.Intent, id string) string {
	t.Helper()
	rs, err := EncodeResources(doc.Name, doc)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rs {
		if r.Resource.ID == id {
			return hex.EncodeToString(r.Digest[:])
		}
	}
	t.Fatalf("%s has no resource %s", doc.Name, id)
	return ""
}

// reportedApplied is a device record reporting these key -> digest as applied.
func reportedApplied(id string, digests map[string]string) *fsm.DeviceRecord {
	rec := &fsm.DeviceRecord{ID: id}
	for k, d := range digests {
		rec.Resources = append(rec.Resources, fsm.ResourceStatus{Key: k, AppliedDigest: d, Effective: "ok"})
	}
	return rec
}

// desiredOf is the desired state holding these documents' resources.
func desiredOf(t *testing.T, docs ...*intent.Intent) *DesiredState {
	t.Helper()
	d := &DesiredState{}
	for _, doc := range docs {
		rs, err := EncodeResources(doc.Name, doc)
		if err != nil {
			t.Fatal(err)
		}
		d.Resources = append(d.Resources, rs...)
	}
	return d
}

// TestEncodeResourcesIsThePlanners: the digests a plan compares are those
// the planner sends devices.
func TestEncodeResourcesIsThePlanners(t *testing.T) {
	f, _ := fsm.New(fsm.DefaultConfig())
	doc := fileIntent("net", nil, map[string]string{"a": "1", "b": "2"})
	put(t, f, 1, doc)
	rec, err := f.Read().Intent(nil, "net")
	if err != nil {
		t.Fatal(err)
	}
	want, err := NewPlanner().Resources(f.Read(), rec, rec.Revision, nil)
	if err != nil {
		t.Fatal(err)
	}
	got, err := EncodeResources("net", rec.Intent)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(want) {
		t.Fatalf("%d resources, want %d", len(got), len(want))
	}
	for i := range want {
		if got[i].Key != want[i].Key || got[i].Digest != want[i].Digest {
			t.Errorf("resource %d: %s %x, planner %s %x", i, got[i].Key, got[i].Digest, want[i].Key, want[i].Digest)
		}
	}
}

// TestPlanChanges: each device's changes are the difference between the
// new document and what the device reports applied: added, changed and
// removed keys; a device that holds the new version already is not
// listed; one the new selector drops loses its resources; a device the
// intent never selected is not targeted.
func TestPlanChanges(t *testing.T) {
	eu := map[string]string{"region": "eu"}
	cur := fileIntent("net", map[string]string{"region": "*"}, map[string]string{"a": "1", "b": "2"})
	doc := fileIntent("net", eu, map[string]string{"a": "1", "b": "3", "c": "4"})
	dA, dB, dB3, dC := planDigest(t, cur, "a"), planDigest(t, cur, "b"), planDigest(t, doc, "b"), planDigest(t, doc, "c")
	in := PlanInput{Doc: doc, Current: cur, Stable: cur, Devices: []PlanTarget{
		// Holds the current revision: b changes, c is added.
		{ID: "d1", Labels: eu, Record: reportedApplied("d1", map[string]string{"net/a": dA, "net/b": dB}), Desired: desiredOf(t, cur)},
		// Holds the new revision already.
		{ID: "d2", Labels: eu, Record: reportedApplied("d2", map[string]string{"net/a": dA, "net/b": dB3, "net/c": dC}), Desired: desiredOf(t, cur)},
		// New to the intent: every resource is added.
		{ID: "d3", Labels: eu},
		// In another region: the new selector drops it.
		{ID: "d4", Labels: map[string]string{"region": "us"}, Record: reportedApplied("d4", map[string]string{"net/a": dA}), Desired: desiredOf(t, cur)},
		// Selected by neither.
		{ID: "d5", Labels: map[string]string{"site": "x"}},
	}}
	p, err := Plan(in)
	if err != nil {
		t.Fatal(err)
	}
	want := &IntentPlan{Action: PlanUpdate, Rollout: intent.StrategyImmediate, Targeted: 4, Devices: []DevicePlan{
		{ID: "d1", Wave: -1, Changes: []ResourceChange{
			{Key: "net/b", Action: ChangeChange, DigestFrom: dB, DigestTo: dB3},
			{Key: "net/c", Action: ChangeAdd, DigestTo: dC, DigestDesired: "none"},
		}},
		{ID: "d3", Wave: -1, Changes: []ResourceChange{
			{Key: "net/a", Action: ChangeAdd, DigestTo: dA, DigestDesired: "none"},
			{Key: "net/b", Action: ChangeAdd, DigestTo: dB3, DigestDesired: "none"},
			{Key: "net/c", Action: ChangeAdd, DigestTo: dC, DigestDesired: "none"},
		}},
		{ID: "d4", Wave: -1, Changes: []ResourceChange{
			{Key: "net/a", Action: ChangeRemove, DigestFrom: dA},
		}},
	}}
	if diff := cmp.Diff(want, p); diff != "" {
		t.Fatalf("plan (-want +got):\n%s", diff)
	}

	// The same document again changes nothing.
	in.Current = doc
	p, err = Plan(in)
	if err != nil {
		t.Fatal(err)
	}
	if p.Action != PlanUnchanged || len(p.Devices) != 0 || len(p.Waves) != 0 {
		t.Fatalf("plan of the current document: %+v", p)
	}
	// A new intent is a create.
	in.Current, in.Stable = nil, nil
	if p, err = Plan(in); err != nil || p.Action != PlanCreate || p.Targeted != 3 {
		t.Fatalf("plan of a new intent: %+v, %v", p, err)
	}
}

// TestPlanWaves: with a rollout block each device falls in the wave Assign
// puts it in, and the waves count them; a device holding a release of a
// rollout in progress is targeted although neither document selects it.
func TestPlanWaves(t *testing.T) {
	doc := fileIntent("net", map[string]string{"region": "eu"}, map[string]string{"a": "1"})
	doc.Rollout = map[string]any{"waves": []any{
		map[string]any{"name": "pilot", "count": 1},
		map[string]any{"name": "kiosks", "selector": map[string]any{"site-type": "kiosk"}},
		"100%",
	}}
	if err := doc.Validate(); err != nil {
		t.Fatal(err)
	}
	var devs []PlanTarget
	var targets []Target
	for i := range 20 {
		labels := map[string]string{"region": "eu"}
		if i%5 == 0 {
			labels["site-type"] = "kiosk"
		}
		id := fmt.Sprintf("d%02d", i)
		devs = append(devs, PlanTarget{ID: id, Labels: labels})
		targets = append(targets, Target{ID: id, Labels: labels})
	}
	devs = append(devs, PlanTarget{ID: "d99", Labels: map[string]string{"region": "us"}, Released: true})
	targets = append(targets, Target{ID: "d99", Labels: map[string]string{"region": "us"}})
	p, err := Plan(PlanInput{Doc: doc, Devices: devs})
	if err != nil {
		t.Fatal(err)
	}
	spec, _ := doc.RolloutSpec()
	assign := Assign("net", spec, targets)
	if p.Rollout != intent.StrategyWaves || p.Targeted != 21 {
		t.Fatalf("rollout %s, targeted %d", p.Rollout, p.Targeted)
	}
	if diff := cmp.Diff([]PlanWave{{"pilot", 1}, {"kiosks", 4}, {"wave-3", 16}}, p.Waves); diff != "" {
		t.Fatalf("waves (-want +got):\n%s", diff)
	}
	got := map[string]int{}
	for _, d := range p.Devices {
		got[d.ID] = d.Wave
	}
	for i, tg := range targets {
		if tg.ID == "d99" {
			if _, ok := got[tg.ID]; ok {
				t.Errorf("d99 holds nothing and is not selected: it changes nothing, yet is listed")
			}
			continue
		}
		if got[tg.ID] != assign[i] {
			t.Errorf("%s in wave %d, Assign says %d", tg.ID, got[tg.ID], assign[i])
		}
	}
}

// TestPlanConflicts: a resource managing a file another intent manages on
// the same devices is a conflict, whether the other is committed or in
// the same plan (which replaces the committed one); exec resources name
// no target.
func TestPlanConflicts(t *testing.T) {
	doc := &intent.Intent{Name: "net", Resources: []intent.Resource{
		{ID: "motd", Type: "file", Spec: map[string]any{"path": "/etc/motd", "content": "x"}},
		{ID: "tls", Type: "certificate", Spec: map[string]any{"certPath": "/etc/tls/c.pem", "keyPath": "/etc/tls/k.pem", "cert": "-", "key": "-"}},
		{ID: "run", Type: "exec", Spec: map[string]any{"check": []any{"true"}, "apply": []any{"true"}}},
		{ID: "light", Type: "sim", Spec: map[string]any{"value": 1}},
	}}
	other := &intent.Intent{Name: "banner", Resources: []intent.Resource{
		{ID: "m", Type: "file", Spec: map[string]any{"path": "/etc/motd", "content": "y"}},
		{ID: "key", Type: "file", Spec: map[string]any{"path": "/etc/tls/k.pem", "content": "y"}},
		{ID: "run", Type: "exec", Spec: map[string]any{"check": []any{"true"}, "apply": []any{"true"}}},
	}}
	sims := &intent.Intent{Name: "sims", Resources: []intent.Resource{{ID: "light", Type: "sim", Spec: map[string]any{"value": 2}}}}
	var devs []PlanTarget
	for i := range 7 {
		devs = append(devs, PlanTarget{ID: fmt.Sprintf("d%d", i), Desired: desiredOf(t, other)})
	}
	p, err := Plan(PlanInput{Doc: doc, Devices: devs, Others: map[string]*intent.Intent{"sims": sims}})
	if err != nil {
		t.Fatal(err)
	}
	sample := []string{"d0", "d1", "d2", "d3", "d4"}
	want := []Conflict{
		{Key: "net/light", OtherIntent: "sims", OtherKey: "sims/light", Target: "sim light", Devices: 7, Sample: sample},
		{Key: "net/motd", OtherIntent: "banner", OtherKey: "banner/m", Target: "file /etc/motd", Devices: 7, Sample: sample},
		{Key: "net/tls", OtherIntent: "banner", OtherKey: "banner/key", Target: "file /etc/tls/k.pem", Devices: 7, Sample: sample},
	}
	if diff := cmp.Diff(want, p.Conflicts); diff != "" {
		t.Fatalf("conflicts (-want +got):\n%s", diff)
	}
	// The plan's own new document of banner replaces the committed one.
	fixed := &intent.Intent{Name: "banner", Resources: []intent.Resource{
		{ID: "m", Type: "file", Spec: map[string]any{"path": "/etc/banner", "content": "y"}},
	}}
	p, err = Plan(PlanInput{Doc: doc, Devices: devs, Others: map[string]*intent.Intent{"banner": fixed}})
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Conflicts) != 0 {
		t.Fatalf("conflicts with a replaced intent: %+v", p.Conflicts)
	}
}

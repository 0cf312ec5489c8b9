package scheduler

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/meteor-edge/meteor/fsm"
	"github.com/meteor-edge/meteor/fsm/intent"
	"github.com/meteor-edge/meteor/wire"
)

func put(t *testing.T, f *fsm.FSM, idx uint64, in *intent.Intent) {
	t.Helper()
	b, err := fsm.Encode(fsm.PutIntentType, &fsm.PutIntentRequest{Intent: in})
	if err != nil {
		t.Fatal(err)
	}
	if res := f.Apply(idx, b); res.Err != nil {
		t.Fatal(res.Err)
	}
}

func fileIntent(name string, sel map[string]string, files map[string]string) *intent.Intent {
	in := &intent.Intent{Name: name, Selector: sel}
	for id, content := range files {
		in.Resources = append(in.Resources, intent.Resource{ID: id, Type: "file", Spec: map[string]any{"path": "/etc/" + id, "content": content}})
	}
	return in
}

func keys(rs []*Resource) []string {
	var out []string
	for _, r := range rs {
		out = append(out, r.Key)
	}
	return out
}

func TestDesiredSelectsByLabels(t *testing.T) {
	f, _ := fsm.New(fsm.DefaultConfig())
	put(t, f, 1, fileIntent("eu-net", map[string]string{"region": "eu"}, map[string]string{"a": "1", "b": "2"}))
	put(t, f, 2, fileIntent("us-net", map[string]string{"region": "us"}, map[string]string{"a": "1"}))
	put(t, f, 3, fileIntent("all", nil, map[string]string{"motd": "hi"}))
	p := NewPlanner()
	d, err := p.Desired(f.Read(), "d1", map[string]string{"region": "eu"})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"all/motd", "eu-net/a", "eu-net/b"}, keys(d.Resources)); diff != "" {
		t.Fatalf("keys (-want +got):\n%s", diff)
	}
	if d.Revision != 3 {
		t.Fatalf("revision %d", d.Revision)
	}
	r := d.Resources[1]
	if r.Digest != wire.DigestOf(r.Body) || r.Revision != 1 {
		t.Fatalf("resource %+v", r)
	}
	body, err := intent.DecodeResourceBody(r.Body)
	if err != nil || body.Intent != "eu-net" || body.Resource.ID != "a" {
		t.Fatalf("body %+v %v", body, err)
	}
}

// TestDeltaFollowsChangeNotHistory checks invariant 5: after 100 revisions
// that changed 3 of 50 resources, the delta holds exactly those 3.
func TestDeltaFollowsChangeNotHistory(t *testing.T) {
	f, _ := fsm.New(fsm.DefaultConfig())
	files := map[string]string{}
	for i := range 50 {
		files[fmt.Sprintf("r%02d", i)] = "v0"
	}
	put(t, f, 1, fileIntent("big", nil, files))
	p := NewPlanner()
	before, _ := p.Desired(f.Read(), "d1", nil)
	var applied []Applied
	for _, r := range before.Resources {
		applied = append(applied, Applied{Key: r.Key, Digest: r.Digest})
	}
	applied = append(applied, Applied{Key: "gone/x"})
	for i := range 100 {
		// Revisions churn r00..r02 and rewrite the same values for the rest.
		files[fmt.Sprintf("r%02d", i%3)] = fmt.Sprintf("v%d", i+1)
		put(t, f, uint64(i+2), fileIntent("big", nil, files))
	}
	after, _ := p.Desired(f.Read(), "d1", nil)
	d := ComputeDelta(after, applied)
	if diff := cmp.Diff([]string{"big/r00", "big/r01", "big/r02"}, keys(d.Upserts)); diff != "" {
		t.Fatalf("upserts (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"gone/x"}, d.Deletes); diff != "" {
		t.Fatalf("deletes (-want +got):\n%s", diff)
	}
	if d.Revision != 101 {
		t.Fatalf("revision %d", d.Revision)
	}
	// Holding exactly the desired state gives an empty delta.
	var all []Applied
	for _, r := range after.Resources {
		all = append(all, Applied{Key: r.Key, Digest: r.Digest})
	}
	if d := ComputeDelta(after, all); len(d.Upserts)+len(d.Deletes) != 0 {
		t.Fatalf("delta for a converged device: %+v", d)
	}
	if before.Fingerprint() == after.Fingerprint() {
		t.Fatal("fingerprint did not change with the desired state")
	}
}

func TestCompareThreeStates(t *testing.T) {
	f, _ := fsm.New(fsm.DefaultConfig())
	put(t, f, 1, fileIntent("net", nil, map[string]string{"a": "1", "b": "2", "c": "3", "d": "4", "e": "5"}))
	d, _ := NewPlanner().Desired(f.Read(), "d1", nil)
	dg := func(i int) string { return fmt.Sprintf("%x", d.Resources[i].Digest) }
	rec := &fsm.DeviceRecord{ID: "x", AckedRevision: 1, Resources: []fsm.ResourceStatus{
		{Key: "net/a", AppliedDigest: dg(0), Effective: "ok"},
		{Key: "net/b", AppliedDigest: dg(1), Effective: "mismatch", Detail: "served old"},
		{Key: "net/c", AppliedDigest: "old", LastError: "disk full"},
		{Key: "net/d", AppliedDigest: dg(3), Effective: "unknown"},
		{Key: "gone/z", AppliedDigest: "zz", Effective: "ok"},
	}}
	v := Compare(d, rec)
	got := map[string]string{}
	for _, r := range v.Resources {
		got[r.Key] = r.State
	}
	want := map[string]string{"net/a": StateConverged, "net/b": StateDrifted, "net/c": StateFailed, "net/d": StateApplied, "net/e": StateProgressing, "gone/z": StateRemoving}
	if diff := cmp.Diff(want, got); diff != "" || v.Converged {
		t.Fatalf("states (-want +got):\n%s", diff)
	}
	rec.AckedRevision = 0
	if v := Compare(d, rec); v.Resources[len(v.Resources)-1].State != StatePending {
		t.Fatalf("unacknowledged resource: %+v", v.Resources[len(v.Resources)-1])
	}
}

// TestPatchDeltaIsComputeDeltaOnTheSet: the patch from one desired state
// to another is the Delta against a device that applied exactly the first,
// on random pairs of sets (shared keys with equal and different digests,
// keys on one side only, empty sets).
func TestPatchDeltaIsComputeDeltaOnTheSet(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	set := func(rev uint64) *DesiredState {
		d := &DesiredState{Revision: rev}
		for k := range 12 {
			if rng.IntN(3) == 0 {
				continue
			}
			body := fmt.Appendf(nil, "v%d", rng.IntN(2))
			d.Resources = append(d.Resources, &Resource{Key: fmt.Sprintf("i/r%02d", k), Body: body, Digest: wire.DigestOf(body)})
		}
		return d
	}
	for range 500 {
		from, to := set(1), set(2)
		var applied []Applied
		for _, r := range from.Resources {
			applied = append(applied, Applied{Key: r.Key, Digest: r.Digest})
		}
		want, got := ComputeDelta(to, applied), PatchDelta(from, to)
		if diff := cmp.Diff(want, got); diff != "" {
			t.Fatalf("PatchDelta(%v, %v) (-ComputeDelta +PatchDelta):\n%s", setKeys(from), setKeys(to), diff)
		}
		if fp := (&DesiredState{Resources: patched(from, got)}).Fingerprint(); fp != to.Fingerprint() {
			t.Fatalf("patching %v gives another set than %v", setKeys(from), setKeys(to))
		}
	}
}

func setKeys(d *DesiredState) []string {
	var out []string
	for _, r := range d.Resources {
		out = append(out, r.Key+"@"+string(r.Body))
	}
	return out
}

// patched applies d to from, as an agent applies a Delta to its set.
func patched(from *DesiredState, d Delta) []*Resource {
	m := map[string]*Resource{}
	for _, r := range from.Resources {
		m[r.Key] = r
	}
	for _, k := range d.Deletes {
		delete(m, k)
	}
	for _, r := range d.Upserts {
		m[r.Key] = r
	}
	var out []*Resource
	for _, k := range slices.Sorted(maps.Keys(m)) {
		out = append(out, m[k])
	}
	return out
}

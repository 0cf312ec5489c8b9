package intent

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestMatches(t *testing.T) {
	device := map[string]string{"region": "eu-west", "site": "store-42", "role": "pos-gateway", "link": "cellular"}
	for _, tc := range []struct {
		name     string
		selector map[string]string
		labels   map[string]string
		want     bool
	}{
		{"nil selector", nil, device, true},
		{"empty selector", map[string]string{}, nil, true},
		{"one label", map[string]string{"role": "pos-gateway"}, device, true},
		{"all labels", map[string]string{"region": "eu-west", "site": "store-42"}, device, true},
		{"other value", map[string]string{"region": "us-east"}, device, false},
		{"one of two differs", map[string]string{"region": "eu-west", "site": "store-7"}, device, false},
		{"missing label", map[string]string{"floor": "2"}, device, false},
		{"no labels", map[string]string{"role": "pos-gateway"}, nil, false},
		{"wildcard", map[string]string{"link": "*"}, device, true},
		{"wildcard needs the label", map[string]string{"rack": "*"}, device, false},
		{"wildcard matches empty value", map[string]string{"rack": "*"}, map[string]string{"rack": ""}, true},
		{"empty value", map[string]string{"rack": ""}, map[string]string{"rack": ""}, true},
		{"empty value needs the label", map[string]string{"rack": ""}, device, false},
		{"case matters", map[string]string{"region": "EU-WEST"}, device, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := &Intent{Selector: tc.selector}
			if got := in.Matches(tc.labels); got != tc.want {
				t.Errorf("Matches(%v) with selector %v = %v, want %v", tc.labels, tc.selector, got, tc.want)
			}
		})
	}
}

func TestDigest(t *testing.T) {
	base := func() Resource {
		return Resource{
			ID:       "ruleset",
			Type:     TypeFile,
			Spec:     map[string]any{"path": "/etc/a", "content": "x", "mode": "0644", "n": int64(7)},
			Requires: []string{"b", "a"},
		}
	}
	d := base()
	want := d.Digest()
	if len(want) != 64 {
		t.Fatalf("Digest() = %q, want 64 hex digits", want)
	}
	for _, tc := range []struct {
		name   string
		modify func(r *Resource)
		same   bool
	}{
		{"other id", func(r *Resource) { r.ID = "other" }, true},
		{"default class spelled out", func(r *Resource) { r.Class = DefaultClass }, true},
		{"default drift spelled out", func(r *Resource) { r.Drift = DriftCorrect }, true},
		{"requires reordered", func(r *Resource) { r.Requires = []string{"a", "b"} }, true},
		{"empty probe", func(r *Resource) { r.Probe = map[string]any{} }, true},
		{"int for int64", func(r *Resource) { r.Spec["n"] = 7 }, true},
		{"type", func(r *Resource) { r.Type = TypeSim }, false},
		{"class", func(r *Resource) { r.Class = "config" }, false},
		{"drift", func(r *Resource) { r.Drift = DriftReport }, false},
		{"spec", func(r *Resource) { r.Spec["content"] = "y" }, false},
		{"number", func(r *Resource) { r.Spec["n"] = 7.5 }, false},
		{"number as string", func(r *Resource) { r.Spec["n"] = "7" }, false},
		{"probe", func(r *Resource) { r.Probe = map[string]any{"type": "content"} }, false},
		{"requires", func(r *Resource) { r.Requires = []string{"a"} }, false},
	} {
		r := base()
		tc.modify(&r)
		if got := r.Digest(); (got == want) != tc.same {
			t.Errorf("%s: digest %s, base %s; want same = %v", tc.name, got, want, tc.same)
		}
	}
}

func TestClone(t *testing.T) {
	orig := &Intent{
		Name:     "clone",
		Selector: map[string]string{"role": "pos"},
		Resources: []Resource{{
			ID: "a", Type: TypeSim, Class: "config",
			Spec:     map[string]any{"value": "x", "nested": map[string]any{"list": []any{int64(1), map[string]any{"k": "v"}}}},
			Probe:    map[string]any{"driftRate": 0.5},
			Requires: []string{"b"},
		}, {ID: "b", Type: TypeSim, Spec: map[string]any{"value": true}}},
		Rollout: map[string]any{"waves": []any{int64(5), int64(100)}},
	}
	c := orig.Clone()
	if diff := cmp.Diff(orig, c); diff != "" {
		t.Fatalf("Clone differs (-orig +clone):\n%s", diff)
	}
	// Changing every level of the clone leaves the original alone.
	snapshot := orig.Clone()
	c.Selector["role"] = "kiosk"
	c.Resources[0].Spec["nested"].(map[string]any)["list"].([]any)[1].(map[string]any)["k"] = "changed"
	c.Resources[0].Probe["driftRate"] = 1.0
	c.Resources[0].Requires[0] = "z"
	c.Rollout["waves"].([]any)[0] = int64(50)
	c.Resources = append(c.Resources[:1], Resource{ID: "new"})
	if diff := cmp.Diff(snapshot, orig); diff != "" {
		t.Errorf("changing the clone changed the original (-before +after):\n%s", diff)
	}
	if got := (*Intent)(nil).Clone(); got != nil {
		t.Errorf("nil.Clone() = %v, want nil", got)
	}
	if got := (&Intent{Name: "x"}).Clone(); got.Selector != nil || got.Resources != nil || got.Rollout != nil {
		t.Errorf("Clone made nil fields non-nil: %+v", got)
	}
}

func TestEffectiveDefaults(t *testing.T) {
	for _, tc := range []struct {
		r                    Resource
		wantClass, wantDrift string
	}{
		{Resource{}, DefaultClass, DriftCorrect},
		{Resource{Class: "network-policy", Drift: DriftTolerate}, "network-policy", DriftTolerate},
	} {
		if got := tc.r.EffectiveClass(); got != tc.wantClass {
			t.Errorf("EffectiveClass() = %q, want %q", got, tc.wantClass)
		}
		if got := tc.r.EffectiveDrift(); got != tc.wantDrift {
			t.Errorf("EffectiveDrift() = %q, want %q", got, tc.wantDrift)
		}
	}
}

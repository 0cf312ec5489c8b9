package intent

import (
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func sim(id string, requires ...string) Resource {
	return Resource{ID: id, Type: TypeSim, Spec: map[string]any{"value": 1}, Requires: requires}
}

func TestValidateCycles(t *testing.T) {
	for _, tc := range []struct {
		name      string
		resources []Resource
		want      string // "" for valid
	}{
		{"chain", []Resource{sim("a"), sim("b", "a"), sim("c", "b", "a")}, ""},
		{"diamond", []Resource{sim("a"), sim("b", "a"), sim("c", "a"), sim("d", "b", "c")}, ""},
		{"forward references", []Resource{sim("d", "b", "c"), sim("c", "a"), sim("b", "a"), sim("a")}, ""},
		{"two", []Resource{sim("a", "b"), sim("b", "a")}, `resources[0].requires: cycle a -> b -> a`},
		{"three", []Resource{sim("a", "b"), sim("b", "c"), sim("c", "a")}, `resources[0].requires: cycle a -> b -> c -> a`},
		{"behind a tail", []Resource{sim("x", "a"), sim("a", "b"), sim("b", "a")}, `resources[1].requires: cycle a -> b -> a`},
		{"second component", []Resource{sim("a"), sim("b", "c"), sim("c", "d"), sim("d", "b")}, `resources[1].requires: cycle b -> c -> d -> b`},
		{"self", []Resource{sim("a", "a")}, `resources[0].requires[0]: resource cannot require itself`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := &Intent{Name: "cycles", Resources: tc.resources}
			got := ""
			if err := in.Validate(); err != nil {
				got = err.Error()
			}
			want := ""
			if tc.want != "" {
				want = `intent "cycles": ` + tc.want
			}
			if got != want {
				t.Errorf("Validate() = %q, want %q", got, want)
			}
		})
	}
}

// TestValidateBuilt covers intents built in code: no lines, problems in
// field order, and values Parse would never produce.
func TestValidateBuilt(t *testing.T) {
	valid := func() *Intent {
		return &Intent{Name: "built", Resources: []Resource{sim("a")}}
	}
	for _, tc := range []struct {
		name   string
		modify func(in *Intent)
		want   *ValidationError
	}{
		{"valid", func(in *Intent) {}, nil},
		{"field order", func(in *Intent) {
			in.Name = ""
			in.Resources[0].Type = "nope"
		}, &ValidationError{Field: "name", Msg: "required"}},
		{"resource order", func(in *Intent) {
			in.Resources = []Resource{sim("a"), {ID: "b", Type: TypeFile, Spec: map[string]any{"path": "x", "mode": 420}}}
		}, &ValidationError{Intent: "built", Field: "resources[1].spec.path", Msg: "must be absolute"}},
		{"sorted keys", func(in *Intent) {
			in.Selector = map[string]string{"z": "bad value!", "a": "bad value!"}
		}, &ValidationError{Intent: "built", Field: "selector.a", Msg: `invalid label value: must be "*" or at most 63 of A-Z, a-z, 0-9, '.', '_' and '-', starting and ending with a letter or digit`}},
		{"unsupported value", func(in *Intent) {
			in.Rollout = map[string]any{"waves": []int{5, 100}}
		}, &ValidationError{Intent: "built", Field: "rollout.waves", Msg: "unsupported value of type []int"}},
		{"infinite", func(in *Intent) {
			in.Resources[0].Spec["value"] = math.Inf(1)
		}, &ValidationError{Intent: "built", Field: "resources[0].spec.value", Msg: "must be a finite number"}},
		{"invalid UTF-8", func(in *Intent) {
			in.Resources[0].Spec["value"] = "\xff"
		}, &ValidationError{Intent: "built", Field: "resources[0].spec.value", Msg: "must be valid UTF-8"}},
		{"long key", func(in *Intent) {
			in.Rollout = map[string]any{strings.Repeat("k", 257): 1}
		}, &ValidationError{Intent: "built", Field: `rollout.` + strings.Repeat("k", 257), Msg: "field name must be at most 256 bytes, got 257"}},
		{"encoded too large", func(in *Intent) {
			big := strings.Repeat("x", MaxStringSize)
			in.Resources = []Resource{sim("a"), sim("b"), sim("c"), sim("d")}
			for i := range in.Resources {
				in.Resources[i].Spec["value"] = big
			}
		}, &ValidationError{Intent: "built", Msg: "encoded intent is larger than 1048576 bytes"}},
		{"too many resources", func(in *Intent) {
			in.Resources = make([]Resource, MaxResources+1)
		}, &ValidationError{Intent: "built", Field: "resources", Msg: "at most 256 resources are allowed, got 257"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := valid()
			tc.modify(in)
			err := in.Validate()
			if tc.want == nil {
				if err != nil {
					t.Fatalf("Validate() = %v, want nil", err)
				}
				return
			}
			var got *ValidationError
			if !errors.As(err, &got) {
				t.Fatalf("Validate() = %v, want a *ValidationError", err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("Validate() (-want +got):\n%s", diff)
			}
		})
	}
}

func TestValidationErrorString(t *testing.T) {
	for _, tc := range []struct {
		err  ValidationError
		want string
	}{
		{ValidationError{Intent: "store-net", Field: "resources[2].spec.path", Line: 14, Msg: "must be absolute"},
			`intent "store-net": resources[2].spec.path: must be absolute (line 14)`},
		{ValidationError{Intent: "store-net", Field: "resources[2].spec.path", Msg: "must be absolute"},
			`intent "store-net": resources[2].spec.path: must be absolute`},
		{ValidationError{Field: "name", Line: 1, Msg: "required"},
			`intent: name: required (line 1)`},
		{ValidationError{Msg: "empty document"},
			`intent: empty document`},
	} {
		if got := tc.err.Error(); got != tc.want {
			t.Errorf("Error() = %q, want %q", got, tc.want)
		}
	}
}

package acl

import (
	"bytes"
	"crypto/rand"
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestPermissionTable pins which policy allows which action (unscoped).
func TestPermissionTable(t *testing.T) {
	want := map[Action][]Policy{
		ActionRead:           {PolicyRead, PolicyOperator, PolicyAdmin},
		ActionReadAudit:      {PolicyOperator, PolicyAdmin},
		ActionWriteIntent:    {PolicyOperator, PolicyAdmin},
		ActionDeleteIntent:   {PolicyOperator, PolicyAdmin},
		ActionLabelDevice:    {PolicyOperator, PolicyAdmin},
		ActionRevokeDevice:   {PolicyOperator, PolicyAdmin},
		ActionUnrevokeDevice: {PolicyAdmin},
		ActionManageMembers:  {PolicyAdmin},
		ActionManageTokens:   {PolicyAdmin},
		ActionSnapshot:       {PolicyAdmin},
		ActionEnroll:         {PolicyEnroll},
		ActionConfigure:      {PolicyOperator, PolicyAdmin},
		ActionUnlockDevice:   {PolicyOperator, PolicyAdmin},
	}
	got := map[Action][]Policy{}
	for _, a := range Actions() {
		for _, p := range Policies() {
			err := Grant{Policy: p}.Allow(a)
			if (err == nil) != p.Allows(a) {
				t.Errorf("Grant{%s}.Allow(%s) = %v but Allows = %v", p, a, err, p.Allows(a))
			}
			if err != nil && !errors.Is(err, ErrForbidden) {
				t.Errorf("refusal %v does not wrap ErrForbidden", err)
			}
			if err == nil {
				got[a] = append(got[a], p)
			}
		}
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("permission table (-want +got):\n%s", diff)
	}
	if Policy("root").Valid() || Policy("root").Allows(ActionRead) {
		t.Fatal("an unknown policy is valid or allows something")
	}
}

func TestScopedGrant(t *testing.T) {
	op := Grant{Policy: PolicyOperator, Scope: Scope{"region": "eu", "site": "*"}}
	for _, tc := range []struct {
		name     string
		selector map[string]string
		want     bool
	}{
		{"same labels", map[string]string{"region": "eu", "site": "s1"}, true},
		{"narrower", map[string]string{"region": "eu", "site": "s1", "role": "pos"}, true},
		{"wildcard under wildcard", map[string]string{"region": "eu", "site": "*"}, true},
		{"other region", map[string]string{"region": "us", "site": "s1"}, false},
		{"region missing", map[string]string{"site": "s1"}, false},
		{"wildcard where the scope names a value", map[string]string{"region": "*", "site": "s1"}, false},
		{"empty selector selects everything", nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := op.AllowIntent(ActionWriteIntent, tc.selector)
			if (err == nil) != tc.want {
				t.Fatalf("AllowIntent(%v) = %v, want allowed %v", tc.selector, err, tc.want)
			}
		})
	}
	if err := op.AllowDevice(ActionRevokeDevice, map[string]string{"region": "eu", "site": "x", "rack": "1"}); err != nil {
		t.Errorf("device in scope: %v", err)
	}
	if err := op.AllowDevice(ActionLabelDevice, map[string]string{"region": "eu"}); !errors.Is(err, ErrForbidden) {
		t.Errorf("device without the site label: %v", err)
	}
	// Cluster-wide actions need an unscoped token.
	if err := op.Allow(ActionWriteIntent); !errors.Is(err, ErrForbidden) {
		t.Errorf("scoped Allow: %v", err)
	}
	if err := op.AllowDevice(ActionReadAudit, map[string]string{"region": "eu", "site": "x"}); !errors.Is(err, ErrForbidden) {
		t.Errorf("scoped audit read: %v", err)
	}
	// A scope does not widen a policy.
	ro := Grant{Policy: PolicyRead, Scope: Scope{"region": "eu"}}
	if err := ro.AllowIntent(ActionWriteIntent, map[string]string{"region": "eu"}); !errors.Is(err, ErrForbidden) {
		t.Errorf("scoped read token writing: %v", err)
	}
	if err := ro.AllowIntent(ActionRead, map[string]string{"region": "eu"}); err != nil {
		t.Errorf("scoped read token reading: %v", err)
	}
	// Unscoped tokens pass scoped checks for whatever their policy allows.
	if err := (Grant{Policy: PolicyAdmin}).AllowIntent(ActionDeleteIntent, nil); err != nil {
		t.Errorf("admin: %v", err)
	}
}

func TestValidateGrant(t *testing.T) {
	for _, tc := range []struct {
		name          string
		p             Policy
		scope, labels map[string]string
		want          string
	}{
		{"read", PolicyRead, nil, nil, ""},
		{"scoped operator", PolicyOperator, map[string]string{"region": "*"}, nil, ""},
		{"enroll with labels", PolicyEnroll, nil, map[string]string{"region": "eu"}, ""},
		{"unknown", "root", nil, nil, "unknown policy"},
		{"scoped admin", PolicyAdmin, map[string]string{"region": "eu"}, nil, "cannot have a scope"},
		{"labels on operator", PolicyOperator, nil, map[string]string{"region": "eu"}, "only an enroll token"},
		{"wildcard label", PolicyEnroll, nil, map[string]string{"region": "*"}, "concrete"},
		{"empty key", PolicyRead, map[string]string{"": "x"}, nil, "key"},
		// Labels no selector could match are refused as selectors refuse them.
		{"bad key", PolicyRead, map[string]string{"Region!": "eu"}, nil, "invalid label key"},
		{"bad value", PolicyEnroll, nil, map[string]string{"site": "store 42"}, "invalid label value"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := ValidateGrant(tc.p, tc.scope, tc.labels)
			if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
				t.Fatalf("ValidateGrant = %v, want %q", err, tc.want)
			}
		})
	}
}

func TestGenerate(t *testing.T) {
	a, err := Generate(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := Generate(rand.Reader)
	if a == b || a.Secret == b.Secret || a.Accessor == b.Accessor {
		t.Fatal("two generated tokens are equal")
	}
	if err := CheckSecretFormat(a.Secret); err != nil || !strings.HasPrefix(a.Secret, SecretPrefix) {
		t.Fatalf("secret %q: %v", a.Secret, err)
	}
	if !ValidAccessor(a.Accessor) || !ValidSecretHash(HashSecret(a.Secret)) {
		t.Fatalf("accessor %q or hash of the secret malformed", a.Accessor)
	}
	if HashSecret(a.Secret) == HashSecret(b.Secret) || strings.Contains(HashSecret(a.Secret), a.Secret) {
		t.Fatal("hashes collide or contain the secret")
	}
	for _, bad := range []string{"", "mtk_", "abc", a.Secret[:len(a.Secret)-1], "xtk_" + a.Secret[4:]} {
		if CheckSecretFormat(bad) == nil {
			t.Errorf("CheckSecretFormat(%q) accepted", bad)
		}
	}
	if _, err := Generate(bytes.NewReader(make([]byte, 10))); err == nil {
		t.Fatal("Generate from a short random source succeeded")
	}
	if ValidAccessor("ABCDEF0123456789") || ValidAccessor("abc") {
		t.Fatal("ValidAccessor accepted a malformed accessor")
	}
}

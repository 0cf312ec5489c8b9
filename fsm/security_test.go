package fsm

import (
	"bytes"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/meteor-edge/meteor/fsm/acl"
)

// applier applies commands at consecutive indexes.
type applier struct {
	t   testing.TB
	f   *FSM
	idx uint64
}

func newApplier(t testing.TB, cfg Config) *applier {
	t.Helper()
	f, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return &applier{t: t, f: f}
}

func (a *applier) apply(typ MessageType, req any) ApplyResult {
	a.t.Helper()
	a.idx++
	return a.f.Apply(a.idx, mustEncode(a.t, typ, req))
}

// state returns the revision and every record: the snapshot without its
// header, whose index moves with every command, rejected or not.
func (a *applier) state() string {
	a.t.Helper()
	snap := snapshotBytes(a.t, a.f)
	_, records, _ := bytes.Cut(snap, []byte("\n"))
	return fmt.Sprintf("revision %d\n%s", a.f.Read().Revision(), records)
}

// refused applies a command that must be rejected with an error wrapping
// want (or mentioning it, for a string) and must change nothing.
func (a *applier) refused(typ MessageType, req any, want any) {
	a.t.Helper()
	before := a.state()
	res := a.apply(typ, req)
	switch w := want.(type) {
	case error:
		if !errors.Is(res.Err, w) {
			a.t.Fatalf("%s: err %v, want %v", typ, res.Err, w)
		}
	case string:
		if res.Err == nil || !strings.Contains(res.Err.Error(), w) {
			a.t.Fatalf("%s: err %v, want one containing %q", typ, res.Err, w)
		}
	default:
		a.t.Fatalf("%s: want %T: give an error or a string", typ, want)
	}
	if res.Labels != nil {
		a.t.Fatalf("%s: a refused command assigned labels %v", typ, res.Labels)
	}
	if after := a.state(); after != before {
		a.t.Fatalf("%s: a refused command changed the state:\n%s", typ, cmp.Diff(before, after))
	}
}

func (a *applier) ok(typ MessageType, req any) ApplyResult {
	a.t.Helper()
	res := a.apply(typ, req)
	if res.Err != nil {
		a.t.Fatalf("%s: %v", typ, res.Err)
	}
	return res
}

var (
	admin = Actor{Accessor: "00000000000000aa", Name: "root"}
	alice = Actor{Accessor: "00000000000000a1", Name: "alice"}
)

// newToken generates a token and the request creating it.
func newToken(t testing.TB, p acl.Policy, name string) (acl.Token, *CreateTokenRequest) {
	t.Helper()
	tok, err := acl.Generate(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return tok, &CreateTokenRequest{
		Accessor: tok.Accessor, SecretHash: acl.HashSecret(tok.Secret), Name: name, Policy: p,
		Actor: admin, Time: 100,
	}
}

func TestTokenCreateLookupRevoke(t *testing.T) {
	a := newApplier(t, Config{})
	tok, req := newToken(t, acl.PolicyOperator, "ci")
	req.Scope = map[string]string{"region": "eu"}
	req.ExpiresAt = 1000
	a.ok(CreateTokenType, req)

	r := a.f.Read()
	got, err := r.TokenBySecretHash(nil, acl.HashSecret(tok.Secret))
	if err != nil {
		t.Fatal(err)
	}
	want := TokenInfo{
		Accessor: tok.Accessor, Name: "ci", Policy: acl.PolicyOperator, Scope: map[string]string{"region": "eu"},
		ExpiresAt: 1000, CreatedAt: 100, CreatedBy: admin, CreateIndex: 1, ModifyIndex: 1,
	}
	if diff := cmp.Diff(want, got.TokenInfo); diff != "" || got.SecretHash != acl.HashSecret(tok.Secret) {
		t.Fatalf("token by hash (-want +got):\n%s", diff)
	}
	if byAcc, err := r.Token(nil, tok.Accessor); err != nil || byAcc != got {
		t.Fatalf("token by accessor: %+v, %v", byAcc, err)
	}
	if got.Expired(999) || !got.Expired(1000) || got.Grant().AllowIntent(acl.ActionWriteIntent, map[string]string{"region": "eu"}) != nil {
		t.Fatalf("expiry or grant of %+v wrong", got)
	}
	if _, err := r.TokenBySecretHash(nil, acl.HashSecret("mtk_other")); !errors.Is(err, ErrNotFound) {
		t.Fatalf("unknown secret: %v", err)
	}
	list, err := r.Tokens(nil)
	if err != nil || len(list) != 1 {
		t.Fatalf("tokens: %v, %v", list, err)
	}
	b, _ := json.Marshal(list)
	if strings.Contains(string(b), "secret_hash") || strings.Contains(string(b), acl.HashSecret(tok.Secret)) {
		t.Fatalf("the token listing carries the secret's hash: %s", b)
	}

	// The same accessor or the same secret again is refused.
	_, dupAcc := newToken(t, acl.PolicyRead, "dup")
	dupAcc.Accessor = tok.Accessor
	a.refused(CreateTokenType, dupAcc, ErrExists)
	_, dupHash := newToken(t, acl.PolicyRead, "dup")
	dupHash.SecretHash = acl.HashSecret(tok.Secret)
	a.refused(CreateTokenType, dupHash, ErrExists)
	// Malformed requests are refused.
	for name, mutate := range map[string]func(*CreateTokenRequest){
		"scoped admin":   func(r *CreateTokenRequest) { r.Policy, r.Scope = acl.PolicyAdmin, map[string]string{"a": "b"} },
		"unknown policy": func(r *CreateTokenRequest) { r.Policy = "root" },
		"plain secret":   func(r *CreateTokenRequest) { r.SecretHash = "mtk_secret" },
		"bad accessor":   func(r *CreateTokenRequest) { r.Accessor = "x" },
		"expired":        func(r *CreateTokenRequest) { r.ExpiresAt = r.Time },
		"uses on read":   func(r *CreateTokenRequest) { r.MaxUses = 1 },
		"labels on operator": func(r *CreateTokenRequest) {
			r.Policy, r.EnrollLabels = acl.PolicyOperator, map[string]string{"a": "b"}
		},
	} {
		_, bad := newToken(t, acl.PolicyRead, name)
		mutate(bad)
		a.refused(CreateTokenType, bad, "create token")
	}

	a.ok(RevokeTokenType, &RevokeTokenRequest{Accessor: tok.Accessor, Actor: admin, Time: 200})
	if _, err := a.f.Read().TokenBySecretHash(nil, acl.HashSecret(tok.Secret)); !errors.Is(err, ErrNotFound) {
		t.Fatalf("revoked token still found: %v", err)
	}
	a.refused(RevokeTokenType, &RevokeTokenRequest{Accessor: tok.Accessor, Actor: admin}, ErrNotFound)
}

func TestEnrollmentToken(t *testing.T) {
	a := newApplier(t, Config{})
	two, req := newToken(t, acl.PolicyEnroll, "store-42")
	req.EnrollLabels = map[string]string{"region": "eu", "site": "store-42"}
	req.MaxUses, req.ExpiresAt = 2, 1000
	a.ok(CreateTokenType, req)
	hash := acl.HashSecret(two.Secret)

	res := a.ok(UseEnrollTokenType, &UseEnrollTokenRequest{SecretHash: hash, Device: "d1", Time: 500})
	if diff := cmp.Diff(req.EnrollLabels, res.Labels); diff != "" {
		t.Fatalf("labels assigned (-want +got):\n%s", diff)
	}
	d, err := a.f.Read().Device(nil, "d1")
	if err != nil || !d.LabelsControlled || !cmp.Equal(d.SelectionLabels(false), req.EnrollLabels) || d.Connected {
		t.Fatalf("enrolled device %+v, %v", d, err)
	}
	tok, _ := a.f.Read().TokenBySecretHash(nil, hash)
	if tok.Uses != 1 || tok.Exhausted() {
		t.Fatalf("after one use: %+v", tok.TokenInfo)
	}
	// Refused without a change of state: expired, after the uses.
	a.refused(UseEnrollTokenType, &UseEnrollTokenRequest{SecretHash: hash, Device: "d2", Time: 1000}, ErrTokenExpired)
	a.ok(UseEnrollTokenType, &UseEnrollTokenRequest{SecretHash: hash, Device: "d2", Time: 600})
	a.refused(UseEnrollTokenType, &UseEnrollTokenRequest{SecretHash: hash, Device: "d3", Time: 700}, ErrTokenExhausted)

	// A one-use token enrolls once.
	one, req := newToken(t, acl.PolicyEnroll, "once")
	req.MaxUses = 1
	a.ok(CreateTokenType, req)
	a.ok(UseEnrollTokenType, &UseEnrollTokenRequest{SecretHash: acl.HashSecret(one.Secret), Device: "d4", Time: 500})
	a.refused(UseEnrollTokenType, &UseEnrollTokenRequest{SecretHash: acl.HashSecret(one.Secret), Device: "d4", Time: 501}, ErrTokenExhausted)

	// A revoked token, an operator token, a revoked device, no device.
	gone, req := newToken(t, acl.PolicyEnroll, "gone")
	a.ok(CreateTokenType, req)
	a.ok(RevokeTokenType, &RevokeTokenRequest{Accessor: gone.Accessor, Actor: admin})
	a.refused(UseEnrollTokenType, &UseEnrollTokenRequest{SecretHash: acl.HashSecret(gone.Secret), Device: "d5"}, ErrNotFound)
	op, req := newToken(t, acl.PolicyOperator, "op")
	a.ok(CreateTokenType, req)
	a.refused(UseEnrollTokenType, &UseEnrollTokenRequest{SecretHash: acl.HashSecret(op.Secret), Device: "d5"}, acl.ErrForbidden)
	many, req := newToken(t, acl.PolicyEnroll, "unlimited")
	a.ok(CreateTokenType, req)
	a.ok(RevokeDeviceType, &RevokeDeviceRequest{ID: "stolen", Actor: admin})
	a.refused(UseEnrollTokenType, &UseEnrollTokenRequest{SecretHash: acl.HashSecret(many.Secret), Device: "stolen", Time: 500}, ErrDeviceRevoked)
	a.refused(UseEnrollTokenType, &UseEnrollTokenRequest{SecretHash: acl.HashSecret(many.Secret)}, "empty device ID")
	// Without the proposer's time expiry cannot be judged; an enrolled
	// device is not taken over by another enrollment.
	a.refused(UseEnrollTokenType, &UseEnrollTokenRequest{SecretHash: acl.HashSecret(many.Secret), Device: "d9"}, "no proposer time")
	a.refused(UseEnrollTokenType, &UseEnrollTokenRequest{SecretHash: acl.HashSecret(many.Secret), Device: "d1", Time: 500}, ErrExists)
	// Without a limit a token enrolls any number of devices.
	for _, id := range []string{"d6", "d7", "d8"} {
		a.ok(UseEnrollTokenType, &UseEnrollTokenRequest{SecretHash: acl.HashSecret(many.Secret), Device: id, Time: 500})
	}
}

func TestAuditLog(t *testing.T) {
	a := newApplier(t, Config{AuditLimit: 100})
	tok, create := newToken(t, acl.PolicyOperator, "alice")
	create.Actor = admin
	a.ok(CreateTokenType, create)
	in := testIntent("web", "x")
	a.ok(PutIntentType, &PutIntentRequest{Intent: in, Actor: alice, Time: 1})
	a.ok(PutIntentType, &PutIntentRequest{Intent: testIntent("web", "y"), Actor: alice, Time: 2})
	a.refused(PutIntentType, &PutIntentRequest{Intent: in, IfMatch: u64(1), Actor: alice, Time: 3}, "expected revision 1")
	a.ok(DeviceSessionType, &DeviceSessionRequest{ID: "d1", SessionID: "s", Server: "a", Connected: true, Time: 4})
	a.ok(SetDeviceLabelsType, &SetDeviceLabelsRequest{ID: "d1", Labels: map[string]string{"region": "eu"}, Actor: alice, Time: 5})
	a.ok(RevokeDeviceType, &RevokeDeviceRequest{ID: "d1", Reason: "stolen", Actor: alice, Time: 6})
	a.ok(UnrevokeDeviceType, &UnrevokeDeviceRequest{ID: "d1", Actor: admin, Time: 7})
	a.ok(AuditMemberChangeType, &MemberChangeRequest{Change: "remove", Member: "s3", Outcome: "ok", Actor: admin, Time: 8})
	a.ok(DeleteIntentType, &DeleteIntentRequest{Name: "web", Actor: alice, Time: 9})
	a.ok(RevokeTokenType, &RevokeTokenRequest{Accessor: tok.Accessor, Actor: admin, Time: 10})
	a.ok(PutIntentType, &PutIntentRequest{Intent: testIntent("legacy", "x"), Time: 11})

	recs, err := a.f.Read().Audit(nil, AuditQuery{})
	if err != nil {
		t.Fatal(err)
	}
	type row struct{ Actor, Action, Target string }
	var got []row
	for _, r := range recs {
		got = append(got, row{r.Actor.String(), r.Action, r.Target})
	}
	want := []row{
		{"system", "put-intent", "intent/legacy"},
		{"root (00000000000000aa)", "revoke-token", "token/" + tok.Accessor},
		{"alice (00000000000000a1)", "delete-intent", "intent/web"},
		{"root (00000000000000aa)", "member-remove", "member/s3"},
		{"root (00000000000000aa)", "unrevoke-device", "device/d1"},
		{"alice (00000000000000a1)", "revoke-device", "device/d1"},
		{"alice (00000000000000a1)", "set-device-labels", "device/d1"},
		{"alice (00000000000000a1)", "put-intent", "intent/web"},
		{"alice (00000000000000a1)", "put-intent", "intent/web"},
		{"root (00000000000000aa)", "create-token", "token/" + tok.Accessor},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("audit log, newest first (-want +got):\n%s", diff)
	}
	if recs[0].Index != a.idx || recs[0].Time != 11 || recs[5].Summary != "stolen" || recs[8].Summary != "created at revision 1" {
		t.Fatalf("records: %+v %+v %+v", recs[0], recs[5], recs[8])
	}
	for _, tc := range []struct {
		q    AuditQuery
		want int
	}{
		{AuditQuery{Limit: 3}, 3},
		{AuditQuery{Actor: "alice"}, 5},
		{AuditQuery{Actor: alice.Accessor, Limit: 2}, 2},
		{AuditQuery{Actor: "system"}, 1},
		{AuditQuery{Target: "intent/web"}, 3},
		{AuditQuery{Target: "device/"}, 3},
		{AuditQuery{Actor: "root", Target: "token/"}, 2},
		{AuditQuery{Target: "intent/we"}, 0},
	} {
		recs, _ := a.f.Read().Audit(nil, tc.q)
		if len(recs) != tc.want {
			t.Errorf("Audit(%+v): %d records, want %d", tc.q, len(recs), tc.want)
		}
	}
}

func TestAuditLogIsBounded(t *testing.T) {
	a := newApplier(t, Config{AuditLimit: 3})
	for i := range 10 {
		a.ok(PutIntentType, &PutIntentRequest{Intent: testIntent("web", string(rune('a'+i))), Actor: alice})
	}
	recs, _ := a.f.Read().Audit(nil, AuditQuery{})
	var idx []uint64
	for _, r := range recs {
		idx = append(idx, r.Index)
	}
	if diff := cmp.Diff([]uint64{10, 9, 8}, idx); diff != "" {
		t.Fatalf("retained audit records (-want +got):\n%s", diff)
	}
	if _, err := New(Config{AuditLimit: -1}); err == nil {
		t.Fatal("a negative audit limit was accepted")
	}
}

func TestControlPlaneLabels(t *testing.T) {
	a := newApplier(t, Config{})
	hello := func(labels map[string]string) ApplyResult {
		return a.ok(DeviceSessionType, &DeviceSessionRequest{ID: "d1", Labels: labels, SessionID: "s", Server: "a", Connected: true})
	}
	dev := func() *DeviceRecord {
		d, err := a.f.Read().Device(nil, "d1")
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	claimed := map[string]string{"role": "pos-gateway"}
	hello(claimed)
	if d := dev(); d.LabelsControlled || !cmp.Equal(d.Labels, claimed) || !cmp.Equal(d.ReportedLabels, claimed) ||
		d.SelectionLabels(false) != nil || !cmp.Equal(d.SelectionLabels(true), claimed) {
		t.Fatalf("device before control-plane labels: %+v", d)
	}
	// The first control-plane labels do not carry over reported ones.
	rev := a.f.Read().Revision()
	res := a.ok(SetDeviceLabelsType, &SetDeviceLabelsRequest{ID: "d1", Labels: map[string]string{"region": "eu", "site": "s1"}, Actor: alice})
	want := map[string]string{"region": "eu", "site": "s1"}
	if d := dev(); !d.LabelsControlled || !cmp.Equal(d.SelectionLabels(false), want) || !cmp.Equal(d.ReportedLabels, claimed) || d.Revision != rev+1 || res.Revision != rev+1 {
		t.Fatalf("device after set labels: %+v (revision %d)", d, res.Revision)
	}
	// A Hello now changes only the reported labels, and takes no revision.
	hello(map[string]string{"role": "anything", "region": "us"})
	if d := dev(); !cmp.Equal(d.Labels, want) || d.ReportedLabels["region"] != "us" || a.f.Read().Revision() != rev+1 {
		t.Fatalf("device after a Hello: %+v", d)
	}
	a.ok(UpsertDeviceType, &UpsertDeviceRequest{ID: "d1", Labels: map[string]string{"x": "y"}})
	if d := dev(); !cmp.Equal(d.Labels, want) || !cmp.Equal(d.ReportedLabels, map[string]string{"x": "y"}) || !d.Connected {
		t.Fatalf("device after an upsert: %+v", d)
	}
	// Merge, remove, replace; the same labels again take no revision.
	a.ok(SetDeviceLabelsType, &SetDeviceLabelsRequest{ID: "d1", Labels: map[string]string{"rack": "3"}, Remove: []string{"site"}})
	if d := dev(); !cmp.Equal(d.Labels, map[string]string{"region": "eu", "rack": "3"}) {
		t.Fatalf("merged labels %v", d.Labels)
	}
	rev = a.f.Read().Revision()
	a.ok(SetDeviceLabelsType, &SetDeviceLabelsRequest{ID: "d1", Labels: map[string]string{"rack": "3"}})
	if a.f.Read().Revision() != rev {
		t.Fatal("setting the same labels took a revision")
	}
	a.ok(SetDeviceLabelsType, &SetDeviceLabelsRequest{ID: "d1", Labels: map[string]string{"site": "s2"}, Replace: true})
	if d := dev(); !cmp.Equal(d.Labels, map[string]string{"site": "s2"}) {
		t.Fatalf("replaced labels %v", d.Labels)
	}
	a.refused(SetDeviceLabelsType, &SetDeviceLabelsRequest{ID: "nope", Labels: want}, ErrNotFound)
	a.refused(SetDeviceLabelsType, &SetDeviceLabelsRequest{ID: "d1", Labels: map[string]string{"region": "*"}}, "concrete")

	// A record from before control-plane labels reads as it did.
	var old DeviceRecord
	if err := json.Unmarshal([]byte(`{"id":"d9","labels":{"region":"eu"},"connected":true}`), &old); err != nil {
		t.Fatal(err)
	}
	if old.LabelsControlled || !cmp.Equal(old.SelectionLabels(true), map[string]string{"region": "eu"}) {
		t.Fatalf("old record %+v", old)
	}
}

func TestDeviceRevocation(t *testing.T) {
	a := newApplier(t, Config{})
	connect := &DeviceSessionRequest{ID: "d1", SessionID: "s", Server: "a", Connected: true}
	a.ok(DeviceSessionType, connect)
	a.ok(RevokeDeviceType, &RevokeDeviceRequest{ID: "d1", Reason: "stolen", Actor: alice, Time: 7})
	ok, rec, err := a.f.Read().DeviceRevoked(nil, "d1")
	if err != nil || !ok || *rec != (RevokedDevice{ID: "d1", Reason: "stolen", Actor: alice, Time: 7, Index: 2}) {
		t.Fatalf("DeviceRevoked = %v %+v %v", ok, rec, err)
	}
	a.refused(RevokeDeviceType, &RevokeDeviceRequest{ID: "d1"}, ErrDeviceRevoked)
	a.refused(DeviceSessionType, connect, ErrDeviceRevoked)
	a.refused(RevokeDeviceType, &RevokeDeviceRequest{}, "empty device ID")
	// A device never seen can be revoked, and the revocation outlives
	// the record.
	a.ok(RevokeDeviceType, &RevokeDeviceRequest{ID: "d2"})
	if list, _ := a.f.Read().RevokedDevices(nil); len(list) != 2 || list[0].ID != "d1" || list[1].ID != "d2" {
		t.Fatalf("revoked devices %+v", list)
	}

	a.ok(UnrevokeDeviceType, &UnrevokeDeviceRequest{ID: "d1", Actor: admin})
	if ok, _, _ := a.f.Read().DeviceRevoked(nil, "d1"); ok {
		t.Fatal("still revoked after unrevoke")
	}
	a.refused(UnrevokeDeviceType, &UnrevokeDeviceRequest{ID: "d1"}, ErrNotFound)
	a.ok(DeviceSessionType, connect)
}

// securityCommand is a random command of the security state: tokens,
// enrollment, control-plane labels, revocations and member changes, on a
// handful of accessors and devices so that some are refused.
func securityCommand(t testing.TB, rng *mrand.Rand, i int) []byte {
	n := rng.IntN(8)
	accessor, hash := fmt.Sprintf("%016x", n), fmt.Sprintf("%064x", n)
	device := fmt.Sprintf("dev-%d", rng.IntN(20))
	actor := Actor{Accessor: fmt.Sprintf("%016x", rng.IntN(3)), Name: "op"}
	switch rng.IntN(7) {
	case 0:
		req := &CreateTokenRequest{Accessor: accessor, SecretHash: hash, Name: fmt.Sprint("t", i), Policy: acl.PolicyEnroll, Actor: actor, Time: int64(i)}
		if n%2 == 0 {
			req.EnrollLabels, req.MaxUses, req.ExpiresAt = map[string]string{"region": "eu", "site": fmt.Sprint(n)}, uint64(1+n%3), int64(i+50)
		} else {
			req.Policy, req.Scope = acl.PolicyOperator, map[string]string{"region": "eu"}
		}
		return mustEncode(t, CreateTokenType, req)
	case 1:
		return mustEncode(t, RevokeTokenType, &RevokeTokenRequest{Accessor: accessor, Actor: actor, Time: int64(i)})
	case 2:
		return mustEncode(t, UseEnrollTokenType, &UseEnrollTokenRequest{SecretHash: hash, Device: device, Time: int64(i)})
	case 3:
		return mustEncode(t, SetDeviceLabelsType, &SetDeviceLabelsRequest{ID: device, Labels: map[string]string{"rack": fmt.Sprint(n)}, Remove: []string{"site"}, Actor: actor, Time: int64(i)})
	case 4:
		return mustEncode(t, RevokeDeviceType, &RevokeDeviceRequest{ID: device, Reason: "lost", Actor: actor, Time: int64(i)})
	case 5:
		return mustEncode(t, UnrevokeDeviceType, &UnrevokeDeviceRequest{ID: device, Actor: actor, Time: int64(i)})
	}
	return mustEncode(t, AuditMemberChangeType, &MemberChangeRequest{Change: "add", Member: fmt.Sprint("s", n), Outcome: "ok", Actor: actor, Time: int64(i)})
}

// TestSecurityStateSnapshot: tokens, the audit log and revocations survive
// a snapshot round trip byte for byte, the audit limit still holds after a
// restore, and a snapshot from before these tables restores to none.
func TestSecurityStateSnapshot(t *testing.T) {
	a := newApplier(t, Config{AuditLimit: 5})
	tok, req := newToken(t, acl.PolicyEnroll, "e")
	req.EnrollLabels, req.MaxUses = map[string]string{"region": "eu"}, 3
	a.ok(CreateTokenType, req)
	a.ok(UseEnrollTokenType, &UseEnrollTokenRequest{SecretHash: acl.HashSecret(tok.Secret), Device: "d1", Time: 1})
	a.ok(RevokeDeviceType, &RevokeDeviceRequest{ID: "d2", Reason: "lost", Actor: alice})
	a.ok(AuditMemberChangeType, &MemberChangeRequest{Change: "add", Member: "s4", Actor: admin})
	a.ok(PutIntentType, &PutIntentRequest{Intent: testIntent("web", "x"), Actor: alice})
	snap := snapshotBytes(t, a.f)
	for _, kind := range []string{`{"token":`, `{"audit":`, `{"revoked_device":`, `"labels_controlled":true`} {
		if !bytes.Contains(snap, []byte(kind)) {
			t.Errorf("snapshot has no %s", kind)
		}
	}

	b := newApplier(t, Config{AuditLimit: 5})
	if err := b.f.Restore(bytes.NewReader(snap)); err != nil {
		t.Fatal(err)
	}
	b.idx = a.idx
	if got := snapshotBytes(t, b.f); !bytes.Equal(snap, got) {
		t.Fatalf("restored state differs:\n%s", cmp.Diff(string(snap), string(got)))
	}
	r := b.f.Read()
	if _, err := r.TokenBySecretHash(nil, acl.HashSecret(tok.Secret)); err != nil {
		t.Fatalf("token lost in the restore: %v", err)
	}
	if ok, _, _ := r.DeviceRevoked(nil, "d2"); !ok {
		t.Fatal("revocation lost in the restore")
	}
	// The same commands on both keep them equal, and the audit log bounded.
	for _, x := range []*applier{a, b} {
		x.ok(RevokeTokenType, &RevokeTokenRequest{Accessor: tok.Accessor, Actor: admin})
		x.ok(UnrevokeDeviceType, &UnrevokeDeviceRequest{ID: "d2", Actor: admin})
	}
	if ha, hb := a.state(), b.state(); ha != hb {
		t.Fatalf("replicas diverged after a restore:\n%s", cmp.Diff(ha, hb))
	}
	if recs, _ := b.f.Read().Audit(nil, AuditQuery{}); len(recs) != 5 || recs[0].Action != "unrevoke-device" {
		t.Fatalf("audit log after the restore: %d records", len(recs))
	}

	// A snapshot written before tokens, audit and revocations existed.
	old := `{"format":"meteor-fsm","version":1,"index":3,"revision":1,"history_limit":16}` + "\n" +
		`{"device":{"id":"d1","labels":{"region":"eu"},"create_index":1,"modify_index":3,"revision":1,"updated_at":0,"connected":true,"acked_revision":0,"report_seq":0,"last_seen":0}}` + "\n"
	c := newApplier(t, Config{})
	if err := c.f.Restore(strings.NewReader(old)); err != nil {
		t.Fatal(err)
	}
	c.idx = 3
	r = c.f.Read()
	tokens, _ := r.Tokens(nil)
	audit, _ := r.Audit(nil, AuditQuery{})
	revoked, _ := r.RevokedDevices(nil)
	d, err := r.Device(nil, "d1")
	if len(tokens)+len(audit)+len(revoked) != 0 || err != nil || !cmp.Equal(d.SelectionLabels(true), map[string]string{"region": "eu"}) {
		t.Fatalf("old snapshot restored to tokens %v audit %v revoked %v device %+v (%v)", tokens, audit, revoked, d, err)
	}
	c.ok(SetDeviceLabelsType, &SetDeviceLabelsRequest{ID: "d1", Labels: map[string]string{"region": "us"}})
	if d, _ := c.f.Read().Device(nil, "d1"); !d.LabelsControlled || d.Labels["region"] != "us" {
		t.Fatalf("device of an old snapshot after set labels: %+v", d)
	}
}

// statesByBatches applies cmds to a new replica of cfg once for each
// batch size in batches, in batches of that size, and fails unless each
// leaves the state the first size does. check, if not nil, runs after
// every batch and on each final state.
func statesByBatches(t *testing.T, cfg Config, cmds [][]byte, batches []int, check func(a *applier, batch int, final bool)) {
	t.Helper()
	var want string
	for n, batch := range batches {
		a := newApplier(t, cfg)
		for start := 0; start < len(cmds); start += batch {
			end := min(start+batch, len(cmds))
			idx := make([]uint64, 0, batch)
			for range cmds[start:end] {
				a.idx++
				idx = append(idx, a.idx)
			}
			for _, res := range a.f.ApplyBatch(idx, cmds[start:end]) {
				if res.Err != nil {
					t.Fatal(res.Err)
				}
			}
			if check != nil {
				check(a, batch, false)
			}
		}
		if check != nil {
			check(a, batch, true)
		}
		got := a.state()
		if n == 0 {
			want = got
			continue
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("batches of %d: state differs from batches of %d (-want +got):\n%s", batch, batches[0], diff)
		}
	}
}

// The audit log is trimmed once a batch (trimAudit), so a batch of
// commands must leave the state that applying them one at a time leaves,
// whatever the batch boundaries: replicas batch the same log differently.
func TestAuditTrimmedByBatchAsByCommand(t *testing.T) {
	var cmds [][]byte
	for i := range 23 {
		cmds = append(cmds, mustEncode(t, PutIntentType, &PutIntentRequest{Intent: testIntent(fmt.Sprintf("web-%d", i%4), string(rune('a'+i))), Actor: alice}))
	}
	statesByBatches(t, Config{AuditLimit: 4}, cmds, []int{1, 2, 5, 23}, func(a *applier, batch int, _ bool) {
		if recs, _ := a.f.Read().Audit(nil, AuditQuery{}); len(recs) > 4 {
			t.Fatalf("batches of %d: %d audit records after the batch ending at %d, limit 4", batch, len(recs), a.idx)
		}
	})
}

// Replicas batch the same log differently: a batch must leave an intent's
// history, its trims and their DroppedFrom marks as one command at a time
// leaves them.
func TestHistoryTrimmedByBatchAsByCommand(t *testing.T) {
	var cmds [][]byte
	for i := range 41 {
		name := fmt.Sprintf("web-%d", i%3)
		if i%9 == 8 {
			cmds = append(cmds, mustEncode(t, DeleteIntentType, &DeleteIntentRequest{Name: name, Actor: alice}))
			continue
		}
		cmds = append(cmds, mustEncode(t, PutIntentType, &PutIntentRequest{Intent: testIntent(name, fmt.Sprint(i)), Actor: alice}))
	}
	statesByBatches(t, Config{HistoryLimit: 3}, cmds, []int{1, 2, 7, 41}, func(a *applier, batch int, final bool) {
		if got := a.state(); final && !strings.Contains(got, `"dropped_from"`) {
			t.Fatalf("batches of %d: no history was trimmed:\n%s", batch, got)
		}
	})
}

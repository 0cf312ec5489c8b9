package fsm

import (
	"bytes"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/meteor-edge/meteor/fsm/acl"
)

// scratchOf reads snapshot bytes into a replica of their own, as the
// leader reads a backup before restoring it.
func scratchOf(t *testing.T, snap []byte) *FSM {
	t.Helper()
	f := newTestFSM(t, 0)
	if err := f.Restore(bytes.NewReader(snap)); err != nil {
		t.Fatal(err)
	}
	return f
}

func tokenAccessors(t *testing.T, f *FSM) map[string]uint64 {
	t.Helper()
	toks, err := f.Read().Tokens(nil)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]uint64{}
	for _, tok := range toks {
		out[tok.Accessor] = tok.Uses
	}
	return out
}

func revokedIDs(t *testing.T, f *FSM) []string {
	t.Helper()
	list, err := f.Read().RevokedDevices(nil)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, r := range list {
		out = append(out, r.ID)
	}
	return out
}

// TestCarrySecurity: a backup restored over a later state of the same
// cluster keeps the devices revoked since and leaves out the tokens
// revoked since; an enroll token used since keeps its uses, and a token
// created since is not brought in. With BackupTokens the backup's tokens
// come back as they were. Over another cluster's state, or a new one, the
// backup's tokens are all restored; revocations are merged in every case.
func TestCarrySecurity(t *testing.T) {
	a := newApplier(t, Config{})
	admTok, req := newToken(t, acl.PolicyAdmin, "adm")
	a.ok(CreateTokenType, req)
	leaked, req := newToken(t, acl.PolicyOperator, "leaked")
	req.Time = 101
	a.ok(CreateTokenType, req)
	enroll, req := newToken(t, acl.PolicyEnroll, "store")
	req.MaxUses, req.Time = 1, 102
	a.ok(CreateTokenType, req)
	a.ok(RevokeDeviceType, &RevokeDeviceRequest{ID: "old", Actor: admin, Time: 103})
	backup := snapshotBytes(t, a.f)

	// Since the backup: a token revoked, the enroll token spent, a
	// device revoked, a token created.
	a.ok(RevokeTokenType, &RevokeTokenRequest{Accessor: leaked.Accessor, Actor: admin, Time: 200})
	a.ok(UseEnrollTokenType, &UseEnrollTokenRequest{SecretHash: acl.HashSecret(enroll.Secret), Device: "d1", Time: 201})
	a.ok(RevokeDeviceType, &RevokeDeviceRequest{ID: "stolen", Reason: "stolen", Actor: admin, Time: 202})
	later, req := newToken(t, acl.PolicyAdmin, "later")
	req.Time = 203
	a.ok(CreateTokenType, req)

	scratch := scratchOf(t, backup)
	res, err := scratch.CarrySecurity(a.f.Read(), CarryOptions{})
	if err != nil {
		t.Fatal(err)
	}
	want := &CarryResult{Descends: true, Basis: res.Basis, KeptRevoked: []string{"stolen"},
		TokensNotRestored: []string{leaked.Accessor}, TokenUsesKept: []string{enroll.Accessor}}
	if diff := cmp.Diff(want, res); diff != "" || !strings.Contains(res.Basis, "newest audit record") {
		t.Fatalf("carry result (-want +got):\n%s\nbasis %q", diff, res.Basis)
	}
	if diff := cmp.Diff(map[string]uint64{admTok.Accessor: 0, enroll.Accessor: 1}, tokenAccessors(t, scratch)); diff != "" {
		t.Fatalf("tokens after the carry (-want +got):\n%s", diff)
	}
	if _, ok := tokenAccessors(t, scratch)[later.Accessor]; ok {
		t.Fatal("a token created after the backup was carried")
	}
	if diff := cmp.Diff([]string{"old", "stolen"}, revokedIDs(t, scratch)); diff != "" {
		t.Fatalf("revocations after the carry (-want +got):\n%s", diff)
	}
	if ok, rec, _ := scratch.Read().DeviceRevoked(nil, "stolen"); !ok || rec.Reason != "stolen" || rec.Index != 7 {
		t.Fatalf("carried revocation %+v", rec)
	}
	// What the carry changed is in the snapshot the leader writes, and
	// the same bytes each time.
	one, two := snapshotBytes(t, scratch), snapshotBytes(t, scratch)
	if !bytes.Equal(one, two) || !bytes.Contains(one, []byte(`"id":"stolen"`)) || bytes.Contains(one, []byte(`{"token":{"accessor":"`+leaked.Accessor)) {
		t.Fatal("the carried state is not what the snapshot writes")
	}

	// Opting out brings the backup's tokens back as they were.
	scratch = scratchOf(t, backup)
	res, err = scratch.CarrySecurity(a.f.Read(), CarryOptions{BackupTokens: true})
	if err != nil || !res.Descends || res.TokensNotRestored != nil || res.TokenUsesKept != nil || len(res.KeptRevoked) != 1 {
		t.Fatalf("carry with the backup's tokens: %+v %v", res, err)
	}
	if diff := cmp.Diff(map[string]uint64{admTok.Accessor: 0, leaked.Accessor: 0, enroll.Accessor: 0}, tokenAccessors(t, scratch)); diff != "" {
		t.Fatalf("backup's tokens (-want +got):\n%s", diff)
	}

	// Another cluster, further on than the backup: the same commands at
	// other times, and a revocation of its own.
	other := newApplier(t, Config{})
	for i := range 8 {
		_, req := newToken(t, acl.PolicyRead, "other")
		req.Time = int64(1000 + i)
		other.ok(CreateTokenType, req)
	}
	other.ok(RevokeDeviceType, &RevokeDeviceRequest{ID: "theirs", Time: 2000})
	// A new cluster, behind the backup.
	fresh := newApplier(t, Config{})
	_, req = newToken(t, acl.PolicyAdmin, "bootstrap")
	fresh.ok(CreateTokenType, req)
	for _, c := range []struct {
		name    string
		cur     *FSM
		revoked []string
		basis   string
	}{
		{"another cluster", other.f, []string{"old", "theirs"}, "differs"},
		{"a new cluster", fresh.f, []string{"old"}, "not past the backup"},
	} {
		scratch := scratchOf(t, backup)
		res, err := scratch.CarrySecurity(c.cur.Read(), CarryOptions{})
		if err != nil || res.Descends || res.TokensNotRestored != nil || res.TokenUsesKept != nil || !strings.Contains(res.Basis, c.basis) {
			t.Fatalf("%s: %+v %v", c.name, res, err)
		}
		if diff := cmp.Diff(map[string]uint64{admTok.Accessor: 0, leaked.Accessor: 0, enroll.Accessor: 0}, tokenAccessors(t, scratch)); diff != "" {
			t.Fatalf("%s: tokens (-want +got):\n%s", c.name, diff)
		}
		if diff := cmp.Diff(c.revoked, revokedIDs(t, scratch)); diff != "" {
			t.Fatalf("%s: revocations (-want +got):\n%s", c.name, diff)
		}
	}
}

// TestCarrySecurityLineage: the same cluster is recognised after an
// operator restore (the backup restored again after a token was revoked,
// and a later backup of the restored state) and when its audit log has
// since dropped the backup's newest record.
func TestCarrySecurityLineage(t *testing.T) {
	a := newApplier(t, Config{AuditLimit: 4})
	tok, req := newToken(t, acl.PolicyOperator, "op")
	a.ok(CreateTokenType, req)
	backup := snapshotBytes(t, a.f)

	// Restored once over a state at index 10; then the token is revoked.
	restored := newTestFSM(t, 0)
	if err := restored.Restore(bytes.NewReader(operatorRestore(t, backup, 10, 5, RestoreMark{}, 7))); err != nil {
		t.Fatal(err)
	}
	b := &applier{t: t, f: restored, idx: 10}
	b.ok(AuditOperationType, &OperationRequest{Action: "snapshot-restore", Target: "snapshot/x", Time: 300})
	later := snapshotBytes(t, b.f)
	b.ok(RevokeTokenType, &RevokeTokenRequest{Accessor: tok.Accessor, Actor: admin, Time: 301})
	for _, c := range []struct {
		name, basis string
		backup      []byte
	}{
		{"the backup again", "newest audit record", backup},
		{"a backup of the restored state", "both descend from restore 1", later},
	} {
		scratch := scratchOf(t, c.backup)
		res, err := scratch.CarrySecurity(b.f.Read(), CarryOptions{})
		if err != nil || !res.Descends || !strings.Contains(res.Basis, c.basis) || len(res.TokensNotRestored) != 1 {
			t.Fatalf("%s: %+v %v", c.name, res, err)
		}
	}

	// More audited changes than the audit limit keeps: the backup's
	// newest record is gone from the state, which is taken to descend.
	a.ok(RevokeTokenType, &RevokeTokenRequest{Accessor: tok.Accessor, Actor: admin, Time: 400})
	for i := range 5 {
		a.ok(RevokeDeviceType, &RevokeDeviceRequest{ID: string(rune('a' + i)), Time: int64(401 + i)})
	}
	scratch := scratchOf(t, backup)
	res, err := scratch.CarrySecurity(a.f.Read(), CarryOptions{})
	if err != nil || !res.Descends || !strings.Contains(res.Basis, "taken as the same cluster") || len(res.TokensNotRestored) != 1 || len(res.KeptRevoked) != 5 {
		t.Fatalf("after the audit log moved on: %+v %v", res, err)
	}
}

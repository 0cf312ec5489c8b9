package cluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/hashicorp/go-hclog"

	"github.com/meteor-edge/meteor/cluster/api"
	"github.com/meteor-edge/meteor/cluster/snapshot"
	"github.com/meteor-edge/meteor/fsm"
	"github.com/meteor-edge/meteor/fsm/acl"
	"github.com/meteor-edge/meteor/wire"
)

// startCluster starts a Local cluster of n servers for a test, with the
// options o sets (Dir, Logger and a 5 s apply timeout are the test's).
func startCluster(t *testing.T, n int, o LocalOptions) *testCluster {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	o.Servers, o.Dir = n, t.TempDir()
	o.Logger = func(id string) hclog.Logger { return testLogger(t, id) }
	tune := o.Configure
	o.Configure = func(i int, cfg *Config) {
		cfg.ApplyTimeout = 5 * time.Second
		// Owners re-classify nothing on their own: the states compared
		// change only by what the test commits.
		cfg.StatusEvalInterval = time.Hour
		if tune != nil {
			tune(i, cfg)
		}
	}
	l, err := StartLocal(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := l.Close(); err != nil {
			t.Logf("close: %v", err)
		}
	})
	return &testCluster{Local: l, t: t}
}

// recordLines returns the records of a replica's state as its snapshot
// writes them, one per line, keeping only the kinds of record named
// (intent, history, device, timeline, token, audit, ...; none: all).
func recordLines(t *testing.T, f *fsm.FSM, kinds ...string) string {
	t.Helper()
	var buf bytes.Buffer
	if _, err := f.Snapshot().WriteTo(&buf); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSuffix(buf.String(), "\n"), "\n")[1:]
	var keep []string
	for _, l := range lines {
		for _, k := range kinds {
			if strings.HasPrefix(l, `{"`+k+`":`) {
				keep = append(keep, l)
			}
		}
		if len(kinds) == 0 {
			keep = append(keep, l)
		}
	}
	return strings.Join(keep, "\n")
}

// saveSnapshot saves a backup through c and checks it.
func saveSnapshot(t *testing.T, c *api.Client, stale bool) ([]byte, *snapshot.Header) {
	t.Helper()
	var buf bytes.Buffer
	if _, err := c.SaveSnapshot(context.Background(), &buf, stale); err != nil {
		t.Fatal(err)
	}
	h, err := snapshot.Verify(bytes.NewReader(buf.Bytes()))
	if err != nil {
		t.Fatal(err)
	}
	return buf.Bytes(), h
}

// TestSnapshotRoundTripIntoAFreshCluster: a backup of a cluster's state,
// restored into a fresh cluster, reproduces every record: every intent
// with its revisions and history, every device with its labels, session
// and status timeline, the tokens (those of the backup: the new cluster's
// own first token is gone) and the audit log, to which the restore adds
// itself. Only an admin token saves and restores; a corrupt or truncated
// file is refused with a clear error and changes nothing.
func TestSnapshotRoundTripIntoAFreshCluster(t *testing.T) {
	src := startCluster(t, 1, LocalOptions{ACL: true})
	ctx := context.Background()
	for i := range 6 {
		src.propose(simpleIntent(fmt.Sprintf("app-%d", i%3), fmt.Sprintf("v%d", i)))
	}
	leader := src.waitLeader()
	mustApply(t, leader, fsm.DeleteIntentType, &fsm.DeleteIntentRequest{Name: "app-2", Time: 1})
	for i := range 4 {
		dev := fmt.Sprintf("dev-%d", i)
		mustApply(t, leader, fsm.DeviceSessionType, &fsm.DeviceSessionRequest{ID: dev, Labels: map[string]string{"region": "eu"}, SessionID: "s" + dev, Server: "s1", Conn: "c1", Connected: true, AckedRevision: 3, Time: 5})
		mustApply(t, leader, fsm.StatusBatchType, &fsm.StatusBatchRequest{Owner: "s1", Transitions: []fsm.StatusTransition{{Device: dev, Seq: 1, Time: 6, Revision: 3, Status: "converged", Full: true,
			Resources: []fsm.ResourceStatus{{Key: "app-0/motd", AppliedDigest: "ab", Effective: "ok", State: "converged"}}}}})
	}
	operator, err := src.Client(0).CreateToken(ctx, api.CreateTokenRequest{Name: "op", Policy: acl.PolicyOperator})
	if err != nil {
		t.Fatal(err)
	}

	// An operator token may not save.
	opClient := src.Client(0)
	opClient.Token = operator.Secret
	var none bytes.Buffer
	var apiErr *api.Error
	if _, err := opClient.SaveSnapshot(ctx, &none, false); !errors.As(err, &apiErr) || apiErr.StatusCode != http.StatusForbidden {
		t.Fatalf("an operator token saved a snapshot: %v", err)
	}
	want := recordLines(t, leader.State(), "intent", "history", "device", "timeline", "token", "rollout", "revoked_device")
	wantAudit := recordLines(t, leader.State(), "audit")
	index, rev := leader.State().Read().Index(), leader.State().Read().Revision()
	file, hdr := saveSnapshot(t, src.Client(0), false)
	if hdr.Index != index || hdr.Revision != rev || hdr.Server != "s1" || hdr.Stale {
		t.Fatalf("header %+v, want index %d revision %d", hdr, index, rev)
	}
	// The save is in the audit log, after the state it saved.
	waitFor(t, 5*time.Second, func() error {
		recs, err := leader.State().Read().Audit(nil, fsm.AuditQuery{Limit: 1})
		if err != nil || len(recs) != 1 || recs[0].Action != "snapshot-save" || recs[0].Target != "snapshot/"+hdr.SHA256 {
			return fmt.Errorf("newest audit record: %v %+v", err, recs)
		}
		return nil
	})

	dst := startCluster(t, 3, LocalOptions{ACL: true})
	dstClient := dst.Client(1)
	before, err := dst.waitLeader().State().Hash()
	if err != nil {
		t.Fatal(err)
	}
	hdrLen := bytes.IndexByte(file, '\n') + 1
	flipped := bytes.Clone(file)
	flipped[hdrLen+len(file[hdrLen:])/2] ^= 1
	for _, bad := range []struct {
		name string
		data []byte
		want string
	}{
		{"truncated", file[:len(file)-10], "truncated"},
		{"cut inside a record", file[:hdrLen+(len(file)-hdrLen)/2], "truncated"},
		{"corrupt", flipped, "corrupt"},
		{"not a snapshot", []byte("hello\n"), "not an intact Meteor snapshot"},
	} {
		_, err := dstClient.RestoreSnapshot(ctx, bytes.NewReader(bad.data), api.RestoreOptions{})
		if !errors.As(err, &apiErr) || apiErr.StatusCode != http.StatusBadRequest || !strings.Contains(err.Error(), bad.want) || !strings.Contains(err.Error(), "nothing changed") {
			t.Fatalf("%s file: restore = %v, want a 400 saying %q", bad.name, err, bad.want)
		}
	}
	if after, _ := dst.waitLeader().State().Hash(); after != before {
		t.Fatal("a refused restore changed the state")
	}
	// Writes still go through: the refusals left proposals open.
	dst.propose(simpleIntent("dst-only", "x"))

	res, err := dstClient.RestoreSnapshot(ctx, bytes.NewReader(file), api.RestoreOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !res.Complete || len(res.Servers) != 3 || res.BackupIndex != hdr.Index || res.Index < hdr.Index || res.Revision != hdr.Revision+1 || res.RestoreSeq != 1 {
		t.Fatalf("restore result %+v", res)
	}
	dst.waitConverged()
	for _, s := range dst.alive() {
		if diff := cmp.Diff(want, recordLines(t, s.State(), "intent", "history", "device", "timeline", "token", "rollout", "revoked_device")); diff != "" {
			t.Fatalf("%s: records differ from the backed-up cluster's (-want +got):\n%s", s.ID(), diff)
		}
		// The audit log is the backup's, then the restore.
		audit := recordLines(t, s.State(), "audit")
		if !strings.HasPrefix(audit, wantAudit+"\n") || !strings.Contains(audit[len(wantAudit):], `"action":"snapshot-restore"`) {
			t.Fatalf("%s: audit log after the restore:\n%s", s.ID(), audit)
		}
		read := s.State().Read()
		if read.Revision() != hdr.Revision+1 || read.RestoreMark().Seq != 1 {
			t.Fatalf("%s: revision %d, restore %v", s.ID(), read.Revision(), read.RestoreMark())
		}
		if _, err := read.Intent(nil, "dst-only"); !errors.Is(err, fsm.ErrNotFound) {
			t.Fatalf("%s: the replaced state's intent survived the restore", s.ID())
		}
	}
	// The tokens are the backup's: the destination's own admin token is
	// gone, the source's works.
	if _, err := dstClient.ListIntents(ctx, api.ReadOptions{}); !errors.As(err, &apiErr) || apiErr.StatusCode != http.StatusUnauthorized {
		t.Fatalf("the replaced state's admin token after the restore: %v", err)
	}
	dstClient.Token = src.AdminToken()
	list, err := dstClient.ListIntents(ctx, api.ReadOptions{})
	if err != nil || len(list.Intents) != 2 {
		t.Fatalf("intents after the restore: %v %+v", err, list)
	}
	if _, err := dstClient.PutIntent(ctx, "after", putDoc(t, simpleIntent("after", "x")), nil); err != nil {
		t.Fatalf("write after the restore: %v", err)
	}
}

// mustApply commits a command through p and fails the test if it is not
// applied.
func mustApply(t *testing.T, p proposer, typ fsm.MessageType, req any) fsm.ApplyResult {
	t.Helper()
	res, _, err := applied(context.Background(), p, typ, req)
	if err != nil {
		t.Fatalf("%s: %v", typ, err)
	}
	return res
}

// TestRestoreOlderSnapshotIntoARunningCluster: an older backup restored
// into a running three-server cluster replaces the state on every server,
// the followers included, although each applied far more than the backup
// holds; the cluster's revision still moves forward, so a connected agent
// is told of the change and pulls the backup's desired state back; later
// writes apply on top. A follower sends the client to the leader.
func TestRestoreOlderSnapshotIntoARunningCluster(t *testing.T) {
	pki := newTestPKI(t)
	c := newTestCluster(t, 3, pki.withAgents(t))
	c.propose(fileIntentN("web", 2, "v1"))
	c.propose(simpleIntent("motd", "old"))
	follower := c.follower()
	file, hdr := saveSnapshot(t, client(follower), false)
	backup := recordLines(t, stateOf(t, file), "intent", "history")

	// The cluster moves on: a new revision, a deleted intent, a new one,
	// and an agent that acknowledges the newest revision.
	c.propose(fileIntentN("web", 2, "v2"))
	mustApply(t, c.waitLeader(), fsm.DeleteIntentType, &fsm.DeleteIntentRequest{Name: "motd", Time: 1})
	c.propose(simpleIntent("new", "x"))
	c.waitConverged() // the follower answers the agent's Pull from its own replica
	a := dialAgent(t, follower.AgentAddr(), pki.deviceTLS(t, "dev-1"))
	a.send(hello(map[string]string{"region": "eu"}))
	welcome := expect[*wire.Welcome](a)
	a.send(&wire.Pull{KnownRevision: 0, Inventory: true})
	d := expect[*wire.Delta](a)
	a.send(&wire.Ack{Revision: d.TargetRevision})
	// Its session is recorded (a new device takes a revision) with the
	// revision it acknowledged.
	waitFor(t, 10*time.Second, func() error {
		rec, err := c.waitLeader().State().Read().Device(nil, "dev-1")
		if err != nil || rec.AckedRevision != d.TargetRevision {
			return fmt.Errorf("dev-1's record: %v %+v", err, rec)
		}
		return nil
	})
	replaced := c.waitLeader().State().Read().Revision()
	if d.TargetRevision <= hdr.Revision || replaced < d.TargetRevision {
		t.Fatalf("agent at %d, cluster at %d, backup at %d", d.TargetRevision, replaced, hdr.Revision)
	}
	c.waitConverged()

	res, err := client(follower).RestoreSnapshot(context.Background(), bytes.NewReader(file), api.RestoreOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !res.Complete || res.Revision <= replaced || res.Leader == follower.ID() {
		t.Fatalf("restore result %+v (replaced revision %d)", res, replaced)
	}
	hash := c.waitConverged()
	for _, s := range c.alive() {
		if diff := cmp.Diff(backup, recordLines(t, s.State(), "intent", "history")); diff != "" {
			t.Fatalf("%s: intents after the restore differ from the backup's (-want +got):\n%s", s.ID(), diff)
		}
		if h, _ := s.State().Hash(); h != hash {
			t.Fatalf("%s holds another state", s.ID())
		}
	}
	// The agent hears of a newer revision and pulls the backup's desired
	// state: web at v1 and motd back, new gone.
	// (A Notify of the writes before the restore may still come first:
	// the session registered as they committed.)
	n := expect[*wire.Notify](a)
	for i := 0; n.Revision < res.Revision; i++ {
		if i == 3 {
			t.Fatalf("Notify of revision %d, want at least %d", n.Revision, res.Revision)
		}
		n = expect[*wire.Notify](a)
	}
	a.send(&wire.Pull{KnownRevision: d.TargetRevision, Inventory: true, Applied: appliedFrom(d)})
	back := expect[*wire.Delta](a)
	var got []string
	for _, u := range back.Upserts {
		got = append(got, u.Key+"="+strings.TrimSpace(string(u.Body)))
	}
	if back.TargetRevision < res.Revision || len(got) != 3 || !strings.Contains(got[1], "v1") || !strings.Contains(got[2], "v1") || !strings.HasPrefix(got[0], "motd/") ||
		len(back.Deletes) != 1 || back.Deletes[0] != "new/motd" {
		t.Fatalf("Delta after the restore: target %d, upserts %q, deletes %q", back.TargetRevision, got, back.Deletes)
	}
	if welcome.DesiredRevision >= back.TargetRevision {
		t.Fatal("the revision went back")
	}
	// Writes go on from the restored state.
	if w := c.propose(fileIntentN("web", 2, "v3")); w.Revision <= res.Revision {
		t.Fatalf("write after the restore at revision %d, not above the restore's %d", w.Revision, res.Revision)
	}
}

// stateOf reads the state of a backup file into a replica of its own.
func stateOf(t *testing.T, file []byte) *fsm.FSM {
	t.Helper()
	_, state, err := snapshot.Open(bytes.NewReader(file))
	if err != nil {
		t.Fatal(err)
	}
	f, err := fsm.New(fsm.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Restore(state); err != nil {
		t.Fatal(err)
	}
	return f
}

// appliedFrom is an agent's inventory after applying Delta d.
func appliedFrom(d *wire.Delta) []wire.AppliedResource {
	var out []wire.AppliedResource
	for _, u := range d.Upserts {
		out = append(out, wire.AppliedResource{Key: u.Key, Digest: u.Digest, Revision: u.Revision})
	}
	return out
}

// TestRestoreKeepsRevocationsMadeSinceTheBackup: a device revoked and a
// token revoked after a backup stay revoked on every server once the
// backup is restored into the same running cluster: the device's Hello is
// refused and the token does not authenticate, while the backup's other
// tokens work and a token created after the backup does not. The restore
// says what it kept, in its result and in the audit log. Restored into a
// new cluster, the same backup brings back every token it holds.
func TestRestoreKeepsRevocationsMadeSinceTheBackup(t *testing.T) {
	c := startCluster(t, 3, LocalOptions{ACL: true, Agents: true})
	ctx := context.Background()
	admin := c.Client(0)
	leaked, err := admin.CreateToken(ctx, api.CreateTokenRequest{Name: "leaked", Policy: acl.PolicyOperator})
	if err != nil {
		t.Fatal(err)
	}
	kept, err := admin.CreateToken(ctx, api.CreateTokenRequest{Name: "kept", Policy: acl.PolicyOperator})
	if err != nil {
		t.Fatal(err)
	}
	file, _ := saveSnapshot(t, admin, false)

	if _, err := admin.RevokeDevice(ctx, "dev-stolen", "stolen"); err != nil {
		t.Fatal(err)
	}
	if err := admin.RevokeToken(ctx, leaked.Token.Accessor); err != nil {
		t.Fatal(err)
	}
	later, err := admin.CreateToken(ctx, api.CreateTokenRequest{Name: "later", Policy: acl.PolicyOperator})
	if err != nil {
		t.Fatal(err)
	}

	res, err := c.Client(1).RestoreSnapshot(ctx, bytes.NewReader(file), api.RestoreOptions{})
	if err != nil {
		t.Fatal(err)
	}
	want := api.RestoreCarried{SameCluster: true, Basis: res.Carried.Basis, KeptRevoked: []string{"dev-stolen"}, TokensNotRestored: []string{leaked.Token.Accessor}}
	if diff := cmp.Diff(want, res.Carried); diff != "" {
		t.Fatalf("carried (-want +got):\n%s", diff)
	}
	c.waitConverged()
	cert, err := c.CA().IssueDevice("dev-stolen")
	if err != nil {
		t.Fatal(err)
	}
	stolen := wire.ClientTLSConfig(c.CA().Pool(), cert, "")
	var apiErr *api.Error
	for i, s := range c.alive() {
		if revoked, _, err := s.State().Read().DeviceRevoked(nil, "dev-stolen"); err != nil || !revoked {
			t.Fatalf("%s: dev-stolen is not revoked after the restore: %v", s.ID(), err)
		}
		expectRevokedReject(t, s, stolen, hello(nil), i == 0)
		cl := c.Client(c.Index(s.ID()))
		for _, tok := range []struct {
			secret string
			works  bool
		}{{leaked.Secret, false}, {later.Secret, false}, {kept.Secret, true}} {
			cl.Token = tok.secret
			_, err := cl.ListIntents(ctx, api.ReadOptions{})
			if works := err == nil; works != tok.works {
				t.Fatalf("%s: token works %v after the restore, want %v: %v", s.ID(), works, tok.works, err)
			}
			if !tok.works && (!errors.As(err, &apiErr) || apiErr.StatusCode != http.StatusUnauthorized) {
				t.Fatalf("%s: refused token answered %v, want 401", s.ID(), err)
			}
		}
	}
	waitFor(t, 5*time.Second, func() error {
		recs, err := c.waitLeader().State().Read().Audit(nil, fsm.AuditQuery{Limit: 1})
		if err != nil || len(recs) != 1 || recs[0].Action != "snapshot-restore" ||
			!strings.Contains(recs[0].Summary, "kept 1 device revocations made since; 1 tokens revoked since left out") {
			return fmt.Errorf("newest audit record: %v %+v", err, recs)
		}
		return nil
	})

	// Into a new cluster every token of the backup comes back; the new
	// cluster's own revocations are kept.
	dst := startCluster(t, 1, LocalOptions{ACL: true})
	if _, err := dst.Client(0).RevokeDevice(ctx, "dev-other", ""); err != nil {
		t.Fatal(err)
	}
	res, err = dst.Client(0).RestoreSnapshot(ctx, bytes.NewReader(file), api.RestoreOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if res.Carried.SameCluster || res.Carried.TokensNotRestored != nil || !cmp.Equal(res.Carried.KeptRevoked, []string{"dev-other"}) {
		t.Fatalf("carried into a new cluster: %+v", res.Carried)
	}
	cl := dst.Client(0)
	for _, secret := range []string{leaked.Secret, kept.Secret} {
		cl.Token = secret
		if _, err := cl.ListIntents(ctx, api.ReadOptions{}); err != nil {
			t.Fatalf("a token of the backup after a restore into a new cluster: %v", err)
		}
	}
}

// TestRestoreCredentialsBringsBackTheBackupsTokens: with
// RestoreCredentials a restore over the same cluster brings back a token
// revoked since; a device revoked since stays revoked.
func TestRestoreCredentialsBringsBackTheBackupsTokens(t *testing.T) {
	c := startCluster(t, 1, LocalOptions{ACL: true})
	ctx := context.Background()
	admin := c.Client(0)
	tok, err := admin.CreateToken(ctx, api.CreateTokenRequest{Name: "op", Policy: acl.PolicyOperator})
	if err != nil {
		t.Fatal(err)
	}
	file, _ := saveSnapshot(t, admin, false)
	if err := admin.RevokeToken(ctx, tok.Token.Accessor); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.RevokeDevice(ctx, "dev-stolen", ""); err != nil {
		t.Fatal(err)
	}
	res, err := admin.RestoreSnapshot(ctx, bytes.NewReader(file), api.RestoreOptions{RestoreCredentials: true})
	if err != nil {
		t.Fatal(err)
	}
	if !res.Carried.SameCluster || !res.Carried.BackupCredentials || res.Carried.TokensNotRestored != nil || len(res.Carried.KeptRevoked) != 1 {
		t.Fatalf("carried: %+v", res.Carried)
	}
	cl := c.Client(0)
	cl.Token = tok.Secret
	if _, err := cl.ListIntents(ctx, api.ReadOptions{}); err != nil {
		t.Fatalf("the backup's token with restore credentials: %v", err)
	}
	if revoked, _, _ := c.Server(0).State().Read().DeviceRevoked(nil, "dev-stolen"); !revoked {
		t.Fatal("dev-stolen is not revoked after the restore")
	}
}

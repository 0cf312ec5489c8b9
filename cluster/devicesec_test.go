package cluster

import (
	"context"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/meteor-edge/meteor/chaos"
	"github.com/meteor-edge/meteor/cluster/api"
	"github.com/meteor-edge/meteor/fsm"
	"github.com/meteor-edge/meteor/fsm/acl"
	"github.com/meteor-edge/meteor/fsm/intent"
	"github.com/meteor-edge/meteor/wire"
)

// Tests of devices' identity at the servers: labels come from the control
// plane, revoked devices are closed and refused, a device reaches only its
// own state.

// untrustingAgents serves agents as a production server does: reported
// labels select nothing.
func untrustingAgents(t *testing.T, pki *testPKI) func(*Config) {
	return func(cfg *Config) {
		pki.withAgents(t)(cfg)
		cfg.TrustReportedLabels = false
	}
}

// posIntent carries what only POS gateways may hold.
func posIntent() *intent.Intent {
	return &intent.Intent{
		Name:     "pos-cert-rotation",
		Selector: map[string]string{"role": "pos-gateway"},
		Resources: []intent.Resource{{
			ID: "key", Type: "file", Spec: map[string]any{"path": "/etc/pos/tls.key", "content": "gateway private key"},
		}},
	}
}

// deviceRecord reads a device's record on s, failing the test if it has none.
func deviceRecord(t *testing.T, s *Server, id string) *fsm.DeviceRecord {
	t.Helper()
	rec, err := s.State().Read().Device(nil, id)
	if err != nil {
		t.Fatal(err)
	}
	return rec
}

// waitRecordedAs waits until every alive server has a record of the device
// that satisfies ok.
func waitRecordedAs(t *testing.T, c *testCluster, id string, ok func(*fsm.DeviceRecord) error) {
	t.Helper()
	waitFor(t, 10*time.Second, func() error {
		for _, s := range c.alive() {
			rec, err := s.State().Read().Device(nil, id)
			if err != nil {
				return fmt.Errorf("%s: %w", s.ID(), err)
			}
			if err := ok(rec); err != nil {
				return fmt.Errorf("%s: %w", s.ID(), err)
			}
		}
		return nil
	})
}

func connected(rec *fsm.DeviceRecord) error {
	if !rec.Connected {
		return errors.New("not connected")
	}
	return nil
}

func upsertKeys(d *wire.Delta) []string {
	var keys []string
	for _, u := range d.Upserts {
		keys = append(keys, u.Key)
	}
	return keys
}

// TestSelfAssertedLabelsSelectNothing is the attack of issue 10: a device
// started with --labels role=pos-gateway must not receive the gateways'
// intent. Only the control plane's label gives it, to the session, the
// status owner and the fleet endpoints alike; a later Hello or report
// does not take it away, and removing it takes the intent back.
func TestSelfAssertedLabelsSelectNothing(t *testing.T) {
	pki := newTestPKI(t)
	c := newTestCluster(t, 1, untrustingAgents(t, pki))
	c.propose(posIntent())
	s := c.Server(0)
	cl := client(s)
	ctx := context.Background()
	tlsConf := pki.deviceTLS(t, "kiosk-1")

	a := dialAgent(t, s.AgentAddr(), tlsConf)
	a.send(hello(map[string]string{"role": "pos-gateway"}))
	w := expect[*wire.Welcome](a)
	a.send(&wire.Pull{Inventory: true})
	if d := expect[*wire.Delta](a); len(d.Upserts) != 0 {
		t.Fatalf("a device claiming role=pos-gateway received %v", upsertKeys(d))
	}
	waitRecordedAs(t, c, "kiosk-1", connected)
	rec := deviceRecord(t, s, "kiosk-1")
	if rec.LabelsControlled || rec.ReportedLabels["role"] != "pos-gateway" {
		t.Fatalf("record after the Hello: controlled %v, reported %v", rec.LabelsControlled, rec.ReportedLabels)
	}
	dev, err := cl.GetDevice(ctx, "kiosk-1", apiStale)
	if err != nil {
		t.Fatal(err)
	}
	if len(dev.Labels) != 0 || dev.Resources != 0 {
		t.Fatalf("device endpoint selects by the reported labels: labels %v, %d resources", dev.Labels, dev.Resources)
	}
	if p, err := cl.IntentProgress(ctx, "pos-cert-rotation", apiStale); err != nil || p.Targeted != 0 {
		t.Fatalf("intent progress counts the claiming device: %+v, %v", p, err)
	}
	labels, err := cl.DeviceLabels(ctx, "kiosk-1", apiStale)
	if err != nil {
		t.Fatal(err)
	}
	if labels.Controlled || len(labels.Selection) != 0 || labels.Reported["role"] != "pos-gateway" || labels.TrustReported {
		t.Fatalf("labels endpoint: %+v", labels)
	}

	// The control plane labels it: the session is told, and the next pull
	// brings the intent.
	res, err := cl.SetDeviceLabels(ctx, "kiosk-1", api.SetDeviceLabelsRequest{Labels: map[string]string{"role": "pos-gateway", "site": "store-42"}})
	if err != nil {
		t.Fatal(err)
	}
	if !res.Controlled || res.Labels["role"] != "pos-gateway" || res.Selection["site"] != "store-42" {
		t.Fatalf("set labels answered %+v", res)
	}
	n := expect[*wire.Notify](a)
	a.send(&wire.Pull{KnownRevision: w.DesiredRevision, Inventory: true})
	d := expect[*wire.Delta](a)
	if keys := upsertKeys(d); fmt.Sprint(keys) != "[pos-cert-rotation/key]" {
		t.Fatalf("after labelling (notify %d): upserts %v", n.Revision, keys)
	}
	if p, err := cl.IntentProgress(ctx, "pos-cert-rotation", apiStale); err != nil || p.Targeted != 1 {
		t.Fatalf("intent progress after labelling: %+v, %v", p, err)
	}

	// A report, and a new session claiming other labels, change the
	// reported labels only.
	a.send(&wire.Ack{Revision: d.TargetRevision})
	a.send(&wire.Report{Seq: 1, DesiredRevision: d.TargetRevision, Full: true, Resources: []wire.ResourceReport{{
		Key: "pos-cert-rotation/key", AppliedDigest: d.Upserts[0].Digest, AppliedRevision: d.Upserts[0].Revision, Effective: wire.EffectiveOK,
	}}})
	expect[*wire.ReportAck](a)
	a.close()
	b := dialAgent(t, s.AgentAddr(), tlsConf)
	b.send(hello(map[string]string{"role": "kiosk"}))
	expect[*wire.Welcome](b)
	b.send(&wire.Pull{Inventory: true})
	if keys := upsertKeys(expect[*wire.Delta](b)); fmt.Sprint(keys) != "[pos-cert-rotation/key]" {
		t.Fatalf("a Hello took the control-plane label away: upserts %v", keys)
	}
	// The owner classifies the report of that session by the control-plane
	// labels, not by the session's.
	b.send(&wire.Report{Seq: 2, DesiredRevision: d.TargetRevision, Full: true, Resources: []wire.ResourceReport{{
		Key: "pos-cert-rotation/key", AppliedDigest: d.Upserts[0].Digest, AppliedRevision: d.Upserts[0].Revision, Effective: wire.EffectiveOK,
	}}})
	expect[*wire.ReportAck](b)
	s.status.mu.Lock()
	owned := s.status.devices["kiosk-1"]
	state, labelled := "", owned != nil && owned.rec.Labels["role"] == "pos-gateway"
	if owned != nil {
		state = owned.stateOf("pos-cert-rotation/key")
	}
	s.status.mu.Unlock()
	if !labelled || state != "converged" {
		t.Fatalf("the owner judged the report by other labels: labelled %v, pos key %q", labelled, state)
	}
	waitRecordedAs(t, c, "kiosk-1", func(rec *fsm.DeviceRecord) error {
		if rec.ReportedLabels["role"] != "kiosk" {
			return fmt.Errorf("reported %v", rec.ReportedLabels)
		}
		if !rec.LabelsControlled || !maps.Equal(rec.Labels, map[string]string{"role": "pos-gateway", "site": "store-42"}) {
			return fmt.Errorf("control-plane labels now %v (controlled %v)", rec.Labels, rec.LabelsControlled)
		}
		return nil
	})

	// Removing the label takes the intent back.
	if _, err := cl.SetDeviceLabels(ctx, "kiosk-1", api.SetDeviceLabelsRequest{Remove: []string{"role"}}); err != nil {
		t.Fatal(err)
	}
	expect[*wire.Notify](b)
	b.send(&wire.Pull{KnownRevision: d.TargetRevision, Inventory: true, Applied: []wire.AppliedResource{{Key: "pos-cert-rotation/key", Digest: d.Upserts[0].Digest}}})
	if d := expect[*wire.Delta](b); len(d.Upserts) != 0 || fmt.Sprint(d.Deletes) != "[pos-cert-rotation/key]" {
		t.Fatalf("after removing the label: upserts %v, deletes %v", upsertKeys(d), d.Deletes)
	}
}

// sessionsOf returns the servers holding a registered session of device.
func sessionsOf(c *testCluster, device string) map[*Server]*agentSession {
	out := map[*Server]*agentSession{}
	for _, s := range c.alive() {
		s.agents.mu.Lock()
		for sess := range s.agents.sessions {
			if sess.deviceID == device {
				out[s] = sess
			}
		}
		s.agents.mu.Unlock()
	}
	return out
}

// expectRevokedReject dials s as device id and expects its Hello to be
// rejected as unauthorized, naming the revocation; if waitClose, also the
// server's close of the connection with that code (after it lingered for
// the Reject to arrive).
func expectRevokedReject(t *testing.T, s *Server, tlsConf *tls.Config, h *wire.Hello, waitClose bool) {
	t.Helper()
	a := dialAgent(t, s.AgentAddr(), tlsConf)
	defer a.close()
	a.send(h)
	rej := expect[*wire.Reject](a)
	if rej.Code != wire.CodeUnauthorized || !strings.Contains(rej.Reason, "revoked") {
		t.Fatalf("%s: Hello of a revoked device answered %+v", s.ID(), rej)
	}
	if !waitClose {
		return
	}
	<-a.conn.Context().Done()
	if err := wire.FromQUICError(context.Cause(a.conn.Context())); !errors.Is(err, wire.ErrUnauthorized) {
		t.Fatalf("%s: connection of a revoked device closed with %v", s.ID(), err)
	}
}

func decodeSessionID(s string) (wire.SessionID, error) {
	var id wire.SessionID
	b, err := hex.DecodeString(s)
	if err != nil || len(b) != len(id) {
		return id, fmt.Errorf("session ID %q: not %d hex bytes", s, len(id))
	}
	copy(id[:], b)
	return id, nil
}

// TestRevokedDeviceIsClosedAndRefused revokes one of two real agents on a
// three-server cluster: its session is closed on the server it is on
// within seconds, its new sessions and resumptions are refused on every
// server without changing its record, the other device keeps its session,
// and after an unrevoke the agent connects again by itself.
func TestRevokedDeviceIsClosedAndRefused(t *testing.T) {
	pki := newTestPKI(t)
	c := newTestCluster(t, 3, pki.withAgents(t))
	c.propose(filesIntent("store-config", 1, "v1"))
	eu := map[string]string{"region": "eu"}
	bad := startAgent(t, pki, "dev-bad", agentAddrs(c), eu, chaos.LinkProfile{}, nil)
	good := startAgent(t, pki, "dev-good", agentAddrs(c), eu, chaos.LinkProfile{}, nil)
	waitDeviceConverged(t, c, "dev-bad")
	waitDeviceConverged(t, c, "dev-good")
	if len(sessionsOf(c, "dev-bad")) != 1 {
		t.Fatalf("dev-bad has sessions on %d servers", len(sessionsOf(c, "dev-bad")))
	}
	goodSessions := sessionsOf(c, "dev-good")
	goodID := good.Status().SessionID
	badSession := bad.Status()

	// Revoke through a server the device is not connected to.
	var via *Server
	for _, s := range c.alive() {
		if _, on := sessionsOf(c, "dev-bad")[s]; !on {
			via = s
		}
	}
	start := time.Now()
	if _, err := client(via).RevokeDevice(context.Background(), "dev-bad", "stolen"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 5*time.Second, func() error {
		if on := sessionsOf(c, "dev-bad"); len(on) != 0 {
			return fmt.Errorf("dev-bad still has a session on %d servers", len(on))
		}
		return nil
	})
	t.Logf("session of the revoked device closed %s after the revoke", time.Since(start).Round(time.Millisecond))
	waitRecordedAs(t, c, "dev-bad", func(rec *fsm.DeviceRecord) error {
		if rec.Connected {
			return errors.New("still recorded as connected")
		}
		return nil
	})
	// What a session, refused or not, would write. Not the whole record:
	// the device's owner may still commit the disconnect's status.
	type sessionFacts struct {
		Connected                bool
		SessionID, Server        string
		LastSeen                 int64
		ReportSeq, AckedRevision uint64
	}
	factsOf := func(rec *fsm.DeviceRecord) sessionFacts {
		return sessionFacts{rec.Connected, rec.SessionID, rec.Server, rec.LastSeen, rec.ReportSeq, rec.AckedRevision}
	}
	before := factsOf(deviceRecord(t, c.waitLeader(), "dev-bad"))

	// Refused everywhere, with a new session as with a resumption; the
	// agent itself keeps trying meanwhile.
	tlsConf := pki.deviceTLS(t, "dev-bad")
	sid, err := decodeSessionID(badSession.SessionID)
	if err != nil {
		t.Fatal(err)
	}
	for i, s := range c.alive() {
		expectRevokedReject(t, s, tlsConf, hello(eu), i == 0)
		expectRevokedReject(t, s, tlsConf, &wire.Hello{Major: wire.ProtocolMajor, Minor: wire.ProtocolMinor, SessionID: sid, AckedRevision: badSession.AckedRevision}, false)
	}
	c.waitConverged()
	for _, s := range c.alive() {
		if got := factsOf(deviceRecord(t, s, "dev-bad")); got != before {
			t.Fatalf("%s: refused connections changed the revoked device's record: %+v, was %+v", s.ID(), got, before)
		}
	}
	if st := bad.Status(); st.Connected {
		t.Fatalf("revoked agent reports a session with %s", st.ServerID)
	}
	// The other device kept its session on its server.
	for s, sess := range goodSessions {
		if sessionsOf(c, "dev-good")[s] != sess {
			t.Fatalf("dev-good lost its session on %s", s.ID())
		}
	}
	if st := good.Status(); !st.Connected || st.SessionID != goodID {
		t.Fatalf("dev-good: connected %v, session %s, was %s", st.Connected, st.SessionID, goodID)
	}

	// Unrevoked, the agent connects again on its own.
	if err := client(c.waitLeader()).UnrevokeDevice(context.Background(), "dev-bad"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 20*time.Second, func() error {
		if len(sessionsOf(c, "dev-bad")) != 1 || !bad.Status().Connected {
			return errors.New("dev-bad has not connected again")
		}
		return nil
	})
}

// TestRevocationReachesAPartitionedServer: a server cut off from the
// others while a device connected to it is revoked keeps the session
// while it cannot know, and closes it once its replica catches up.
func TestRevocationReachesAPartitionedServer(t *testing.T) {
	pki := newTestPKI(t)
	n := chaos.NewNetwork(1, chaos.NewFaultLog())
	t.Cleanup(func() { n.Close() })
	c := newTestCluster(t, 3, func(cfg *Config) {
		withNetwork(n)(cfg)
		pki.withAgents(t)(cfg)
	})
	c.propose(fileIntentN("store", 1, "v0"))
	f := c.follower()
	c.waitConverged()
	a := dialAgent(t, f.AgentAddr(), pki.deviceTLS(t, "dev-p"))
	a.send(hello(map[string]string{"region": "eu"}))
	expect[*wire.Welcome](a)
	waitRecordedAs(t, c, "dev-p", connected)
	waitFor(t, 10*time.Second, func() error {
		if sessionsOf(c, "dev-p")[f] == nil {
			return errors.New("session not registered")
		}
		return nil
	})

	n.Isolate(f.ID())
	waitFor(t, 20*time.Second, func() error {
		for _, s := range c.alive() {
			if s == f || !s.IsLeader() {
				continue
			}
			_, err := client(s).RevokeDevice(context.Background(), "dev-p", "lost")
			return err
		}
		return errors.New("no leader on the majority side")
	})
	if revoked, _, _ := f.State().Read().DeviceRevoked(nil, "dev-p"); revoked {
		t.Fatal("the isolated server applied the revocation")
	}
	if sessionsOf(c, "dev-p")[f] == nil {
		t.Fatal("the isolated server closed the session without knowing of the revocation")
	}

	n.Heal()
	select {
	case <-a.conn.Context().Done():
	case <-time.After(30 * time.Second):
		t.Fatal("the session of the revoked device is still open after the partition healed")
	}
	if err := wire.FromQUICError(context.Cause(a.conn.Context())); !errors.Is(err, wire.ErrUnauthorized) {
		t.Fatalf("session closed with %v, want unauthorized", err)
	}
}

// TestDeviceReachesOnlyItsOwnState: device IDs come from certificates, so
// a device pulls its own desired state, its reports change only its own
// record, and it cannot resume another device's session.
func TestDeviceReachesOnlyItsOwnState(t *testing.T) {
	pki := newTestPKI(t)
	c := newTestCluster(t, 1, untrustingAgents(t, pki))
	s := c.Server(0)
	for _, site := range []string{"a", "b"} {
		in := fileIntentN("site-"+site, 1, site)
		in.Selector = map[string]string{"site": site}
		c.propose(in)
	}
	agents := map[string]*wireAgent{}
	welcomes := map[string]*wire.Welcome{}
	for _, site := range []string{"a", "b"} {
		id := "dev-" + site
		a := dialAgent(t, s.AgentAddr(), pki.deviceTLS(t, id))
		// Each claims the other's site: claims select nothing.
		a.send(hello(map[string]string{"site": map[string]string{"a": "b", "b": "a"}[site]}))
		welcomes[id] = expect[*wire.Welcome](a)
		agents[id] = a
		waitRecordedAs(t, c, id, connected)
		if _, err := client(s).SetDeviceLabels(context.Background(), id, api.SetDeviceLabelsRequest{Labels: map[string]string{"site": site}}); err != nil {
			t.Fatal(err)
		}
	}
	var bDigest wire.Digest
	for id, a := range agents {
		a.send(&wire.Pull{Inventory: true})
		d := expect[*wire.Delta](a)
		want := "[site-" + strings.TrimPrefix(id, "dev-") + "/r00]"
		if keys := upsertKeys(d); fmt.Sprint(keys) != want {
			t.Fatalf("%s pulled %v, want %s", id, keys, want)
		}
		if id == "dev-b" {
			bDigest = d.Upserts[0].Digest
		}
	}
	// report sends device id's report of site-b/r00 and waits until it is
	// on its record.
	report := func(id string, seq uint64, r wire.ResourceReport) {
		t.Helper()
		r.Key, r.AppliedRevision = "site-b/r00", 1
		agents[id].send(&wire.Report{Seq: seq, Full: true, Resources: []wire.ResourceReport{r}})
		expect[*wire.ReportAck](agents[id])
		waitRecordedAs(t, c, id, func(rec *fsm.DeviceRecord) error {
			if rec.ReportSeq != seq {
				return fmt.Errorf("report seq %d", rec.ReportSeq)
			}
			return nil
		})
	}
	report("dev-b", 1, wire.ResourceReport{AppliedDigest: bDigest, Effective: wire.EffectiveOK})
	bBefore := deviceRecord(t, s, "dev-b")

	// dev-a reports what would be dev-b's state, with a later sequence: it
	// lands on dev-a's record only.
	report("dev-a", 9, wire.ResourceReport{AppliedDigest: wire.Digest{9}, Effective: wire.EffectiveMismatch, LastError: "forged"})
	bAfter := deviceRecord(t, s, "dev-b")
	if bAfter.ReportSeq != bBefore.ReportSeq || fmt.Sprint(bAfter.Resources) != fmt.Sprint(bBefore.Resources) {
		t.Fatalf("dev-a's report changed dev-b's record: seq %d -> %d, resources %v -> %v", bBefore.ReportSeq, bAfter.ReportSeq, bBefore.Resources, bAfter.Resources)
	}

	// dev-a with dev-b's session and resume token gets no session of it.
	thief := dialAgent(t, s.AgentAddr(), pki.deviceTLS(t, "dev-a"))
	wb := welcomes["dev-b"]
	thief.send(&wire.Hello{Major: wire.ProtocolMajor, Minor: wire.ProtocolMinor, SessionID: wb.SessionID, ResumeToken: wb.ResumeToken})
	if rej := expect[*wire.Reject](thief); rej.Code != wire.CodeSessionUnknown {
		t.Fatalf("dev-a resuming dev-b's session: %+v", rej)
	}
	if rec := deviceRecord(t, s, "dev-b"); rec.SessionID != bAfter.SessionID || rec.ModifyIndex != bAfter.ModifyIndex {
		t.Fatalf("dev-b's session record changed: %s@%d -> %s@%d", bAfter.SessionID, bAfter.ModifyIndex, rec.SessionID, rec.ModifyIndex)
	}
}

// TestDeviceEndpointsPolicies: labelling and revoking take an operator
// token (within its scope for a scoped one), unrevoking an admin token;
// each refusal leaves the device as it was, and each change is audited.
func TestDeviceEndpointsPolicies(t *testing.T) {
	c := newACLCluster(t, 1, nil)
	s := c.waitLeader()
	ctx := context.Background()
	for id, region := range map[string]string{"dev-eu": "eu", "dev-us": "us"} {
		if _, _, err := applied(ctx, s, fsm.DeviceSessionType, &fsm.DeviceSessionRequest{ID: id, Labels: map[string]string{"region": region}, SessionID: "s", Server: "s2", Conn: "c", Connected: true, Time: 1}); err != nil {
			t.Fatal(err)
		}
		if _, _, err := applied(ctx, s, fsm.SetDeviceLabelsType, &fsm.SetDeviceLabelsRequest{ID: id, Labels: map[string]string{"region": region}, Time: 1}); err != nil {
			t.Fatal(err)
		}
	}
	reader := c.token(api.CreateTokenRequest{Policy: acl.PolicyRead}).Secret
	operator := c.token(api.CreateTokenRequest{Policy: acl.PolicyOperator, Name: "ops"}).Secret
	euOps := c.token(api.CreateTokenRequest{Policy: acl.PolicyOperator, Scope: map[string]string{"region": "eu"}}).Secret
	label := func(region string) []byte { return []byte(`{"labels":{"region":"` + region + `"}}`) }

	unchanged := func(what string) {
		t.Helper()
		for id, region := range map[string]string{"dev-eu": "eu", "dev-us": "us"} {
			rec := deviceRecord(t, s, id)
			if rec.Labels["region"] != region || len(rec.Labels) != 1 {
				t.Fatalf("%s changed %s's labels to %v", what, id, rec.Labels)
			}
			if revoked, _, _ := s.State().Read().DeviceRevoked(nil, id); revoked {
				t.Fatalf("%s revoked %s", what, id)
			}
		}
	}
	for _, tc := range []struct {
		name, token, method, path string
		body                      []byte
		want                      int
	}{
		{"anonymous label", "", http.MethodPut, "/v1/devices/dev-eu/labels", label("us"), http.StatusUnauthorized},
		{"read label", reader, http.MethodPut, "/v1/devices/dev-eu/labels", label("us"), http.StatusForbidden},
		{"read revoke", reader, http.MethodPost, "/v1/devices/dev-eu/revoke", nil, http.StatusForbidden},
		{"scoped label outside scope", euOps, http.MethodPut, "/v1/devices/dev-us/labels", label("eu"), http.StatusForbidden},
		{"scoped label out of scope", euOps, http.MethodPut, "/v1/devices/dev-eu/labels", label("us"), http.StatusForbidden},
		{"scoped revoke outside scope", euOps, http.MethodPost, "/v1/devices/dev-us/revoke", nil, http.StatusForbidden},
		{"scoped revoke of an unknown device", euOps, http.MethodPost, "/v1/devices/dev-new/revoke", nil, http.StatusForbidden},
		{"label an unknown device", operator, http.MethodPut, "/v1/devices/dev-new/labels", label("eu"), http.StatusNotFound},
	} {
		if code, e, _ := call(t, s, tc.token, tc.method, tc.path, tc.body, nil); code != tc.want {
			t.Fatalf("%s: %d %+v, want %d", tc.name, code, e, tc.want)
		}
		unchanged(tc.name)
	}

	// Allowed: a scoped operator within its scope, an operator anywhere.
	if code, e, _ := call(t, s, euOps, http.MethodPut, "/v1/devices/dev-eu/labels", []byte(`{"labels":{"site":"store-1"}}`), nil); code != http.StatusOK {
		t.Fatalf("scoped label within scope: %d %+v", code, e)
	}
	if code, e, _ := call(t, s, operator, http.MethodPost, "/v1/devices/dev-us/revoke", []byte(`{"reason":"stolen"}`), nil); code != http.StatusOK {
		t.Fatalf("operator revoke: %d %+v", code, e)
	}
	list, err := tokenClient(s, reader).RevokedDevices(ctx, api.ReadOptions{})
	if err != nil || len(list.Devices) != 1 || list.Devices[0].ID != "dev-us" || list.Devices[0].Reason != "stolen" {
		t.Fatalf("revocations: %+v, %v", list, err)
	}
	// Unrevoking takes an admin.
	for _, tok := range []string{operator, euOps} {
		if code, e, _ := call(t, s, tok, http.MethodDelete, "/v1/devices/dev-us/revoke", nil, nil); code != http.StatusForbidden {
			t.Fatalf("non-admin unrevoke: %d %+v", code, e)
		}
	}
	if revoked, _, _ := s.State().Read().DeviceRevoked(nil, "dev-us"); !revoked {
		t.Fatal("a refused unrevoke undid the revocation")
	}
	if err := tokenClient(s, c.admin).UnrevokeDevice(ctx, "dev-us"); err != nil {
		t.Fatal(err)
	}
	log, err := tokenClient(s, c.admin).Audit(ctx, api.AuditQuery{Target: "device/"})
	if err != nil {
		t.Fatal(err)
	}
	var actions []string
	for _, r := range log.Records {
		actions = append(actions, r.Action+" "+r.Target+" by "+r.Actor)
	}
	want := fmt.Sprintf("[unrevoke-device device/dev-us by %s revoke-device device/dev-us by %s set-device-labels device/dev-eu by %s]",
		tokenName(t, s, c.admin), tokenName(t, s, operator), tokenName(t, s, euOps))
	if got := fmt.Sprint(actions[:3]); got != want {
		t.Fatalf("audit %s, want %s", got, want)
	}
}

// tokenName is how the audit log names the token with this secret.
func tokenName(t *testing.T, s *Server, secret string) string {
	t.Helper()
	rec, err := s.State().Read().TokenBySecretHash(nil, acl.HashSecret(secret))
	if err != nil {
		t.Fatal(err)
	}
	return fsm.Actor{Accessor: rec.Accessor, Name: rec.Name}.String()
}

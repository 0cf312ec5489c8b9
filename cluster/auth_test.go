package cluster

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strconv"
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

// aclCluster is a test cluster with the ACL on and the secret of its
// bootstrap admin token.
type aclCluster struct {
	*testCluster
	admin string
}

// newACLCluster starts n servers with the ACL on, a bootstrap admin token
// and a shared cluster secret, and waits until every server has the
// bootstrap token. tune, if set, adjusts the ACL configuration.
func newACLCluster(t *testing.T, n int, tune func(*ACLConfig)) *aclCluster {
	t.Helper()
	tok, err := acl.Generate(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	secret := make([]byte, 32)
	rand.Read(secret)
	c := newTestCluster(t, n, func(cfg *Config) {
		cfg.ClusterSecret = secret
		// The tests refuse many requests on purpose: only the rate
		// limit's own test limits them.
		cfg.ACL = &ACLConfig{BootstrapTokenHash: acl.HashSecret(tok.Secret), FailedAuthRate: 1000, FailedAuthBurst: 1000}
		if tune != nil {
			tune(cfg.ACL)
		}
	})
	ac := &aclCluster{testCluster: c, admin: tok.Secret}
	ac.waitToken(tok.Secret)
	return ac
}

// waitToken waits until every alive server authenticates secret.
func (c *aclCluster) waitToken(secret string) {
	c.t.Helper()
	waitFor(c.t, 10*time.Second, func() error {
		for _, s := range c.alive() {
			if _, err := s.State().Read().TokenBySecretHash(nil, acl.HashSecret(secret)); err != nil {
				return fmt.Errorf("%s: %w", s.ID(), err)
			}
		}
		return nil
	})
}

// token has the admin create a token and waits until every server knows it.
func (c *aclCluster) token(req api.CreateTokenRequest) *api.CreateTokenResponse {
	c.t.Helper()
	res, err := tokenClient(c.waitLeader(), c.admin).CreateToken(context.Background(), req)
	if err != nil {
		c.t.Fatal(err)
	}
	c.waitToken(res.Secret)
	return res
}

func tokenClient(s *Server, token string) *api.Client {
	cl := client(s)
	cl.Token = token
	return cl
}

// call sends one request to s with the token (none if empty) and extra
// headers, and returns the status, the decoded error body and the headers.
func call(t *testing.T, s *Server, token, method, path string, body []byte, hdr map[string]string) (int, api.Error, http.Header) {
	t.Helper()
	req, err := http.NewRequest(method, s.HTTPURL()+path, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := operatorClient(s).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	var e api.Error
	if resp.StatusCode >= 300 {
		if err := json.Unmarshal(data, &e); err != nil {
			t.Fatalf("%s %s: %d with a body that is not an error: %s", method, path, resp.StatusCode, data)
		}
	}
	return resp.StatusCode, e, resp.Header
}

func scopedIntent(name string, selector map[string]string) *intent.Intent {
	in := simpleIntent(name, "hello")
	in.Selector = selector
	return in
}

// checkUnchanged verifies that nothing an operator could have changed did:
// no intent, the voters, every server still running.
func (c *aclCluster) checkUnchanged(t *testing.T, voters []string) {
	t.Helper()
	for _, s := range c.alive() {
		recs, err := s.State().Read().Intents(nil)
		if err != nil || len(recs) != 0 {
			t.Fatalf("%s: intents %v, %v: a refused request changed the state", s.ID(), recs, err)
		}
		if s.ctx.Err() != nil {
			t.Fatalf("%s stopped after a refused leave", s.ID())
		}
	}
	if got := c.voters(); !slices.Equal(got, voters) {
		t.Fatalf("voters %v, want %v", got, voters)
	}
}

// TestACLRefusesAnonymous: with the ACL on every kind of endpoint answers
// an anonymous request 401 with WWW-Authenticate, on the leader and on a
// follower, and nothing changes; the liveness probe stays open and tells
// only "ok".
func TestACLRefusesAnonymous(t *testing.T) {
	c := newACLCluster(t, 3, nil)
	voters := c.voters()
	doc := putDoc(t, simpleIntent("web", "x"))
	for _, s := range []*Server{c.waitLeader(), c.follower()} {
		for _, ep := range []struct {
			method, path string
			body         []byte
		}{
			{"GET", "/v1/intents", nil},
			{"GET", "/v1/intents/web", nil},
			{"PUT", "/v1/intents/web", doc},
			{"DELETE", "/v1/intents/web", nil},
			{"GET", "/v1/devices", nil},
			{"GET", "/v1/status", nil},
			{"GET", "/v1/cluster/members", nil},
			{"GET", "/v1/health", nil},
			{"DELETE", "/v1/cluster/members/" + voters[0], nil},
			{"POST", "/v1/cluster/leave", nil},
			{"GET", "/v1/tokens", nil},
			{"POST", "/v1/tokens", []byte(`{"policy":"admin"}`)},
			{"DELETE", "/v1/tokens/0123456789abcdef", nil},
			{"GET", "/v1/audit", nil},
			{"GET", "/v1/snapshot", nil},
			{"PUT", "/v1/snapshot", []byte("not a snapshot")},
			{"GET", "/v1/operator/raft", nil},
			{"POST", "/v1/operator/raft/transfer-leader", nil},
			{"GET", "/v1/internal/self", nil},
			{"GET", "/v1/internal/state-hash", nil},
		} {
			code, e, hdr := call(t, s, "", ep.method, ep.path, ep.body, nil)
			internal := strings.HasPrefix(ep.path, "/v1/internal/")
			switch {
			case internal && code != http.StatusForbidden:
				t.Errorf("%s: anonymous %s %s: %d %+v, want 403", s.ID(), ep.method, ep.path, code, e)
			case !internal && (code != http.StatusUnauthorized || e.Code != api.CodeUnauthenticated || !strings.HasPrefix(hdr.Get("WWW-Authenticate"), "Bearer")):
				t.Errorf("%s: anonymous %s %s: %d %+v (WWW-Authenticate %q), want 401 unauthenticated", s.ID(), ep.method, ep.path, code, e, hdr.Get("WWW-Authenticate"))
			}
			// A malformed token is no better than none.
			if code, _, _ := call(t, s, "mtk_nope", ep.method, ep.path, ep.body, nil); !internal && code != http.StatusUnauthorized {
				t.Errorf("%s: bad token %s %s: %d, want 401", s.ID(), ep.method, ep.path, code)
			}
		}
		resp, err := operatorClient(s).Get(s.HTTPURL() + "/v1/healthz")
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || strings.TrimSpace(string(body)) != `{"ok":true}` {
			t.Errorf("%s: /v1/healthz: %d %s, want 200 {\"ok\":true}", s.ID(), resp.StatusCode, body)
		}
	}
	c.checkUnchanged(t, voters)
	// The servers' own calls to each other still work: members shows every
	// server's figures.
	m, err := tokenClient(c.follower(), c.admin).Members(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, mm := range m.Members {
		if mm.Error != "" {
			t.Errorf("member %s: %s", mm.ID, mm.Error)
		}
	}
}

// TestACLPolicies: a read token reads but cannot write an intent, remove a
// member or make a server leave (403 naming the action and the policy,
// nothing changes); an operator token writes and deletes intents but
// cannot manage tokens; a scoped operator token writes only within its
// scope; an expired token is refused.
func TestACLPolicies(t *testing.T) {
	c := newACLCluster(t, 3, nil)
	voters := c.voters()
	ctx := context.Background()
	reader := c.token(api.CreateTokenRequest{Name: "viewer", Policy: acl.PolicyRead}).Secret
	for _, s := range []*Server{c.waitLeader(), c.follower()} {
		for _, ep := range []struct {
			method, path, action string
			body                 []byte
		}{
			{"PUT", "/v1/intents/web", "write-intent", putDoc(t, simpleIntent("web", "x"))},
			{"DELETE", "/v1/intents/web", "delete-intent", nil},
			{"DELETE", "/v1/cluster/members/" + voters[0], "manage-members", nil},
			{"POST", "/v1/cluster/leave", "manage-members", nil},
			{"POST", "/v1/tokens", "manage-tokens", []byte(`{"policy":"admin"}`)},
			{"GET", "/v1/audit", "read-audit", nil},
		} {
			code, e, _ := call(t, s, reader, ep.method, ep.path, ep.body, nil)
			if code != http.StatusForbidden || e.Code != api.CodeForbidden || !strings.Contains(e.Message, ep.action) || !strings.Contains(e.Message, "policy read") {
				t.Errorf("%s: read token %s %s: %d %+v, want 403 forbidden naming %s and the policy", s.ID(), ep.method, ep.path, code, e, ep.action)
			}
		}
		if _, err := tokenClient(s, reader).ListIntents(ctx, api.ReadOptions{}); err != nil {
			t.Errorf("%s: read token cannot read: %v", s.ID(), err)
		}
	}
	c.checkUnchanged(t, voters)

	op := c.token(api.CreateTokenRequest{Name: "ops", Policy: acl.PolicyOperator}).Secret
	opc := tokenClient(c.follower(), op)
	if _, err := opc.PutIntent(ctx, "web", putDoc(t, simpleIntent("web", "x")), nil); err != nil {
		t.Fatalf("operator write: %v", err)
	}
	if _, err := opc.DeleteIntent(ctx, "web", nil); err != nil {
		t.Fatalf("operator delete: %v", err)
	}
	if _, err := opc.Tokens(ctx); !isCode(err, api.CodeForbidden) {
		t.Fatalf("operator lists tokens: %v, want forbidden", err)
	}

	// A scoped operator: region=eu only.
	admin := tokenClient(c.waitLeader(), c.admin)
	if _, err := admin.PutIntent(ctx, "us-web", putDoc(t, scopedIntent("us-web", map[string]string{"region": "us"})), nil); err != nil {
		t.Fatal(err)
	}
	eu := c.token(api.CreateTokenRequest{Name: "eu-ops", Policy: acl.PolicyOperator, Scope: map[string]string{"region": "eu"}}).Secret
	c.waitConverged()
	for _, s := range []*Server{c.waitLeader(), c.follower()} {
		euc := tokenClient(s, eu)
		if _, err := euc.PutIntent(ctx, "eu-web", putDoc(t, scopedIntent("eu-web", map[string]string{"region": "eu", "site": "s1"})), nil); err != nil {
			t.Fatalf("%s: scoped write within the scope: %v", s.ID(), err)
		}
		for name, sel := range map[string]map[string]string{
			"us-web":  {"region": "eu"}, // takes over an intent outside the scope
			"us-new":  {"region": "us"},
			"all-new": nil,
			"any-new": {"region": "*"},
		} {
			if _, err := euc.PutIntent(ctx, name, putDoc(t, scopedIntent(name, sel)), nil); !isCode(err, api.CodeForbidden) {
				t.Errorf("%s: scoped write of %s with selector %v: %v, want forbidden", s.ID(), name, sel, err)
			}
		}
		if _, err := euc.DeleteIntent(ctx, "us-web", nil); !isCode(err, api.CodeForbidden) {
			t.Errorf("%s: scoped delete outside the scope: %v, want forbidden", s.ID(), err)
		}
		if _, err := euc.DeleteIntent(ctx, "eu-web", nil); err != nil {
			t.Fatalf("%s: scoped delete within the scope: %v", s.ID(), err)
		}
		c.waitConverged()
	}
	if _, err := tokenClient(c.follower(), eu).ListIntents(ctx, api.ReadOptions{}); !isCode(err, api.CodeForbidden) {
		t.Errorf("scoped token lists every intent: %v, want forbidden", err)
	}
	enroll := c.token(api.CreateTokenRequest{Name: "store", Policy: acl.PolicyEnroll, EnrollLabels: map[string]string{"region": "eu"}, Uses: 1}).Secret
	if _, err := tokenClient(c.follower(), enroll).ListIntents(ctx, api.ReadOptions{}); !isCode(err, api.CodeUnauthenticated) {
		t.Errorf("enroll token on the API: %v, want unauthenticated", err)
	}
	in, err := admin.GetIntent(ctx, "us-web", api.ReadOptions{})
	if err != nil || in.Intent.Selector["region"] != "us" {
		t.Fatalf("us-web after the refused writes: %+v, %v", in, err)
	}

	// An expired token.
	short := c.token(api.CreateTokenRequest{Name: "short", Policy: acl.PolicyOperator, TTL: "300ms"}).Secret
	waitFor(t, 5*time.Second, func() error {
		_, err := tokenClient(c.follower(), short).ListIntents(ctx, api.ReadOptions{})
		if !isCode(err, api.CodeUnauthenticated) || !strings.Contains(err.Error(), "expired") {
			return fmt.Errorf("expired token: %v", err)
		}
		return nil
	})
}

func isCode(err error, code string) bool {
	var e *api.Error
	return errors.As(err, &e) && e.Code == code
}

// TestACLRevokedTokenEverywhere: a revoked token is refused on every server
// within seconds, as the revocation replicates.
func TestACLRevokedTokenEverywhere(t *testing.T) {
	c := newACLCluster(t, 3, nil)
	ctx := context.Background()
	res := c.token(api.CreateTokenRequest{Name: "temp", Policy: acl.PolicyOperator})
	for _, s := range c.alive() {
		if _, err := tokenClient(s, res.Secret).ListIntents(ctx, api.ReadOptions{Stale: true}); err != nil {
			t.Fatalf("%s: fresh token: %v", s.ID(), err)
		}
	}
	if err := tokenClient(c.follower(), c.admin).RevokeToken(ctx, res.Token.Accessor); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 5*time.Second, func() error {
		for _, s := range c.alive() {
			_, err := tokenClient(s, res.Secret).ListIntents(ctx, api.ReadOptions{Stale: true})
			if !isCode(err, api.CodeUnauthenticated) {
				return fmt.Errorf("%s: revoked token: %v", s.ID(), err)
			}
		}
		return nil
	})
	toks, err := tokenClient(c.follower(), c.admin).Tokens(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, tok := range toks.Tokens {
		if tok.Accessor == res.Token.Accessor {
			t.Fatalf("revoked token still listed: %+v", tok)
		}
	}
}

// bootstrapCount returns how many bootstrap admin tokens s's replica has.
func bootstrapCount(t *testing.T, s *Server) int {
	t.Helper()
	toks, err := s.State().Read().Tokens(nil)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, tok := range toks {
		if tok.Name == BootstrapTokenName && tok.Policy == acl.PolicyAdmin && tok.CreatedBy.IsSystem() {
			n++
		}
	}
	return n
}

// TestACLBootstrapTokenOnce: a fresh cluster has the bootstrap admin token
// on every server; after a leader change, and when the worker runs
// again, it still has exactly one.
func TestACLBootstrapTokenOnce(t *testing.T) {
	c := newACLCluster(t, 3, nil)
	for _, s := range c.alive() {
		if n := bootstrapCount(t, s); n != 1 {
			t.Fatalf("%s: %d bootstrap tokens after start, want 1", s.ID(), n)
		}
	}
	// A leader change: the old leader crashes, a new one is elected and
	// runs the worker, and the old one comes back as a follower.
	old := c.index(c.waitLeader())
	c.kill(old)
	c.waitLeader()
	c.restart(old)
	leader := c.waitLeader()
	// The worker, run again on the leader, finds the token and does nothing.
	w := &bootstrapToken{hash: acl.HashSecret(c.admin), state: leader.fsm, propose: leader, clock: leader.clock}
	if err := w.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	// A follower authenticates with its own replica: the restarted one
	// knows the token once it has caught up.
	c.waitConverged()
	if _, err := tokenClient(c.follower(), c.admin).PutIntent(context.Background(), "web", putDoc(t, simpleIntent("web", "x")), nil); err != nil {
		t.Fatal(err)
	}
	c.waitConverged()
	for _, s := range c.alive() {
		if n := bootstrapCount(t, s); n != 1 {
			t.Fatalf("%s: %d bootstrap tokens after a leader change, want 1", s.ID(), n)
		}
	}
	recs, err := leader.State().Read().Audit(nil, fsm.AuditQuery{Actor: "system", Target: "token/"})
	if err != nil || len(recs) != 1 || recs[0].Action != "create-token" {
		t.Fatalf("system token records in the audit log: %+v, %v; want one create-token", recs, err)
	}
}

// TestACLAuditActors: an intent put through a follower (forwarded to the
// leader), a token creation and revocation, and a member removal proxied
// by a follower record the verified actor in the audit log.
func TestACLAuditActors(t *testing.T) {
	c := newACLCluster(t, 3, nil)
	ctx := context.Background()
	op := c.token(api.CreateTokenRequest{Name: "ops", Policy: acl.PolicyOperator})
	f := c.follower()
	if _, err := tokenClient(f, op.Secret).PutIntent(ctx, "web", putDoc(t, simpleIntent("web", "x")), nil); err != nil {
		t.Fatal(err)
	}
	admin := tokenClient(f, c.admin)
	temp, err := admin.CreateToken(ctx, api.CreateTokenRequest{Name: "temp", Policy: acl.PolicyRead})
	if err != nil {
		t.Fatal(err)
	}
	if err := admin.RevokeToken(ctx, temp.Token.Accessor); err != nil {
		t.Fatal(err)
	}
	s4 := c.add()
	waitFor(t, 20*time.Second, func() error {
		if !slices.Contains(c.voters(), s4.ID()) {
			return fmt.Errorf("%s is not a voter yet", s4.ID())
		}
		return nil
	})
	c.kill(c.index(s4))
	f = c.follower()
	if err := tokenClient(f, c.admin).RemoveMember(ctx, s4.ID(), false); err != nil {
		t.Fatalf("remove %s through follower %s: %v", s4.ID(), f.ID(), err)
	}

	log, err := tokenClient(c.follower(), op.Secret).Audit(ctx, api.AuditQuery{Limit: -1})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{ // action target -> actor accessor
		"put-intent intent/web":                     op.Token.Accessor,
		"create-token token/" + temp.Token.Accessor: "",
		"revoke-token token/" + temp.Token.Accessor: "",
		"member-remove member/" + s4.ID():           "",
	}
	bootstrap, err := c.waitLeader().State().Read().Audit(nil, fsm.AuditQuery{Actor: "system", Target: "token/"})
	if err != nil || len(bootstrap) != 1 {
		t.Fatalf("bootstrap record: %+v, %v", bootstrap, err)
	}
	adminAccessor := strings.TrimPrefix(bootstrap[0].Target, "token/")
	for k, v := range want {
		if v == "" {
			want[k] = adminAccessor
		}
	}
	got := map[string]string{}
	for _, rec := range log.Records {
		if _, ok := want[rec.Action+" "+rec.Target]; ok {
			got[rec.Action+" "+rec.Target] = rec.ActorAccessor
		}
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("audit %s: actor %q, want %q (log %+v)", k, got[k], v, log.Records)
		}
	}
	one, err := tokenClient(c.follower(), op.Secret).Audit(ctx, api.AuditQuery{Actor: "ops", Target: "intent/web", Limit: 5})
	if err != nil || len(one.Records) != 1 || one.Records[0].Actor != "ops ("+op.Token.Accessor+")" {
		t.Fatalf("audit ?actor=ops&target=intent/web: %+v, %v", one, err)
	}
}

// TestACLLeaveIsAudited: an admin makes a server leave; the leaving server,
// holding no token, still has the leader remove it (its requests are
// signed as a server's), and the audit log shows who asked.
func TestACLLeaveIsAudited(t *testing.T) {
	c := newACLCluster(t, 3, nil)
	ctx := context.Background()
	waitFor(t, 20*time.Second, func() error {
		if v := c.voters(); len(v) != 3 {
			return fmt.Errorf("voters %v", v)
		}
		return nil
	})
	s3 := c.follower()
	if err := tokenClient(s3, c.admin).Leave(ctx); err != nil {
		t.Fatal(err)
	}
	var other *Server
	for _, s := range c.alive() {
		if s != s3 {
			other = s
		}
	}
	waitFor(t, 30*time.Second, func() error {
		if other.inRaftConfig(s3.ID()) {
			return fmt.Errorf("%s is still in the Raft configuration", s3.ID())
		}
		if s3.ctx.Err() == nil {
			return fmt.Errorf("%s is still running", s3.ID())
		}
		return nil
	})
	waitFor(t, 10*time.Second, func() error {
		log, err := tokenClient(other, c.admin).Audit(ctx, api.AuditQuery{Target: "member/" + s3.ID()})
		if err != nil {
			return err
		}
		for _, rec := range log.Records {
			if rec.Action == "member-leave" && rec.Actor == BootstrapTokenName+" ("+rec.ActorAccessor+")" {
				return nil
			}
		}
		return fmt.Errorf("no member-leave record by the admin: %+v", log.Records)
	})
}

// TestACLRateLimitsFailedAuthentications: repeated bad tokens from one
// address get 429 once the burst is spent; a valid token still works.
func TestACLRateLimitsFailedAuthentications(t *testing.T) {
	c := newACLCluster(t, 1, func(a *ACLConfig) { a.FailedAuthRate, a.FailedAuthBurst = 0.001, 3 })
	s := c.waitLeader()
	bad, _ := acl.Generate(rand.Reader)
	var codes []int
	for range 5 {
		code, _, _ := call(t, s, bad.Secret, "GET", "/v1/intents", nil, nil)
		codes = append(codes, code)
	}
	if want := []int{401, 401, 401, 429, 429}; !slices.Equal(codes, want) {
		t.Fatalf("statuses for bad tokens %v, want %v", codes, want)
	}
	code, e, hdr := call(t, s, "", "GET", "/v1/intents", nil, nil)
	if code != http.StatusTooManyRequests || e.Code != api.CodeRateLimited || hdr.Get("Retry-After") == "" {
		t.Fatalf("after the burst: %d %+v (Retry-After %q)", code, e, hdr.Get("Retry-After"))
	}
	if _, err := tokenClient(s, c.admin).ListIntents(context.Background(), api.ReadOptions{}); err != nil {
		t.Fatalf("valid token while the address is limited: %v", err)
	}
}

// TestACLIgnoresForgedForwarding: the actor and forwarding headers of a
// request count only under a valid signature of the cluster secret. A
// plain request claiming to be forwarded for the admin is refused; a read
// token with an admin actor header stays a read token; a forged internal
// apply carrying an admin actor writes nothing.
func TestACLIgnoresForgedForwarding(t *testing.T) {
	c := newACLCluster(t, 3, nil)
	leader := c.waitLeader()
	reader := c.token(api.CreateTokenRequest{Name: "viewer", Policy: acl.PolicyRead}).Secret
	adminRec, err := leader.State().Read().TokenBySecretHash(nil, acl.HashSecret(c.admin))
	if err != nil {
		t.Fatal(err)
	}
	forged := map[string]string{
		headerForwarded: c.follower().ID(),
		headerActor:     adminRec.Accessor,
		headerSignedAt:  strconv.FormatInt(time.Now().UnixNano(), 10),
		headerSignature: strings.Repeat("ab", 32),
	}
	doc := putDoc(t, simpleIntent("web", "x"))
	if code, _, _ := call(t, leader, "", "PUT", "/v1/intents/web", doc, forged); code != http.StatusUnauthorized {
		t.Errorf("forged forwarded put: %d, want 401", code)
	}
	if code, _, _ := call(t, leader, "", "GET", "/v1/tokens", nil, forged); code != http.StatusUnauthorized {
		t.Errorf("forged forwarded token list: %d, want 401", code)
	}
	actorOnly := map[string]string{headerActor: adminRec.Accessor}
	if code, _, _ := call(t, leader, reader, "PUT", "/v1/intents/web", doc, actorOnly); code != http.StatusForbidden {
		t.Errorf("read token with an admin actor header: %d, want 403", code)
	}
	cmd, err := fsm.Encode(fsm.PutIntentType, &fsm.PutIntentRequest{Intent: simpleIntent("web", "x"), Time: time.Now().UnixNano(),
		Actor: fsm.Actor{Accessor: adminRec.Accessor, Name: adminRec.Name}})
	if err != nil {
		t.Fatal(err)
	}
	if code, _, _ := call(t, leader, "", "POST", "/v1/internal/apply", cmd, map[string]string{headerSignature: strings.Repeat("ab", 32)}); code != http.StatusForbidden {
		t.Errorf("forged internal apply: %d, want 403", code)
	}
	batch := encodeBatch([]batchCommand{{t: fsm.PutIntentType, data: cmd, timeout: time.Second}})
	if code, _, _ := call(t, leader, "", "POST", "/v1/internal/apply-batch", batch, map[string]string{headerSignature: strings.Repeat("ab", 32)}); code != http.StatusForbidden {
		t.Errorf("forged internal batch: %d, want 403", code)
	}
	reports := encodeReportBatch([]*reportCall{{fr: &forwardedReport{Device: "pos-1", Report: (&wire.Report{Seq: 1}).Append(nil)}, timeout: time.Second}})
	if code, _, _ := call(t, leader, "", "POST", "/v1/internal/report-batch", reports, map[string]string{headerSignature: strings.Repeat("ab", 32)}); code != http.StatusForbidden {
		t.Errorf("forged report batch: %d, want 403", code)
	}
	// A request a server really signed, for a harmless body, carries that
	// signature to no other body: someone on the path cannot swap it.
	signed, err := http.NewRequest("PUT", leader.HTTPURL()+"/v1/intents/web", bytes.NewReader(putDoc(t, simpleIntent("web", "harmless"))))
	if err != nil {
		t.Fatal(err)
	}
	signed.Header.Set(headerForwarded, c.follower().ID())
	if err := c.follower().peers.signForwarded(signed, fsm.Actor{}, time.Now()); err != nil {
		t.Fatal(err)
	}
	swapped := map[string]string{}
	for _, k := range []string{headerForwarded, headerActor, headerSignedAt, headerSignature} {
		swapped[k] = signed.Header.Get(k)
	}
	if code, _, _ := call(t, leader, "", "PUT", "/v1/intents/web", doc, swapped); code != http.StatusUnauthorized {
		t.Errorf("a signed request with its body swapped: %d, want 401", code)
	}
	c.checkUnchanged(t, c.voters())
}

// TestRestartedServerKnowsNewTokens: a server that restarts replays its
// log only once the leader reaches it. Until its replica has caught up it
// does not know a token created since its last state, and it must not
// refuse that token as unknown (401): it asks the leader how far it
// committed and waits for its replica to get there, and answers 503
// catching_up, which clients retry, only when it cannot.
func TestRestartedServerKnowsNewTokens(t *testing.T) {
	faults := chaos.NewFaultLog()
	n := chaos.NewNetwork(1, faults)
	t.Cleanup(func() { n.Close() })
	tok, err := acl.Generate(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	secret := make([]byte, 32)
	rand.Read(secret)
	tc := newTestCluster(t, 3, func(cfg *Config) {
		withNetwork(n)(cfg)
		cfg.ClusterSecret = secret
		cfg.ACL = &ACLConfig{BootstrapTokenHash: acl.HashSecret(tok.Secret), FailedAuthRate: 1000, FailedAuthBurst: 1000}
	})
	c := &aclCluster{testCluster: tc, admin: tok.Secret}
	c.waitToken(tok.Secret)

	f := c.follower()
	i := c.index(f)
	c.kill(i)
	res, err := tokenClient(c.waitLeader(), c.admin).CreateToken(context.Background(), api.CreateTokenRequest{Policy: acl.PolicyRead, Name: "new"})
	if err != nil {
		t.Fatal(err)
	}
	// Back, but cut off: it cannot learn the token, nor confirm it.
	n.Isolate(f.ID())
	f = c.restart(i)
	if code, e, _ := call(t, f, res.Secret, http.MethodGet, "/v1/intents?stale=true", nil, nil); code != http.StatusServiceUnavailable || e.Code != api.CodeCatchingUp {
		t.Fatalf("a new token on a cut-off restarted server: %d %+v; want 503 %s", code, e, api.CodeCatchingUp)
	}
	n.Heal()
	waitFor(t, 60*time.Second, func() error {
		code, e, _ := call(t, f, res.Secret, http.MethodGet, "/v1/intents?stale=true", nil, nil)
		switch {
		case code == http.StatusOK:
			return nil
		case code == http.StatusServiceUnavailable && e.Code == api.CodeCatchingUp:
			return fmt.Errorf("still catching up: %s", e.Message)
		}
		t.Fatalf("a valid token on a server catching up: %d %+v", code, e)
		return nil
	})
	// An unknown token is still refused as such once the server can
	// confirm it with the leader.
	other, err := acl.Generate(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, 60*time.Second, func() error {
		code, e, _ := call(t, f, other.Secret, http.MethodGet, "/v1/intents?stale=true", nil, nil)
		switch {
		case code == http.StatusUnauthorized:
			return nil
		case code == http.StatusServiceUnavailable && e.Code == api.CodeCatchingUp:
			return fmt.Errorf("still catching up: %s", e.Message)
		}
		t.Fatalf("an unknown token: %d %+v; want 401", code, e)
		return nil
	})

	// After an election on a quiet cluster (a term's no-op and no
	// command since) an unknown token is still refused as unknown, on
	// the new leader and on a follower alike.
	if err := c.waitLeader().Raft().LeadershipTransfer().Error(); err != nil {
		t.Fatal(err)
	}
	leader := c.waitLeader()
	for _, s := range []*Server{leader, c.follower()} {
		if code, e, _ := call(t, s, other.Secret, http.MethodGet, "/v1/intents?stale=true", nil, nil); code != http.StatusUnauthorized {
			t.Fatalf("an unknown token on %s after an election: %d %+v; want 401", s.ID(), code, e)
		}
	}
}

// TestDebugProfilesAreForAdmins: the profiling endpoints exist only with
// --enable-debug, and then only for a token allowed to manage members;
// api.Client.Profile fetches a profile pprof reads and, against a server
// without them, says which flag is missing.
func TestDebugProfilesAreForAdmins(t *testing.T) {
	c := newACLCluster(t, 1, nil)
	ctx := context.Background()
	reader := c.token(api.CreateTokenRequest{Name: "viewer", Policy: acl.PolicyRead}).Secret
	if _, err := tokenClient(c.Server(0), c.admin).Profile(ctx, "heap", nil, io.Discard); err == nil || !strings.Contains(err.Error(), "--enable-debug") {
		t.Fatalf("a heap profile from a server without --enable-debug: %v", err)
	}

	c.kill(0)
	s, err := c.RestartWith(0, func(cfg *Config) { cfg.EnableDebug = true })
	if err != nil {
		t.Fatal(err)
	}
	c.waitLeader()
	var prof bytes.Buffer
	n, err := tokenClient(s, c.admin).Profile(ctx, "heap", url.Values{"gc": {"1"}}, &prof)
	if err != nil || n == 0 || int64(prof.Len()) != n || !bytes.HasPrefix(prof.Bytes(), []byte{0x1f, 0x8b}) {
		t.Fatalf("the admin's heap profile: %d bytes (%q...), %v; want a gzipped profile", n, prof.Bytes()[:min(prof.Len(), 8)], err)
	}
	var e *api.Error
	if _, err := tokenClient(s, reader).Profile(ctx, "goroutine", nil, io.Discard); !errors.As(err, &e) || e.StatusCode != http.StatusForbidden {
		t.Fatalf("a read token's goroutine profile: %v, want 403", err)
	}
	if _, err := tokenClient(s, "").Profile(ctx, "goroutine", nil, io.Discard); !errors.As(err, &e) || e.StatusCode != http.StatusUnauthorized {
		t.Fatalf("an anonymous goroutine profile: %v, want 401", err)
	}
}

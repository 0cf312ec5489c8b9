package cluster

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/memberlist"

	"github.com/meteor-edge/meteor/cluster/api"
	"github.com/meteor-edge/meteor/fsm/acl"
)

func newGossipKey(t *testing.T) []byte {
	t.Helper()
	k := make([]byte, 32)
	rand.Read(k)
	return k
}

// TestNextKeys: install appends a new key and keeps the primary; use
// moves an installed key to the front and refuses one not installed;
// remove drops a secondary key and refuses the primary.
func TestNextKeys(t *testing.T) {
	a, b, c := bytes.Repeat([]byte{1}, 16), bytes.Repeat([]byte{2}, 24), bytes.Repeat([]byte{3}, 32)
	for _, tc := range []struct {
		name    string
		keys    [][]byte
		op      string
		key     []byte
		want    [][]byte
		wantErr error
	}{
		{"install new", [][]byte{a}, keyringInstall, b, [][]byte{a, b}, nil},
		{"install again", [][]byte{a, b}, keyringInstall, b, [][]byte{a, b}, nil},
		{"use secondary", [][]byte{a, b, c}, keyringUse, c, [][]byte{c, a, b}, nil},
		{"use primary", [][]byte{a, b}, keyringUse, a, [][]byte{a, b}, nil},
		{"use missing", [][]byte{a}, keyringUse, b, nil, errKeyNotInstalled},
		{"remove secondary", [][]byte{a, b, c}, keyringRemove, b, [][]byte{a, c}, nil},
		{"remove missing", [][]byte{a}, keyringRemove, b, [][]byte{a}, nil},
		{"remove primary", [][]byte{a, b}, keyringRemove, a, nil, errRemovePrimary},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := slices.Clone(tc.keys)
			got, err := nextKeys(tc.keys, tc.op, tc.key)
			if !errors.Is(err, tc.wantErr) || !slices.EqualFunc(got, tc.want, bytes.Equal) {
				t.Fatalf("got %x, %v; want %x, %v", got, err, tc.want, tc.wantErr)
			}
			if !slices.EqualFunc(tc.keys, before, bytes.Equal) {
				t.Fatalf("nextKeys changed its input: %x, was %x", tc.keys, before)
			}
		})
	}
	if _, err := nextKeys([][]byte{a}, keyringInstall, []byte("short")); err == nil {
		t.Fatal("a 5-byte key was accepted")
	}
}

// TestKeyringFile: the keyring is seeded from the configured key once and
// written with private modes; a change survives reopening, and the file
// wins over a configured key it no longer holds; a damaged file is an
// error naming it; without a key or file there is no keyring.
func TestKeyringFile(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	logger := hclog.NewNullLogger()
	old, next := newGossipKey(t), newGossipKey(t)
	if kr, err := openKeyring(dir, nil, logger); kr != nil || err != nil {
		t.Fatalf("no key, no file: %v, %v; want no keyring", kr, err)
	}
	kr, err := openKeyring(dir, old, logger)
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(filepath.Join(dir, keyringFileName))
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("keyring file: %v, %v; want mode 0600", fi, err)
	}
	for _, op := range []string{keyringInstall, keyringUse, keyringRemove} {
		key := next
		if op == keyringRemove {
			key = old
		}
		if err := kr.change(op, key); err != nil {
			t.Fatalf("%s: %v", op, err)
		}
	}
	if err := kr.change(keyringRemove, next); !errors.Is(err, errRemovePrimary) {
		t.Fatalf("remove the primary: %v", err)
	}
	// Reopened with the old key configured, as a restart with the same
	// flags does: the keyring keeps the new key only.
	again, err := openKeyring(dir, old, logger)
	if err != nil {
		t.Fatal(err)
	}
	if got := again.keys(); !slices.EqualFunc(got, [][]byte{next}, bytes.Equal) {
		t.Fatalf("reopened keyring %x, want only the new key", got)
	}
	if err := os.WriteFile(filepath.Join(dir, keyringFileName), []byte(`{"keys":["bm90IGEga2V5"]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := openKeyring(dir, old, logger); err == nil || !strings.Contains(err.Error(), keyringFileName) {
		t.Fatalf("damaged keyring: %v, want an error naming the file", err)
	}
}

// keyringCluster is an ACL cluster of three whose gossip leave events
// (a server seeing another fail or leave) are counted.
type keyringCluster struct {
	*aclCluster
	mu     sync.Mutex
	leaves []string // guarded by mu: "s1 saw s2 leave"
}

// leaveCounter counts the leave events of one server's memberlist.
type leaveCounter struct {
	memberlist.EventDelegate
	self string
	c    *keyringCluster
}

func (l leaveCounter) NotifyLeave(n *memberlist.Node) {
	if _, ok := toMember(n); ok {
		l.c.mu.Lock()
		l.c.leaves = append(l.c.leaves, l.self+" saw "+n.Name+" leave")
		l.c.mu.Unlock()
	}
	l.EventDelegate.NotifyLeave(n)
}

func (c *keyringCluster) leaveEvents() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.leaves)
}

func newKeyringCluster(t *testing.T) *keyringCluster {
	t.Helper()
	tok, err := acl.Generate(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	secret := newGossipKey(t)
	kc := &keyringCluster{}
	tc := newTestCluster(t, 3, func(cfg *Config) {
		cfg.ClusterSecret = secret
		cfg.ACL = &ACLConfig{BootstrapTokenHash: acl.HashSecret(tok.Secret), FailedAuthRate: 1000, FailedAuthBurst: 1000}
		tune, id := cfg.GossipTuning, cfg.NodeID
		cfg.GossipTuning = func(mc *memberlist.Config) {
			tune(mc)
			mc.Events = leaveCounter{EventDelegate: mc.Events, self: id, c: kc}
		}
	})
	kc.aclCluster = &aclCluster{testCluster: tc, admin: tok.Secret}
	kc.waitToken(tok.Secret)
	return kc
}

// keyrings returns every running server's keys by fingerprint, the
// primary first.
func (c *keyringCluster) keyrings() map[string][]string {
	out := map[string][]string{}
	for _, s := range c.alive() {
		out[s.ID()] = s.gossipKeyring().view(s.ID()).Keys
	}
	return out
}

func (c *keyringCluster) wantKeyrings(t *testing.T, keys ...[]byte) {
	t.Helper()
	var want []string
	for _, k := range keys {
		want = append(want, api.KeyFingerprint(k))
	}
	for id, got := range c.keyrings() {
		if !slices.Equal(got, want) {
			t.Fatalf("%s has keys %v, want %v (the primary first)", id, got, want)
		}
	}
}

// waitAllAlive waits until every running server's gossip sees every
// running server alive.
func (c *keyringCluster) waitAllAlive(t *testing.T) {
	t.Helper()
	waitFor(t, 10*time.Second, func() error {
		for _, s := range c.alive() {
			alive := 0
			for _, m := range s.members() {
				if m.State == memberlist.StateAlive {
					alive++
				}
			}
			if alive != len(c.alive()) {
				return fmt.Errorf("%s sees %d of %d servers alive", s.ID(), alive, len(c.alive()))
			}
		}
		return nil
	})
}

// checkPushPull has every server exchange its state with every other
// (memberlist's push-pull, which Join does): it succeeds only if each can
// decrypt what the other encrypts with its primary key, which is what
// keeps probes answered and members from being suspected.
func (c *keyringCluster) checkPushPull(t *testing.T) {
	t.Helper()
	for _, s := range c.alive() {
		for _, o := range c.alive() {
			if s == o {
				continue
			}
			if n, err := s.gossip.ml.Join([]string{o.GossipAddr()}); n != 1 || err != nil {
				t.Fatalf("%s cannot exchange gossip with %s: %v", s.ID(), o.ID(), err)
			}
		}
	}
}

// tryJoin starts a bare gossip node (no Meteor metadata, so no server
// counts it) with primary as its primary key and others installed, and
// has it join s.
func tryJoin(t *testing.T, s *Server, primary []byte, others ...[]byte) error {
	t.Helper()
	cfg := testConfig(t, "joiner")
	cfg.GossipKey = primary
	g, err := startGossip(&cfg, hclog.NewNullLogger(), serverClock(&cfg), nodeMeta{})
	if err != nil {
		t.Fatal(err)
	}
	defer g.shutdown()
	for _, k := range others {
		if err := g.keyring.change(keyringInstall, k); err != nil {
			t.Fatal(err)
		}
	}
	n, err := g.ml.Join([]string{s.GossipAddr()})
	if n == 0 && err == nil {
		err = errors.New("contacted nobody")
	}
	if err == nil {
		g.ml.Leave(time.Second)
	}
	return err
}

// TestGossipKeyRotation: install a new key, make it primary and remove
// the old one through a follower; every server reports each step, no
// server ever sees another fail or leave (no flapping), a node with only
// the old key cannot join afterwards while one with the new key can, and
// a restarted server, still configured with the old key, keeps the
// rotated keyring and rejoins.
func TestGossipKeyRotation(t *testing.T) {
	c := newKeyringCluster(t)
	ctx := context.Background()
	old, next := c.GossipKey(), newGossipKey(t)
	follower := c.follower()
	cl := tokenClient(follower, c.admin)
	b64 := base64.StdEncoding.EncodeToString

	res, err := cl.GossipKeyring(ctx, false)
	if err != nil || len(res.Servers) != 3 {
		t.Fatalf("list: %+v, %v; want 3 servers", res, err)
	}
	for _, s := range res.Servers {
		if s.Primary != api.KeyFingerprint(old) || len(s.Keys) != 1 || s.Error != "" || len(s.Secrets) != 0 {
			t.Fatalf("list before rotation: %+v", s)
		}
	}
	if res, err := cl.InstallGossipKey(ctx, b64(next)); err != nil || len(res.Servers) != 3 {
		t.Fatalf("install: %+v, %v", res, err)
	}
	c.wantKeyrings(t, old, next)
	if res, err := cl.UseGossipKey(ctx, b64(next)); err != nil || len(res.Servers) != 3 {
		t.Fatalf("use: %+v, %v", res, err)
	}
	c.wantKeyrings(t, next, old)
	c.checkPushPull(t)
	// A server still encrypting with the old key, but able to read the
	// new, can join as long as the cluster keeps the old key...
	if err := tryJoin(t, c.waitLeader(), old, next); err != nil {
		t.Fatalf("before the old key's removal, a node with it as primary cannot join: %v", err)
	}
	if res, err := cl.RemoveGossipKey(ctx, b64(old)); err != nil || len(res.Servers) != 3 {
		t.Fatalf("remove: %+v, %v", res, err)
	}
	c.wantKeyrings(t, next)
	c.checkPushPull(t)
	if ev := c.leaveEvents(); len(ev) != 0 {
		t.Fatalf("membership flapped during the rotation: %v", ev)
	}
	c.waitAllAlive(t)

	res, err = cl.GossipKeyring(ctx, true)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range res.Servers {
		wantSecrets := []string(nil)
		if s.ID == follower.ID() {
			wantSecrets = []string{b64(next)}
		}
		if !slices.Equal(s.Secrets, wantSecrets) {
			t.Fatalf("list --secrets: %s shows %v, want %v (only the contacted server's)", s.ID, s.Secrets, wantSecrets)
		}
	}

	// ...and no longer once it is removed.
	if err := tryJoin(t, c.waitLeader(), old, next); err == nil {
		t.Fatal("a node with the old key as primary joined after its removal")
	}
	if err := tryJoin(t, c.waitLeader(), old); err == nil {
		t.Fatal("a node with only the old key joined after the rotation")
	}
	if err := tryJoin(t, c.waitLeader(), next); err != nil {
		t.Fatalf("a node with the new key cannot join: %v", err)
	}

	// A restart keeps the rotated keyring although the configuration
	// still holds the old key.
	i := c.index(follower)
	c.kill(i)
	s := c.restart(i)
	if got := s.gossipKeyring().view(s.ID()).Keys; !slices.Equal(got, []string{api.KeyFingerprint(next)}) {
		t.Fatalf("%s restarted with keys %v, want only the new one", s.ID(), got)
	}
	c.waitAllAlive(t)
}

// TestGossipKeyringRefusals: making primary a key some server lacks,
// removing a primary key or one installed nowhere, a bad key, anonymous,
// read and operator tokens, and unsigned, missigned or misaddressed
// internal calls are all refused, and no server's keyring changes.
func TestGossipKeyringRefusals(t *testing.T) {
	c := newKeyringCluster(t)
	ctx := context.Background()
	old, next := c.GossipKey(), newGossipKey(t)
	b64 := base64.StdEncoding.EncodeToString
	leader := c.waitLeader()
	// Only the leader has the new key.
	if err := leader.gossipKeyring().change(keyringInstall, next); err != nil {
		t.Fatal(err)
	}
	before := c.keyrings()
	unchanged := func(what string) {
		t.Helper()
		if got := c.keyrings(); fmt.Sprint(got) != fmt.Sprint(before) {
			t.Fatalf("%s changed the keyrings: %v, was %v", what, got, before)
		}
	}
	admin := tokenClient(c.follower(), c.admin)
	_, err := admin.UseGossipKey(ctx, b64(next))
	var e *api.Error
	if !errors.As(err, &e) || e.StatusCode != http.StatusConflict || !strings.Contains(e.Message, "not installed on") {
		t.Fatalf("use a key only the leader has: %v, want 409 naming the servers without it", err)
	}
	for _, s := range c.alive() {
		if s != leader && !strings.Contains(e.Message, s.ID()) {
			t.Errorf("refusal %q does not name %s", e.Message, s.ID())
		}
	}
	unchanged("use of a key not installed everywhere")

	if _, err := admin.RemoveGossipKey(ctx, b64(old)); !errors.As(err, &e) || e.StatusCode != http.StatusConflict || !strings.Contains(e.Message, "primary key of") {
		t.Fatalf("remove the primary: %v, want 409", err)
	}
	unchanged("removal of the primary")
	if _, err := admin.RemoveGossipKey(ctx, b64(newGossipKey(t))); !isCode(err, api.CodeNotFound) {
		t.Fatalf("remove a key installed nowhere: %v, want not_found", err)
	}
	for _, bad := range []string{"not base64!", b64([]byte("five!"))} {
		if _, err := admin.InstallGossipKey(ctx, bad); !isCode(err, api.CodeBadRequest) {
			t.Fatalf("install %q: %v, want bad_request", bad, err)
		}
	}
	unchanged("bad keys")

	reader := c.token(api.CreateTokenRequest{Name: "viewer", Policy: acl.PolicyRead}).Secret
	op := c.token(api.CreateTokenRequest{Name: "ops", Policy: acl.PolicyOperator}).Secret
	body := []byte(`{"key":"` + b64(next) + `"}`)
	for _, tok := range []struct {
		name, secret string
		want         int
	}{{"anonymous", "", http.StatusUnauthorized}, {"read", reader, http.StatusForbidden}, {"operator", op, http.StatusForbidden}} {
		for _, path := range []string{"/v1/cluster/keyring/install", "/v1/cluster/keyring/use", "/v1/cluster/keyring/remove"} {
			if code, e, _ := call(t, c.follower(), tok.secret, "POST", path, body, nil); code != tok.want {
				t.Errorf("%s token POST %s: %d %+v, want %d", tok.name, path, code, e, tok.want)
			}
		}
		if code, _, _ := call(t, c.follower(), tok.secret, "GET", "/v1/cluster/keyring?secrets=true", nil, nil); code != tok.want {
			t.Errorf("%s token lists the keyring: %d, want %d", tok.name, code, tok.want)
		}
	}
	unchanged("requests without an admin token")

	// The internal endpoint: unsigned, signed with another secret, and
	// signed for another server.
	follower := c.follower()
	target, _ := follower.gossip.memberByID(follower.ID())
	sealed, err := leader.peers.sealKey(keyringAAD(keyringUse, follower.ID()), next)
	if err != nil {
		t.Fatal(err)
	}
	internal := []byte(`{"op":"use","server":"` + follower.ID() + `","key":"` + sealed + `"}`)
	if code, _, _ := call(t, follower, c.admin, "POST", "/v1/internal/keyring", internal, nil); code != http.StatusForbidden {
		t.Errorf("unsigned internal keyring call: %d, want 403", code)
	}
	stranger := &peerClient{scheme: "http", hc: http.DefaultClient, self: leader.ID(), secret: []byte("another cluster's secret"), now: time.Now}
	if _, err := stranger.keyring(ctx, target, keyringInstall, next); err == nil {
		t.Error("an internal keyring call signed with another secret was accepted")
	}
	misaddressed := target
	misaddressed.ID = leader.ID() // sealed and addressed to the leader, sent to the follower
	if _, err := leader.peers.keyring(ctx, misaddressed, keyringInstall, next); err == nil || !strings.Contains(err.Error(), "reached "+follower.ID()) {
		t.Errorf("a call for %s delivered to %s: %v, want refused", leader.ID(), follower.ID(), err)
	}
	unchanged("refused internal calls")
	// The same path, properly signed and addressed, works: the refusals
	// above are the checks', not a broken path.
	if _, err := leader.peers.keyring(ctx, target, keyringInstall, next); err != nil {
		t.Fatalf("signed internal install: %v", err)
	}
	if got := follower.gossipKeyring().view(follower.ID()).Keys; len(got) != 2 {
		t.Fatalf("%s has keys %v after a signed install", follower.ID(), got)
	}
}

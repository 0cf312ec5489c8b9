package cluster

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/asn1"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/quic-go/quic-go"

	"github.com/meteor-edge/meteor/agent"
	"github.com/meteor-edge/meteor/chaos"
	"github.com/meteor-edge/meteor/cluster/pki"
	"github.com/meteor-edge/meteor/fsm"
	"github.com/meteor-edge/meteor/fsm/acl"
	"github.com/meteor-edge/meteor/wire"
)

// enrollCluster is a 3-server cluster serving agents, whose servers s1
// and s2 hold the CA key and sign device certificates; s3 does not.
type enrollCluster struct {
	*testCluster
	pki *testPKI
}

func newEnrollCluster(t *testing.T, lifetime time.Duration) *enrollCluster {
	t.Helper()
	p := newTestPKI(t)
	// Longer than a device certificate, which is never valid beyond its
	// CA.
	ca, err := pki.NewCA("enroll test CA", 200*24*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	p.ca = ca
	c := newTestCluster(t, 3, func(cfg *Config) {
		p.withAgents(t)(cfg)
		if cfg.NodeID != "s3" {
			cfg.DeviceCA = p.ca
		}
		cfg.DeviceCertLifetime = lifetime
	})
	return &enrollCluster{testCluster: c, pki: p}
}

func (c *enrollCluster) server(id string) *Server { return c.Server(c.Index(id)) }

// token creates a token through Raft and returns its accessor and secret.
func (c *enrollCluster) token(policy acl.Policy, labels map[string]string, uses uint64, created, expires time.Time) (string, string) {
	c.t.Helper()
	tok, err := acl.Generate(rand.Reader)
	if err != nil {
		c.t.Fatal(err)
	}
	req := &fsm.CreateTokenRequest{
		Accessor: tok.Accessor, SecretHash: acl.HashSecret(tok.Secret), Name: "t-" + tok.Accessor[:4],
		Policy: policy, EnrollLabels: labels, MaxUses: uses, Time: created.UnixNano(),
	}
	if !expires.IsZero() {
		req.ExpiresAt = expires.UnixNano()
	}
	c.mustApply(fsm.CreateTokenType, req)
	return tok.Accessor, tok.Secret
}

func (c *enrollCluster) mustApply(t fsm.MessageType, req any) {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, _, err := applied(ctx, c.waitLeader(), t, req); err != nil {
		c.t.Fatal(err)
	}
}

// enroll runs the agent's enrollment (agent.LoadOrEnroll) with data dir
// dir against servers.
func enroll(t *testing.T, c *enrollCluster, dir, id, token string, servers ...string) (tls.Certificate, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return agent.LoadOrEnroll(ctx, agent.EnrollConfig{
		DataDir: dir, DeviceID: id, Token: token, Servers: servers, RootCAs: c.pki.ca.Pool(),
		Logger: testLogger(t, id),
	})
}

// usesOf returns the uses counted on a token, on every server alike.
func (c *enrollCluster) usesOf(accessor string) uint64 {
	c.t.Helper()
	c.waitConverged()
	var uses []uint64
	for _, s := range c.alive() {
		tok, err := s.fsm.Read().Token(nil, accessor)
		if err != nil {
			c.t.Fatalf("%s: token %s: %v", s.ID(), accessor, err)
		}
		uses = append(uses, tok.Uses)
	}
	for _, u := range uses[1:] {
		if u != uses[0] {
			c.t.Fatalf("token %s: uses differ between servers: %v", accessor, uses)
		}
	}
	return uses[0]
}

// expectNoEnrollment checks that no server knows device id and that dir holds
// no device certificate.
func (c *enrollCluster) expectNoEnrollment(id, dir string) {
	c.t.Helper()
	c.waitConverged()
	for _, s := range c.alive() {
		if d, err := s.fsm.Read().Device(nil, id); !errors.Is(err, fsm.ErrNotFound) {
			c.t.Errorf("%s: device %s after a refused enrollment: %+v, %v", s.ID(), id, d, err)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, agent.DeviceCertFile)); !errors.Is(err, os.ErrNotExist) {
		c.t.Errorf("a refused enrollment left %s: %v", agent.DeviceCertFile, err)
	}
}

// TestEnrollDevice: a device enrolls with a single-use token through a
// follower (which forwards the token's use to the leader), gets a
// 90-day-or-less device certificate for its own key in private files, and
// connects with it; its labels are the token's, not those it claims. A
// second run finds the certificate and does not enroll again.
func TestEnrollDevice(t *testing.T) {
	c := newEnrollCluster(t, 0)
	now := time.Now()
	labels := map[string]string{"region": "eu", "site": "store-42"}
	accessor, secret := c.token(acl.PolicyEnroll, labels, 1, now, now.Add(15*time.Minute))
	via := c.follower()
	if via.ID() == "s3" {
		via = c.waitLeader()
	}
	dir := t.TempDir()
	cert, err := enroll(t, c, dir, "store-42-router", secret, via.AgentAddr())
	if err != nil {
		t.Fatal(err)
	}
	if id, err := wire.DeviceIDFromCert(cert.Leaf); err != nil || id != "store-42-router" {
		t.Fatalf("enrolled certificate names %q, %v", id, err)
	}
	if life := cert.Leaf.NotAfter.Sub(now); life > pki.DefaultDeviceValidity+time.Minute || life < pki.DefaultDeviceValidity-time.Hour {
		t.Errorf("device certificate valid for %v, want about %v", life, pki.DefaultDeviceValidity)
	}
	for _, name := range []string{agent.DeviceCertFile, agent.EnrollCAFile} {
		fi, err := os.Stat(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		if m := fi.Mode().Perm(); m != 0o600 {
			t.Errorf("%s has mode %o, want 600", name, m)
		}
	}
	if left, _ := filepath.Glob(filepath.Join(dir, "*key*")); len(left) != 0 {
		t.Errorf("files left after enrolling: %v", left)
	}
	if got := c.usesOf(accessor); got != 1 {
		t.Errorf("token uses = %d, want 1", got)
	}

	// The agent runs with what it enrolled for; it claims other labels.
	again, err := enroll(t, c, dir, "store-42-router", "", via.AgentAddr())
	if err != nil {
		t.Fatalf("a second run does not find its certificate: %v", err)
	}
	if !again.Leaf.Equal(cert.Leaf) {
		t.Error("a second run enrolled again")
	}
	ra := startEnrolledAgent(t, c, dir, "store-42-router", again, map[string]string{"region": "us", "role": "pos-gateway"}, nil)
	waitFor(t, 15*time.Second, func() error {
		if !ra.Status().Connected {
			return errors.New("agent not connected")
		}
		for _, s := range c.alive() {
			d, err := s.fsm.Read().Device(nil, "store-42-router")
			if err != nil {
				return err
			}
			if !d.LabelsControlled || len(d.Labels) != 2 || d.Labels["site"] != "store-42" || d.Labels["region"] != "eu" {
				return errors.New(s.ID() + ": labels not the token's: " + strings.Join(keysOf(d.Labels), ","))
			}
		}
		return nil
	})
}

func keysOf(m map[string]string) []string {
	var out []string
	for k, v := range m {
		out = append(out, k+"="+v)
	}
	return out
}

// startEnrolledAgent runs a real agent with an enrolled certificate kept
// (and renewed) in dir.
func startEnrolledAgent(t *testing.T, c *enrollCluster, dir, id string, cert tls.Certificate, labels map[string]string, tune func(*agent.Config)) *runningAgent {
	t.Helper()
	return startAgent(t, c.pki, id, agentAddrs(c.testCluster), labels, chaos.LinkProfile{}, func(cfg *agent.Config) {
		cfg.DataDir = dir
		cfg.Certificate = cert
		cfg.CertificateDir = dir
		if tune != nil {
			tune(cfg)
		}
	})
}

// TestEnrollRefusals: an expired, a used-up, a revoked and an operator
// token, a revoked device ID and a device the servers know already are
// refused; no certificate is written, no device appears, no use is
// counted.
func TestEnrollRefusals(t *testing.T) {
	c := newEnrollCluster(t, 0)
	now := time.Now()
	eu := map[string]string{"region": "eu"}
	addr := c.server("s1").AgentAddr()
	refused := func(t *testing.T, id, secret, want string) {
		t.Helper()
		dir := t.TempDir()
		_, err := enroll(t, c, dir, id, secret, addr)
		var ee *wire.EnrollError
		if !errors.As(err, &ee) || ee.Status != wire.EnrollRefused || !strings.Contains(err.Error(), want) {
			t.Fatalf("enrollment of %s: %v, want a refusal saying %q", id, err, want)
		}
		c.expectNoEnrollment(id, dir)
	}

	t.Run("expired", func(t *testing.T) {
		acc, secret := c.token(acl.PolicyEnroll, eu, 1, now.Add(-2*time.Hour), now.Add(-time.Hour))
		refused(t, "late", secret, fsm.ErrTokenExpired.Error())
		if u := c.usesOf(acc); u != 0 {
			t.Errorf("uses = %d", u)
		}
	})
	t.Run("reused", func(t *testing.T) {
		acc, secret := c.token(acl.PolicyEnroll, eu, 1, now, now.Add(time.Hour))
		if _, err := enroll(t, c, t.TempDir(), "first", secret, addr); err != nil {
			t.Fatal(err)
		}
		// The second use goes to the other signing server: the count is
		// the replicated state's.
		_, err := enroll(t, c, t.TempDir(), "second", secret, c.server("s2").AgentAddr())
		if err == nil || !strings.Contains(err.Error(), fsm.ErrTokenExhausted.Error()) {
			t.Fatalf("second use of a single-use token: %v", err)
		}
		refused(t, "second", secret, fsm.ErrTokenExhausted.Error())
		if u := c.usesOf(acc); u != 1 {
			t.Errorf("uses = %d, want 1", u)
		}
	})
	t.Run("raced", func(t *testing.T) {
		// Devices racing for a single-use token through both signing
		// servers: each server's replica shows a use left, and only the
		// committed use counts. Exactly one gets a certificate.
		acc, secret := c.token(acl.PolicyEnroll, eu, 1, now, now.Add(time.Hour))
		c.waitConverged()
		const n = 6
		errs := make(chan error, n)
		for i := range n {
			via := c.server([]string{"s1", "s2"}[i%2]).AgentAddr()
			go func() {
				_, err := enroll(t, c, t.TempDir(), fmt.Sprintf("racer-%d", i), secret, via)
				errs <- err
			}()
		}
		won := 0
		for range n {
			if err := <-errs; err == nil {
				won++
			} else if !strings.Contains(err.Error(), fsm.ErrTokenExhausted.Error()) {
				t.Errorf("a losing enrollment: %v", err)
			}
		}
		if won != 1 {
			t.Errorf("%d of %d enrollments with a single-use token succeeded", won, n)
		}
		if u := c.usesOf(acc); u != 1 {
			t.Errorf("uses = %d, want 1", u)
		}
	})
	t.Run("revoked token", func(t *testing.T) {
		acc, secret := c.token(acl.PolicyEnroll, eu, 5, now, now.Add(time.Hour))
		c.mustApply(fsm.RevokeTokenType, &fsm.RevokeTokenRequest{Accessor: acc, Time: now.UnixNano()})
		// Refused by s1's replica ("unknown or revoked"), or, if s1 has
		// not applied the revocation yet, by the state machine ("not
		// found").
		dir := t.TempDir()
		_, err := enroll(t, c, dir, "after-revoke", secret, addr)
		if err == nil || !strings.Contains(err.Error(), "unknown or revoked") && !strings.Contains(err.Error(), "not found") {
			t.Fatalf("enrollment with a revoked token: %v", err)
		}
		c.expectNoEnrollment("after-revoke", dir)
	})
	t.Run("operator token", func(t *testing.T) {
		acc, secret := c.token(acl.PolicyOperator, nil, 0, now, now.Add(time.Hour))
		refused(t, "by-operator", secret, "cannot enroll")
		if u := c.usesOf(acc); u != 0 {
			t.Errorf("uses = %d", u)
		}
	})
	t.Run("revoked device", func(t *testing.T) {
		acc, secret := c.token(acl.PolicyEnroll, eu, 5, now, now.Add(time.Hour))
		c.mustApply(fsm.RevokeDeviceType, &fsm.RevokeDeviceRequest{ID: "stolen", Time: now.UnixNano()})
		dir := t.TempDir()
		_, err := enroll(t, c, dir, "stolen", secret, addr)
		if err == nil || !strings.Contains(err.Error(), "revoked") {
			t.Fatalf("enrollment of a revoked device: %v", err)
		}
		if _, err := os.Stat(filepath.Join(dir, agent.DeviceCertFile)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("certificate written: %v", err)
		}
		if u := c.usesOf(acc); u != 0 {
			t.Errorf("uses = %d", u)
		}
	})
	t.Run("known device", func(t *testing.T) {
		// A device that connected with an offline-issued certificate is
		// not handed to a token holder.
		ra := startAgent(t, c.pki, "offline-issued", agentAddrs(c.testCluster), eu, chaos.LinkProfile{}, nil)
		waitFor(t, 15*time.Second, func() error {
			if _, err := c.waitLeader().fsm.Read().Device(nil, "offline-issued"); err != nil {
				return err
			}
			return nil
		})
		ra.stop()
		before, _ := c.waitLeader().fsm.Read().Device(nil, "offline-issued")
		acc, secret := c.token(acl.PolicyEnroll, map[string]string{"role": "pos-gateway"}, 5, now, now.Add(time.Hour))
		dir := t.TempDir()
		if _, err := enroll(t, c, dir, "offline-issued", secret, addr); err == nil || !strings.Contains(err.Error(), "known already") {
			t.Fatalf("enrollment of a known device: %v", err)
		}
		after, _ := c.waitLeader().fsm.Read().Device(nil, "offline-issued")
		if after.LabelsControlled || after.Labels["role"] != "" || after.LabelsIndex != before.LabelsIndex {
			t.Errorf("labels changed: %+v", after)
		}
		if u := c.usesOf(acc); u != 0 {
			t.Errorf("uses = %d", u)
		}
	})
}

// TestEnrollWithoutCAKey: a server without the CA key says what to
// configure; the agent then enrolls through the next server.
func TestEnrollWithoutCAKey(t *testing.T) {
	c := newEnrollCluster(t, 0)
	now := time.Now()
	acc, secret := c.token(acl.PolicyEnroll, map[string]string{"region": "eu"}, 1, now, now.Add(time.Hour))
	_, err := enroll(t, c, t.TempDir(), "d1", secret, c.server("s3").AgentAddr())
	var ee *wire.EnrollError
	if !errors.As(err, &ee) || ee.Status != wire.EnrollUnavailable || !strings.Contains(err.Error(), "--ca-key-file") {
		t.Fatalf("enrollment through a server without the CA key: %v", err)
	}
	if u := c.usesOf(acc); u != 0 {
		t.Fatalf("a server that cannot sign spent a use: %d", u)
	}
	if _, err := enroll(t, c, t.TempDir(), "d1", secret, c.server("s3").AgentAddr(), c.server("s1").AgentAddr()); err != nil {
		t.Fatalf("enrollment falling over to a server with the key: %v", err)
	}
}

// enrollDial opens an enrollment connection to addr, presenting cert if
// set.
func enrollDial(t *testing.T, c *enrollCluster, addr string, cert *tls.Certificate) *quic.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := quic.DialAddr(ctx, addr, wire.EnrollClientTLSConfig(c.pki.ca.Pool(), cert, ""), wire.ClientQUICConfig())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.CloseWithError(wire.CloseNormal, "") })
	return conn
}

// exchange sends one enrollment request and returns the answer.
func exchange(t *testing.T, conn *quic.Conn, req *wire.EnrollRequest) *wire.EnrollAnswer {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	str, err := conn.OpenStreamSync(ctx)
	if err != nil {
		t.Fatal(err)
	}
	str.SetDeadline(time.Now().Add(20 * time.Second))
	if err := wire.WriteEnrollRequest(str, req); err != nil {
		t.Fatal(err)
	}
	str.Close()
	ans, err := wire.ReadEnrollAnswer(str)
	if err != nil {
		t.Fatalf("read answer: %v", wire.FromQUICError(err))
	}
	return ans
}

// TestEnrollCSRSmuggling: a request asking for a CA, a server identity
// and server authentication gets a device certificate and nothing more.
func TestEnrollCSRSmuggling(t *testing.T) {
	c := newEnrollCluster(t, 0)
	now := time.Now()
	_, secret := c.token(acl.PolicyEnroll, map[string]string{"region": "eu"}, 1, now, now.Add(time.Hour))
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	bc, _ := pkixBasicConstraintsCA()
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{
		Subject:         pkix.Name{CommonName: "s9"},
		DNSNames:        []string{wire.ClusterServerName},
		IPAddresses:     []net.IP{net.IPv4(127, 0, 0, 1)},
		URIs:            []*url.URL{wire.ServerURI("s9")},
		ExtraExtensions: []pkix.Extension{bc},
	}, key)
	if err != nil {
		t.Fatal(err)
	}
	ans := exchange(t, enrollDial(t, c, c.server("s1").AgentAddr(), nil), &wire.EnrollRequest{Kind: wire.EnrollWithToken, Token: secret, CSR: der})
	if ans.Status != wire.EnrollOK {
		t.Fatalf("answer %v: %s", ans.Status, ans.Reason)
	}
	leaf, err := x509.ParseCertificate(ans.Certificates[0])
	if err != nil {
		t.Fatal(err)
	}
	if leaf.IsCA || len(leaf.DNSNames) != 0 || len(leaf.IPAddresses) != 0 || len(leaf.ExtKeyUsage) != 1 || leaf.ExtKeyUsage[0] != x509.ExtKeyUsageClientAuth {
		t.Errorf("issued certificate: CA %v, DNS %v, IPs %v, usages %v", leaf.IsCA, leaf.DNSNames, leaf.IPAddresses, leaf.ExtKeyUsage)
	}
	if _, err := wire.ServerIDFromCert(leaf); err == nil {
		t.Error("the issued certificate names a server")
	}
	if id, err := wire.DeviceIDFromCert(leaf); err != nil || id != "s9" {
		t.Errorf("device ID %q, %v", id, err)
	}
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: c.pki.ca.Pool(), DNSName: wire.ClusterServerName}); err == nil {
		t.Error("the issued certificate verifies as a server")
	}
}

// TestEnrollPort: the enrollment ALPN serves enrollment only, refuses a
// server certificate and malformed requests, and renews only the
// presented device's own certificate; the session ALPN still requires a
// device certificate.
func TestEnrollPort(t *testing.T) {
	c := newEnrollCluster(t, 0)
	addr := c.server("s1").AgentAddr()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	// No certificate on the session ALPN: refused as before.
	noCert := wire.ClientTLSConfig(c.pki.ca.Pool(), tls.Certificate{}, "")
	noCert.Certificates = nil
	if conn, err := quic.DialAddr(ctx, addr, noCert, wire.ClientQUICConfig()); err == nil {
		str, err := conn.OpenStreamSync(ctx)
		if err == nil {
			wire.NewWriter(str).Write(&wire.Hello{Major: wire.ProtocolMajor, Minor: wire.ProtocolMinor})
			_, err = wire.NewReader(str).Read()
		}
		if err == nil {
			t.Fatal("the session ALPN served a client without a certificate")
		}
	}
	// Both ALPNs offered: the connection is an enrollment one, where a
	// Hello is malformed input.
	both := wire.EnrollClientTLSConfig(c.pki.ca.Pool(), nil, "")
	both.NextProtos = []string{wire.ALPN, wire.EnrollALPN}
	conn, err := quic.DialAddr(ctx, addr, both, wire.ClientQUICConfig())
	if err != nil {
		t.Fatal(err)
	}
	if p := conn.ConnectionState().TLS.NegotiatedProtocol; p != wire.EnrollALPN {
		t.Fatalf("negotiated %q", p)
	}
	str, _ := conn.OpenStreamSync(ctx)
	wire.NewWriter(str).Write(&wire.Hello{Major: wire.ProtocolMajor, Minor: wire.ProtocolMinor, Labels: map[string]string{"a": "b"}})
	str.Close()
	if _, err := wire.ReadEnrollAnswer(str); !errors.Is(wire.FromQUICError(err), wire.ErrProtocol) {
		t.Errorf("a Hello on the enrollment ALPN: %v, want a protocol error", err)
	}

	// A server certificate presented for enrollment is refused in the
	// handshake.
	srv, _ := c.pki.ca.IssueServer("s9", []string{"127.0.0.1"})
	// With TLS 1.3 the client may finish its handshake before the server
	// refuses the certificate: the refusal then ends the connection.
	conn, err = quic.DialAddr(ctx, addr, wire.EnrollClientTLSConfig(c.pki.ca.Pool(), &srv, ""), wire.ClientQUICConfig())
	if err == nil {
		_, err = conn.AcceptStream(ctx)
	}
	if err == nil || (!strings.Contains(err.Error(), "identity") && !strings.Contains(err.Error(), "certificate")) {
		t.Errorf("server certificate on the enrollment ALPN: %v, want refused for its identity", err)
	}

	// Made-up tokens are committed (to learn whether they exist) only
	// within a small budget: a flood of them does not fill the Raft log.
	key0, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	csr0, _ := pki.NewDeviceCSR("guesser", key0)
	refusedN, unavailableN := 0, 0
	for range 12 {
		fake, _ := acl.Generate(rand.Reader)
		switch ans := exchange(t, enrollDial(t, c, addr, nil), &wire.EnrollRequest{Kind: wire.EnrollWithToken, Token: fake.Secret, CSR: csr0}); ans.Status {
		case wire.EnrollRefused:
			refusedN++
		case wire.EnrollUnavailable:
			unavailableN++
		default:
			t.Fatalf("made-up token: %v %s", ans.Status, ans.Reason)
		}
	}
	if refusedN > 8 || unavailableN == 0 {
		t.Errorf("12 made-up tokens: %d committed and refused, %d turned away before Raft", refusedN, unavailableN)
	}

	// Renewal: only with a device certificate, for the same device, not
	// revoked.
	dev, _ := c.pki.ca.IssueDevice("renewer")
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	csrFor := func(id string) []byte {
		der, err := pki.NewDeviceCSR(id, key)
		if err != nil {
			t.Fatal(err)
		}
		return der
	}
	if ans := exchange(t, enrollDial(t, c, addr, nil), &wire.EnrollRequest{Kind: wire.EnrollRenew, CSR: csrFor("renewer")}); ans.Status != wire.EnrollRefused {
		t.Errorf("renewal without a certificate: %v %s", ans.Status, ans.Reason)
	}
	if ans := exchange(t, enrollDial(t, c, addr, &dev), &wire.EnrollRequest{Kind: wire.EnrollRenew, CSR: csrFor("other")}); ans.Status != wire.EnrollRefused {
		t.Errorf("renewal for another device: %v %s", ans.Status, ans.Reason)
	}
	ans := exchange(t, enrollDial(t, c, addr, &dev), &wire.EnrollRequest{Kind: wire.EnrollRenew, CSR: csrFor("renewer")})
	if ans.Status != wire.EnrollOK {
		t.Fatalf("renewal: %v %s", ans.Status, ans.Reason)
	}
	c.mustApply(fsm.RevokeDeviceType, &fsm.RevokeDeviceRequest{ID: "renewer", Time: time.Now().UnixNano()})
	waitFor(t, 10*time.Second, func() error {
		if ok, _, _ := c.server("s1").fsm.Read().DeviceRevoked(nil, "renewer"); !ok {
			return errors.New("revocation not applied on s1")
		}
		return nil
	})
	if ans := exchange(t, enrollDial(t, c, addr, &dev), &wire.EnrollRequest{Kind: wire.EnrollRenew, CSR: csrFor("renewer")}); ans.Status != wire.EnrollRefused {
		t.Errorf("renewal of a revoked device: %v %s", ans.Status, ans.Reason)
	}
}

// TestCertificateRotation: with 6-second device certificates, an enrolled
// agent renews its certificate before it expires, for a new key, keeps its
// session meanwhile, and reconnects with the new certificate once the
// first one has expired.
func TestCertificateRotation(t *testing.T) {
	const lifetime = 6 * time.Second
	c := newEnrollCluster(t, lifetime)
	now := time.Now()
	_, secret := c.token(acl.PolicyEnroll, map[string]string{"region": "eu"}, 1, now, now.Add(time.Hour))
	dir := t.TempDir()
	first, err := enroll(t, c, dir, "rotor", secret, c.server("s1").AgentAddr())
	if err != nil {
		t.Fatal(err)
	}
	ra := startEnrolledAgent(t, c, dir, "rotor", first, map[string]string{"region": "eu"}, func(cfg *agent.Config) {
		cfg.Servers = []string{c.server("s1").AgentAddr(), c.server("s2").AgentAddr()}
	})
	waitFor(t, 10*time.Second, func() error {
		if !ra.Status().Connected {
			return errors.New("not connected")
		}
		return nil
	})
	session := ra.Status().SessionID

	var renewed tls.Certificate
	waitFor(t, lifetime, func() error {
		b, err := os.ReadFile(filepath.Join(dir, agent.DeviceCertFile))
		if err != nil {
			return err
		}
		cert, err := pki.LoadCertificate(b, b)
		if err != nil {
			return err
		}
		if cert.Leaf.Equal(first.Leaf) {
			return errors.New("not renewed yet")
		}
		renewed = cert
		return nil
	})
	if !time.Now().Before(first.Leaf.NotAfter) {
		t.Errorf("renewed only after the certificate expired")
	}
	if renewed.PrivateKey.(*ecdsa.PrivateKey).Equal(first.PrivateKey) {
		t.Error("renewal kept the old key")
	}
	if fi, err := os.Stat(filepath.Join(dir, agent.DeviceCertFile)); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("renewed certificate file: %v, %v", fi.Mode(), err)
	}
	if st := ra.Status(); !st.Connected || st.SessionID != session {
		t.Errorf("after renewal: connected %v, session %s (was %s)", st.Connected, st.SessionID, session)
	}

	// Once the first certificate expired, a new connection succeeds: it
	// presents a renewed one.
	waitFor(t, 2*lifetime, func() error {
		if time.Now().Before(first.Leaf.NotAfter) {
			return errors.New("first certificate still valid")
		}
		return nil
	})
	for _, s := range c.alive() {
		if s.agents == nil {
			continue
		}
		s.agents.mu.Lock()
		for sess := range s.agents.sessions {
			sess.conn.CloseWithError(wire.CloseShuttingDown, "test: reconnect")
		}
		s.agents.mu.Unlock()
	}
	waitFor(t, 15*time.Second, func() error {
		for _, s := range c.alive() {
			if s.agents == nil {
				continue
			}
			s.agents.mu.Lock()
			defer s.agents.mu.Unlock()
			for sess := range s.agents.sessions {
				pcs := sess.conn.ConnectionState().TLS.PeerCertificates
				if len(pcs) > 0 && !pcs[0].Equal(first.Leaf) && pcs[0].NotAfter.After(first.Leaf.NotAfter) {
					return nil
				}
			}
		}
		return errors.New("no session with a renewed certificate")
	})
	if st := ra.Status(); st.SessionID != session {
		t.Logf("session after reconnecting: %s (was %s)", st.SessionID, session)
	}
}

// pkixBasicConstraintsCA is a basicConstraints extension saying "CA",
// for requests that try to smuggle it in.
func pkixBasicConstraintsCA() (pkix.Extension, error) {
	v, err := asn1.Marshal(struct {
		IsCA bool `asn1:"optional"`
	}{true})
	return pkix.Extension{Id: asn1.ObjectIdentifier{2, 5, 29, 19}, Critical: true, Value: v}, err
}

// TestDeviceCAValidate: a CA key that is not the agent port's CA is
// refused at start-up.
func TestDeviceCAValidate(t *testing.T) {
	p := newTestPKI(t)
	cfg := testConfig(t, "s1")
	p.withAgents(t)(&cfg)
	cfg.DeviceCA = p.ca
	if err := cfg.Validate(); err != nil {
		t.Fatalf("the cluster CA: %v", err)
	}
	other, err := pki.NewCA("other", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	cfg.DeviceCA = other
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "--ca-key-file") {
		t.Errorf("another CA's key: %v", err)
	}
	cfg.DeviceCA, cfg.DeviceCertLifetime = p.ca, -time.Second
	if err := cfg.Validate(); err == nil {
		t.Error("negative device certificate lifetime accepted")
	}
}

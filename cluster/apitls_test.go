package cluster

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"errors"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/meteor-edge/meteor/cluster/pki"
	"github.com/meteor-edge/meteor/fsm"
	"github.com/meteor-edge/meteor/wire"
)

// httpsClient returns a client that trusts the cluster of s as an
// operator does and presents cert, if set.
func httpsClient(s *Server, cert *tls.Certificate) *http.Client {
	conf := OperatorTLS(s.config.PeerTLS.CAs)
	if cert != nil {
		// Present it whatever CAs the server names as acceptable (Go's
		// client would otherwise send no certificate of another CA).
		conf.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return cert, nil }
	}
	return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: conf, DisableKeepAlives: true}}
}

// TestAPIRefusesPlaintextAndStrangers: a server with its certificate
// serves its HTTP API over TLS only. A plaintext request, a client
// presenting a device certificate or another CA's certificate, and an
// operator trusting another CA get nowhere, and none of them changes the
// state.
func TestAPIRefusesPlaintextAndStrangers(t *testing.T) {
	c := newTestCluster(t, 1, nil)
	s := c.waitLeader()
	before := s.fsm.Read().Index()
	doc := putDoc(t, simpleIntent("evil", "plaintext"))

	// Plaintext: the TLS listener answers 400 and reads nothing further.
	conn, err := net.DialTimeout("tcp", s.HTTPAddr(), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	conn.SetDeadline(time.Now().Add(5 * time.Second))
	req, _ := http.NewRequest(http.MethodPut, "http://"+s.HTTPAddr()+"/v1/intents/evil", bytes.NewReader(doc))
	if err := req.Write(conn); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), req)
	conn.Close()
	if err == nil {
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest {
			t.Errorf("plaintext PUT: %s, want 400 (an HTTP request to an HTTPS server)", resp.Status)
		}
	}

	ca := c.CA()
	device, err := ca.IssueDevice("pos-1")
	if err != nil {
		t.Fatal(err)
	}
	foreign, err := pki.NewCA("attacker CA", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	stranger, err := foreign.IssueServer(s.ID(), []string{"127.0.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	for name, cert := range map[string]*tls.Certificate{"device certificate": &device, "another CA's server certificate": &stranger} {
		_, err := httpsClient(s, cert).Get(s.HTTPURL() + "/v1/healthz")
		if err == nil {
			t.Errorf("client with a %s: handshake succeeded, want it refused", name)
		}
	}
	// An operator who trusts another CA does not trust this server.
	wrong := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: OperatorTLS(foreign.Pool())}}
	if _, err := wrong.Get(s.HTTPURL() + "/v1/healthz"); err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Errorf("operator trusting another CA: %v, want a certificate error", err)
	}
	// The operator's client works, which shows the refusals above are
	// about who asks.
	if resp, err := httpsClient(s, nil).Get(s.HTTPURL() + "/v1/healthz"); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("operator's client: %v %v, want 200", resp, err)
	}
	if _, err := s.fsm.Read().Intent(nil, "evil"); !errors.Is(err, fsm.ErrNotFound) {
		t.Errorf("intent evil: %v, want not found", err)
	}
	if got := s.fsm.Read().Index(); got != before {
		t.Errorf("state index moved from %d to %d", before, got)
	}
}

// TestInternalEndpointsNeedAServerCertificate replays a server-to-server
// write exactly as a server signed it (body and cluster-secret HMAC) from
// someone without a server certificate, and with another server's
// certificate claiming to be the signer: both are refused and nothing is
// committed. The same request from the server that signed it commits.
func TestInternalEndpointsNeedAServerCertificate(t *testing.T) {
	c := newTestCluster(t, 3, func(cfg *Config) { cfg.ClusterSecret = []byte("0123456789abcdef0123456789abcdef") })
	leader := c.waitLeader()
	var follower, other *Server
	for _, s := range c.Servers() {
		switch {
		case s == leader:
		case follower == nil:
			follower = s
		default:
			other = s
		}
	}
	body, err := fsm.Encode(fsm.PutIntentType, &fsm.PutIntentRequest{Intent: simpleIntent("replayed", "x"), Time: time.Now().UnixNano()})
	if err != nil {
		t.Fatal(err)
	}
	send := func(hc *http.Client, claims string) int {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPost, leader.HTTPURL()+"/v1/internal/apply", bytes.NewReader(body))
		req.Header.Set(headerSignature, follower.peers.sign(body))
		req.Header.Set(headerForwarded, claims)
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatalf("internal apply: %v", err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	otherCert := other.config.PeerTLS.Certificate
	for name, code := range map[string]int{
		"no certificate":                send(httpsClient(leader, nil), follower.ID()),
		"another server's certificate":  send(httpsClient(leader, &otherCert), follower.ID()),
		"no certificate, internal read": internalRead(t, httpsClient(leader, nil), leader, follower.ID()),
	} {
		if code != http.StatusForbidden {
			t.Errorf("%s: %d, want 403", name, code)
		}
	}
	if _, err := leader.fsm.Read().Intent(nil, "replayed"); !errors.Is(err, fsm.ErrNotFound) {
		t.Fatalf("intent replayed: %v, want not found", err)
	}
	if code := send(follower.peers.hc, follower.ID()); code != http.StatusOK {
		t.Fatalf("the signing server's own request: %d, want 200", code)
	}
	if _, err := leader.fsm.Read().Intent(nil, "replayed"); err != nil {
		t.Fatalf("intent replayed after the server's own request: %v", err)
	}
	// Servers talk HTTP/2 among themselves: requests in flight at once
	// share a connection.
	req, _ := http.NewRequest(http.MethodGet, leader.HTTPURL()+"/v1/internal/self", nil)
	req.Header.Set(headerForwarded, follower.ID())
	if err := follower.peers.signForwarded(req, fsm.Actor{}, time.Now()); err != nil {
		t.Fatal(err)
	}
	resp, err := follower.peers.hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.ProtoMajor != 2 {
		t.Fatalf("a server's request to another: %s over %s, want 200 over HTTP/2", resp.Status, resp.Proto)
	}
}

// internalRead sends GET /v1/internal/self to s with hc, claiming to be
// server by, and returns the status.
func internalRead(t *testing.T, hc *http.Client, s *Server, by string) int {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, s.HTTPURL()+"/v1/internal/self", nil)
	req.Header.Set(headerForwarded, by)
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatalf("internal read: %v", err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// TestAgentPortRefusesStrangers: the agent endpoint refuses a client
// without a certificate, with a device certificate of another CA, with a
// server certificate of the cluster (valid for client authentication, but
// no device's), and with an expired device certificate of the cluster CA;
// none of them becomes a device. A device certificate of the cluster CA is
// welcome, which shows the refusals are about the certificate.
func TestAgentPortRefusesStrangers(t *testing.T) {
	c := newTestCluster(t, 1, servesAgents)
	s := c.waitLeader()
	ca := c.CA()
	foreign, err := pki.NewCA("attacker CA", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	foreignDevice, _ := foreign.IssueDevice("intruder")
	serverCert := s.config.PeerTLS.Certificate
	expiring := *ca
	expiring.LeafValidity = time.Nanosecond
	expired, err := expiring.IssueDevice("expired")
	if err != nil {
		t.Fatal(err)
	}
	good, err := ca.IssueDevice("good")
	if err != nil {
		t.Fatal(err)
	}
	conf := func(cert *tls.Certificate) *tls.Config {
		tc := wire.ClientTLSConfig(ca.Pool(), tls.Certificate{}, "")
		tc.Certificates = nil
		if cert != nil {
			tc.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return cert, nil }
		}
		return tc
	}
	for name, cert := range map[string]*tls.Certificate{
		"no certificate":                   nil,
		"another CA's device certificate":  &foreignDevice,
		"the cluster's server certificate": &serverCert,
		"an expired device certificate":    &expired,
	} {
		if err := dialAgentErr(s.AgentAddr(), conf(cert)); err == nil {
			t.Errorf("%s: welcomed, want refused", name)
		}
	}
	for _, id := range []string{"intruder", "expired", s.ID()} {
		if d, err := s.fsm.Read().Device(nil, id); err == nil && d != nil {
			t.Errorf("device %q registered by a refused connection", id)
		}
	}
	if err := dialAgentErr(s.AgentAddr(), conf(&good)); err != nil {
		t.Fatalf("device certificate of the cluster CA: %v", err)
	}
}

package cluster

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/quic-go/quic-go"

	"github.com/meteor-edge/meteor/cluster/pki"
	"github.com/meteor-edge/meteor/wire"
)

// TestReloadTLSRotatesTheCAWithAgentsConnected rotates the cluster CA on
// a running cluster the way docs/operations.md describes: every server
// reloads (ReloadTLS) a pool of the old and the new CA and a certificate
// of the new one. An agent connected before keeps its session on the same
// connection; a device of the new CA connects; an operator who trusts only
// the new CA reaches the API; writes still commit; and a restarted
// follower rejoins, its Raft handshakes made with the new material. A
// certificate of the wrong server or of a CA outside the pool is refused
// and changes nothing.
func TestReloadTLSRotatesTheCAWithAgentsConnected(t *testing.T) {
	c := newTestCluster(t, 3, servesAgents)
	old := c.CA()
	oldDevice, err := old.IssueDevice("dev-old")
	if err != nil {
		t.Fatal(err)
	}
	before := dialAgent(t, c.Server(0).AgentAddr(), wire.ClientTLSConfig(old.Pool(), oldDevice, ""))
	before.send(hello(nil))
	w := expect[*wire.Welcome](before)

	next, err := pki.NewCA("next CA", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	oldPEM, _, _ := old.PEM()
	nextPEM, _, _ := next.PEM()
	both, err := pki.PoolFromPEM(append(oldPEM, nextPEM...))
	if err != nil {
		t.Fatal(err)
	}

	s0 := c.Server(0)
	wrongID, _ := next.IssueServer("not-"+s0.ID(), []string{"127.0.0.1"})
	outsiderCA, err := pki.NewCA("outsider", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	outsider, _ := outsiderCA.IssueServer(s0.ID(), []string{"127.0.0.1"})
	for name, cert := range map[string]tls.Certificate{"another server's certificate": wrongID, "a certificate of a CA outside the pool": outsider} {
		if err := s0.ReloadTLS(both, cert); err == nil {
			t.Errorf("reload with %s: accepted", name)
		}
	}
	if _, cert := s0.config.PeerTLS.current(); !sameCert(cert, s0.config.PeerTLS.Certificate) {
		t.Fatal("a refused reload changed the certificate")
	}

	for _, s := range c.Servers() {
		cert, err := next.IssueServer(s.ID(), []string{"127.0.0.1"})
		if err != nil {
			t.Fatal(err)
		}
		if err := s.ReloadTLS(both, cert); err != nil {
			t.Fatalf("reload %s: %v", s.ID(), err)
		}
	}

	// The agent connected before still has its session, on the same
	// connection.
	before.send(&wire.Pull{Inventory: true})
	expect[*wire.Delta](before)
	if err := before.conn.Context().Err(); err != nil {
		t.Fatalf("the connection made before the reload: %v", err)
	}

	// A device of the new CA connects, and one of the old still does.
	nextDevice, err := next.IssueDevice("dev-next")
	if err != nil {
		t.Fatal(err)
	}
	a := dialAgent(t, s0.AgentAddr(), wire.ClientTLSConfig(next.Pool(), nextDevice, ""))
	a.send(hello(nil))
	if w2 := expect[*wire.Welcome](a); w2.SessionID == w.SessionID {
		t.Fatalf("new device got the old device's session")
	}
	b := dialAgent(t, c.Server(1).AgentAddr(), wire.ClientTLSConfig(next.Pool(), oldDevice, ""))
	b.send(hello(nil))
	expect[*wire.Welcome](b)

	// An operator who trusts only the new CA reaches every server.
	hc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: OperatorTLS(next.Pool())}}
	defer hc.CloseIdleConnections()
	for _, s := range c.Servers() {
		resp, err := hc.Get(s.HTTPURL() + "/v1/healthz")
		if err != nil {
			t.Fatalf("%s after the reload, trusting the new CA: %v", s.ID(), err)
		}
		resp.Body.Close()
	}

	// Writes commit, and a restarted follower rejoins over handshakes made
	// with the new material.
	c.propose(simpleIntent("after-reload", "v1"))
	f := c.Index(c.follower().ID())
	if err := c.Stop(f); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Restart(f); err != nil {
		t.Fatal(err)
	}
	c.propose(simpleIntent("after-restart", "v1"))
	c.waitConverged()
}

// TestReloadTLSDropsAnOldCA: once the pool holds only the new CA, a
// device certificate of the old one is refused at the handshake.
func TestReloadTLSDropsAnOldCA(t *testing.T) {
	c := newTestCluster(t, 1, servesAgents)
	s := c.waitLeader()
	next, err := pki.NewCA("next CA", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := next.IssueServer(s.ID(), []string{"127.0.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.ReloadTLS(next.Pool(), cert); err != nil {
		t.Fatal(err)
	}
	oldDevice, err := c.CA().IssueDevice("dev-old")
	if err != nil {
		t.Fatal(err)
	}
	err = dialAgentErr(s.AgentAddr(), wire.ClientTLSConfig(next.Pool(), oldDevice, ""))
	if err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Fatalf("device of the dropped CA: %v, want a certificate error", err)
	}
}

func sameCert(a, b tls.Certificate) bool {
	if len(a.Certificate) == 0 || len(b.Certificate) == 0 {
		return false
	}
	ca, _ := x509.ParseCertificate(a.Certificate[0])
	cb, _ := x509.ParseCertificate(b.Certificate[0])
	return ca != nil && cb != nil && ca.Equal(cb)
}

// dialAgentErr connects to the agent endpoint at addr, says Hello and
// returns the error that ends the attempt, nil if a Welcome comes.
func dialAgentErr(addr string, tlsConf *tls.Config) error {
	udp, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	tr := &quic.Transport{Conn: udp}
	defer udp.Close()
	defer tr.Close()
	raddr, err := net.ResolveUDPAddr("udp", addr)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := tr.Dial(ctx, raddr, tlsConf, wire.ClientQUICConfig())
	if err != nil {
		return err
	}
	defer conn.CloseWithError(wire.CloseNormal, "")
	stream, err := conn.OpenStreamSync(ctx)
	if err != nil {
		return err
	}
	if err := wire.NewWriter(stream).Write(hello(nil)); err != nil {
		return err
	}
	stream.SetReadDeadline(time.Now().Add(10 * time.Second))
	m, err := wire.NewReader(stream).Read()
	if err != nil {
		return err
	}
	if _, ok := m.(*wire.Welcome); !ok {
		return fmt.Errorf("got %s", m.Type())
	}
	return nil
}

// servesAgents makes a test cluster's server serve agents with the
// certificate the cluster's CA gave it for Raft.
func servesAgents(cfg *Config) {
	cfg.AgentAddr = "127.0.0.1:0"
	cfg.AgentTLS = &AgentTLS{ClientCAs: cfg.PeerTLS.CAs, Certificate: cfg.PeerTLS.Certificate}
	cfg.ClusterSecret = []byte("0123456789abcdef0123456789abcdef")
}

// TestReloadTLSKeepsTheDeviceCA: a server that signs enrolled devices'
// certificates refuses a CA pool without its signing CA (the agent port
// would refuse what it issues), and takes a certificate built by hand,
// without its parsed leaf.
func TestReloadTLSKeepsTheDeviceCA(t *testing.T) {
	c := newTestCluster(t, 1, servesAgents)
	s := c.waitLeader()
	s.config.DeviceCA = c.CA() // as --ca-key-file with the cluster's CA key
	next, err := pki.NewCA("next CA", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := next.IssueServer(s.ID(), []string{"127.0.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.ReloadTLS(next.Pool(), cert); err == nil || !strings.Contains(err.Error(), "signs device certificates") {
		t.Fatalf("reload without the device CA: %v, want refused", err)
	}
	oldPEM, _, _ := c.CA().PEM()
	nextPEM, _, _ := next.PEM()
	both, err := pki.PoolFromPEM(append(oldPEM, nextPEM...))
	if err != nil {
		t.Fatal(err)
	}
	cert.Leaf = nil
	if err := s.ReloadTLS(both, cert); err != nil {
		t.Fatalf("reload with both CAs and no parsed leaf: %v", err)
	}
}

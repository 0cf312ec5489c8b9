package cluster

import (
	"crypto/tls"
	"errors"
	"io"
	"net"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/meteor-edge/meteor/cluster/pki"
)

// peerPKI issues server certificates of one CA for the Raft TLS tests.
func peerPKI(t *testing.T) (*pki.CA, func(id string) *PeerTLS) {
	t.Helper()
	ca, err := pki.NewCA("peer test CA", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	return ca, func(id string) *PeerTLS {
		cert, err := ca.IssueServer(id, []string{"127.0.0.1"})
		if err != nil {
			t.Fatal(err)
		}
		return &PeerTLS{CAs: ca.Pool(), Certificate: cert}
	}
}

// serveEcho accepts on layer and echoes what each connection sends; the
// errors of failed connections (handshakes refused) go to refused.
func serveEcho(t *testing.T, layer raft.StreamLayer) <-chan error {
	refused := make(chan error, 16)
	go func() {
		for {
			c, err := layer.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				c.SetDeadline(time.Now().Add(5 * time.Second))
				buf := make([]byte, 5)
				if _, err := io.ReadFull(c, buf); err != nil {
					refused <- err
					return
				}
				c.Write(buf)
			}()
		}
	}()
	return refused
}

func listenTLS(t *testing.T, p *PeerTLS) *tlsLayer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := newTLSLayer(tcpLayer{ln}, p)
	t.Cleanup(func() { ln.Close() })
	return l
}

func TestRaftTLSBetweenServers(t *testing.T) {
	_, peer := peerPKI(t)
	srv := listenTLS(t, peer("s1"))
	serveEcho(t, srv)
	addr := raft.ServerAddress(srv.Addr().String())

	cli := listenTLS(t, peer("s2"))
	if err := cli.verify(addr, "s1"); err != nil {
		t.Fatalf("verify s1: %v", err)
	}
	c, err := cli.Dial(addr, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.Write([]byte("hello"))
	buf := make([]byte, 5)
	if _, err := io.ReadFull(c, buf); err != nil || string(buf) != "hello" {
		t.Fatalf("echo %q, %v", buf, err)
	}

	// The server at that address must prove the node ID the
	// configuration has for it.
	other := listenTLS(t, peer("s3"))
	if err := other.verify(addr, "s9"); !errors.Is(err, ErrWrongPeer) {
		t.Errorf("verify under another ID: %v, want ErrWrongPeer", err)
	}
	other.watch(fixedConfig{Servers: []raft.Server{{ID: "s7", Address: addr}}})
	if _, err := other.Dial(addr, time.Second); !errors.Is(err, ErrWrongPeer) {
		t.Errorf("dial a server configured as s7: %v, want ErrWrongPeer", err)
	}
	other.watch(fixedConfig{Servers: []raft.Server{{ID: "s1", Address: addr}}})
	c2, err := other.Dial(addr, time.Second)
	if err != nil {
		t.Fatalf("dial s1 where the configuration has it: %v", err)
	}
	c2.Close()
}

// fixedConfig is a Raft configuration source that never changes.
type fixedConfig raft.Configuration

func (c fixedConfig) GetConfiguration() raft.ConfigurationFuture { return configFuture(c) }

type configFuture raft.Configuration

func (configFuture) Error() error                        { return nil }
func (configFuture) Index() uint64                       { return 0 }
func (c configFuture) Configuration() raft.Configuration { return raft.Configuration(c) }

// TestRaftTLSRefusesOutsiders: plaintext, no certificate, a device
// certificate and a server certificate of another CA are all refused by a
// server, and a server refuses to talk to an impostor.
func TestRaftTLSRefusesOutsiders(t *testing.T) {
	ca, peer := peerPKI(t)
	srv := listenTLS(t, peer("s1"))
	refused := serveEcho(t, srv)
	addr := srv.Addr().String()

	expectRefused := func(name string) {
		t.Helper()
		select {
		case err := <-refused:
			t.Logf("%s: %v", name, err)
		case <-time.After(5 * time.Second):
			t.Errorf("%s: the server did not refuse the connection", name)
		}
	}
	dialWith := func(name string, conf *tls.Config) {
		t.Helper()
		c, err := tls.Dial("tcp", addr, conf)
		if err == nil {
			c.Write([]byte("hello"))
			c.SetReadDeadline(time.Now().Add(5 * time.Second))
			if _, err := c.Read(make([]byte, 5)); err == nil {
				t.Errorf("%s: the server answered", name)
			}
			c.Close()
		}
		expectRefused(name)
	}

	// Plaintext: the bytes of an AppendEntries are not a TLS hello.
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	c.Write([]byte{0, 1, 2, 3, 4, 5, 6, 7})
	c.Close()
	expectRefused("plaintext")

	base := &tls.Config{RootCAs: ca.Pool(), ServerName: "server.meteor.internal", MinVersion: tls.VersionTLS13}
	dialWith("no certificate", base)

	device, err := ca.IssueDevice("store-1")
	if err != nil {
		t.Fatal(err)
	}
	withDevice := base.Clone()
	withDevice.Certificates = []tls.Certificate{device}
	dialWith("device certificate", withDevice)

	_, foreign := peerPKI(t)
	withForeign := base.Clone()
	withForeign.Certificates = []tls.Certificate{foreign("s2").Certificate}
	dialWith("another CA's server certificate", withForeign)

	// A server does not talk to a listener with another CA's certificate.
	impostor := listenTLS(t, foreign("s1"))
	serveEcho(t, impostor)
	cli := listenTLS(t, peer("s2"))
	if _, err := cli.Dial(raft.ServerAddress(impostor.Addr().String()), time.Second); err == nil {
		t.Error("dialled an impostor of another CA")
	}
}

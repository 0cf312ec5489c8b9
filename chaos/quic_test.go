package chaos

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"io"
	"math/big"
	mrand "math/rand/v2"
	"net"
	"syscall"
	"testing"
	"time"

	"github.com/quic-go/quic-go"
)

// selfSignedTLS returns a server config with a fresh certificate for
// 127.0.0.1 and a client config trusting only it.
func selfSignedTLS(t testing.TB) (server, client *tls.Config) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1),
		Subject:      pkix.Name{CommonName: "chaos-test"},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1)},
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	const alpn = "meteor-chaos-test"
	server = &tls.Config{
		Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key, Leaf: cert}},
		NextProtos:   []string{alpn},
	}
	client = &tls.Config{RootCAs: pool, ServerName: "127.0.0.1", NextProtos: []string{alpn}}
	return server, client
}

// TestQUICOverLossyPacketConn runs a real quic-go handshake and an echo of
// 64 KiB over two wrapped sockets that lose, delay, duplicate, reorder and
// corrupt datagrams in both directions.
func TestQUICOverLossyPacketConn(t *testing.T) {
	lossy := LinkProfile{
		Loss: 0.05, Delay: 2 * time.Millisecond, Jitter: time.Millisecond,
		Duplicate: 0.02, Reorder: 0.05, Corrupt: 0.02,
	}
	log := NewFaultLog()
	serverPC := NewPacketConn(listenUDP(t), lossy, 11, log)
	clientPC := NewPacketConn(listenUDP(t), lossy, 12, log)
	defer serverPC.Close()
	defer clientPC.Close()

	// quic-go must take its plain ReadFrom/WriteTo path: with either of
	// these it would reach the socket directly and bypass the faults.
	if _, ok := any(serverPC).(quic.OOBCapablePacketConn); ok {
		t.Fatal("PacketConn implements quic.OOBCapablePacketConn")
	}
	if _, ok := any(serverPC).(interface {
		SyscallConn() (syscall.RawConn, error)
	}); ok {
		t.Fatal("PacketConn exposes SyscallConn")
	}

	serverTLS, clientTLS := selfSignedTLS(t)
	qconf := &quic.Config{MaxIdleTimeout: 10 * time.Second, HandshakeIdleTimeout: 10 * time.Second}
	serverTr := &quic.Transport{Conn: serverPC}
	defer serverTr.Close()
	clientTr := &quic.Transport{Conn: clientPC}
	defer clientTr.Close()

	ln, err := serverTr.Listen(serverTLS, qconf)
	if err != nil {
		t.Fatalf("listen: %v", err)
	}
	defer ln.Close()

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	echoed := make(chan error, 1)
	go func() {
		conn, err := ln.Accept(ctx)
		if err != nil {
			echoed <- err
			return
		}
		defer conn.CloseWithError(0, "")
		str, err := conn.AcceptStream(ctx)
		if err != nil {
			echoed <- err
			return
		}
		if _, err := io.Copy(str, str); err != nil {
			echoed <- err
			return
		}
		echoed <- str.Close()
		// Wait for the client to finish reading before closing the conn.
		<-conn.Context().Done()
	}()

	conn, err := clientTr.Dial(ctx, serverPC.LocalAddr(), clientTLS, qconf)
	if err != nil {
		t.Fatalf("dial over lossy link: %v (faults so far: %s)", err, log)
	}
	str, err := conn.OpenStreamSync(ctx)
	if err != nil {
		t.Fatalf("open stream: %v", err)
	}
	payload := make([]byte, 64<<10)
	r := mrand.New(mrand.NewPCG(1, 2))
	for i := range payload {
		payload[i] = byte(r.Uint32())
	}
	go func() {
		str.Write(payload)
		str.Close()
	}()
	got, err := io.ReadAll(str)
	if err != nil {
		t.Fatalf("read echo: %v (faults: %s)", err, log)
	}
	if !bytes.Equal(got, payload) {
		t.Fatalf("echo differs: got %d bytes, want %d", len(got), len(payload))
	}
	conn.CloseWithError(0, "done")
	select {
	case err := <-echoed:
		if err != nil {
			t.Fatalf("server: %v", err)
		}
	case <-ctx.Done():
		t.Fatal("server did not finish")
	}

	for _, k := range []string{KindLoss, KindDelay, KindCorrupt} {
		if log.Count(k) == 0 {
			t.Errorf("no %s faults injected: %s", k, log)
		}
	}
	for _, pc := range []*PacketConn{clientPC, serverPC} {
		st := pc.Stats()
		if st.Out.Sent == 0 || st.In.Packets == 0 || st.In.Sent == 0 {
			t.Errorf("%s: traffic bypassed the wrapper: %+v", pc.LocalAddr(), st)
		}
	}
	if clientPC.Stats().Out.Dropped+serverPC.Stats().Out.Dropped == 0 {
		t.Error("nothing dropped at 5% loss")
	}
	t.Logf("faults: %s", log)
}

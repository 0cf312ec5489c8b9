package wire

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/quic-go/quic-go"
)

// observed is what a test server saw on one connection.
type observed struct {
	device   string
	hello    *Hello
	resumed  bool // TLS.DidResume
	used0RTT bool // read after the handshake completed
}

type testServer struct {
	id   string
	addr string
	seen chan observed
}

// startServer runs a minimal session server on 127.0.0.1: it reads the
// Hello, checks the version (closing with the close code on failure), and
// answers with a Welcome. Everything stops at test cleanup.
func startServer(t *testing.T, id string, ticketKeys [][32]byte) *testServer {
	t.Helper()
	ca := sharedTestCA()
	ln, err := quic.ListenAddrEarly("127.0.0.1:0", ServerTLSConfig(ca.pool(), ca.server(t, id), ticketKeys), ServerQUICConfig())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	s := &testServer{id: id, addr: ln.Addr().String(), seen: make(chan observed, 8)}
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			conn, err := ln.Accept(ctx)
			if err != nil {
				return
			}
			wg.Go(func() { s.handle(ctx, t, conn) })
		}
	})
	t.Cleanup(func() {
		cancel()
		ln.Close()
		wg.Wait()
	})
	return s
}

func (s *testServer) handle(ctx context.Context, t *testing.T, conn *quic.Conn) {
	defer conn.CloseWithError(CloseNormal, "")
	str, err := conn.AcceptStream(ctx)
	if err != nil {
		return
	}
	m, err := NewReader(str).Read()
	if err != nil {
		code, reason := CloseCodeFor(err)
		conn.CloseWithError(code, reason)
		return
	}
	hello, ok := m.(*Hello)
	if !ok {
		conn.CloseWithError(CloseProtocolError, "first message must be Hello, got "+m.Type().String())
		return
	}
	obs := observed{hello: hello}
	if err := Negotiate(hello.Major, hello.Minor); err != nil {
		code, reason := CloseCodeFor(err)
		conn.CloseWithError(code, reason)
		return
	}
	obs.resumed = conn.ConnectionState().TLS.DidResume
	if obs.device, err = PeerDeviceID(ctx, conn); err != nil {
		t.Errorf("server %s: %v", s.id, err)
		return
	}
	w := &Welcome{Major: ProtocolMajor, Minor: ProtocolMinor, ServerID: s.id, SessionID: SessionID{1}, DesiredRevision: hello.AckedRevision}
	if err := WriteMessage(str, w); err != nil {
		return
	}
	select {
	case <-conn.HandshakeComplete():
	case <-ctx.Done():
		return
	}
	obs.used0RTT = conn.ConnectionState().Used0RTT
	s.seen <- obs
	select { // until the agent closes
	case <-conn.Context().Done():
	case <-ctx.Done():
	}
}

// notifyingCache reports each session ticket the client stores.
type notifyingCache struct {
	tls.ClientSessionCache
	put chan struct{}
}

func (c *notifyingCache) Put(key string, cs *tls.ClientSessionState) {
	c.ClientSessionCache.Put(key, cs)
	if cs != nil {
		select {
		case c.put <- struct{}{}:
		default:
		}
	}
}

type clientResult struct {
	welcome  *Welcome
	early    bool // last Hello written before the handshake completed
	rejected bool // the server refused 0-RTT, the Hello was sent again
	state    quic.ConnectionState
}

// dialHello connects as an agent would: it sends hello in 0-RTT when a
// session ticket allows, sends it again after the handshake if the server
// refused 0-RTT, reads the Welcome and waits for the handshake to complete.
//
// With early set (a ticket is cached), the client takes no datagram from
// the server until the Hello is written: on a busy host the handshake
// could otherwise complete before the client got to write, and the Hello
// would go as 1-RTT data although 0-RTT works. Without a ticket the dial
// itself waits for the handshake, so nothing may be held.
func dialHello(ctx context.Context, t *testing.T, addr string, conf *tls.Config, hello *Hello, early bool) (*quic.Conn, clientResult, error) {
	t.Helper()
	udp, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gate := &heldConn{PacketConn: udp, open: make(chan struct{})}
	release := sync.OnceFunc(func() { close(gate.open) })
	if !early {
		release()
	}
	tr := &quic.Transport{Conn: gate}
	t.Cleanup(func() { release(); tr.Close(); udp.Close() })
	raddr, err := net.ResolveUDPAddr("udp", addr)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := tr.DialEarly(ctx, raddr, conf, ClientQUICConfig())
	if err != nil {
		t.Fatalf("dial %s: %v", addr, err)
	}
	t.Cleanup(func() { conn.CloseWithError(CloseNormal, "") })
	var res clientResult
	for {
		res.welcome, res.early, err = exchangeHello(conn, hello, release)
		if !errors.Is(err, quic.Err0RTTRejected) || res.rejected {
			break
		}
		// 0-RTT data was discarded: wait for the handshake, then resend
		// on a new stream of the same connection.
		res.rejected = true
		if conn, err = conn.NextConnection(ctx); err != nil {
			break
		}
	}
	if err != nil {
		return conn, res, FromQUICError(err)
	}
	select {
	case <-conn.HandshakeComplete():
	case <-ctx.Done():
		t.Fatal(ctx.Err())
	}
	res.state = conn.ConnectionState()
	return conn, res, nil
}

// heldConn holds every read until open is closed.
type heldConn struct {
	net.PacketConn
	open chan struct{}
}

func (c *heldConn) ReadFrom(b []byte) (int, net.Addr, error) {
	<-c.open
	return c.PacketConn.ReadFrom(b)
}

// exchangeHello sends hello on a new stream, calls written once it is
// written (or failed), and reads the Welcome.
func exchangeHello(conn *quic.Conn, hello *Hello, written func()) (*Welcome, bool, error) {
	str, err := conn.OpenStream()
	if err != nil {
		return nil, false, err
	}
	hello.Early = !HandshakeDone(conn)
	err = WriteMessage(str, hello)
	written()
	if err != nil {
		return nil, hello.Early, err
	}
	m, err := NewReader(str).Read()
	if err != nil {
		return nil, hello.Early, err
	}
	w, ok := m.(*Welcome)
	if !ok {
		return nil, hello.Early, fmt.Errorf("got %s, want Welcome", m.Type())
	}
	return w, hello.Early, nil
}

func waitFor[T any](ctx context.Context, t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-ctx.Done():
		t.Fatalf("waiting for %s: %v", what, ctx.Err())
		panic("unreachable")
	}
}

func TestQUICResume0RTT(t *testing.T) {
	if raceBuild {
		t.Skip("opens streams in 0-RTT, which races inside quic-go v0.65 (quic-go/quic-go#4303): make test runs it without -race")
	}
	t.Setenv("QUIC_GO_DISABLE_RECEIVE_BUFFER_WARNING", "true")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	keys := TicketKeys(testSecret, time.Now(), time.Hour)
	s1 := startServer(t, "s1", keys)
	s2 := startServer(t, "s2", keys) // another server sharing the ticket keys

	ca := sharedTestCA()
	dev := ca.device(t, "dev-1")
	conf := ClientTLSConfig(ca.pool(), dev, "")
	cache := &notifyingCache{ClientSessionCache: conf.ClientSessionCache, put: make(chan struct{}, 1)}
	conf.ClientSessionCache = cache
	hello := func() *Hello {
		return &Hello{Major: ProtocolMajor, Minor: ProtocolMinor, AgentVersion: "test", AckedRevision: 5}
	}

	// 1. Full handshake with a client certificate.
	conn, res, err := dialHello(ctx, t, s1.addr, conf, hello(), false)
	if err != nil {
		t.Fatal(err)
	}
	obs := waitFor(ctx, t, s1.seen, "s1 first connection")
	if res.early || res.state.TLS.DidResume || res.state.Used0RTT || obs.resumed || obs.used0RTT {
		t.Errorf("first connection: client early=%v resumed=%v 0rtt=%v; server resumed=%v 0rtt=%v",
			res.early, res.state.TLS.DidResume, res.state.Used0RTT, obs.resumed, obs.used0RTT)
	}
	if obs.device != "dev-1" || res.welcome.ServerID != "s1" || res.state.TLS.NegotiatedProtocol != ALPN {
		t.Errorf("first connection: device %q, server %q, ALPN %q", obs.device, res.welcome.ServerID, res.state.TLS.NegotiatedProtocol)
	}
	waitFor(ctx, t, cache.put, "session ticket")
	conn.CloseWithError(CloseNormal, "")

	// 2. Same server, then 3. another server with the same ticket keys:
	// both resume the TLS session and accept the Hello in 0-RTT, knowing
	// the device from the ticket before the handshake completes.
	for _, s := range []*testServer{s1, s2} {
		conn, res, err := dialHello(ctx, t, s.addr, conf, hello(), true)
		if err != nil {
			t.Fatalf("%s: %v", s.id, err)
		}
		obs := waitFor(ctx, t, s.seen, s.id+" resumed connection")
		if !res.early || !res.state.TLS.DidResume || !res.state.Used0RTT {
			t.Errorf("%s client: early=%v resumed=%v 0rtt=%v, want all true", s.id, res.early, res.state.TLS.DidResume, res.state.Used0RTT)
		}
		if !obs.resumed || !obs.used0RTT || !obs.hello.Early || obs.device != "dev-1" {
			t.Errorf("%s server: resumed=%v 0rtt=%v hello.Early=%v device=%q", s.id, obs.resumed, obs.used0RTT, obs.hello.Early, obs.device)
		}
		if res.welcome.ServerID != s.id {
			t.Errorf("welcome from %q, want %q", res.welcome.ServerID, s.id)
		}
		waitFor(ctx, t, cache.put, "fresh session ticket")
		conn.CloseWithError(CloseNormal, "")
	}

	// 4. A server with other ticket keys cannot resume: full handshake.
	s3 := startServer(t, "s3", TicketKeys([]byte("another-cluster-secret-0123456"), time.Now(), time.Hour))
	_, res, err = dialHello(ctx, t, s3.addr, conf, hello(), true)
	if err != nil {
		t.Fatal(err)
	}
	obs = waitFor(ctx, t, s3.seen, "s3 connection")
	if res.state.TLS.DidResume || res.state.Used0RTT || !res.rejected || res.early || obs.hello.Early {
		t.Errorf("foreign ticket keys: resumed=%v 0rtt=%v rejected=%v early=%v server saw early=%v",
			res.state.TLS.DidResume, res.state.Used0RTT, res.rejected, res.early, obs.hello.Early)
	}
	if obs.device != "dev-1" {
		t.Errorf("s3 saw device %q", obs.device)
	}
}

func TestQUICVersionRejected(t *testing.T) {
	t.Setenv("QUIC_GO_DISABLE_RECEIVE_BUFFER_WARNING", "true")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	s := startServer(t, "s1", nil)
	ca := sharedTestCA()
	dev := ca.device(t, "dev-2")
	_, _, err := dialHello(ctx, t, s.addr, ClientTLSConfig(ca.pool(), dev, ""), &Hello{Major: 2, Minor: 7}, false)
	var ce *CloseError
	if !errors.As(err, &ce) {
		t.Fatalf("err = %v, want a *CloseError", err)
	}
	if ce.Code != CloseVersionUnsupported || !ce.Remote || !errors.Is(err, ErrVersionUnsupported) {
		t.Errorf("close: code %#x remote %v (%v)", uint64(ce.Code), ce.Remote, err)
	}
	if !strings.Contains(ce.Reason, "2.7 unsupported") || !strings.Contains(err.Error(), "version unsupported") {
		t.Errorf("reason %q / error %q do not explain the version", ce.Reason, err)
	}
	var qe *quic.ApplicationError
	if !errors.As(err, &qe) {
		t.Error("CloseError does not unwrap to the QUIC error")
	}
}

func TestCloseCodeFor(t *testing.T) {
	for _, tc := range []struct {
		err  error
		code quic.ApplicationErrorCode
	}{
		{nil, CloseNormal},
		{Negotiate(3, 0), CloseVersionUnsupported},
		{ErrFrameTooLarge, CloseProtocolError},
		{ErrMalformed, CloseProtocolError},
		{ErrUnknownMessage, CloseProtocolError},
		{errors.New("disk full"), CloseInternalError},
		{FromQUICError(&quic.ApplicationError{ErrorCode: CloseLagging, ErrorMessage: "behind"}), CloseLagging},
	} {
		if code, _ := CloseCodeFor(tc.err); code != tc.code {
			t.Errorf("CloseCodeFor(%v) = %#x, want %#x", tc.err, uint64(code), uint64(tc.code))
		}
	}
	if Negotiate(ProtocolMajor, 99) != nil {
		t.Error("a higher minor of our major must be accepted")
	}
	for c := CodeVersionUnsupported; c <= maxCode; c++ {
		err := FromQUICError(&quic.ApplicationError{ErrorCode: c.CloseCode(), Remote: true})
		if !errors.Is(err, closeSentinels[c.CloseCode()]) || strings.HasPrefix(c.String(), "Code(") {
			t.Errorf("code %d: %v", c, err)
		}
	}
	if err := errors.New("plain"); FromQUICError(err) != err {
		t.Error("FromQUICError changed a non-QUIC error")
	}
}

// sizeProxy relays datagrams between one client and a server on
// loopback and records the largest it relayed each way, and the lengths
// of the connection IDs each side chose for itself (the source IDs of its
// long-header packets). Both ends keep their own *net.UDPConn, so
// quic-go runs as it does in production (it probes the path MTU only on
// sockets where it can set the DF bit).
type sizeProxy struct {
	conn                   *net.UDPConn
	mu                     sync.Mutex
	fromClient, fromServer int
	// idLens count the source connection ID lengths seen, by length.
	clientIDLens, serverIDLens map[int]int
}

// sourceIDLen returns the length of the source connection ID of a QUIC
// long-header packet (RFC 9000, 17.2), or -1 for a short-header one.
func sourceIDLen(b []byte) int {
	if len(b) < 6 || b[0]&0x80 == 0 {
		return -1
	}
	dst := int(b[5])
	if len(b) < 7+dst {
		return -1
	}
	return int(b[6+dst])
}

func startSizeProxy(t *testing.T, server *net.UDPAddr) *sizeProxy {
	t.Helper()
	conn, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	p := &sizeProxy{conn: conn, clientIDLens: map[int]int{}, serverIDLens: map[int]int{}}
	var wg sync.WaitGroup
	wg.Go(func() {
		var client *net.UDPAddr
		buf := make([]byte, 65536)
		for {
			n, from, err := conn.ReadFromUDP(buf)
			if err != nil {
				return
			}
			to := server
			p.mu.Lock()
			idLen := sourceIDLen(buf[:n])
			if from.Port == server.Port {
				p.fromServer = max(p.fromServer, n)
				to = client
				if idLen >= 0 {
					p.serverIDLens[idLen]++
				}
			} else {
				p.fromClient = max(p.fromClient, n)
				client = from
				if idLen >= 0 {
					p.clientIDLens[idLen]++
				}
			}
			p.mu.Unlock()
			if to != nil {
				conn.WriteToUDP(buf[:n], to)
			}
		}
	})
	t.Cleanup(func() { conn.Close(); wg.Wait() })
	return p
}

// serveEcho accepts one connection on ln and echoes its first stream
// until the agent closes it; the returned func waits for that.
func serveEcho(ctx context.Context, ln *quic.Listener) (wait func()) {
	var wg sync.WaitGroup
	wg.Go(func() {
		conn, err := ln.Accept(ctx)
		if err != nil {
			return
		}
		defer conn.CloseWithError(CloseNormal, "")
		if s, err := conn.AcceptStream(ctx); err == nil {
			io.Copy(s, s)
			s.Close()
		}
	})
	return wg.Wait
}

// TestQUICNoPathMTUProbes: neither side probes the path MTU, so nothing
// either sends exceeds quic-go's initial packet size. Probes are padded
// datagrams of up to 1,452 bytes, a few to every connection: after a
// fleet connected, a server sending its first change to each agent spent
// nearly half again the CPU on them (docs/performance.md), and an agent's
// messages are small enough to gain nothing from larger packets.
func TestQUICNoPathMTUProbes(t *testing.T) {
	t.Setenv("QUIC_GO_DISABLE_RECEIVE_BUFFER_WARNING", "true")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	ca := sharedTestCA()
	ln, err := quic.ListenAddr("127.0.0.1:0", ServerTLSConfig(ca.pool(), ca.server(t, "s1"), nil), ServerQUICConfig())
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	defer serveEcho(ctx, ln)()
	proxy := startSizeProxy(t, ln.Addr().(*net.UDPAddr))

	conn, err := quic.DialAddr(ctx, proxy.conn.LocalAddr().String(), ClientTLSConfig(ca.pool(), ca.device(t, "dev-1"), ""), ClientQUICConfig())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.CloseWithError(CloseNormal, "")
	s, err := conn.OpenStream()
	if err != nil {
		t.Fatal(err)
	}
	// 50 round trips of a kilobyte, one after the other: quic-go probes
	// again once five smoothed RTTs have passed since its last probe, so
	// a prober that ran would send several (no wall-clock pause needed).
	msg := make([]byte, 1000)
	for range 50 {
		if _, err := s.Write(msg); err != nil {
			t.Fatal(err)
		}
		if _, err := io.ReadFull(s, msg); err != nil {
			t.Fatal(err)
		}
	}
	s.Close()
	proxy.mu.Lock()
	defer proxy.mu.Unlock()
	// quic-go's packets are at most 1,280 bytes without path MTU discovery
	// (protocol.InitialPacketSize).
	if proxy.fromServer > 1280 || proxy.fromClient > 1280 {
		t.Fatalf("largest datagram from the server %d bytes, from the agent %d: a path MTU probe (want none above 1,280)", proxy.fromServer, proxy.fromClient)
	}
}

// TestSharedTransportConnectionIDs: a transport shared by many
// connections (a server's agent socket, the benchmarks' device sockets)
// chooses connection IDs of SharedConnectionIDLength bytes, on both the
// listening and the dialling side. With quic-go's 4-byte default, two of
// a few thousand connections on one transport sooner or later draw the
// same ID, and one of them stops receiving what its peer sends, silently
// (SharedConnectionIDLength).
func TestSharedTransportConnectionIDs(t *testing.T) {
	t.Setenv("QUIC_GO_DISABLE_RECEIVE_BUFFER_WARNING", "true")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	ca := sharedTestCA()
	listen := func() (*quic.Transport, *net.UDPConn) {
		pc, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
		if err != nil {
			t.Fatal(err)
		}
		tr := NewSharedTransport(pc)
		t.Cleanup(func() { tr.Close(); pc.Close() })
		return tr, pc
	}
	srv, srvPC := listen()
	ln, err := srv.Listen(ServerTLSConfig(ca.pool(), ca.server(t, "s1"), nil), ServerQUICConfig())
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	defer serveEcho(ctx, ln)()
	proxy := startSizeProxy(t, srvPC.LocalAddr().(*net.UDPAddr))
	dev, _ := listen()
	conn, err := dev.Dial(ctx, proxy.conn.LocalAddr(), ClientTLSConfig(ca.pool(), ca.device(t, "dev-1"), ""), ClientQUICConfig())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.CloseWithError(CloseNormal, "")
	s, err := conn.OpenStream()
	if err != nil {
		t.Fatal(err)
	}
	msg := []byte("hello")
	if _, err := s.Write(msg); err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadFull(s, msg); err != nil {
		t.Fatal(err)
	}
	s.Close()
	proxy.mu.Lock()
	defer proxy.mu.Unlock()
	for side, lens := range map[string]map[int]int{"listening": proxy.serverIDLens, "dialling": proxy.clientIDLens} {
		if len(lens) != 1 || lens[SharedConnectionIDLength] == 0 {
			t.Errorf("the %s transport chose connection IDs of these lengths (bytes: packets): %v; want %d bytes only", side, lens, SharedConnectionIDLength)
		}
	}
}

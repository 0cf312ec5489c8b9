package agent

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/tls"
	"maps"
	"net"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/quic-go/quic-go"

	"github.com/meteor-edge/meteor/cluster/pki"
	"github.com/meteor-edge/meteor/wire"
)

// This file is a small session server written against package wire, to
// test the agent's side of docs/wire.md over real QUIC on loopback. It
// keeps its state in memory, shared by the servers of one testCluster
// (one desired state per test, one device), and implements just enough
// of §7: sessions with opaque tokens, Welcome, Deltas diffed against the
// Pull's inventory, Acks, reports applied at most once, ReportAck, Notify,
// and refusals on demand.

var testSecret = []byte("agent-test-cluster-secret-0123456789")

// testCluster is the shared state of the test servers.
type testCluster struct {
	t    *testing.T
	ca   *pki.CA
	keys [][32]byte

	mu       sync.Mutex
	rev      uint64                          // guarded by mu
	desired  map[string]wire.Upsert          // guarded by mu
	sessions map[wire.SessionID]*testSession // guarded by mu
	servers  []*testServer                   // guarded by mu
	reports  []*wire.Report                  // applied reports, partial ones merged (see merge); guarded by mu
	view     map[string]wire.ResourceReport  // the device's resources as the reports built them; guarded by mu
	dropped  []droppedReport                 // reports ignored in dropReports mode; guarded by mu
	acks     []uint64                        // guarded by mu
	hellos   []helloSeen                     // guarded by mu
	pings    []*wire.Ping                    // guarded by mu
	pulls    []time.Time                     // when each Pull arrived; guarded by mu
	settings *wire.Settings                  // sent after the Welcome at minor 4, and to live sessions when set; guarded by mu
	changed  chan struct{}                   // closed and replaced on every event; guarded by mu
}

// droppedReport is a report a server ignored, and when it arrived.
type droppedReport struct {
	seq uint64
	at  time.Time
}

type testSession struct {
	token      []byte
	acked      uint64
	appliedSeq uint64
}

type helloSeen struct {
	server   string
	hello    *wire.Hello
	used0RTT bool
	device   string
}

func newTestCluster(t *testing.T) *testCluster {
	ca, err := pki.NewCA("agent test CA", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	return &testCluster{
		t: t, ca: ca, keys: wire.TicketKeys(testSecret, time.Now(), time.Hour),
		desired: map[string]wire.Upsert{}, sessions: map[wire.SessionID]*testSession{},
		changed: make(chan struct{}),
	}
}

// eventLocked wakes waiters.
func (c *testCluster) eventLocked() {
	close(c.changed)
	c.changed = make(chan struct{})
}

// setDesired moves the desired state to rev and notifies live sessions.
func (c *testCluster) setDesired(rev uint64, ups ...wire.Upsert) {
	c.mu.Lock()
	c.rev = rev
	c.desired = map[string]wire.Upsert{}
	for _, u := range ups {
		c.desired[u.Key] = u
	}
	servers := slices.Clone(c.servers)
	c.eventLocked()
	c.mu.Unlock()
	for _, s := range servers {
		s.notify(rev)
	}
}

// pushDesired moves the desired state to rev like setDesired, but the
// Notify to sessions of protocol 1.5 carries the Delta from the previous
// desired state, as based on that state's fingerprint, or on another
// fingerprint with wrongBase.
func (c *testCluster) pushDesired(rev uint64, wrongBase bool, ups ...wire.Upsert) {
	c.mu.Lock()
	prev := c.desired
	c.rev = rev
	c.desired = map[string]wire.Upsert{}
	for _, u := range ups {
		c.desired[u.Key] = u
	}
	n := &wire.Notify{Revision: rev, Delta: &wire.Delta{TargetRevision: rev, Complete: true}}
	f := wire.NewSetFingerprint()
	for _, k := range slices.Sorted(maps.Keys(prev)) {
		f.Add(k, prev[k].Digest)
		if _, ok := c.desired[k]; !ok {
			n.Delta.Deletes = append(n.Delta.Deletes, k)
		}
	}
	n.Base = f.Sum()
	if wrongBase {
		n.Base[0]++
	}
	for _, k := range slices.Sorted(maps.Keys(c.desired)) {
		if u := c.desired[k]; prev[k].Digest != u.Digest {
			n.Delta.Upserts = append(n.Delta.Upserts, u)
		}
	}
	servers := slices.Clone(c.servers)
	c.eventLocked()
	c.mu.Unlock()
	sendLive(servers, wire.MinorPushDelta, n)
}

// sendLive sends m to the established sessions of the servers whose
// protocol minor is at least minor.
func sendLive(servers []*testServer, minor uint16, m wire.Message) {
	for _, s := range servers {
		s.mu.Lock()
		live := slices.Collect(maps.Keys(s.live))
		s.mu.Unlock()
		for _, tc := range live {
			if tc.sess != nil && tc.minor >= minor {
				_ = tc.write(m)
			}
		}
	}
}

// setSettings makes s the settings of the device and sends them to the
// live sessions of protocol 1.4.
func (c *testCluster) setSettings(s *wire.Settings) {
	c.mu.Lock()
	c.settings = s
	servers := slices.Clone(c.servers)
	c.eventLocked()
	c.mu.Unlock()
	sendLive(servers, wire.MinorEdge, s)
}

// mergeLocked applies rep to the device's resource view, as a server
// does, and returns a copy of rep listing the whole view: a partial
// report carries only what changed, and tests look at the device's state.
func (c *testCluster) mergeLocked(rep *wire.Report) *wire.Report {
	if rep.Full || c.view == nil {
		c.view = map[string]wire.ResourceReport{}
	}
	for _, r := range rep.Resources {
		c.view[r.Key] = r
	}
	m := *rep
	m.Resources = nil
	for _, k := range slices.Sorted(maps.Keys(c.view)) {
		m.Resources = append(m.Resources, c.view[k])
	}
	return &m
}

// snapshot returns copies of what the cluster recorded.
func (c *testCluster) snapshot() (reports []*wire.Report, acks []uint64, hellos []helloSeen) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.reports), slices.Clone(c.acks), slices.Clone(c.hellos)
}

func (c *testCluster) lastReport() *wire.Report {
	reports, _, _ := c.snapshot()
	if len(reports) == 0 {
		return nil
	}
	return reports[len(reports)-1]
}

// serverMode selects a server's behaviour.
type serverMode struct {
	// rejectHello answers every Hello with this Reject.
	rejectHello *wire.Reject
	// goAwayOnPull answers every Pull with this GoAway.
	goAwayOnPull *wire.GoAway
	// dropReports ignores reports (as if lost) and sends no ReportAck.
	dropReports bool
	// staleDelta answers Pulls with a Delta to this revision instead.
	staleDelta uint64
	// protocol10 makes the server speak protocol 1.0: its Welcome says
	// minor 0, and a Report with typed states (1.1) is a protocol error,
	// as a 1.0 decoder refuses the flag.
	protocol10 bool
	// protocol13 makes it speak protocol 1.3: no Settings, and a Report
	// with the edge flag is a protocol error.
	protocol13 bool
}

type testServer struct {
	c    *testCluster
	id   string
	addr *net.UDPAddr
	udp  *net.UDPConn
	tr   *quic.Transport
	ln   *quic.EarlyListener
	// tlsConf is the listener's TLS config; SetSessionTicketKeys on it
	// rotates the ticket keys.
	tlsConf *tls.Config

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu    sync.Mutex
	mode  serverMode         // guarded by mu
	conns int                // connections accepted; guarded by mu
	full  int                // of them, handshakes that did not resume a TLS session; guarded by mu
	stale int                // stale Deltas sent; guarded by mu
	live  map[*testConn]bool // guarded by mu
}

type testConn struct {
	conn  *quic.Conn
	minor uint16 // the session's minor, once welcomed
	wmu   sync.Mutex
	w     *wire.Writer // guarded by wmu
	sess  *testSession
}

func (tc *testConn) write(m wire.Message) error {
	tc.wmu.Lock()
	defer tc.wmu.Unlock()
	return tc.w.Write(m)
}

// startServer starts a server of the cluster on 127.0.0.1.
func (c *testCluster) startServer(id string) *testServer {
	t := c.t
	cert, err := c.ca.IssueServer(id, []string{"127.0.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	tlsConf := wire.ServerTLSConfig(c.ca.Pool(), cert, c.keys)
	udp, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	tr := &quic.Transport{Conn: udp}
	ln, err := tr.ListenEarly(tlsConf, wire.ServerQUICConfig())
	if err != nil {
		t.Fatal(err)
	}
	s := &testServer{c: c, id: id, addr: ln.Addr().(*net.UDPAddr), udp: udp, tr: tr, ln: ln, tlsConf: tlsConf, live: map[*testConn]bool{}}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	s.wg.Go(func() {
		for {
			conn, err := ln.Accept(s.ctx)
			if err != nil {
				return
			}
			s.mu.Lock()
			s.conns++
			s.mu.Unlock()
			s.wg.Go(func() {
				select {
				case <-conn.HandshakeComplete():
					if !conn.ConnectionState().TLS.DidResume {
						s.mu.Lock()
						s.full++
						s.mu.Unlock()
					}
				case <-conn.Context().Done():
				}
			})
			s.wg.Go(func() { s.serve(conn) })
		}
	})
	c.mu.Lock()
	c.servers = append(c.servers, s)
	c.mu.Unlock()
	t.Cleanup(s.stop)
	return s
}

func (s *testServer) setMode(m serverMode) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.mode = m
}

func (s *testServer) getMode() serverMode {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.mode
}

func (s *testServer) accepted() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.conns
}

// fullHandshakes counts the accepted connections whose TLS handshake was
// a full one (no resumed session): certificates both ways.
func (s *testServer) fullHandshakes() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.full
}

// stop closes the server: live connections are closed with "shutting
// down", the listener goes away.
func (s *testServer) stop() {
	s.cancel()
	s.mu.Lock()
	for tc := range s.live {
		tc.conn.CloseWithError(wire.CloseShuttingDown, "test server stopping")
	}
	s.mu.Unlock()
	s.ln.Close()
	s.wg.Wait()
	s.tr.Close()
	s.udp.Close()
}

// closeSessions closes every live connection abruptly (as a crash of the
// session would), leaving the server up.
func (s *testServer) closeSessions() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for tc := range s.live {
		tc.conn.CloseWithError(wire.CloseInternalError, "test server dropped the session")
	}
}

func (s *testServer) notify(rev uint64) {
	s.mu.Lock()
	live := slices.Collect(maps.Keys(s.live))
	s.mu.Unlock()
	for _, tc := range live {
		if tc.sess != nil {
			_ = tc.write(&wire.Notify{Revision: rev})
		}
	}
}

func (s *testServer) serve(conn *quic.Conn) {
	defer conn.CloseWithError(wire.CloseNormal, "")
	str, err := conn.AcceptStream(s.ctx)
	if err != nil {
		return // an RTT probe: no stream
	}
	tc := &testConn{conn: conn, w: wire.NewWriter(str)}
	s.mu.Lock()
	s.live[tc] = true
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.live, tc)
		s.mu.Unlock()
	}()
	r := wire.NewReader(str)
	m, err := r.Read()
	if err != nil {
		return
	}
	hello, ok := m.(*wire.Hello)
	if !ok {
		conn.CloseWithError(wire.CloseProtocolError, "first message must be Hello")
		return
	}
	device, err := wire.PeerDeviceID(s.ctx, conn)
	if err != nil {
		return
	}
	// This test server commits nothing before the handshake completes; a
	// connection closed before it (the server stopping) never completes it.
	select {
	case <-conn.HandshakeComplete():
	case <-conn.Context().Done():
		return
	}
	c := s.c
	c.mu.Lock()
	c.hellos = append(c.hellos, helloSeen{server: s.id, hello: hello, used0RTT: conn.ConnectionState().Used0RTT, device: device})
	c.eventLocked()
	c.mu.Unlock()
	if rej := s.getMode().rejectHello; rej != nil {
		s.refuse(tc, str, rej, rej.Code)
		return
	}

	c.mu.Lock()
	sid := hello.SessionID
	sess, ok := c.sessions[sid]
	if !ok || sid.IsZero() || !bytes.Equal(sess.token, hello.ResumeToken) {
		if !hello.Inventory {
			c.mu.Unlock()
			s.refuse(tc, str, &wire.Reject{Code: wire.CodeSessionUnknown, Reason: "no such session"}, wire.CodeSessionUnknown)
			return
		}
		_, _ = rand.Read(sid[:])
		sess = &testSession{}
		c.sessions[sid] = sess
	}
	sess.acked = max(sess.acked, hello.AckedRevision)
	sess.token = make([]byte, 32)
	_, _ = rand.Read(sess.token)
	minor := wire.ProtocolMinor
	if s.getMode().protocol10 {
		minor = 0
	}
	if s.getMode().protocol13 {
		minor = 3
	}
	settings := c.settings
	welcome := &wire.Welcome{
		Major: wire.ProtocolMajor, Minor: minor, ServerID: s.id, SessionID: sid,
		ResumeToken: bytes.Clone(sess.token), DesiredRevision: max(c.rev, sess.acked),
		AcceptedReportSeq: sess.appliedSeq, ServerTimeUnixNano: time.Now().UnixNano(),
	}
	c.mu.Unlock()
	tc.minor = min(minor, hello.Minor)
	if err := tc.write(welcome); err != nil {
		return
	}
	if settings != nil && tc.minor >= wire.MinorEdge {
		if err := tc.write(settings); err != nil {
			return
		}
	}
	tc.sess = sess
	for {
		m, err := r.Read()
		if err != nil {
			return
		}
		switch m := m.(type) {
		case *wire.Pull:
			c.mu.Lock()
			c.pulls = append(c.pulls, time.Now())
			c.eventLocked()
			c.mu.Unlock()
			if g := s.getMode().goAwayOnPull; g != nil {
				s.refuse(tc, str, g, g.Code)
				return
			}
			for _, part := range s.delta(m) {
				if err := tc.write(part); err != nil {
					return
				}
			}
		case *wire.Ping:
			c.mu.Lock()
			c.pings = append(c.pings, m)
			c.eventLocked()
			c.mu.Unlock()
			if m.EchoAfter > 0 {
				time.AfterFunc(m.EchoAfter, func() { _ = tc.write(&wire.Pong{Seq: m.Seq}) })
			}
		case *wire.Ack:
			c.mu.Lock()
			sess.acked = max(sess.acked, m.Revision)
			c.acks = append(c.acks, m.Revision)
			c.eventLocked()
			c.mu.Unlock()
		case *wire.Report:
			if m.States && minor < wire.MinorReportStates || m.Corrections && minor < wire.MinorReportCorrections || m.Traffic != nil && minor < wire.MinorReportTraffic || m.Edge && minor < wire.MinorEdge {
				c.t.Errorf("report %d with flags its session at minor %d lacks (states %v, corrections %v, traffic %v)", m.Seq, minor, m.States, m.Corrections, m.Traffic != nil)
				conn.CloseWithError(wire.CloseProtocolError, "undefined report flag")
				return
			}
			if s.getMode().dropReports {
				c.mu.Lock()
				c.dropped = append(c.dropped, droppedReport{seq: m.Seq, at: time.Now()})
				c.eventLocked()
				c.mu.Unlock()
				continue
			}
			c.mu.Lock()
			applied := m.Seq > sess.appliedSeq
			if applied {
				sess.appliedSeq = m.Seq
				c.reports = append(c.reports, c.mergeLocked(m))
				c.eventLocked()
			}
			seq := sess.appliedSeq
			c.mu.Unlock()
			_ = tc.write(&wire.ReportAck{Seq: seq})
		default:
			conn.CloseWithError(wire.CloseProtocolError, "unexpected "+m.Type().String())
			return
		}
	}
}

// refuse sends a Reject or GoAway as docs/wire.md §6.4 says: nothing
// more on the stream, and a close with the matching code if the agent has
// not closed within a grace period.
func (s *testServer) refuse(tc *testConn, str *quic.Stream, m wire.Message, code wire.Code) {
	if err := tc.write(m); err != nil {
		return
	}
	str.Close()
	select {
	case <-tc.conn.Context().Done():
	case <-time.After(2 * time.Second):
		tc.conn.CloseWithError(code.CloseCode(), "refused")
	case <-s.ctx.Done():
	}
}

// delta answers a Pull: every desired key whose digest differs from the
// inventory is upserted, every inventory key not desired is deleted. It
// is split in frames of at most 600 bytes to exercise reassembly.
func (s *testServer) delta(p *wire.Pull) []*wire.Delta {
	c := s.c
	mode := s.getMode()
	c.mu.Lock()
	d := &wire.Delta{BaseRevision: p.KnownRevision, TargetRevision: c.rev, Complete: true}
	if stale := mode.staleDelta; stale != 0 {
		d.TargetRevision = stale
		s.mu.Lock()
		s.stale++
		s.mu.Unlock()
	}
	inv := map[string]wire.AppliedResource{}
	for _, a := range p.Applied {
		inv[a.Key] = a
	}
	for _, k := range slices.Sorted(maps.Keys(c.desired)) {
		if u := c.desired[k]; inv[k].Digest != u.Digest {
			d.Upserts = append(d.Upserts, u)
		}
	}
	for _, a := range p.Applied {
		if _, ok := c.desired[a.Key]; !ok {
			d.Deletes = append(d.Deletes, a.Key)
		}
	}
	c.mu.Unlock()
	parts, err := wire.SplitDelta(d, 600)
	if err != nil {
		c.t.Errorf("split delta: %v", err)
	}
	return parts
}

// agentConfig returns an agent config for this cluster with tight test
// timings and the given servers.
func (c *testCluster) agentConfig(t *testing.T, deviceID string, servers ...*testServer) Config {
	cert, err := c.ca.IssueDevice(deviceID)
	if err != nil {
		t.Fatal(err)
	}
	cfg := DefaultConfig()
	for _, s := range servers {
		cfg.Servers = append(cfg.Servers, s.addr.String())
	}
	cfg.DataDir = t.TempDir()
	cfg.Root = t.TempDir()
	cfg.RootCAs = c.ca.Pool()
	cfg.Certificate = cert
	cfg.Labels = map[string]string{"region": "eu", "site": "store-42"}
	cfg.Logger = testLogger(t)
	cfg.BackoffMin, cfg.BackoffMax = 20*time.Millisecond, 200*time.Millisecond
	cfg.RetryMin, cfg.RetryMax = 20*time.Millisecond, 200*time.Millisecond
	cfg.DialTimeout = 3 * time.Second
	cfg.RTTProbeInterval = -1
	q := wire.ClientQUICConfig()
	q.MaxIdleTimeout, q.KeepAlivePeriod = 1500*time.Millisecond, 300*time.Millisecond
	cfg.QUIC = q
	return cfg
}

// startAgent runs an agent until the test ends.
func startAgent(t *testing.T, cfg Config) *Agent {
	t.Helper()
	a, _ := runAgent(t, cfg)
	return a
}

// runAgent runs an agent until the returned stop is called (or the test
// ends).
func runAgent(t *testing.T, cfg Config) (*Agent, func()) {
	t.Helper()
	t.Setenv("QUIC_GO_DISABLE_RECEIVE_BUFFER_WARNING", "true")
	a, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	stop := sync.OnceFunc(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("agent Run: %v", err)
		}
	})
	t.Cleanup(stop)
	return a, stop
}

// waitCluster waits until cond holds on the cluster's state.
func (c *testCluster) wait(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		c.mu.Lock()
		ch := c.changed
		c.mu.Unlock()
		if cond() {
			return
		}
		select {
		case <-ch:
		case <-deadline.C:
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
	}
}

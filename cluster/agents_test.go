package cluster

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"testing"
	"time"

	"github.com/quic-go/quic-go"

	"github.com/meteor-edge/meteor/cluster/api"
	"github.com/meteor-edge/meteor/cluster/pki"
	"github.com/meteor-edge/meteor/fsm/intent"
	"github.com/meteor-edge/meteor/wire"
)

// testPKI is a cluster CA, a cluster secret and the means to issue
// certificates, for tests that serve agents.
type testPKI struct {
	ca     *pki.CA
	secret []byte
}

func newTestPKI(t testing.TB) *testPKI {
	t.Helper()
	ca, err := pki.NewCA("test CA", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	return &testPKI{ca: ca, secret: []byte("0123456789abcdef0123456789abcdef")}
}

// withAgents makes every server of a test cluster serve agents.
func (p *testPKI) withAgents(t testing.TB) func(*Config) {
	return func(cfg *Config) {
		cert, err := p.ca.IssueServer(cfg.NodeID, []string{"127.0.0.1"})
		if err != nil {
			t.Fatal(err)
		}
		cfg.AgentAddr = "127.0.0.1:0"
		cfg.AgentTLS = &AgentTLS{ClientCAs: p.ca.Pool(), Certificate: cert}
		cfg.ClusterSecret = p.secret
		cfg.LagWait = 300 * time.Millisecond
	}
}

func (p *testPKI) deviceTLS(t testing.TB, id string) *tls.Config {
	t.Helper()
	cert, err := p.ca.IssueDevice(id)
	if err != nil {
		t.Fatal(err)
	}
	return wire.ClientTLSConfig(p.ca.Pool(), cert, "")
}

// wireAgent is a test peer speaking the wire protocol over real QUIC:
// enough of an agent to drive a server through a session step by step.
type wireAgent struct {
	t      testing.TB
	tr     *quic.Transport
	conn   *quic.Conn
	stream *quic.Stream
	r      *wire.Reader
	w      *wire.Writer
}

func dialAgent(t testing.TB, addr string, tlsConf *tls.Config) *wireAgent {
	t.Helper()
	return dialAgentQUIC(t, addr, tlsConf, wire.ClientQUICConfig())
}

// dialAgentQUIC is dialAgent with the agent's QUIC configuration.
func dialAgentQUIC(t testing.TB, addr string, tlsConf *tls.Config, qconf *quic.Config) *wireAgent {
	t.Helper()
	udp, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	tr := &quic.Transport{Conn: udp}
	raddr, err := net.ResolveUDPAddr("udp", addr)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := tr.DialEarly(ctx, raddr, tlsConf, qconf)
	if err != nil {
		t.Fatal(err)
	}
	// No test here needs early data, and opening a stream in 0-RTT races
	// inside quic-go v0.65 (quic-go/quic-go#4303, see agent/race.go): the
	// race detector fails the test when a resumed connection opens its
	// stream while the handshake is still running.
	select {
	case <-conn.HandshakeComplete():
	case <-ctx.Done():
		t.Fatalf("handshake with %s: %v", addr, ctx.Err())
	}
	stream, err := conn.OpenStreamSync(ctx)
	if err != nil {
		t.Fatal(err)
	}
	a := &wireAgent{t: t, tr: tr, conn: conn, stream: stream, r: wire.NewReader(stream), w: wire.NewWriter(stream)}
	t.Cleanup(a.close)
	return a
}

func (a *wireAgent) close() {
	a.conn.CloseWithError(wire.CloseNormal, "")
	a.tr.Close()
	a.tr.Conn.Close()
}

func (a *wireAgent) send(m wire.Message) {
	a.t.Helper()
	if err := a.w.Write(m); err != nil {
		a.t.Fatalf("send %s: %v", m.Type(), err)
	}
}

func (a *wireAgent) recv() wire.Message {
	a.t.Helper()
	// A bound, not a wait: a message that has not come in this long will
	// not come.
	a.stream.SetReadDeadline(time.Now().Add(30 * time.Second))
	m, err := a.r.Read()
	if err != nil {
		a.t.Fatalf("receive: %v", wire.FromQUICError(err))
	}
	return m
}

// expect reads messages until one of type T arrives (skipping pushes).
func expect[T wire.Message](a *wireAgent) T {
	a.t.Helper()
	for {
		m := a.recv()
		if v, ok := m.(T); ok {
			return v
		}
		switch m.(type) {
		case *wire.Notify, *wire.Settings: // pushes
		default:
			var zero T
			a.t.Fatalf("got %s, want %T", m.Type(), zero)
		}
	}
}

func hello(labels map[string]string) *wire.Hello {
	return &wire.Hello{Major: wire.ProtocolMajor, Minor: wire.ProtocolMinor, Labels: labels, Inventory: true}
}

func fileIntentN(name string, n int, content string) *intent.Intent {
	in := &intent.Intent{Name: name, Selector: map[string]string{"region": "eu"}}
	for i := range n {
		in.Resources = append(in.Resources, intent.Resource{ID: fmt.Sprintf("r%02d", i), Type: "file", Spec: map[string]any{"path": fmt.Sprintf("/etc/r%02d", i), "content": content}})
	}
	return in
}

func TestAgentSessionMinimalDeltaAndReports(t *testing.T) {
	pki := newTestPKI(t)
	c := newTestCluster(t, 3, pki.withAgents(t))
	c.propose(fileIntentN("store", 50, "v0"))
	f := c.follower()
	c.waitConverged()

	a := dialAgent(t, f.AgentAddr(), pki.deviceTLS(t, "dev-1"))
	a.send(hello(map[string]string{"region": "eu"}))
	w := expect[*wire.Welcome](a)
	if w.ServerID != f.ID() || w.SessionID.IsZero() || len(w.ResumeToken) == 0 || w.DesiredRevision != 1 {
		t.Fatalf("welcome %+v", w)
	}
	a.send(&wire.Pull{Inventory: true})
	d := expect[*wire.Delta](a)
	if len(d.Upserts) != 50 || d.TargetRevision != 1 || !d.Complete {
		t.Fatalf("first delta: %d upserts, target %d", len(d.Upserts), d.TargetRevision)
	}
	if err := d.Verify(); err != nil {
		t.Fatal(err)
	}
	var applied []wire.AppliedResource
	for _, u := range d.Upserts {
		applied = append(applied, wire.AppliedResource{Key: u.Key, Digest: u.Digest, Revision: u.Revision})
	}
	a.send(&wire.Ack{Revision: 1})
	rep := &wire.Report{Seq: 1, DesiredRevision: 1, Full: true}
	for _, u := range d.Upserts {
		rep.Resources = append(rep.Resources, wire.ResourceReport{Key: u.Key, AppliedDigest: u.Digest, AppliedRevision: 1, Effective: wire.EffectiveOK})
	}
	a.send(rep)
	if ack := expect[*wire.ReportAck](a); ack.Seq != 1 {
		t.Fatalf("report ack %d", ack.Seq)
	}
	// A resent duplicate is acknowledged and not applied again.
	a.send(&wire.Report{Seq: 1, DesiredRevision: 1, Full: true})
	if ack := expect[*wire.ReportAck](a); ack.Seq != 1 {
		t.Fatalf("duplicate report ack %d", ack.Seq)
	}
	// The device is visible, converged, on every server.
	waitFor(t, 10*time.Second, func() error {
		for _, s := range c.alive() {
			dev, err := client(s).GetDevice(context.Background(), "dev-1", apiStale)
			if err != nil {
				return err
			}
			if !dev.Converged || !dev.Connected || dev.Server != f.ID() || dev.AckedRevision != 1 || len(dev.States) != 50 {
				return fmt.Errorf("%s sees %+v", s.ID(), dev.DeviceSummary)
			}
		}
		return nil
	})

	// 100 revisions that change 3 of the 50 resources: the agent is
	// notified, and the next delta holds exactly those 3.
	for i := range 100 {
		in := fileIntentN("store", 50, "v0")
		for j := range 3 {
			in.Resources[j].Spec["content"] = fmt.Sprintf("v%d", i+1)
		}
		c.propose(in)
	}
	n := expect[*wire.Notify](a)
	if n.Revision < 2 {
		t.Fatalf("notify %+v", n)
	}
	c.waitConverged()
	want := f.State().Read().Revision()
	a.send(&wire.Pull{KnownRevision: 1, Inventory: true, Applied: applied})
	d = expect[*wire.Delta](a)
	var keys []string
	for _, u := range d.Upserts {
		keys = append(keys, u.Key)
	}
	if fmt.Sprint(keys) != "[store/r00 store/r01 store/r02]" || len(d.Deletes) != 0 || d.TargetRevision != want {
		t.Fatalf("resync delta: upserts %v, deletes %v, target %d", keys, d.Deletes, d.TargetRevision)
	}
}

var apiStale = api.ReadOptions{Stale: true}

func TestAgentSessionResumesOnAnotherServer(t *testing.T) {
	pki := newTestPKI(t)
	c := newTestCluster(t, 3, pki.withAgents(t))
	c.propose(fileIntentN("store", 2, "v0"))
	c.waitConverged()
	tlsConf := pki.deviceTLS(t, "dev-2")

	a := dialAgent(t, c.Server(0).AgentAddr(), tlsConf)
	a.send(hello(map[string]string{"region": "eu"}))
	w := expect[*wire.Welcome](a)
	a.send(&wire.Ack{Revision: 1})
	a.send(&wire.Report{Seq: 7, DesiredRevision: 1, Full: true})
	expect[*wire.ReportAck](a)
	a.close()
	c.waitConverged()

	// The token from one server resumes the session on another, without an
	// inventory, and the accepted report seq carries over.
	b := dialAgent(t, c.Server(1).AgentAddr(), tlsConf)
	b.send(&wire.Hello{Major: wire.ProtocolMajor, SessionID: w.SessionID, ResumeToken: w.ResumeToken, AckedRevision: 1, Labels: map[string]string{"region": "eu"}})
	w2 := expect[*wire.Welcome](b)
	if w2.SessionID != w.SessionID || w2.AcceptedReportSeq != 7 {
		t.Fatalf("resumed welcome %+v, want session %x and report seq 7", w2, w.SessionID)
	}

	// Another device cannot use that token: it gets a new session at most.
	other := dialAgent(t, c.Server(1).AgentAddr(), pki.deviceTLS(t, "dev-3"))
	other.send(&wire.Hello{Major: wire.ProtocolMajor, SessionID: w.SessionID, ResumeToken: w.ResumeToken})
	if rej := expect[*wire.Reject](other); rej.Code != wire.CodeSessionUnknown {
		t.Fatalf("stolen token: %+v", rej)
	}
}

func TestLaggingServerSendsAgentElsewhere(t *testing.T) {
	pki := newTestPKI(t)
	c := newTestCluster(t, 3, pki.withAgents(t))
	c.propose(fileIntentN("store", 1, "v0"))
	c.waitConverged()
	// Stop a follower's progress, then move the cluster on.
	lag := c.follower()
	// Wait for Raft's goroutines: a second Shutdown (the server's own,
	// below) returns at once, and the server would then close the Raft
	// store under a candidate still saving its term.
	if err := lag.raft.Shutdown().Error(); err != nil {
		t.Fatal(err)
	}
	// The test cluster's helpers look at the servers that take part in Raft.
	c.Detach(c.index(lag))
	t.Cleanup(func() { lag.Shutdown() })
	for i := range 3 {
		c.propose(fileIntentN("store", 1, fmt.Sprint(i)))
	}
	have := lag.State().Read().Revision()
	a := dialAgent(t, lag.AgentAddr(), pki.deviceTLS(t, "dev-4"))
	h := hello(map[string]string{"region": "eu"})
	h.AckedRevision = have + 2
	a.send(h)
	ga := expect[*wire.GoAway](a)
	if ga.Code != wire.CodeLagging || len(ga.Redirect) == 0 {
		t.Fatalf("goaway %+v", ga)
	}
	// The stream ends after the GoAway; then the server closes with the code.
	if _, err := a.r.Read(); !errors.Is(err, io.EOF) && !errors.Is(wire.FromQUICError(err), wire.ErrLagging) {
		t.Fatalf("after goaway: %v", err)
	}
	<-a.conn.Context().Done()
	if err := wire.FromQUICError(context.Cause(a.conn.Context())); !errors.Is(err, wire.ErrLagging) {
		t.Fatalf("close after goaway: %v", err)
	}
}

func TestUnknownMajorVersionIsRejected(t *testing.T) {
	pki := newTestPKI(t)
	cfg := testConfig(t, "solo")
	cfg.Dev = true
	pki.withAgents(t)(&cfg)
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Shutdown() })
	a := dialAgent(t, s.AgentAddr(), pki.deviceTLS(t, "dev-5"))
	a.send(&wire.Hello{Major: 9, Minor: 1})
	_, err = a.r.Read()
	var ce *wire.CloseError
	if !errors.As(wire.FromQUICError(err), &ce) || ce.Code != wire.CloseVersionUnsupported || ce.Reason == "" {
		t.Fatalf("unknown major: %v", err)
	}
}

// TestStopClosesAConnectionBeforeItsHello: a server that stops closes an
// agent connection that has not sent its Hello yet with "shutting down",
// as it closes its sessions. An agent's round-trip probe opens such
// connections; one left to its handshake timeout held the stop for up to
// wire.HandshakeIdleTimeout (and closed it as a protocol error).
func TestStopClosesAConnectionBeforeItsHello(t *testing.T) {
	pki := newTestPKI(t)
	c := newTestCluster(t, 1, pki.withAgents(t))
	srv := c.Server(0)
	udp, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	tr := &quic.Transport{Conn: udp}
	defer tr.Close()
	raddr, err := net.ResolveUDPAddr("udp", srv.AgentAddr())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	// The server sends its session ticket once it has completed the
	// handshake; closed before that, the connection would carry only a
	// generic APPLICATION_ERROR, as QUIC hides the code from a peer not
	// yet authenticated.
	tlsConf := pki.deviceTLS(t, "dev-1")
	ticket := &ticketSignal{ClientSessionCache: tls.NewLRUClientSessionCache(1), got: make(chan struct{}, 1)}
	tlsConf.ClientSessionCache = ticket
	conn, err := tr.Dial(ctx, raddr, tlsConf, wire.ClientQUICConfig())
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-ticket.got:
	case <-ctx.Done():
		t.Fatal("no session ticket from the server")
	}
	go srv.Shutdown()
	<-conn.Context().Done()
	var ae *quic.ApplicationError
	if err := context.Cause(conn.Context()); !errors.As(err, &ae) || !ae.Remote || ae.ErrorCode != wire.CloseShuttingDown {
		t.Fatalf("connection closed with %v, want the server's %s", err, wire.CloseCodeName(wire.CloseShuttingDown))
	}
}

// ticketSignal is a client session cache that says when a ticket arrived.
type ticketSignal struct {
	tls.ClientSessionCache
	got chan struct{}
}

func (c *ticketSignal) Put(key string, cs *tls.ClientSessionState) {
	c.ClientSessionCache.Put(key, cs)
	select {
	case c.got <- struct{}{}:
	default:
	}
}

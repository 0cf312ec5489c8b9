package wiredev

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/quic-go/quic-go"

	"github.com/meteor-edge/meteor/agent"
	"github.com/meteor-edge/meteor/bench/internal/benchkit"
	clusterpki "github.com/meteor-edge/meteor/cluster/pki"
	"github.com/meteor-edge/meteor/wire"
)

// Config says how a Fleet's devices connect. The zero value of every
// field but Servers and Roots has a default.
type Config struct {
	// Servers are the servers' agent endpoints. Device i dials its home
	// server (Home(i); nil means i mod len(Servers)) first, and after a
	// failed dial the next one in turn.
	Servers []*net.UDPAddr
	Home    func(i int) int
	// Roots is the cluster CA.
	Roots *x509.CertPool
	// Sockets is how many UDP sockets on 127.0.0.1, one quic.Transport
	// each, the devices share: device i uses socket i mod Sockets.
	// Default 8.
	Sockets int
	// Dials bounds the dials in flight (handshake until the Welcome),
	// first ones and reconnects alike. Default 64.
	Dials int
	// DialTimeout bounds one dial until the Welcome; default the agent's
	// (wire.HandshakeIdleTimeout).
	DialTimeout time.Duration
	// BackoffMin and BackoffMax bound the jittered exponential backoff
	// after a device's failed dials; defaults the agent's.
	BackoffMin, BackoffMax time.Duration
	// ReportResendMin and ReportResendMax bound the jittered, doubling
	// wait before an unacknowledged report is sent again on the same
	// connection; defaults the agent's.
	ReportResendMin, ReportResendMax time.Duration
}

func (c *Config) fill() error {
	switch {
	case len(c.Servers) == 0:
		return errors.New("wiredev: no servers")
	case c.Roots == nil:
		return errors.New("wiredev: no CA")
	}
	def := func(v *time.Duration, d time.Duration) {
		if *v <= 0 {
			*v = d
		}
	}
	if c.Sockets <= 0 {
		c.Sockets = 8
	}
	if c.Dials <= 0 {
		c.Dials = 64
	}
	def(&c.DialTimeout, wire.HandshakeIdleTimeout)
	def(&c.BackoffMin, agent.DefaultBackoffMin)
	def(&c.BackoffMax, agent.DefaultBackoffMax)
	def(&c.ReportResendMin, agent.DefaultReportResendMin)
	def(&c.ReportResendMax, agent.DefaultReportResendMax)
	return nil
}

// Fleet runs devices until the context given to Start ends: each one has
// one goroutine of its own (besides its connection's, inside quic-go),
// which dials, reads the server's frames and answers them; the pull and
// report-resend timers write from their own short-lived goroutines, under
// the device's lock.
type Fleet struct {
	cfg   Config
	qc    *quic.Config
	devs  []*member
	socks *Sockets
	dials chan struct{} // a token per dial in flight
	wg    sync.WaitGroup

	attempted    atomic.Int64 // devices that made their first dial
	connected    atomic.Int64 // devices with a session now
	reconnects   atomic.Int64 // sessions lost after they opened
	dialFailures atomic.Int64
	deltas       deltaCounts
	lastErr      atomic.Pointer[error] // the latest failure, for logs
}

// member is one device of a Fleet.
// deltaCounts counts the complete Deltas a fleet's devices took: carried by
// a Notify (protocol 1.5), and answering a Pull.
type deltaCounts struct{ notified, pulled atomic.Int64 }

type member struct {
	mu          sync.Mutex // guards every field up to first
	d           *Device
	l           *link // the current session's link; nil between sessions
	pulling     bool  // a Pull is out, its Delta not complete
	notified    uint64
	parts       []*wire.Delta
	pullEvery   time.Duration
	pullTimer   *time.Timer
	resendTimer *time.Timer
	resendWait  time.Duration
	server      int          // index in Config.Servers of the session's server
	deltas      *deltaCounts // the fleet's (Fleet.Deltas)

	first          atomic.Int64 // UnixNano of its first Welcome; 0 before
	took, reported benchkit.TargetLog
}

// link is one connection's control stream.
type link struct {
	conn *quic.Conn
	str  *quic.Stream
	r    *wire.Reader
	w    *wire.Writer
}

func (l *link) send(m wire.Message) error {
	if err := l.w.Write(m); err != nil {
		return fmt.Errorf("send %s: %w", m.Type(), wire.FromQUICError(err))
	}
	return nil
}

// NewFleet returns a fleet of devs with its sockets open; Start runs it.
func NewFleet(cfg Config, devs []*Device) (*Fleet, error) {
	if err := cfg.fill(); err != nil {
		return nil, err
	}
	f := &Fleet{cfg: cfg, qc: wire.ClientQUICConfig(), dials: make(chan struct{}, cfg.Dials)}
	for _, d := range devs {
		f.devs = append(f.devs, &member{d: d, deltas: &f.deltas})
	}
	var err error
	if f.socks, err = OpenSockets(cfg.Sockets); err != nil {
		return nil, err
	}
	return f, nil
}

// Start starts every device's goroutine; each dials at once, Config.Dials
// at a time. They run until ctx ends; Wait waits for them.
func (f *Fleet) Start(ctx context.Context) {
	for i := range f.devs {
		f.wg.Go(func() { f.run(ctx, i) })
	}
}

// Wait waits until every device's goroutine has returned (after the
// context given to Start ended).
func (f *Fleet) Wait() { f.wg.Wait() }

// Close closes the fleet's sockets; call it after Wait.
func (f *Fleet) Close() { f.socks.Close() }

// Len is the number of devices.
func (f *Fleet) Len() int { return len(f.devs) }

// Attempted counts the devices that made their first dial, Connected
// those with a session now.
func (f *Fleet) Attempted() int { return int(f.attempted.Load()) }
func (f *Fleet) Connected() int { return int(f.connected.Load()) }

// Reconnects counts sessions lost after they opened; DialFailures dials
// that failed (to a Welcome).
func (f *Fleet) Reconnects() int64   { return f.reconnects.Load() }
func (f *Fleet) DialFailures() int64 { return f.dialFailures.Load() }

// Deltas counts the complete Deltas the devices took so far: carried by a
// Notify (protocol 1.5: no Pull needed), and pulled.
func (f *Fleet) Deltas() (notified, pulled int64) {
	return f.deltas.notified.Load(), f.deltas.pulled.Load()
}

// LastErr is the latest failure of any device, nil if none.
func (f *Fleet) LastErr() error {
	if p := f.lastErr.Load(); p != nil {
		return *p
	}
	return nil
}

func (f *Fleet) fail(id string, err error) {
	err = fmt.Errorf("%s: %w", id, err)
	f.lastErr.Store(&err)
}

// AppliedLogs are every device's log of the revisions it applied
// (complete Deltas taken), ReportedLogs of the revisions its reports were
// acknowledged for (a ReportAck: the server sends one once the report is
// committed through Raft); both in device order.
func (f *Fleet) AppliedLogs() []*benchkit.TargetLog {
	out := make([]*benchkit.TargetLog, len(f.devs))
	for i, m := range f.devs {
		out[i] = &m.took
	}
	return out
}

func (f *Fleet) ReportedLogs() []*benchkit.TargetLog {
	out := make([]*benchkit.TargetLog, len(f.devs))
	for i, m := range f.devs {
		out[i] = &m.reported
	}
	return out
}

// CountReported counts the devices whose reports were acknowledged for
// rev or a later revision.
func (f *Fleet) CountReported(rev uint64) int {
	n := 0
	for _, m := range f.devs {
		if _, ok := m.reported.First(rev); ok {
			n++
		}
	}
	return n
}

// Unreported describes, for at most n devices whose reports were not
// acknowledged for rev or a later revision, what the device holds: its
// ID, its server, the revisions it acknowledged and was notified of,
// whether a Pull of it is out and whether a report awaits its
// acknowledgement. A run that leaves devices behind names them.
func (f *Fleet) Unreported(rev uint64, n int) []string {
	var out []string
	for _, m := range f.devs {
		if len(out) == n {
			break
		}
		if _, ok := m.reported.First(rev); ok {
			continue
		}
		m.mu.Lock()
		server := "none"
		if m.l != nil {
			server = f.cfg.Servers[m.server].String()
		}
		out = append(out, fmt.Sprintf("%s (server %s, acknowledged %d, notified %d, pulling %v, report unacknowledged %v)",
			m.d.ID, server, m.d.Acked, m.notified, m.pulling, m.d.Unacked()))
		m.mu.Unlock()
	}
	return out
}

// SessionsByServer counts the devices in session, by the address of
// their server (Config.Servers' String()).
func (f *Fleet) SessionsByServer() map[string]int {
	out := map[string]int{}
	for _, m := range f.devs {
		m.mu.Lock()
		if m.l != nil {
			out[f.cfg.Servers[m.server].String()]++
		}
		m.mu.Unlock()
	}
	return out
}

// FirstSessions returns, sorted, how long after start each device got
// its first Welcome, for those that did.
func (f *Fleet) FirstSessions(start time.Time) []time.Duration {
	var out []time.Duration
	for _, m := range f.devs {
		if ns := m.first.Load(); ns != 0 {
			out = append(out, time.Unix(0, ns).Sub(start))
		}
	}
	slices.Sort(out)
	return out
}

// Ports returns the local ports of the fleet's sockets.
func (f *Fleet) Ports() []int { return f.socks.Ports() }

func (f *Fleet) home(i int) int {
	if f.cfg.Home != nil {
		return f.cfg.Home(i)
	}
	return i % len(f.cfg.Servers)
}

// run keeps device i in session until ctx ends: it dials (its home server
// first, the next one after each failure, with the agent's jittered
// exponential backoff between failures), serves the session until it
// fails, and dials again at once.
func (f *Fleet) run(ctx context.Context, i int) {
	m := f.devs[i]
	tr := f.socks.Transport(i)
	home := f.home(i)
	failures := 0
	first := true
	for ctx.Err() == nil {
		l, err := f.dial(ctx, m, tr, (home+failures)%len(f.cfg.Servers))
		if first {
			f.attempted.Add(1)
			first = false
		}
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			f.dialFailures.Add(1)
			f.fail(m.d.ID, err)
			failures++
			if benchkit.Sleep(ctx, jittered(backoff(f.cfg.BackoffMin, f.cfg.BackoffMax, failures))) != nil {
				return
			}
			continue
		}
		failures = 0
		f.connected.Add(1)
		err = f.serve(ctx, m, l)
		f.connected.Add(-1)
		m.drop(l)
		l.conn.CloseWithError(wire.CloseNormal, "")
		if ctx.Err() != nil {
			return
		}
		f.reconnects.Add(1)
		f.fail(m.d.ID, err)
	}
}

// backoff is the agent's exponential backoff: lo doubled for each failure
// after the first, at most hi.
func backoff(lo, hi time.Duration, n int) time.Duration {
	d := lo
	for i := 1; i < n && d < hi; i++ {
		d *= 2
	}
	return min(d, hi)
}

// jittered draws the agent's jitter: a duration in [d/2, d].
func jittered(d time.Duration) time.Duration {
	return d/2 + time.Duration(rand.Int64N(int64(d/2)+1))
}

// dial connects to addr and opens a session: Hello (resuming the session
// if the device has one, always with its inventory), Welcome; then Pull
// if the server's desired revision is ahead, and a fresh report if one
// is unacknowledged. It holds a dial token until the Welcome.
func (f *Fleet) dial(ctx context.Context, m *member, tr *quic.Transport, server int) (*link, error) {
	addr := f.cfg.Servers[server]
	select {
	case f.dials <- struct{}{}:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	defer func() { <-f.dials }()
	dctx, cancel := context.WithTimeout(ctx, f.cfg.DialTimeout)
	defer cancel()
	// No session cache: a ticket per device would cost memory, and these
	// devices reconnect with full handshakes.
	conn, err := tr.Dial(dctx, addr, m.d.TLSConfig(f.cfg.Roots, nil), f.qc)
	if err != nil {
		return nil, fmt.Errorf("dial %s: %w", addr, err)
	}
	l, err := f.open(dctx, m, conn, server)
	if err != nil {
		conn.CloseWithError(wire.CloseNormal, "")
		return nil, err
	}
	return l, nil
}

// errEnded is a session the server ended with Reject or GoAway.
var errEnded = errors.New("session ended by the server")

func (f *Fleet) open(ctx context.Context, m *member, conn *quic.Conn, server int) (*link, error) {
	str, err := conn.OpenStream()
	if err != nil {
		return nil, err
	}
	l := &link{conn: conn, str: str, r: wire.NewReader(str), w: wire.NewWriter(str)}
	m.mu.Lock()
	err = l.send(m.d.Hello(true))
	m.mu.Unlock()
	if err != nil {
		return nil, err
	}
	if dl, ok := ctx.Deadline(); ok {
		str.SetReadDeadline(dl)
	}
	msg, err := l.r.Read()
	if err != nil {
		return nil, fmt.Errorf("receive: %w", wire.FromQUICError(err))
	}
	str.SetReadDeadline(time.Time{})
	w, ok := msg.(*wire.Welcome)
	if !ok {
		return nil, fmt.Errorf("%w: got %s, want Welcome", errEnded, msg.Type())
	}
	now := time.Now()
	m.first.CompareAndSwap(0, now.UnixNano())
	m.mu.Lock()
	defer m.mu.Unlock()
	d := m.d
	d.Welcomed(w)
	m.l, m.pulling, m.notified, m.parts, m.server = l, false, 0, nil, server
	m.pullEvery = agent.DefaultPullInterval
	if w.PullInterval > 0 {
		m.pullEvery = w.PullInterval
	}
	if w.Minor >= wire.MinorKeepAlive {
		// These devices leave keep-alives to QUIC (wire.KeepAlivePeriod);
		// announce a silence the server will not cut them off for.
		if err := l.send(&wire.Ping{Seq: 1, Interval: wire.MaxPingInterval}); err != nil {
			return nil, err
		}
	}
	// Reports the cluster holds (the Welcome says up to which seq) are
	// durable: they need no resend.
	if rev := d.Acknowledged(w.AcceptedReportSeq); rev > 0 {
		m.reported.Record(rev, now)
	}
	if w.DesiredRevision > d.Acked || d.Acked == 0 {
		if err := l.send(d.Pull(true)); err != nil {
			return nil, err
		}
		m.pulling = true
	}
	if d.Unacked() {
		// What the cluster does not hold goes again, as it was sent.
		if err := m.resendLocked(l); err != nil {
			return nil, err
		}
		m.armResendLocked(l, f.cfg, true)
	}
	m.armPullLocked(l)
	return l, nil
}

// serve reads the session's frames and answers them until the connection
// fails, the server ends the session, or ctx ends.
func (f *Fleet) serve(ctx context.Context, m *member, l *link) error {
	stop := context.AfterFunc(ctx, func() { l.conn.CloseWithError(wire.CloseNormal, "") })
	defer stop()
	for {
		msg, err := l.r.Read()
		if err != nil {
			return fmt.Errorf("receive: %w", wire.FromQUICError(err))
		}
		if err := m.handle(l, msg, f.cfg); err != nil {
			return err
		}
	}
}

// handle answers one frame of the session on l.
func (m *member) handle(l *link, msg wire.Message, cfg Config) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	d := m.d
	switch msg := msg.(type) {
	case *wire.Notify:
		m.notified = max(m.notified, msg.Revision)
		if msg.Revision <= d.Acked || m.pulling {
			return nil
		}
		if msg.Delta != nil && msg.Base == d.Fingerprint() {
			// As the agent does: the Delta patches exactly what the
			// device holds, so it needs no Pull (protocol 1.5).
			if err := msg.Delta.Verify(); err != nil {
				return err
			}
			m.deltas.notified.Add(1)
			return m.takeLocked(l, []*wire.Delta{msg.Delta}, cfg)
		}
		if err := l.send(d.Pull(true)); err != nil {
			return err
		}
		m.pulling = true
	case *wire.Delta:
		m.parts = append(m.parts, msg)
		if !msg.Complete {
			return nil
		}
		if err := msg.Verify(); err != nil {
			return err
		}
		parts := m.parts
		m.parts, m.pulling = nil, false
		m.deltas.pulled.Add(1)
		return m.takeLocked(l, parts, cfg)
	case *wire.ReportAck:
		if rev := d.Acknowledged(msg.Seq); rev > 0 {
			m.reported.Record(rev, time.Now())
		}
		if !d.Unacked() && m.resendTimer != nil {
			m.resendTimer.Stop()
		}
	case *wire.Pong:
	case *wire.Settings:
		// Classes and windows pace a real agent's own work; a device
		// that applies in zero time has none.
	case *wire.Reject:
		return fmt.Errorf("%w: Reject %s: %s", errEnded, msg.Code, msg.Reason)
	case *wire.GoAway:
		return fmt.Errorf("%w: GoAway %s: %s", errEnded, msg.Code, msg.Reason)
	default:
		return fmt.Errorf("unexpected %s", msg.Type())
	}
	return nil
}

// takeLocked applies a complete Delta's frames, acknowledges and reports
// them, and pulls again if a newer revision was notified meanwhile.
func (m *member) takeLocked(l *link, parts []*wire.Delta, cfg Config) error {
	d := m.d
	if rev := d.Take(parts); rev != 0 {
		m.took.Record(rev, time.Now())
		// Ack means journaled; the apply itself takes no time here,
		// so the report follows at once.
		if err := l.send(&wire.Ack{Revision: rev}); err != nil {
			return err
		}
		if err := l.send(d.Report()); err != nil {
			return err
		}
		m.armResendLocked(l, cfg, true)
	}
	if m.notified > d.Acked {
		if err := l.send(d.Pull(true)); err != nil {
			return err
		}
		m.pulling = true
	}
	return nil
}

// armPullLocked schedules the periodic pull on l: the check that no
// change was missed, as the agent's.
func (m *member) armPullLocked(l *link) {
	if m.pullTimer != nil {
		m.pullTimer.Stop()
	}
	m.pullTimer = time.AfterFunc(m.pullEvery, func() {
		m.mu.Lock()
		defer m.mu.Unlock()
		if m.l != l {
			return
		}
		if !m.pulling {
			if err := l.send(m.d.Pull(true)); err != nil {
				l.conn.CloseWithError(wire.CloseNormal, "")
				return
			}
			m.pulling = true
		}
		m.pullTimer.Reset(m.pullEvery)
	})
}

// armResendLocked schedules sending the unacknowledged reports again on
// l: after ReportResendMin when fresh (a report was just sent), else
// after twice the last wait, at most ReportResendMax, jittered.
func (m *member) armResendLocked(l *link, cfg Config, fresh bool) {
	if fresh || m.resendWait == 0 {
		m.resendWait = cfg.ReportResendMin
	} else {
		m.resendWait = min(2*m.resendWait, cfg.ReportResendMax)
	}
	wait := jittered(m.resendWait)
	if m.resendTimer != nil {
		m.resendTimer.Stop()
	}
	m.resendTimer = time.AfterFunc(wait, func() {
		m.mu.Lock()
		defer m.mu.Unlock()
		if m.l != l || !m.d.Unacked() {
			return
		}
		if err := m.resendLocked(l); err != nil {
			l.conn.CloseWithError(wire.CloseNormal, "")
			return
		}
		m.armResendLocked(l, cfg, false)
	})
}

// resendLocked sends the device's unacknowledged reports on l again, each
// with the seq it was sent with.
func (m *member) resendLocked(l *link) error {
	for _, r := range m.d.Unacknowledged() {
		if err := l.send(r); err != nil {
			return err
		}
	}
	return nil
}

// drop ends the session on l: its timers stop.
func (m *member) drop(l *link) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.l != l {
		return
	}
	m.l, m.pulling, m.parts = nil, false, nil
	for _, t := range []*time.Timer{m.pullTimer, m.resendTimer} {
		if t != nil {
			t.Stop()
		}
	}
}

// Issue issues one device certificate per ID from ca (ECDSA P-256), on
// every CPU. The parsed leaf is dropped: a client never needs it, and a
// hundred thousand of them would cost hundreds of megabytes.
func Issue(ca *clusterpki.CA, ids []string) ([]tls.Certificate, error) {
	certs := make([]tls.Certificate, len(ids))
	err := benchkit.Parallel(len(ids), func(i int) error {
		c, err := ca.IssueDevice(ids[i])
		c.Leaf = nil
		certs[i] = c
		return err
	})
	return certs, err
}

package agent

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/quic-go/quic-go"

	"github.com/meteor-edge/meteor/agent/journal"
	"github.com/meteor-edge/meteor/wire"
)

// sessionEnd says why a session on one connection ended.
type sessionEnd struct {
	// established is true once a Welcome was received.
	established bool
	// refusal is set when the server sent Reject (goAway false) or GoAway.
	refusal *wire.Refusal
	goAway  bool
	// switchTo is set when the agent left for a nearer server.
	switchTo string
	// err says what else ended it (connection lost, protocol error,
	// context ended).
	err error
}

// session runs the protocol of docs/wire.md §7 on one connection: Hello,
// Welcome, then pulls, deltas, acks, reports and report acks on the
// control stream. One goroutine (the caller of run) writes and owns the
// state below; a reader goroutine only decodes frames.
type session struct {
	a        *Agent
	j        *journal.Journal
	conn     *quic.Conn
	addr     string
	log      hclog.Logger
	switchCh <-chan string

	str    *quic.Stream
	w      *wire.Writer
	reader *frameReader

	welcomed    bool
	minor       uint16 // the session's protocol minor, once welcomed
	retried0RTT bool
	pullOut     bool                            // a Pull awaits its Delta
	pullInv     map[string]wire.AppliedResource // inventory of that Pull; nil: none sent
	// sentInv is the inventory last sent on this connection (Hello or
	// Pull), which the server diffs Deltas against until another comes;
	// nil: none sent. A Pull carries the inventory only when it changed.
	sentInv     map[string]wire.AppliedResource
	pullAgain   bool             // pull once the outstanding Delta arrived
	repulled    bool             // pulled again for unresolved keys
	partial     *wire.Delta      // frames of an incomplete Delta
	sentSeq     uint64           // highest report seq sent or accepted
	reportOut   bool             // a report sent awaits its ReportAck
	resend      resendBackoff    // wait before sending it again
	resendTimer <-chan time.Time // set while reportOut
	pullEvery   time.Duration    // the Welcome's pull interval (else the agent's own)
	pullTimer   <-chan time.Time // armed for the pull interval of the moment (pullInterval)
	pullArmed   time.Time        // when pullTimer was armed
	ka          keepAlive        // the session's own keep-alives (1.3)
}

// send writes a message on the control stream.
func (s *session) send(m wire.Message) error {
	if err := s.w.Write(m); err != nil {
		return err
	}
	s.wrote()
	return nil
}

// liveWriter writes to the control stream, giving up once a write has
// waited timeout (Config.KeepAliveTimeout) without a packet from the
// server. A write blocks while QUIC's congestion or flow-control window
// is full: to a server whose host vanished (no close, no reset) a report
// larger than the window then held the session goroutine, and with it
// the keep-alive checks that would have moved the agent to another
// server, until QUIC's idle timeout (wire.MaxIdleTimeout, 20 minutes). A
// slow but live path keeps acknowledging, and the write goes on.
type liveWriter struct {
	str     *quic.Stream
	conn    *quic.Conn
	timeout time.Duration
}

func (w liveWriter) Write(p []byte) (int, error) {
	written := 0
	for {
		heard := w.conn.ConnectionStats().PacketsReceived
		w.str.SetWriteDeadline(time.Now().Add(w.timeout))
		n, err := w.str.Write(p[written:])
		written += n
		if err == nil || !errors.Is(err, os.ErrDeadlineExceeded) {
			return written, err
		}
		if w.conn.ConnectionStats().PacketsReceived == heard {
			return written, fmt.Errorf("nothing from the server for %v of a write: %w", w.timeout, err)
		}
	}
}

// frameReader decodes frames from the control stream into a channel.
type frameReader struct {
	in   chan inbound
	stop chan struct{}
	done chan struct{}
}

type inbound struct {
	m   wire.Message
	err error
}

func startReader(str *quic.Stream) *frameReader {
	fr := &frameReader{in: make(chan inbound), stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(fr.done)
		r := wire.NewReader(str)
		for {
			m, err := r.Read()
			select {
			case fr.in <- inbound{m, err}:
			case <-fr.stop:
				return
			}
			if err != nil {
				return
			}
		}
	}()
	return fr
}

// close stops the reader; the stream must be cancelled or its connection
// closed for a blocked Read to return.
func (fr *frameReader) close() {
	close(fr.stop)
	<-fr.done
}

// runSession runs a session on conn, a fresh connection to addr, until it
// ends.
func (a *Agent) runSession(ctx context.Context, conn *quic.Conn, addr string, switchCh <-chan string) sessionEnd {
	s := &session{
		a: a, j: a.j, conn: conn, addr: addr, log: a.log.Named("session").With("server_addr", addr), switchCh: switchCh,
		resend: resendBackoff{min: a.cfg.ReportResendMin, max: a.cfg.ReportResendMax},
	}
	end := s.run(ctx)
	code, reason := wire.CloseNormal, ""
	switch {
	case end.switchTo != "":
		reason = "moving to a nearer server"
	case ctx.Err() != nil:
		reason = "agent stopping"
	case end.refusal == nil && end.err != nil:
		code, reason = wire.CloseCodeFor(end.err)
	}
	s.conn.CloseWithError(code, reason)
	if s.reader != nil {
		s.reader.close()
	}
	return end
}

func (s *session) run(ctx context.Context) sessionEnd {
	if err := s.open(ctx); err != nil {
		return sessionEnd{err: err}
	}
	// A connection dialled with 0-RTT is open before its handshake is:
	// the Welcome's wait then covers the handshake too, which a full
	// handshake's dial bounded on its own, so it gets both bounds. With
	// one, a busy server's resumptions failed twice as often as its full
	// handshakes, and each retry added to the load (a reconnect storm).
	welcomeWait := s.a.cfg.DialTimeout
	if !wire.HandshakeDone(s.conn) {
		welcomeWait += s.a.cfg.DialTimeout
	}
	welcomeTimeout := s.a.cfg.Clock.After(welcomeWait)
	for {
		var reports <-chan struct{}
		if s.welcomed {
			reports, welcomeTimeout = s.a.rp.ready, nil
		}
		select {
		case <-ctx.Done():
			return s.end(ctx.Err())
		case <-welcomeTimeout:
			return s.end(fmt.Errorf("no Welcome within %v", welcomeWait))
		case in := <-s.reader.in:
			if in.err != nil {
				if errors.Is(in.err, quic.Err0RTTRejected) && !s.welcomed && !s.retried0RTT {
					if err := s.reopen(ctx); err != nil {
						return s.end(err)
					}
					continue
				}
				return s.end(fmt.Errorf("control stream: %w", wire.FromQUICError(in.err)))
			}
			if end, done := s.handle(in.m); done {
				return end
			}
		case <-s.pullTimer:
			s.pullTimer = nil
			if err := s.pull(); err != nil {
				return s.end(err)
			}
		case <-reports:
			if err := s.sendReports(); err != nil {
				return s.end(err)
			}
		case <-s.resendTimer:
			s.resendTimer = nil
			if err := s.resendReports(); err != nil {
				return s.end(err)
			}
		case <-s.ka.timer:
			s.ka.timer = nil
			if err := s.keepAliveTick(); err != nil {
				return s.end(err)
			}
		case <-s.ka.suspect:
			s.ka.suspect = nil
			if err := s.suspectCheck(); err != nil {
				return s.end(err)
			}
		case <-s.ka.dead:
			if err := s.deadCheck(); err != nil {
				return s.end(err)
			}
		case to := <-s.switchCh:
			return sessionEnd{established: s.welcomed, switchTo: to}
		}
	}
}

func (s *session) end(err error) sessionEnd {
	return sessionEnd{established: s.welcomed, err: err}
}

// open opens the control stream and sends Hello, and in 0-RTT also Pull.
// If the server refuses 0-RTT it sends Hello again after the handshake.
func (s *session) open(ctx context.Context) error {
	err := s.openOnce(ctx)
	if err == nil {
		return nil
	}
	if !errors.Is(err, quic.Err0RTTRejected) || s.retried0RTT {
		return wire.FromQUICError(err)
	}
	return s.reopen(ctx)
}

// reopen handles a refused 0-RTT (docs/wire.md §4): wait for the
// handshake, then send Hello again, not early, on a new stream. The early
// Pull was discarded with it; the Welcome decides whether to pull again.
func (s *session) reopen(ctx context.Context) error {
	s.retried0RTT = true
	s.a.refused0RTT.Add(1)
	s.log.Debug("server refused 0-RTT; resending after the handshake")
	if s.reader != nil {
		s.str.CancelRead(0)
		s.reader.close()
		s.reader = nil
	}
	hctx, cancel := context.WithTimeout(ctx, s.a.cfg.DialTimeout)
	defer cancel()
	conn, err := s.conn.NextConnection(hctx)
	if err != nil {
		return fmt.Errorf("handshake after refused 0-RTT: %w", wire.FromQUICError(err))
	}
	s.conn = conn
	s.pullOut, s.pullInv, s.partial, s.sentInv = false, nil, nil, nil
	if err := s.openOnce(ctx); err != nil {
		return wire.FromQUICError(err)
	}
	return nil
}

// openOnce opens the control stream and sends Hello (and Pull in 0-RTT).
// Race builds first wait for the handshake, or for ctx: a connection
// dialled with 0-RTT is returned before its handshake completes, and one
// to a server that has gone silent would otherwise hold the agent's stop
// until the handshake's idle timeout.
func (s *session) openOnce(ctx context.Context) error {
	if raceBuild {
		select {
		case <-s.conn.HandshakeComplete():
		case <-s.conn.Context().Done():
			return context.Cause(s.conn.Context())
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	str, err := s.conn.OpenStream()
	if err != nil {
		return err
	}
	s.str, s.w = str, wire.NewWriter(liveWriter{str: str, conn: s.conn, timeout: s.a.cfg.KeepAliveTimeout})
	s.reader = startReader(str)
	hello, err := s.hello()
	if err != nil {
		return err
	}
	hello.Early = !wire.HandshakeDone(s.conn)
	if err := s.send(hello); err != nil {
		return err
	}
	s.sentInv = nil
	if hello.Inventory {
		s.sentInv = inventoryMap(hello.Applied)
	}
	s.log.Debug("sent Hello", "early", hello.Early, "session", hex.EncodeToString(hello.SessionID[:]),
		"acked_revision", hello.AckedRevision, "inventory", len(hello.Applied))
	if hello.Early {
		// Pipelined in 0-RTT: the answer comes in 0.5-RTT with the Welcome.
		return s.pull()
	}
	return nil
}

// hello builds the Hello from the journal.
func (s *session) hello() (*wire.Hello, error) {
	sess, err := s.j.Session()
	if err != nil {
		return nil, err
	}
	inv, err := s.inventory()
	if err != nil {
		return nil, err
	}
	h := &wire.Hello{
		Major: wire.ProtocolMajor, Minor: wire.ProtocolMinor,
		AgentVersion:   truncate(s.a.cfg.AgentVersion, wire.MaxNameLen),
		Labels:         s.a.cfg.Labels,
		AckedRevision:  sess.AckedRevision,
		AckedReportSeq: sess.AckedReportSeq,
		Inventory:      true,
		Applied:        inv,
	}
	if id, ok := parseSessionID(sess.ID); ok {
		h.SessionID, h.ResumeToken = id, sess.ResumeToken
	}
	if wire.FrameLen(h) > wire.DefaultMaxFrameSize {
		s.log.Warn("inventory too large for a Hello; resuming by revision only", "resources", len(inv))
		h.Inventory, h.Applied = false, nil
	}
	return h, nil
}

// inventory returns every resource applied, from the journal.
func (s *session) inventory() ([]wire.AppliedResource, error) {
	all, err := s.j.AppliedAll()
	if err != nil {
		return nil, err
	}
	inv := make([]wire.AppliedResource, 0, len(all))
	for _, a := range all {
		if a.Digest != "" {
			inv = append(inv, wire.AppliedResource{Key: a.Key, Digest: digestFromHex(a.Digest), Revision: a.Revision})
		}
	}
	return inv, nil
}

// pull sends a Pull with the inventory, or marks one as wanted if a Pull
// is outstanding (one at a time keeps Deltas and inventories paired).
func (s *session) pull() error {
	if s.pullOut {
		s.pullAgain = true
		return nil
	}
	known, err := s.j.DesiredRevision()
	if err != nil {
		return err
	}
	inv, err := s.inventory()
	if err != nil {
		return err
	}
	p := &wire.Pull{KnownRevision: known, Inventory: true, Applied: inv}
	same := s.sentInv != nil && sameInventory(s.sentInv, inv)
	switch {
	case same:
		// The server diffs against the inventory it has from this
		// connection, which is still the agent's.
		p.Inventory, p.Applied = false, nil
	case wire.FrameLen(p) > wire.DefaultMaxFrameSize:
		s.log.Warn("inventory too large for a Pull; pulling by revision only", "resources", len(inv))
		p.Inventory, p.Applied = false, nil
	}
	if err := s.send(p); err != nil {
		return err
	}
	s.pullOut, s.pullAgain = true, false
	if p.Inventory {
		s.sentInv = inventoryMap(inv)
	}
	s.pullInv = nil
	if p.Inventory || same {
		s.pullInv = s.sentInv // what the Delta is diffed against
	}
	if s.welcomed {
		s.armPull()
	}
	s.log.Debug("sent Pull", "known_revision", known, "inventory", len(p.Applied))
	return nil
}

// inventoryMap indexes an inventory by key.
func inventoryMap(inv []wire.AppliedResource) map[string]wire.AppliedResource {
	m := make(map[string]wire.AppliedResource, len(inv))
	for _, r := range inv {
		m[r.Key] = r
	}
	return m
}

// sameInventory reports whether inv lists exactly the resources of m.
func sameInventory(m map[string]wire.AppliedResource, inv []wire.AppliedResource) bool {
	if len(m) != len(inv) {
		return false
	}
	for _, r := range inv {
		if m[r.Key] != r {
			return false
		}
	}
	return true
}

// handle acts on one message; done is true when the session ends.
func (s *session) handle(m wire.Message) (end sessionEnd, done bool) {
	fail := func(err error) (sessionEnd, bool) { return s.end(err), true }
	if !s.welcomed {
		switch m := m.(type) {
		case *wire.Welcome:
			if err := s.onWelcome(m); err != nil {
				return fail(err)
			}
			return end, false
		case *wire.Reject:
			return sessionEnd{refusal: (*wire.Refusal)(m)}, true
		case *wire.GoAway:
			return sessionEnd{refusal: (*wire.Refusal)(m), goAway: true}, true
		}
		return fail(protocolErrorf("%s before Welcome", m.Type()))
	}
	var err error
	switch m := m.(type) {
	case *wire.GoAway:
		return sessionEnd{established: true, refusal: (*wire.Refusal)(m), goAway: true}, true
	case *wire.Notify:
		err = s.onNotify(m)
	case *wire.Delta:
		err = s.onDelta(m)
	case *wire.ReportAck:
		err = s.onReportAck(m)
	case *wire.Pong:
		err = s.onPong(m)
	case *wire.Settings:
		err = s.onSettings(m)
	default:
		err = protocolErrorf("unexpected %s from the server", m.Type())
	}
	if err != nil {
		return fail(err)
	}
	return end, false
}

func (s *session) onWelcome(m *wire.Welcome) error {
	if err := wire.Negotiate(m.Major, m.Minor); err != nil {
		return err
	}
	old, err := s.j.Session()
	if err != nil {
		return err
	}
	sid := hex.EncodeToString(m.SessionID[:])
	// The token is journaled before anything else happens in the session.
	if err := s.j.SetSession(sid, m.ResumeToken); err != nil {
		return err
	}
	s.welcomed = true
	s.minor = min(m.Minor, wire.ProtocolMinor)
	if err := s.startKeepAlive(); err != nil {
		return err
	}
	newSession := old.ID != sid
	s.log = s.log.With("session", sid)
	s.log.Info("session established", "server", m.ServerID, "resumed", !newSession,
		"desired_revision", m.DesiredRevision, "accepted_report_seq", m.AcceptedReportSeq, "tls_resumed", s.conn.ConnectionState().TLS.DidResume, "0rtt", s.conn.ConnectionState().Used0RTT)
	s.a.st.update(func(st *Status) {
		st.Connected, st.Server, st.ServerID, st.SessionID = true, s.addr, m.ServerID, sid
		st.Connects++
	})
	s.pullEvery = m.PullInterval
	if s.pullEvery <= 0 {
		s.pullEvery = s.a.cfg.PullInterval
	}

	// Reports: drop what the server already applied; coalesce the rest,
	// and start a new session, with one fresh full report.
	if m.AcceptedReportSeq > 0 {
		if err := s.j.AckReports(min(m.AcceptedReportSeq, old.LastReportSeq)); err != nil {
			return err
		}
		s.a.rp.acked(m.AcceptedReportSeq)
	}
	pending, err := s.j.PendingReports()
	if err != nil {
		return err
	}
	s.sentSeq = m.AcceptedReportSeq
	if (newSession || len(pending) > 0) && s.a.st.passed() {
		if err := s.a.rp.queue(m.AcceptedReportSeq); err != nil {
			return err
		}
	}
	if err := s.sendReports(); err != nil {
		return err
	}

	known, err := s.j.DesiredRevision()
	if err != nil {
		return err
	}
	if !s.pullOut && m.DesiredRevision > known {
		return s.pull()
	}
	s.armPull()
	return nil
}

// pullInterval is the pull cadence now: the shortest among the classes of
// the desired resources, once the control plane sent its classes;
// otherwise the Welcome's.
func (s *session) pullInterval() time.Duration { return s.a.book.pullInterval(s.pullEvery) }

// armPull sets the pull timer to the pull interval from now.
func (s *session) armPull() {
	s.pullArmed = s.a.cfg.Clock.Now()
	s.pullTimer = s.a.cfg.Clock.After(s.pullInterval())
}

// onSettings journals and applies what the control plane configured on
// the device (protocol 1.4): a change of class takes effect at once, the
// reconciler re-planning its checks and the session its next pull.
func (s *session) onSettings(m *wire.Settings) error {
	if s.minor < wire.MinorEdge {
		return protocolErrorf("Settings in a session at protocol 1.%d", s.minor)
	}
	if !s.a.book.set(m) {
		s.log.Debug("ignoring older settings", "seq", m.Seq)
		return nil
	}
	if err := s.j.SaveSettings(m.Append(nil)); err != nil {
		return err
	}
	s.log.Debug("settings received", "seq", m.Seq, "classes", len(m.Classes), "windows", len(m.Windows), "unlocks", len(m.Unlocks))
	s.a.rec.trigger()
	if s.pullTimer != nil {
		// The next pull comes one new interval after the last one.
		next := s.pullArmed.Add(s.pullInterval())
		s.pullTimer = s.a.cfg.Clock.After(max(0, next.Sub(s.a.cfg.Clock.Now())))
	}
	return nil
}

func (s *session) onNotify(m *wire.Notify) error {
	known, err := s.j.DesiredRevision()
	if err != nil {
		return err
	}
	if m.Revision <= known {
		return nil
	}
	if m.Delta != nil {
		if s.minor < wire.MinorPushDelta {
			return protocolErrorf("Notify with a Delta in a session at protocol 1.%d", s.minor)
		}
		if !s.pullOut {
			took, err := s.takePushed(m)
			if err != nil || took {
				return err
			}
		}
	}
	s.log.Debug("notified", "revision", m.Revision)
	return s.pull()
}

// takePushed applies the Delta a Notify carries (protocol 1.5) if the
// journaled desired set is the one it patches, and reports whether it
// did. Otherwise (the set moved since the server computed the patch, or
// was never the one this server sent) the caller pulls.
func (s *session) takePushed(m *wire.Notify) (bool, error) {
	sess, err := s.j.Session()
	if err != nil {
		return false, err
	}
	set, err := s.j.Desired()
	if err != nil {
		return false, err
	}
	if setFingerprint(set) != m.Base {
		s.log.Debug("notified with a Delta for another desired set; pulling", "revision", m.Revision)
		return false, nil
	}
	s.log.Debug("notified with the Delta", "revision", m.Revision, "upserts", len(m.Delta.Upserts), "deletes", len(m.Delta.Deletes))
	if err := s.applyDeltaTo(m.Delta, nil, sess, set); err != nil {
		return false, err
	}
	if s.pullAgain {
		return true, s.pull()
	}
	return true, nil
}

// setFingerprint is the wire.SetFingerprint of a journaled desired set,
// whose resources the journal keeps in key order. A digest that does not
// decode counts as the zero digest: the fingerprint then matches no
// server's, and the agent pulls.
func setFingerprint(set journal.DesiredSet) wire.Digest {
	f := wire.NewSetFingerprint()
	for _, r := range set.Resources {
		f.Add(r.Key, digestFromHex(r.Digest))
	}
	return f.Sum()
}

// onDelta collects the frames of a Delta and, once complete, journals the
// target desired set, acknowledges it and wakes the reconciler.
func (s *session) onDelta(m *wire.Delta) error {
	if !s.pullOut {
		return protocolErrorf("Delta without a Pull")
	}
	if s.partial == nil {
		s.partial = m
	} else {
		if m.BaseRevision != s.partial.BaseRevision || m.TargetRevision != s.partial.TargetRevision {
			return protocolErrorf("Delta frame %d->%d inside Delta %d->%d",
				m.BaseRevision, m.TargetRevision, s.partial.BaseRevision, s.partial.TargetRevision)
		}
		if len(s.partial.Upserts)+len(m.Upserts) > wire.MaxResources || len(s.partial.Deletes)+len(m.Deletes) > wire.MaxResources {
			return protocolErrorf("Delta of more than %d resources", wire.MaxResources)
		}
		s.partial.Upserts = append(s.partial.Upserts, m.Upserts...)
		s.partial.Deletes = append(s.partial.Deletes, m.Deletes...)
		s.partial.Complete = m.Complete
	}
	if !s.partial.Complete {
		return nil
	}
	d, inv := s.partial, s.pullInv
	s.partial, s.pullOut, s.pullInv = nil, false, nil
	if err := s.applyDelta(d, inv); err != nil {
		return err
	}
	if s.pullAgain {
		return s.pull()
	}
	return nil
}

func (s *session) applyDelta(d *wire.Delta, inv map[string]wire.AppliedResource) error {
	sess, err := s.j.Session()
	if err != nil {
		return err
	}
	set, err := s.j.Desired()
	if err != nil {
		return err
	}
	return s.applyDeltaTo(d, inv, sess, set)
}

// applyDeltaTo applies d to the journaled session sess and desired set
// set (applyDelta).
func (s *session) applyDeltaTo(d *wire.Delta, inv map[string]wire.AppliedResource, sess journal.Session, set journal.DesiredSet) error {
	if err := d.Verify(); err != nil {
		return fmt.Errorf("%w: %v", wire.ErrProtocol, err)
	}
	if floor := max(sess.AckedRevision, set.Revision); d.TargetRevision < floor {
		// Never go back (invariant 2); a server that is behind should
		// have said "lagging".
		s.log.Warn("ignoring Delta older than the journaled desired state", "revision", d.TargetRevision, "journaled_revision", floor)
		return nil
	}
	cur := make(map[string]journal.DesiredResource, len(set.Resources))
	for _, r := range set.Resources {
		cur[r.Key] = r
	}
	p, err := planDelta(d, cur, inv, s.j.AppliedBody)
	if err != nil {
		return err
	}
	if len(p.upserts) > 0 || len(p.removes) > 0 || d.TargetRevision != set.Revision {
		if err := s.j.PatchDesired(d.TargetRevision, p.upserts, p.removes); err != nil {
			if errors.Is(err, journal.ErrRevisionRegression) {
				s.log.Warn("ignoring Delta", "error", err)
				return nil
			}
			return err
		}
		s.a.rec.trigger()
		s.log.Info("desired state journaled", "revision", d.TargetRevision, "base_revision", d.BaseRevision,
			"upserts", len(d.Upserts), "deletes", len(d.Deletes), "changed", len(p.upserts), "removed", len(p.removes))
	}
	if d.TargetRevision > sess.AckedRevision {
		if err := s.j.AckRevision(d.TargetRevision); err != nil {
			return err
		}
		if err := s.send(&wire.Ack{Revision: d.TargetRevision}); err != nil {
			return err
		}
	}
	s.a.st.update(func(st *Status) { st.AckedRevision = max(st.AckedRevision, d.TargetRevision) })
	if len(p.unresolved) > 0 && !s.repulled {
		s.log.Debug("applied state moved during the pull; pulling again", "keys", len(p.unresolved))
		s.repulled = true
		s.pullAgain = true
	} else if len(p.unresolved) == 0 {
		s.repulled = false
	}
	return nil
}

func (s *session) onReportAck(m *wire.ReportAck) error {
	sess, err := s.j.Session()
	if err != nil {
		return err
	}
	if err := s.j.AckReports(min(m.Seq, sess.LastReportSeq)); err != nil {
		return err
	}
	s.a.rp.acked(m.Seq)
	s.log.Debug("reports acknowledged", "seq", m.Seq)
	if m.Seq < s.sentSeq {
		return nil // the report in flight is still unacknowledged
	}
	s.reportOut, s.resendTimer = false, nil
	s.resend.reset()
	return s.sendReports()
}

// sendReports sends the queued reports not sent on this connection yet,
// unless one is in flight: every report supersedes the ones before it, so
// a report queued meanwhile goes when the server acknowledges the one in
// flight, or in its place when that is resent.
func (s *session) sendReports() error {
	if s.reportOut {
		return nil
	}
	return s.writeReports(s.sentSeq)
}

// resendReports sends the queued reports again: the server has not
// acknowledged the one in flight within the backoff (a server that cannot
// commit a report, during an election say, does not answer it). The
// server applies each seq at most once, so resending one it did apply
// only gets it acknowledged.
func (s *session) resendReports() error {
	s.reportOut = false
	return s.writeReports(0)
}

// writeReports sends the queued reports numbered above after and, if it
// sent any, waits the next backoff for their acknowledgement.
func (s *session) writeReports(after uint64) error {
	pending, err := s.j.PendingReports()
	if err != nil {
		return err
	}
	sent := false
	for _, p := range pending {
		if p.Seq <= after {
			continue
		}
		rep, err := decodeReport(p)
		if err != nil {
			return err
		}
		rep = s.a.withTraffic(rep, s.minor)
		if s.minor < wire.MinorEdge {
			rep = rep.WithoutEdge() // a 1.3 server refuses the flag
		}
		if s.minor < wire.MinorReportCorrections {
			rep = rep.WithoutCorrections() // a 1.1 server refuses the flag
		}
		if s.minor < wire.MinorReportStates {
			rep = legacyReport(rep) // a 1.0 server refuses typed states
		}
		if err := s.send(rep); err != nil {
			return err
		}
		s.sentSeq, sent = max(s.sentSeq, p.Seq), true
		s.log.Debug("sent Report", "seq", p.Seq, "status", rep.Status, "resources", len(rep.Resources), "resend", after == 0)
	}
	if sent {
		s.reportOut = true
		s.resendTimer = s.a.cfg.Clock.After(s.resend.wait(rand.Int64N))
	} else {
		s.resend.reset()
	}
	return nil
}

// parseSessionID decodes a journaled session ID; ok is false for none.
func parseSessionID(s string) (wire.SessionID, bool) {
	var id wire.SessionID
	b, err := hex.DecodeString(s)
	if err != nil || len(b) != len(id) {
		return id, false
	}
	copy(id[:], b)
	return id, !id.IsZero()
}

package cluster

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/quic-go/quic-go"

	"github.com/meteor-edge/meteor/fsm"
	"github.com/meteor-edge/meteor/scheduler"
	"github.com/meteor-edge/meteor/wire"
)

// agentSession is one agent connection's session (docs/wire.md §7). The
// serveConn goroutine owns it; notifyLoop only calls maybeNotify.
type agentSession struct {
	a        *agentServer
	conn     *quic.Conn
	logger   hclog.Logger
	deviceID string
	id       wire.SessionID
	connID   string // this connection's ID in the device's session record
	// minor is the session's protocol minor: the lower of the Hello's
	// and this server's.
	minor uint16
	// labels are the labels the Hello reported: facts the session record
	// commits (fsm.DeviceRecord.ReportedLabels), not what intents are
	// selected by (selectionLabels).
	labels map[string]string

	wmu sync.Mutex // serialises frames on the control stream
	// goAwayOnce sends the GoAway of a draining server once (drain.go).
	goAwayOnce sync.Once
	// leaveBy, once set (unix nanoseconds), bounds every later write on
	// the control stream: the session is going away (goAway).
	leaveBy atomic.Int64
	w       *wire.Writer
	stream  *quic.Stream // the control stream
	// liveness is how long the session may go without a message from the
	// agent before the server ends it as dead (wire.LivenessBound of the
	// keep-alive interval the agent's last Ping announced); zero leaves
	// liveness to QUIC's idle timeout (agents of 1.2 and earlier, whose
	// keep-alives QUIC sends). Owned by the session's read loop.
	liveness time.Duration
	// echo sends the Pong of the NAT binding test in progress; one at a
	// time, a newer test replacing an older. Owned by the read loop.
	echo Timer

	mu           sync.Mutex // guards the fields below
	acked        uint64     // highest desired revision the agent journaled
	reportSeq    uint64     // highest report seq durably applied
	inventory    []scheduler.Applied
	notified     uint64      // revision of the last Notify or Delta sent
	fp           wire.Digest // fingerprint of the desired state last sent; zero: none yet
	registered   bool        // the session is committed and receives pushes
	registeredAt time.Time   // when it registered (local monotonic clock)
	notifying    bool        // a Notify is queued or being written (notify)
	notifyRev    uint64      // the revision the next Notify names
	// due is the desired state of the revision the next Notify names, and
	// sent the desired state the last Delta written on this connection
	// (a Pull's answer or a Notify's) took the agent to, or the state of
	// its Welcome. A Notify carries the patch from sent to due (1.5); sent
	// is updated under wmu, in the order the Deltas go on the stream.
	due, sent *scheduler.DesiredState
	// pulled is the revision of the last Delta served (handlePull);
	// pulledCh, if set, is closed when it or acked moves (awaitPull).
	pulled   uint64
	pulledCh chan struct{}
	// recordedOnce is set once sessionSync committed this connection as
	// connected, and recorded is the highest acknowledged revision it
	// committed. attemptedOnce and attempted are the same for commits
	// tried, whether they succeeded or not. recordedCh is closed (and
	// replaced) whenever any of them moves on.
	recordedOnce  bool
	recorded      uint64
	attemptedOnce bool
	attempted     uint64
	recordedCh    chan struct{}
	// retrying is the newest report the server could not record yet and
	// is retrying (retryReports); nil while none is.
	retrying *wire.Report
	// carrying is the acknowledged revision that the report being
	// handed to the owner carries (recordReport); 0 while none is.
	carrying uint64

	// settingsMu guards the settings last sent (sendSettings): their
	// encoding without Seq, and Seq.
	settingsMu sync.Mutex
	// welcomed is set once the Welcome is written, under settingsMu so
	// that sendSettings sees it in order; read without it by the device
	// watch (deviceWatch.sendSettings).
	welcomed     atomic.Bool
	settingsSent []byte
	settingsSeq  uint64
}

// serveConn runs one agent connection to its end. srvCtx is the agent
// server's context.
func (a *agentServer) serveConn(srvCtx context.Context, conn *quic.Conn) {
	ctx := conn.Context()
	// The server's stop closes every agent connection, sessions and those
	// not yet one alike: a connection that never sends its Hello (an
	// agent's round-trip probe does not) would otherwise hold the stop
	// for up to wire.HandshakeIdleTimeout, and one whose registration
	// waits on Raft for up to the apply timeout.
	unwatch := context.AfterFunc(srvCtx, func() { conn.CloseWithError(wire.CloseShuttingDown, "server shutting down") })
	defer unwatch()
	var stream *quic.Stream
	err := a.handshake(ctx, conn, &stream)
	code, reason := closeCode(err)
	if err != nil && code != wire.CloseNormal {
		a.logger.Debug("agent connection closed", "remote", conn.RemoteAddr(), "code", wire.CloseCodeName(code), "reason", reason)
	}
	var ce *errClose
	if errors.As(err, &ce) && ce.flush && stream != nil {
		// The last frame (a Reject or GoAway with redirects) must reach the
		// agent: closing the connection at once would discard it. Finish
		// the stream and give the agent a moment to read it and hang up.
		stream.Close()
		linger := a.clock.NewTimer(time.Second)
		select {
		case <-ctx.Done():
		case <-srvCtx.Done():
		case <-linger.C():
		}
		linger.Stop()
	}
	conn.CloseWithError(code, reason)
	if a.connClosed != nil {
		st := conn.ConnectionStats()
		a.connClosed(st.BytesSent, st.BytesReceived)
	}
}

func (a *agentServer) handshake(ctx context.Context, conn *quic.Conn, streamOut **quic.Stream) error {
	sctx, cancel := context.WithTimeout(ctx, wire.HandshakeIdleTimeout)
	stream, err := conn.AcceptStream(sctx)
	cancel()
	if err != nil {
		return closeWith(wire.CloseProtocolError, "no control stream: %v", err)
	}
	*streamOut = stream
	r := wire.NewReader(stream)
	msg, err := r.Read()
	if err != nil {
		return closeWith(wire.CloseProtocolError, "read hello: %v", err)
	}
	hello, ok := msg.(*wire.Hello)
	if !ok {
		return closeWith(wire.CloseProtocolError, "expected Hello, got %s", msg.Type())
	}
	if err := wire.Negotiate(hello.Major, hello.Minor); err != nil {
		return closeWith(wire.CloseVersionUnsupported, "%v", err)
	}
	deviceID, err := wire.PeerDeviceID(ctx, conn)
	if err != nil {
		return closeWith(wire.CloseUnauthorized, "%v", err)
	}
	sess := &agentSession{
		a: a, conn: conn, deviceID: deviceID, labels: hello.Labels, connID: newConnID(),
		stream: stream, logger: a.logger.With("device", deviceID),
	}
	sess.w = wire.NewWriter(progressWriter{stream: stream, idle: sessionWriteTimeout, leaveBy: &sess.leaveBy})
	sess.minor = min(hello.Minor, a.cfg.wireMinor())
	if sess.minor >= wire.MinorKeepAlive {
		// Until its first Ping, an agent of 1.3 keeps alive at the
		// starting interval.
		sess.liveness = a.livenessBound(wire.KeepAliveStart)
	}
	if err := sess.refuseRevoked(a.state.Read()); err != nil {
		return err
	}
	if a.draining.Load() {
		return sess.refuseDraining()
	}
	return sess.run(ctx, hello, r)
}

func (sess *agentSession) run(ctx context.Context, hello *wire.Hello, r *wire.Reader) error {
	a := sess.a
	cfg := a.cfg
	now := a.clock.Now()
	defer func() {
		if sess.echo != nil {
			sess.echo.Stop()
		}
	}()

	// Resume the session if the token is valid for this device and session;
	// otherwise start a new one, which needs the agent's inventory.
	resumed := false
	if !hello.SessionID.IsZero() {
		claims, err := a.keyring.Load().Open(hello.ResumeToken, now)
		switch {
		case err != nil:
			sess.logger.Debug("resume token refused", "error", err)
		case claims.CheckDevice(sess.deviceID) != nil || claims.SessionID != hello.SessionID:
			sess.logger.Warn("resume token of another device or session refused")
		default:
			resumed = true
			sess.id = hello.SessionID
			sess.acked = max(hello.AckedRevision, claims.LastAckRevision)
		}
	}
	if !resumed {
		if !hello.Inventory {
			sess.write(&wire.Reject{Code: wire.CodeSessionUnknown, Reason: "session unknown or token expired: send a Hello with your inventory"})
			return flushAndClose(wire.CloseSessionUnknown, "session unknown")
		}
		sess.id = newSessionID()
		sess.acked = hello.AckedRevision
	}
	if hello.Inventory {
		sess.inventory = appliedOf(hello.Applied)
	}
	sess.logger = sess.logger.With("session", sessionString(sess.id))
	// Labels given or taken by the control plane, and a revocation, reach
	// the session through the replica's record of the device.
	a.watches.join(ctx, sess)

	// Never answer with a desired state older than what the agent holds.
	if a.state.Read().Revision() < sess.acked && !a.waitForRevision(ctx, sess.acked) {
		return sess.lagging(sess.acked)
	}
	// welcome is the state the Welcome speaks of: the agent holds its
	// desired state, or pulls it.
	welcome := a.state.Read()
	if rec, err := welcome.Device(nil, sess.deviceID); err == nil {
		sess.reportSeq = rec.ReportSeq
	}
	token := a.keyring.Load().Seal(wire.Claims{
		SessionID: sess.id, DeviceID: sess.deviceID, IssuedAt: now,
		ExpiresAt: now.Add(cfg.TokenLifetime), LastAckRevision: sess.acked,
	})
	if err := sess.write(&wire.Welcome{
		Major: wire.ProtocolMajor, Minor: cfg.wireMinor(),
		ServerID: cfg.NodeID, SessionID: sess.id, ResumeToken: token,
		DesiredRevision: welcome.Revision(), AcceptedReportSeq: sess.reportSeq,
		ServerTimeUnixNano: now.UnixNano(), PullInterval: cfg.PullInterval,
	}); err != nil {
		return err
	}
	sess.welcomeSent()
	if err := sess.sendSettings(welcome); err != nil {
		return err
	}

	// Nothing others can observe happens before the handshake completes:
	// until then the Hello may be a replay of 0-RTT data. A Pull is a read
	// and is answered at once (in 0.5-RTT when the agent sent it early);
	// the session is recorded in the background (sessionSync), and Acks
	// and Reports, which change state, wait until it is: the owner of the
	// device judges reports against that record.
	registered := make(chan struct{})
	var regErr error
	live := false // the session is in sessionSync's table; set before registered closes
	go func() {
		defer close(registered)
		select {
		case <-sess.conn.HandshakeComplete():
		case <-ctx.Done():
			regErr = context.Cause(ctx)
			return
		}
		live = true
		a.sync.started(sess)
		// Wait for the first try to commit it, not for its success: while
		// the cluster elects a leader the record cannot commit, but the
		// device is heard all the same, and its owner must hear its
		// reports, not a silence (sessionSync goes on trying).
		if regErr = sess.waitAttempted(ctx, 0); regErr != nil {
			return
		}
		if hook := a.beforeRegister.Load(); hook != nil {
			(*hook)(sess.deviceID)
		}
		sess.register(welcome)
		if resumed {
			a.stats.resumed.Add(1)
		} else {
			a.stats.fresh.Add(1)
		}
		if sess.conn.ConnectionState().Used0RTT {
			a.stats.zeroRTT.Add(1)
		}
		sess.logger.Debug("session established", "resumed", resumed, "acked_revision", sess.acked, "early", hello.Early)
	}()
	defer func() {
		<-registered
		if !live {
			return
		}
		if regErr == nil {
			a.remove(sess)
		}
		// sessionSync records the disconnect, retrying until it commits.
		a.sync.stopped(sess)
	}()
	waitRegistered := func() error {
		select {
		case <-registered:
			return regErr
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	}

	for {
		if sess.liveness > 0 {
			// A real-time deadline: QUIC's own timers are on the real clock.
			sess.stream.SetReadDeadline(time.Now().Add(sess.liveness))
		}
		msg, err := r.Read()
		if err != nil {
			var appErr *quic.ApplicationError
			if errors.As(err, &appErr) || errors.Is(err, context.Canceled) {
				return nil
			}
			if errors.Is(err, os.ErrDeadlineExceeded) && ctx.Err() == nil {
				sess.logger.Info("agent silent past its keep-alive; ending the session", "silent_for", sess.liveness)
				return closeWith(wire.CloseNormal, "no keep-alive from the agent for %v", sess.liveness)
			}
			return closeWith(wire.CloseProtocolError, "read: %v", err)
		}
		switch m := msg.(type) {
		case *wire.Ping:
			if sess.minor < wire.MinorKeepAlive {
				err = closeWith(wire.CloseProtocolError, "Ping in a session at protocol 1.%d, which has none", sess.minor)
				break
			}
			sess.handlePing(ctx, m)
		case *wire.Pull:
			err = sess.handlePull(ctx, m)
		case *wire.Ack:
			if err = waitRegistered(); err == nil {
				err = sess.handleAck(ctx, m)
			}
		case *wire.Report:
			if err = waitRegistered(); err == nil {
				err = sess.handleReport(ctx, m)
			}
		default:
			err = closeWith(wire.CloseProtocolError, "unexpected %s from an agent", msg.Type())
		}
		if err != nil {
			return err
		}
	}
}

// handlePing takes a keep-alive: the agent's announced interval sets the
// session's liveness bound, and a NAT binding test gets its Pong after the
// silence it asked for. Pings are not acknowledged otherwise: QUIC's ACK
// of the packet is the answer an agent needs.
func (sess *agentSession) handlePing(ctx context.Context, m *wire.Ping) {
	sess.liveness = sess.a.livenessBound(m.Interval)
	if m.EchoAfter <= 0 {
		return
	}
	if sess.echo != nil {
		sess.echo.Stop()
	}
	sess.echo = sess.a.clock.AfterFunc(m.EchoAfter, func() {
		if ctx.Err() != nil {
			return
		}
		if err := sess.write(&wire.Pong{Seq: m.Seq}); err != nil {
			sess.writeFailed("Pong", err)
		}
	})
}

// livenessBound is how long a session whose agent keeps alive every
// interval may be silent (wire.LivenessBound).
func (a *agentServer) livenessBound(interval time.Duration) time.Duration {
	if a.cfg.AgentLivenessSlack > 0 {
		return wire.LivenessBoundWith(interval, a.cfg.AgentLivenessSlack)
	}
	return wire.LivenessBound(interval)
}

func (sess *agentSession) write(m wire.Message) error {
	sess.wmu.Lock()
	defer sess.wmu.Unlock()
	return sess.writeLocked(m)
}

// sessionWriteTimeout bounds how long a write on the control stream may
// go without the stream taking any of it. A write blocks while the
// agent's flow-control window is full: an agent that stopped reading (a
// stalled device, or one that means harm) would otherwise hold the
// stream's lock, and every goroutine of its session that wants to write,
// for good. The session ends with the error instead. A write that makes
// progress goes on (progressWriter): a Delta frame of up to 4 MiB takes
// minutes on a slow link, and a bound on the whole write would fail it at
// every try, the agent pulling the same Delta again each time.
const sessionWriteTimeout = 30 * time.Second

// writeLocked writes m (progressWriter bounds it). The caller holds wmu.
func (sess *agentSession) writeLocked(m wire.Message) error {
	return sess.w.Write(m)
}

// progressWriter writes to a session's control stream, giving up once
// the stream has taken nothing of a write for idle, or at leaveBy (unix
// nanoseconds, when set: the session is leaving a draining server),
// whichever comes first.
type progressWriter struct {
	stream  *quic.Stream
	idle    time.Duration
	leaveBy *atomic.Int64
}

func (w progressWriter) Write(p []byte) (int, error) {
	written := 0
	for {
		deadline := time.Now().Add(w.idle)
		leaving := false
		if by := w.leaveBy.Load(); by != 0 && by < deadline.UnixNano() {
			deadline, leaving = time.Unix(0, by), true
		}
		w.stream.SetWriteDeadline(deadline)
		n, err := w.stream.Write(p[written:])
		written += n
		switch {
		case err == nil, !errors.Is(err, os.ErrDeadlineExceeded), leaving:
			return written, err
		case n == 0:
			return written, fmt.Errorf("the agent took none of a write for %v: %w", w.idle, err)
		}
		// The stream took part of it: the agent reads, slowly.
	}
}

// writeFailed ends the session after a write that no caller's error ends
// it for failed: a push (Notify, Settings), a Pong or a retried report's
// ReportAck, written beside the read loop. The control stream may hold part of a frame, and a session
// left open would send its agent nothing more of what it is due (a
// Notify not written leaves the session believing its agent told), so
// the agent must reconnect and resume to be served again. A write fails
// when the agent has not taken it within sessionWriteTimeout (a link gone
// silent, an agent that stopped reading) or the connection is closing.
func (sess *agentSession) writeFailed(what string, err error) {
	switch {
	case sess.conn.Context().Err() != nil:
		sess.logger.Debug(what+" not written: the connection is closed", "error", err)
		return
	case sess.leaveBy.Load() != 0:
		// Leaving (goAway): its GoAway may still be on its way, which a
		// close now would cut off; the drain closes what stays.
		sess.logger.Debug(what+" not written: the session is leaving", "error", err)
		return
	}
	sess.logger.Info(what+" not written; closing the session", "error", err)
	code, _ := wire.CloseCodeFor(err)
	sess.conn.CloseWithError(code, what+" not written: "+err.Error())
}

// lagging sends the agent elsewhere: this replica is behind rev.
func (sess *agentSession) lagging(rev uint64) error {
	have := sess.a.state.Read().Revision()
	reason := fmt.Sprintf("server %s is at revision %d, behind the agent's %d", sess.a.cfg.NodeID, have, rev)
	sess.write(&wire.GoAway{Code: wire.CodeLagging, Reason: reason, RetryAfter: time.Second, Redirect: sess.a.redirects()})
	return flushAndClose(wire.CloseLagging, reason)
}

func (sess *agentSession) handlePull(ctx context.Context, p *wire.Pull) error {
	a := sess.a
	if a.state.Read().Revision() < p.KnownRevision && !a.waitForRevision(ctx, p.KnownRevision) {
		return sess.lagging(p.KnownRevision)
	}
	read := a.state.Read()
	desired, err := sess.a.planner.Desired(read, sess.deviceID, sess.selectionLabels(read))
	if err != nil {
		return closeWith(wire.CloseInternalError, "compute desired state: %v", err)
	}
	sess.mu.Lock()
	if p.Inventory {
		sess.inventory = appliedOf(p.Applied)
	}
	delta := scheduler.ComputeDelta(desired, sess.inventory)
	sess.notified, sess.fp = desired.Revision, desired.Fingerprint()
	sess.mu.Unlock()

	d := &wire.Delta{BaseRevision: p.KnownRevision, TargetRevision: delta.Revision, Complete: true, Deletes: delta.Deletes}
	for _, u := range delta.Upserts {
		d.Upserts = append(d.Upserts, wire.Upsert{Key: u.Key, Digest: wire.Digest(u.Digest), Revision: u.Revision, Body: u.Body})
	}
	frames, err := wire.SplitDelta(d, wire.DefaultMaxFrameSize)
	if err != nil {
		return closeWith(wire.CloseInternalError, "split delta: %v", err)
	}
	sess.wmu.Lock()
	for _, f := range frames {
		if err := sess.writeLocked(f); err != nil {
			sess.wmu.Unlock()
			return err
		}
		sess.a.stats.countDelta(f)
	}
	sess.mu.Lock()
	sess.sent = desired
	sess.mu.Unlock()
	sess.wmu.Unlock()
	sess.markPulled(delta.Revision)
	return nil
}

// pushDeltaMax bounds the Delta a Notify carries (1.5): a larger change
// is named by revision only and the agent pulls it, as from 1.4 agents.
const pushDeltaMax = 16 << 10

// pushedDelta returns the Delta a Notify of due may carry to an agent
// that holds sent, and sent's fingerprint, or nil if the session cannot
// take one: a minor before 1.5, no state known to be held, a Notify of
// another revision, or a change larger than pushDeltaMax.
func (sess *agentSession) pushedDelta(rev uint64, due, sent *scheduler.DesiredState) (*wire.Delta, wire.Digest) {
	if sess.minor < wire.MinorPushDelta || due == nil || sent == nil || due.Revision != rev || sent.Revision > rev {
		return nil, wire.Digest{}
	}
	patch := scheduler.PatchDelta(sent, due)
	d := &wire.Delta{BaseRevision: sent.Revision, TargetRevision: due.Revision, Complete: true, Deletes: patch.Deletes}
	n := d.Len()
	for _, u := range patch.Upserts {
		d.Upserts = append(d.Upserts, wire.Upsert{Key: u.Key, Digest: u.Digest, Revision: u.Revision, Body: u.Body})
		if n += len(u.Body); n > pushDeltaMax {
			return nil, wire.Digest{}
		}
	}
	if d.Len() > pushDeltaMax {
		return nil, wire.Digest{}
	}
	return d, sent.Fingerprint()
}

func (sess *agentSession) handleAck(ctx context.Context, m *wire.Ack) error {
	sess.mu.Lock()
	advanced := m.Revision > sess.acked
	sess.acked = max(sess.acked, m.Revision)
	acked := sess.acked
	if advanced && sess.pulledCh != nil {
		// A push waiting for this agent (awaitPull) has its answer.
		close(sess.pulledCh)
		sess.pulledCh = nil
	}
	sess.mu.Unlock()
	if !advanced {
		return nil
	}
	if sess.a.state.Read().ActiveLevel() >= fsm.LevelAckWithStatus {
		// The report that follows carries the acknowledgement to the
		// device's owner, which judges it by it and commits both in one
		// entry (statusOwner.ingest). Should no report have done so
		// within Config.AckFoldWait (a device that sends none), or should
		// the owner fail to record it, sessionSync commits it alone; it
		// passes over it while a report carrying it is being recorded,
		// however long the owner takes (sessionSync.pass).
		sess.a.sync.changedAfter(sess, cmp.Or(sess.a.cfg.AckFoldWait, DefaultAckFoldWait))
		return nil
	}
	sess.a.sync.changed(sess)
	// The owner judges the reports that follow by the acknowledged
	// revision: let its record go first. If it cannot commit (an
	// election), sessionSync keeps trying and the session goes on.
	if err := sess.waitAttempted(ctx, acked); err != nil {
		return err
	}
	if !sess.isRecorded(acked) {
		sess.logger.Debug("acknowledged revision not recorded yet; recording in the background", "acked_revision", acked)
	}
	return nil
}

// markAttempted notes that sessionSync tried to commit this connection as
// connected with acknowledged revision acked, and whether it succeeded.
func (sess *agentSession) markAttempted(acked uint64, ok bool) {
	sess.mu.Lock()
	defer sess.mu.Unlock()
	moved := !sess.attemptedOnce || acked > sess.attempted
	sess.attemptedOnce, sess.attempted = true, max(sess.attempted, acked)
	if ok && (!sess.recordedOnce || acked > sess.recorded) {
		sess.recordedOnce, sess.recorded, moved = true, max(sess.recorded, acked), true
	}
	if moved && sess.recordedCh != nil {
		close(sess.recordedCh)
		sess.recordedCh = nil
	}
}

// wasRecorded reports whether this connection was ever committed as
// connected.
func (sess *agentSession) wasRecorded() bool {
	sess.mu.Lock()
	defer sess.mu.Unlock()
	return sess.recordedOnce
}

// isRecorded reports whether this connection is committed as connected
// with an acknowledged revision of at least acked.
func (sess *agentSession) isRecorded(acked uint64) bool {
	sess.mu.Lock()
	defer sess.mu.Unlock()
	return sess.recordedOnce && sess.recorded >= acked
}

// waitAttempted waits until sessionSync has tried to commit this
// connection as connected with an acknowledged revision of at least
// acked (or found it committed).
func (sess *agentSession) waitAttempted(ctx context.Context, acked uint64) error {
	for {
		sess.mu.Lock()
		if sess.attemptedOnce && sess.attempted >= acked {
			sess.mu.Unlock()
			return nil
		}
		if sess.recordedCh == nil {
			sess.recordedCh = make(chan struct{})
		}
		ch := sess.recordedCh
		sess.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	}
}

// handleReport applies a report at most once and acknowledges it only
// once it is committed. A report that cannot be recorded now (an election,
// an owner cut off) is kept and retried by the server itself (retryReports)
// rather than left to the agent's resend, whose backoff grows over a long
// outage and would keep the device's status stale for that long after the
// cluster heals; the agent's resend remains for a server that goes away.
func (sess *agentSession) handleReport(ctx context.Context, m *wire.Report) error {
	sess.mu.Lock()
	done := m.Seq <= sess.reportSeq
	if !done && sess.retrying != nil {
		// A retry is under way: this report supersedes (or repeats) it
		// and goes with the next try, keeping reports in order.
		if m.Seq > sess.retrying.Seq {
			sess.retrying = m
		}
		sess.mu.Unlock()
		return nil
	}
	sess.mu.Unlock()
	if done {
		return sess.ackReports()
	}
	// The read loop waits for the first try only so long (the agent's
	// Pulls, Acks and Pings wait behind it); the retries go on beside it.
	first, cancel := context.WithTimeout(ctx, reportFirstTry)
	err := sess.recordReport(first, m)
	cancel()
	if err != nil {
		sess.logger.Warn("report not recorded; retrying", "seq", m.Seq, "error", err)
		sess.mu.Lock()
		sess.retrying = m
		sess.mu.Unlock()
		sess.a.wg.Go(func() { sess.retryReports(ctx) })
		return nil
	}
	return sess.ackReports()
}

// reportFirstTry bounds how long a session's read loop waits for its
// agent's report to be recorded before leaving it to retryReports: an
// owner that does not answer (its host gone without a reset, before
// gossip says so) would otherwise hold the session's Pulls, Acks and
// Pings for as long as a forward may take (reportForwardTimeout, minutes).
// A report takes about a second to commit while a change reaches ten
// thousand devices; one that takes longer is sent again by the retry,
// and its owner answers both once it is committed.
const reportFirstTry = 5 * time.Second

// reportRetryTry bounds each of retryReports' tries, so that a try sent
// to an owner that vanished does not wait out reportForwardTimeout before
// the next goes to the device's new owner.
const reportRetryTry = 30 * time.Second

// DefaultAckFoldWait is how long an acknowledgement is left to the report
// that follows it (handleAck) before sessionSync commits it alone, unless
// Config.AckFoldWait says otherwise. A device reports as soon as it has
// applied a change, or found it held back, so this is a bound for a
// report lost or late, not a wait the status shows.
const DefaultAckFoldWait = 2 * time.Second

// recordReport delivers m, with the revision the agent acknowledged before
// it, to the device's owner and notes it applied.
func (sess *agentSession) recordReport(ctx context.Context, m *wire.Report) error {
	sess.mu.Lock()
	acked := sess.acked
	sess.carrying = acked
	sess.mu.Unlock()
	err := sess.a.reports.deliverReport(ctx, sess.deviceID, sess.placementLabels(sess.a.state.Read()), acked, m)
	sess.mu.Lock()
	sess.carrying = 0
	if err == nil {
		sess.reportSeq = max(sess.reportSeq, m.Seq)
	}
	sess.mu.Unlock()
	if err != nil {
		if ctx.Err() == nil {
			sess.a.stats.reportFailures.Add(1)
		}
		// The acknowledgement it carried is not committed: let
		// sessionSync compare the record now rather than at its next
		// full pass.
		sess.a.sync.changed(sess)
		return err
	}
	sess.a.stats.reports.Add(1)
	return nil
}

// ackReports acknowledges every report applied so far. The seq is read
// under the write lock, so acknowledgements leave in increasing order.
func (sess *agentSession) ackReports() error {
	sess.wmu.Lock()
	defer sess.wmu.Unlock()
	sess.mu.Lock()
	seq := sess.reportSeq
	sess.mu.Unlock()
	return sess.writeLocked(&wire.ReportAck{Seq: seq})
}

// Bounds of the wait between the server's tries to record a report; each
// wait is jittered in [d/2, d] so that the sessions an election stalled do
// not all try again at once.
const (
	reportRetryMin = 250 * time.Millisecond
	reportRetryMax = 4 * time.Second
)

// retryReports tries to record the newest unrecorded report of the
// session until one commits or the session ends, then acknowledges it.
// It owns sess.retrying's slot until it clears it.
func (sess *agentSession) retryReports(ctx context.Context) {
	jitter := func(d time.Duration) time.Duration { return d/2 + rand.N(d/2+1) }
	backoff := reportRetryMin
	delay := jitter(backoff)
	for {
		if delay > 0 {
			t := sess.a.clock.NewTimer(delay)
			select {
			case <-t.C():
			case <-ctx.Done():
				t.Stop()
				return
			}
		}
		sess.mu.Lock()
		m := sess.retrying
		done := m.Seq <= sess.reportSeq
		sess.mu.Unlock()
		if !done {
			try, cancel := context.WithTimeout(ctx, reportRetryTry)
			err := sess.recordReport(try, m)
			cancel()
			if err != nil {
				if ctx.Err() == nil {
					sess.logger.Debug("report still not recorded", "seq", m.Seq, "error", err)
				}
				backoff = min(2*backoff, reportRetryMax)
				delay = jitter(backoff)
				continue
			}
		}
		if err := sess.ackReports(); err != nil {
			sess.writeFailed("ReportAck", err)
		}
		sess.mu.Lock()
		newer := sess.retrying.Seq > m.Seq
		if !newer {
			sess.retrying = nil
		}
		sess.mu.Unlock()
		if !newer {
			sess.logger.Debug("report recorded on retry", "seq", m.Seq)
			return
		}
		delay = 0 // a report arrived meanwhile: try it at once
	}
}

// register makes the session receive pushes, then closes the window
// between the Welcome and now: notifyLoop passes over sessions that are
// not registered yet, so an intent change committed meanwhile would
// otherwise reach the agent only with its next periodic pull. welcome is
// the state the Welcome was computed from.
func (sess *agentSession) register(welcome *fsm.Read) {
	sess.mu.Lock()
	pulled := sess.fp != (wire.Digest{})
	sess.mu.Unlock()
	var base *scheduler.DesiredState
	if !pulled {
		// No Pull answered yet: the agent holds the desired state of the
		// Welcome, or is pulling it. That is the baseline to compare with,
		// so that an unrelated revision (another device registering) does
		// not make every agent pull.
		var err error
		if base, err = sess.a.planner.Desired(welcome, sess.deviceID, sess.selectionLabels(welcome)); err != nil {
			sess.logger.Warn("compute desired state at registration", "error", err)
		}
	}
	sess.mu.Lock()
	if base != nil && sess.fp == (wire.Digest{}) {
		sess.notified, sess.fp = base.Revision, base.Fingerprint()
		// What an agent that is up to date holds; a Notify's Delta
		// patches it only if the agent finds it holds exactly that.
		sess.sent = base
	}
	sess.registered, sess.registeredAt = true, sess.a.clock.Mono()
	sess.mu.Unlock()
	// notifyLoop takes its list of sessions after reading the state: a
	// change committed after the read below finds the session in that list.
	sess.a.add(sess)
	if sess.a.draining.Load() {
		// Registered after the drain listed the sessions it told.
		sess.goAway()
		return
	}
	sess.maybeNotify(sess.a.state.Read(), map[string]*scheduler.DesiredState{})
}

// maybeNotify pushes Notify if the session's desired state changed as of
// read. Called by notifyLoop, by the device watch when the device's labels
// change, and once by register.
//
// byLabels caches desired states by label set for one pass over the
// sessions.
func (sess *agentSession) maybeNotify(read *fsm.Read, byLabels map[string]*scheduler.DesiredState) {
	sess.mu.Lock()
	if !sess.registered || read.Revision() <= sess.notified {
		sess.mu.Unlock()
		return
	}
	sess.mu.Unlock()
	labels := sess.selectionLabels(read)
	assigned, err := scheduler.AssignmentKey(read, sess.deviceID)
	if err != nil {
		sess.logger.Warn("compute desired state for notify", "error", err)
		return
	}
	// Devices with the same labels and the same rollout releases have the
	// same desired state.
	key := fsm.MapKey(labels) + "\x00" + assigned
	desired, ok := byLabels[key]
	if !ok {
		if desired, err = sess.a.planner.Desired(read, sess.deviceID, labels); err != nil {
			sess.logger.Warn("compute desired state for notify", "error", err)
			return
		}
		byLabels[key] = desired
	}
	fp := desired.Fingerprint()
	sess.mu.Lock()
	if desired.Revision < sess.notified {
		// A later state was evaluated meanwhile (notifyLoop and the
		// session's device watcher both call here): keep its fingerprint.
		sess.mu.Unlock()
		return
	}
	changed := fp != sess.fp
	if changed {
		sess.fp, sess.due = fp, desired
	}
	sess.notified = max(sess.notified, desired.Revision)
	sess.mu.Unlock()
	if changed {
		sess.notify(desired.Revision)
	}
}

// notify makes the session due a Notify of revision rev. The push goes
// through the server's notify window (notifyWindow), which paces a
// change's pushes and never waits on one session's stream in the caller:
// the writes of a device whose link went silent block (flow and
// congestion control) until its connection times out, and notifyLoop
// serves every session. At most one Notify per session is queued or in
// flight; one asked for meanwhile follows it, with the latest revision.
func (sess *agentSession) notify(rev uint64) {
	sess.mu.Lock()
	sess.notifyRev = max(sess.notifyRev, rev)
	if sess.notifying {
		sess.mu.Unlock()
		return
	}
	sess.notifying = true
	sess.mu.Unlock()
	sess.a.notifies.push(sess)
}

func effectiveName(e wire.Effective) string {
	switch e {
	case wire.EffectiveOK:
		return "ok"
	case wire.EffectiveMismatch:
		return "mismatch"
	}
	return "unknown"
}

// selectionLabels are the labels the session selects the device's
// intents by as of read (Config.selectionLabels): never the Hello's alone,
// unless the cluster trusts reported labels.
func (sess *agentSession) selectionLabels(read *fsm.Read) map[string]string {
	rec, _ := read.Device(nil, sess.deviceID)
	return sess.a.cfg.selectionLabels(rec, sess.labels)
}

// placementLabels are the labels the device's owner is chosen by: those
// of its record (as the owners' evaluation reads them), or the Hello's
// while the record is not committed.
func (sess *agentSession) placementLabels(read *fsm.Read) map[string]string {
	if rec, err := read.Device(nil, sess.deviceID); err == nil {
		return rec.Labels
	}
	return sess.labels
}

// recordedHere reports whether the replica's record of the device names
// this connection, on server self, as connected.
func (sess *agentSession) recordedHere(rec *fsm.DeviceRecord, self string) bool {
	return rec != nil && rec.Connected && rec.Server == self && rec.Conn == sess.connID &&
		rec.SessionID == sessionString(sess.id)
}

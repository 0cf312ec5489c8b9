package cluster

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/go-memdb"
	"github.com/hashicorp/memberlist"
	"github.com/quic-go/quic-go"

	"github.com/meteor-edge/meteor/scheduler"
	"github.com/meteor-edge/meteor/wire"
)

// agentServer serves device agents over QUIC (docs/wire.md).
//
// Goroutines, all owned by Run and waited for before it returns:
// acceptLoop accepts connections and starts one serveConn per connection
// (serveEnroll for one that negotiated wire.EnrollALPN, enroll.go);
// rotateLoop refreshes the token keyring and TLS session ticket keys at
// each epoch; notifyLoop watches the FSM revision and pushes Notify to
// sessions whose desired state changed, through the notify window's
// workers (notifyWindow), which pace the pushes; sessionSync.Run keeps the replica's
// session records true. Each session's writes go through its own mutex, so
// pushes and answers never interleave mid-frame.
type agentServer struct {
	agentDeps
	cfg     *Config
	addr    string // the bound UDP address
	pc      net.PacketConn
	tr      *quic.Transport
	ln      *quic.EarlyListener
	tlsConf *tls.Config
	enroll  *enroller // enrollment and renewal (enroll.go)
	planner *scheduler.Planner
	keyring atomic.Pointer[wire.Keyring]

	mu       sync.Mutex
	sessions map[*agentSession]struct{} // guarded by mu
	// emptied, if set, is closed (and cleared) when the last session
	// ends; drain waits on it. Guarded by mu.
	emptied chan struct{}
	// draining is set once the server drains (drain.go): sessions are
	// told to go, new ones refused.
	draining atomic.Bool

	stats agentCounters

	// notifies paces the pushes of changes (notifywindow.go), steered by
	// schedLatency (schedLatencies.next; tests replace it).
	notifies     *notifyWindow
	schedLatency func() (p90 time.Duration, samples uint64)

	// sync keeps the replica's records of the sessions here true.
	sync *sessionSync

	// watches follows each session's device (devicewatch.go).
	watches *deviceWatches

	// beforeRegister, if set, runs in a session's registration goroutine
	// after the session is recorded and before it is registered for
	// pushes. A test hook: it widens the window between Welcome and
	// registration.
	beforeRegister atomic.Pointer[func(deviceID string)]

	wg sync.WaitGroup
}

// agentDeps are what session serving takes from the rest of the server.
type agentDeps struct {
	logger  hclog.Logger
	clock   Clock
	state   stateReader
	peers   peerView
	reports reportSink
	records sessionCommitter
	// connClosed, if set, is told the bytes an agent connection sent and
	// received once it closed (the metrics' meteor_agent_connection_bytes).
	connClosed func(sent, received uint64)
}

// peerView is what session serving knows of the other servers: gossip's
// members, and the Raft leader's node ID ("" if none is known).
type peerView interface {
	members() []member
	leaderID() string
}

// reportSink hands a device's report to the device's owner, here or on
// another server, and returns once the owner made it durable
// (Server.deliverReport).
type reportSink interface {
	deliverReport(ctx context.Context, device string, labels map[string]string, acked uint64, rep *wire.Report) error
}

// agentCounters count what a server sent agents, for tests and benchmarks.
type agentCounters struct {
	deltas, upserts, deltaBytes, notifies, reports, rerecords atomic.Uint64
	// reportFailures counts the tries to record a report that failed
	// (the owner refused it or could not be reached): the session retries.
	reportFailures atomic.Uint64
	// pushedDeltas counts the Notifies that carried their change's Delta.
	pushedDeltas atomic.Uint64
	// fresh and resumed count the sessions established: new ones, and
	// those that resumed an earlier session; zeroRTT those whose
	// connection's 0-RTT data was accepted.
	fresh, resumed, zeroRTT atomic.Uint64
}

// countDelta counts one Delta frame sent, as a Pull's answer or in a
// Notify.
func (c *agentCounters) countDelta(d *wire.Delta) {
	c.deltas.Add(1)
	c.upserts.Add(uint64(len(d.Upserts)))
	c.deltaBytes.Add(uint64(wire.FrameLen(d)))
}

// AgentStats is a snapshot of a server's agent counters.
type AgentStats struct {
	// Connected is the number of sessions now; Sessions counts sessions
	// established since start: Fresh new ones, Resumed those that resumed
	// an earlier session. ZeroRTT counts those whose connection's 0-RTT
	// data was accepted.
	Connected                         int
	Sessions, Fresh, Resumed, ZeroRTT uint64
	// Deltas, Upserts and DeltaBytes count Delta frames, resources and
	// encoded Delta bytes sent (in Delta frames and Notifies); Notifies
	// the pushes, PushedDeltas those of them that carried their Delta;
	// Reports the reports applied; Rerecords the sessions recorded again
	// because the replica no longer showed them as connected here
	// (sessionSync); ReportFailures the tries to record a report that
	// failed, which the session makes again.
	Deltas, Upserts, DeltaBytes, Notifies, PushedDeltas, Reports, Rerecords, ReportFailures uint64
	// RecordEntries and RecordEvents count the Raft entries this server
	// committed for session events (connects, acknowledged revisions,
	// disconnects) and the events in them.
	RecordEntries, RecordEvents uint64
	// NotifyWindow is how many sessions the server may push a change to
	// at once now (notifyWindow).
	NotifyWindow int
}

// AgentStats returns the server's agent counters (zero without agents).
func (s *Server) AgentStats() AgentStats {
	a := s.agents
	if a == nil {
		return AgentStats{}
	}
	st := AgentStats{
		Connected: a.count(), Fresh: a.stats.fresh.Load(), Resumed: a.stats.resumed.Load(), ZeroRTT: a.stats.zeroRTT.Load(),
		Deltas: a.stats.deltas.Load(), Upserts: a.stats.upserts.Load(), DeltaBytes: a.stats.deltaBytes.Load(),
		Notifies: a.stats.notifies.Load(), PushedDeltas: a.stats.pushedDeltas.Load(), Reports: a.stats.reports.Load(), Rerecords: a.stats.rerecords.Load(),
		ReportFailures: a.stats.reportFailures.Load(),
		RecordEntries:  s.sessionRec.entries.Load(), RecordEvents: s.sessionRec.events.Load(),
		NotifyWindow: a.notifies.current(),
	}
	st.Sessions = st.Fresh + st.Resumed
	return st
}

// listenAgents binds the agents' UDP socket; serving starts with Run.
func listenAgents(cfg *Config, deps agentDeps) (*agentServer, error) {
	udp, err := net.ListenPacket("udp", cfg.AgentAddr)
	if err != nil {
		return nil, fmt.Errorf("listen for agents on %s: %w", cfg.AgentAddr, err)
	}
	a := &agentServer{
		agentDeps: deps, cfg: cfg, pc: udp, addr: udp.LocalAddr().String(),
		planner: scheduler.NewPlanner(), sessions: map[*agentSession]struct{}{},
		notifies:     newNotifyWindow(cfg.NotifyWindow, cfg.NotifyPullWait),
		schedLatency: newSchedLatencies().next,
	}
	a.watches = newDeviceWatches(a)
	a.sync = newSessionSync(cfg, deps.logger, deps.clock, deps.state, deps.records, &a.stats.rerecords)
	pc := agentSocket(udp.(*net.UDPConn)) // what ListenPacket("udp") returns
	if cfg.AgentPacketConn != nil {
		pc = cfg.AgentPacketConn(pc)
	}
	a.tr = wire.NewSharedTransport(pc)
	if len(cfg.ClusterSecret) > 0 {
		a.tr.StatelessResetKey = wire.StatelessResetKey(cfg.ClusterSecret)
	}
	if err := a.rotate(a.clock.Now()); err != nil {
		udp.Close()
		return nil, err
	}
	a.enroll = newEnroller(cfg, deps)
	a.tlsConf.GetConfigForClient = configForClient(a.tlsConf)
	qc := wire.ServerQUICConfig()
	if t := cfg.AgentIdleTimeout; t > 0 {
		qc.MaxIdleTimeout = t
		qc.KeepAlivePeriod = min(qc.KeepAlivePeriod, t/3)
	}
	a.ln, err = a.tr.ListenEarly(a.tlsConf, qc)
	if err != nil {
		udp.Close()
		return nil, fmt.Errorf("listen for agents on %s: %w", a.addr, err)
	}
	return a, nil
}

// rotate derives the keys of the epoch that contains now.
func (a *agentServer) rotate(now time.Time) error {
	cfg := a.cfg
	kr, err := wire.EpochKeyring(cfg.ClusterSecret, now, cfg.TicketPeriod, cfg.TokenLifetime)
	if err != nil {
		return fmt.Errorf("derive resume token keys: %w", err)
	}
	a.keyring.Store(kr)
	keys := wire.TicketKeys(cfg.ClusterSecret, now, cfg.TicketPeriod)
	if a.tlsConf == nil {
		a.tlsConf = cfg.AgentTLS.reloadable(wire.ServerTLSConfig(cfg.AgentTLS.ClientCAs, cfg.AgentTLS.Certificate, keys))
	} else {
		a.tlsConf.SetSessionTicketKeys(keys)
	}
	return nil
}

// Run serves agents until ctx ends. Then it stops accepting; every
// connection left, session or not (a drain told the sessions to go
// already; drain.go), is closed with "shutting down" by its own goroutine
// at once (serveConn); Run waits for them all and closes the socket.
func (a *agentServer) Run(ctx context.Context) error {
	a.wg.Go(func() { a.acceptLoop(ctx) })
	a.wg.Go(func() { a.rotateLoop(ctx) })
	a.wg.Go(func() { a.notifyLoop(ctx) })
	a.runNotifyWindow(ctx)
	a.wg.Go(func() { a.sync.Run(ctx) })
	<-ctx.Done()
	start := a.clock.Mono()
	n := a.count()
	a.ln.Close()
	a.wg.Wait() // each connection's goroutine closed it (serveConn)
	a.closeSockets()
	a.logger.Info("agent sessions closed", "sessions", n, "took", a.clock.Mono().Sub(start))
	return nil
}

// closeSockets closes the listener and the socket; Run does it, and
// Shutdown if the server stops before Run was started.
func (a *agentServer) closeSockets() {
	a.ln.Close()
	a.tr.Close()
	a.pc.Close()
}

func (a *agentServer) acceptLoop(ctx context.Context) {
	for {
		conn, err := a.ln.Accept(ctx)
		if err != nil {
			return
		}
		if isEnrollConn(conn) {
			a.wg.Go(func() { a.serveEnroll(ctx, conn) })
			continue
		}
		a.wg.Go(func() { a.serveConn(ctx, conn) })
	}
}

func (a *agentServer) rotateLoop(ctx context.Context) {
	period := a.cfg.TicketPeriod
	for {
		now := a.clock.Now()
		next := now.Truncate(period).Add(period)
		if !sleep(a.clock, next.Sub(now), ctx.Done()) {
			return
		}
		if err := a.rotate(a.clock.Now()); err != nil {
			a.logger.Error("rotate agent keys", "error", err)
		}
	}
}

// notifyLoop pushes a Notify to every session whose desired state changed
// when the intents change. Devices registering (which also take a
// revision) do not wake it, and the desired state is computed once per
// distinct label set, not once per session. Agents also pull on their own
// cadence, so a lost push only delays convergence.
func (a *agentServer) notifyLoop(ctx context.Context) {
	for {
		ws := memdb.NewWatchSet()
		read := a.state.Read()
		_, err := read.Intents(ws)
		if err == nil {
			// A release changes desired states without changing an
			// intent.
			err = read.WatchReleases(ws)
		}
		if err != nil {
			// Without the watch no change would reach the sessions:
			// try again rather than stop notifying for good.
			a.logger.Error("watch intents and releases; retrying in 1s", "error", err)
			if !sleep(a.clock, time.Second, ctx.Done()) {
				return
			}
			continue
		}
		a.mu.Lock()
		sessions := make([]*agentSession, 0, len(a.sessions))
		for sess := range a.sessions {
			sessions = append(sessions, sess)
		}
		a.mu.Unlock()
		fingerprints := map[string]*scheduler.DesiredState{}
		for _, sess := range sessions {
			sess.maybeNotify(read, fingerprints)
		}
		if ws.WatchCtx(ctx) != nil {
			return
		}
	}
}

func (a *agentServer) add(sess *agentSession) {
	a.mu.Lock()
	a.sessions[sess] = struct{}{}
	a.mu.Unlock()
}

func (a *agentServer) remove(sess *agentSession) {
	a.mu.Lock()
	delete(a.sessions, sess)
	if len(a.sessions) == 0 && a.emptied != nil {
		close(a.emptied)
		a.emptied = nil
	}
	a.mu.Unlock()
}

// count returns the number of connected sessions.
func (a *agentServer) count() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.sessions)
}

func newSessionID() wire.SessionID {
	var id wire.SessionID
	if _, err := rand.Read(id[:]); err != nil {
		panic(err)
	}
	return id
}

// newConnID returns a random ID for one agent connection.
func newConnID() string {
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(err)
	}
	return hex.EncodeToString(b[:])
}

func sessionString(id wire.SessionID) string { return hex.EncodeToString(id[:]) }

// errClose carries the close code and reason a session ends with.
type errClose struct {
	code   quic.ApplicationErrorCode
	reason string
	// flush: a final frame was written that the agent must receive.
	flush bool
}

func (e *errClose) Error() string { return e.reason }

func closeWith(code quic.ApplicationErrorCode, format string, args ...any) error {
	return &errClose{code: code, reason: fmt.Sprintf(format, args...)}
}

// flushAndClose is closeWith after a final Reject or GoAway frame.
func flushAndClose(code quic.ApplicationErrorCode, reason string) error {
	return &errClose{code: code, reason: reason, flush: true}
}

func closeCode(err error) (quic.ApplicationErrorCode, string) {
	var ce *errClose
	if errors.As(err, &ce) {
		return ce.code, ce.reason
	}
	return wire.CloseCodeFor(err)
}

// waitForRevision waits until the local replica has reached rev, up to
// LagWait. It returns false if it did not.
func (a *agentServer) waitForRevision(ctx context.Context, rev uint64) bool {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	deadline := a.clock.AfterFunc(a.cfg.LagWait, cancel)
	defer deadline.Stop()
	for {
		ws := memdb.NewWatchSet()
		if a.state.Read().WatchRevision(ws) >= rev {
			return true
		}
		if ws.WatchCtx(ctx) != nil {
			return a.state.Read().Revision() >= rev
		}
	}
}

// redirects lists other servers' agent addresses, the leader first: the
// leader's replica is never behind.
func (a *agentServer) redirects() []string {
	leader := a.peers.leaderID()
	var out []string
	for _, m := range a.peers.members() {
		if m.AgentAddr == "" || m.ID == a.cfg.NodeID || m.State != memberlist.StateAlive || m.Leaving || m.Draining {
			continue
		}
		if m.ID == leader {
			out = append([]string{m.AgentAddr}, out...)
		} else {
			out = append(out, m.AgentAddr)
		}
	}
	if len(out) > wire.MaxRedirects {
		out = out[:wire.MaxRedirects]
	}
	return out
}

// appliedOf converts an agent's inventory for the scheduler.
func appliedOf(in []wire.AppliedResource) []scheduler.Applied {
	out := make([]scheduler.Applied, len(in))
	for i, r := range in {
		out[i] = scheduler.Applied{Key: r.Key, Digest: wire.Digest(r.Digest)}
	}
	return out
}

package cluster

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"

	"github.com/meteor-edge/meteor/cluster/api"
	"github.com/meteor-edge/meteor/fsm"
	"github.com/meteor-edge/meteor/scheduler"
	"github.com/meteor-edge/meteor/wire"
)

// Version is the Meteor server version reported in gossip and the API.
const Version = wire.ReleaseVersion

// Server is one Meteor server node. It wires the server's components
// together (docs/architecture.md, "Components of a server"): the Raft
// node, gossip membership and device ownership, the HTTP API, agent
// sessions, the status owner, session records and the leader-only
// workers. Each component takes the small interfaces it needs, defined
// where it uses them; the Server implements most of them.
type Server struct {
	config Config
	logger hclog.Logger
	clock  Clock

	fsm    *fsm.FSM
	rparts *raftParts
	raft   *raft.Raft
	gossip *membership

	api     *httpAPI
	httpSrv *http.Server
	httpLn  net.Listener
	peers   *peerClient // requests to other servers
	// forwarder batches the commands forwarded to the leader.
	forwarder *applyBatcher
	// reportFwd batches the reports handed to their devices' owners.
	reportFwd *reportBatcher
	// metrics are this server's Prometheus registry and event metrics;
	// raftObs delivers the Raft observations they count.
	metrics *serverMetrics
	raftObs *raftObserver

	// Addresses actually bound (ports resolved).
	httpAddr, raftAddr, gossipAddr, agentAddr string

	// agents serves device agents; nil unless Config.AgentAddr is set.
	agents *agentServer
	// status turns the reports of the devices this server owns into
	// committed status transitions.
	status *statusOwner
	// sessionRec commits device session events in batches.
	sessionRec *sessionRecorder
	// leadership runs the leader-only workers while this server leads.
	leadership *leadership
	// stateCache is the last comparison of the replicas' states
	// (divergence.go).
	stateCache stateCheckCache
	// planner serves the device API when no agents are served here.
	plannerOnce sync.Once
	planner     *scheduler.Planner

	// readyForReads is set by the leadership component once a barrier has
	// applied every entry of earlier terms; linearizable reads wait for it.
	readyForReads atomic.Bool
	// levelMu orders raising the active feature level (levelRaiser) with
	// adding servers to the Raft configuration (membershipReconciler.add).
	levelMu sync.Mutex
	// restoreMu admits one snapshot restore at a time; restoring stops
	// proposals while one hands its state to Raft (restore.go).
	restoreMu sync.Mutex
	restoring atomic.Bool
	// draining is set by Drain.
	draining atomic.Bool

	eventCh     chan struct{} // gossip changes, for the membership reconciler
	bootstrapCh chan struct{} // gossip changes, for the bootstrap loop
	leaderCh    chan bool     // raft leadership changes (raft.Config.NotifyCh)

	// ctx is the root context of every goroutine of the server; Shutdown
	// cancels it. front runs the components that serve clients (HTTP,
	// agents), which stop before gossip and Raft do; wg runs the others.
	ctx          context.Context
	cancel       context.CancelFunc
	front, wg    sync.WaitGroup
	started      bool // the components run (New got that far)
	shutdownOnce sync.Once
	shutdownErr  error
}

// New starts a server: it opens the data dir, starts Raft, gossip and the
// HTTP API, and joins the cluster. Stop it with Shutdown (or Leave first to
// remove it from the cluster for good).
func New(cfg Config) (*Server, error) {
	if cfg.Logger == nil {
		cfg.Logger = hclog.Default()
	}
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("invalid server configuration: %w", err)
	}
	if err := checkNodeID(cfg.DataDir, cfg.NodeID); err != nil {
		return nil, err
	}
	cfg.FSM.FeatureLevel = cfg.featureLevel()
	state, err := fsm.New(cfg.FSM)
	if err != nil {
		return nil, err
	}
	s := &Server{
		config:      cfg,
		logger:      cfg.Logger.Named("server").With("server", cfg.NodeID),
		clock:       serverClock(&cfg),
		fsm:         state,
		peers:       newPeerClient(&cfg),
		eventCh:     make(chan struct{}, 1),
		bootstrapCh: make(chan struct{}, 1),
		leaderCh:    make(chan bool, 8),
	}
	s.metrics = newServerMetrics(s)
	s.ctx, s.cancel = context.WithCancel(context.Background())
	s.forwarder = newApplyBatcher(s.ctx, s.peers, cfg.ApplyTimeout)
	s.reportFwd = newReportBatcher(s.ctx, s.peers)
	ok := false
	defer func() {
		if !ok {
			s.Shutdown()
		}
	}()

	s.httpLn, err = net.Listen("tcp", cfg.HTTPAddr)
	if err != nil {
		return nil, fmt.Errorf("listen for HTTP on %s: %w", cfg.HTTPAddr, err)
	}
	s.httpAddr = s.httpLn.Addr().String()
	if cfg.PeerTLS != nil {
		s.httpLn = tls.NewListener(s.httpLn, cfg.PeerTLS.apiServerConfig())
	}

	if s.rparts, err = s.setupRaft(); err != nil {
		return nil, err
	}
	s.raft = s.rparts.raft
	s.raftObs = newRaftObserver()
	s.raft.RegisterObserver(s.raftObs.obs)

	s.sessionRec = newSessionRecorder(s, cfg.ApplyTimeout)
	if cfg.AgentAddr != "" {
		if s.agents, err = listenAgents(&cfg, agentDeps{
			logger: s.logger.Named("agents"), clock: s.clock, state: s.fsm,
			peers: s, reports: s, records: s.sessionRec, connClosed: s.metrics.agentConnClosed,
		}); err != nil {
			return nil, err
		}
		s.agentAddr = s.agents.addr
	}
	if s.gossip, err = startGossip(&cfg, s.logger.Named("gossip"), s.clock, nodeMeta{
		ID: cfg.NodeID, Region: cfg.Region, RaftAddr: s.raftAddr, HTTPAddr: s.httpAddr, AgentAddr: s.agentAddr,
		BootstrapExpect: cfg.BootstrapExpect, Version: Version, WireMinor: cfg.wireMinor(), Features: cfg.featureLevel(),
		PeerAPI: peerAPISessionOwner,
	}, s.eventCh, s.bootstrapCh); err != nil {
		return nil, err
	}
	s.gossipAddr = s.gossip.addr

	// The status owner exists before the HTTP server serves: another
	// server may forward a report here as soon as the port answers.
	s.status = newStatusOwner(&cfg, s.logger.Named("status"), s.clock, s.fsm, s, s.gossip, s.devicePlanner())
	s.leadership = &leadership{
		logger: s.logger.Named("leader"), clock: s.clock, changes: s.leaderCh,
		barrier: func() error { return s.raft.Barrier(s.config.ApplyTimeout).Error() },
		ready:   &s.readyForReads,
		workers: append([]LeaderWorker{s.membership(), s.levelRaiser(), s.rolloutWorker()}, cfg.LeaderWorkers...),
	}
	if cfg.ACL != nil && cfg.ACL.BootstrapTokenHash != "" {
		s.leadership.workers = append(s.leadership.workers, &bootstrapToken{hash: cfg.ACL.BootstrapTokenHash, state: s.fsm, propose: s, clock: s.clock})
	}
	s.api = &httpAPI{
		cfg: &s.config, logger: s.logger, clock: s.clock, state: s.fsm, propose: s, node: s, admin: s,
		owners: s.gossip, reports: s.status, peers: s.peers, planner: s.devicePlanner(), done: s.ctx.Done(),
		metrics: s.metrics.handler(s.logger),
	}
	if cfg.ACL != nil {
		s.api.auth = newAuthenticator(cfg.ACL, s.fsm, s.clock, s.peers, cfg.PeerTLS != nil)
		s.api.auth.catchUp = s.catchUp
	}
	s.httpSrv = &http.Server{Handler: s.metrics.instrument(s.clock, s.api.handler()), ReadHeaderTimeout: 10 * time.Second, HTTP2: apiHTTP2(),
		ErrorLog: s.logger.Named("http").StandardLogger(&hclog.StandardLoggerOptions{ForceLevel: hclog.Debug})}

	ctx := s.ctx
	s.started = true
	s.front.Go(func() { s.serveHTTP(ctx) })
	if s.agents != nil {
		s.front.Go(func() { s.agents.Run(ctx) })
	}
	s.wg.Go(func() { s.status.Run(ctx) })
	s.wg.Go(func() { s.sessionRec.Run(ctx) })
	s.wg.Go(func() { s.leadership.Run(ctx) })
	s.wg.Go(func() { s.gossip.Run(ctx) })
	s.wg.Go(func() { s.bootstrapLoop(ctx) })
	s.wg.Go(func() { s.metrics.observeRaft(ctx, s.raftObs) })
	ok = true
	s.logger.Info("server started", "region", cfg.Region, "http", s.httpAddr, "raft", s.raftAddr, "gossip", s.gossipAddr, "existing_state", s.rparts.hasState)
	return s, nil
}

// runAll runs each of fs in a goroutine of its own and returns once all
// have returned.
func runAll(fs ...func()) {
	var wg sync.WaitGroup
	for _, f := range fs {
		wg.Go(f)
	}
	wg.Wait()
}

// serveHTTP serves the HTTP API until ctx ends, then stops it, giving
// requests in flight a moment to finish.
func (s *Server) serveHTTP(ctx context.Context) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := s.httpSrv.Serve(s.httpLn); err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.logger.Error("HTTP server stopped", "error", err)
		}
	}()
	select {
	case <-ctx.Done():
	case <-done:
	}
	sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	if err := s.httpSrv.Shutdown(sctx); err != nil {
		s.httpSrv.Close()
	}
	cancel()
	<-done
}

// Run blocks until ctx ends, then drains the server (Drain, at most
// Config.DrainTimeout) and shuts it down.
func (s *Server) Run(ctx context.Context) error {
	select {
	case <-ctx.Done():
		s.Drain(s.config.drainTimeout())
	case <-s.ctx.Done():
	}
	return s.Shutdown()
}

// Shutdown stops the server without leaving the cluster: a restart with the
// same data dir rejoins with its state. It cancels the root context, waits
// for the components that serve clients, stops gossip and Raft, and waits
// for every other goroutine. It is safe to call more than once.
func (s *Server) Shutdown() error {
	s.shutdownOnce.Do(func() {
		start := s.clock.Mono()
		s.cancel()
		var errs []error
		if !s.started {
			if s.agents != nil {
				s.agents.closeSockets()
			}
			if s.httpLn != nil {
				s.httpLn.Close()
			}
		}
		s.front.Wait()
		front := s.clock.Mono()
		if s.gossip != nil {
			if err := s.gossip.shutdown(); err != nil {
				errs = append(errs, fmt.Errorf("stop gossip: %w", err))
			}
		}
		if s.rparts != nil {
			if err := s.rparts.close(); err != nil {
				errs = append(errs, err)
			}
		}
		raftDone := s.clock.Mono()
		s.wg.Wait()
		s.forwarder.wait()
		s.reportFwd.wait()
		s.peers.close()
		s.shutdownErr = errors.Join(errs...)
		end := s.clock.Mono()
		s.logger.Info("server stopped", "took", end.Sub(start), "front", front.Sub(start), "gossip_raft", raftDone.Sub(front), "rest", end.Sub(raftDone))
	})
	return s.shutdownErr
}

// Leave removes this server from the cluster for good, then shuts it down:
// it hands leadership over if it leads, asks the leader to remove it from
// the Raft configuration, announces its departure through gossip, and
// stops. A server that left starts again only with an empty data dir.
func (s *Server) Leave(timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	if s.raft.State() == raft.Leader {
		if err := s.raft.LeadershipTransfer().Error(); err != nil {
			s.logger.Warn("hand over leadership before leaving", "error", err)
		}
	}
	// Announce the departure first: from then on the leader's membership
	// reconciler removes this server instead of adding it back.
	s.gossip.leave(timeout / 4)
	err := s.leaveRaft(ctx)
	return errors.Join(err, s.Shutdown())
}

func (s *Server) leaveRaft(ctx context.Context) error {
	for {
		if !s.inRaftConfig(s.config.NodeID) {
			s.logger.Info("left the raft configuration")
			return nil
		}
		err := s.askLeaderToRemove(ctx)
		if err == nil {
			s.logger.Info("left the raft configuration")
			return nil
		}
		s.logger.Debug("leave: retrying", "error", err)
		if !sleep(s.clock, 100*time.Millisecond, ctx.Done()) {
			return fmt.Errorf("leave: still in the Raft configuration (%v); remove it with 'meteor members remove %s'", err, s.config.NodeID)
		}
	}
}

// askLeaderToRemove waits until the leader's gossip view no longer shows
// this server alive (so its membership reconciler will not add it back),
// then asks it to remove this server. It returns nil once the leader
// confirms.
//
// The leader may see the server as failed rather than left: the update
// that sets Leaving and memberlist's leave message travel separately, and
// when the leave message arrives first, or the update is lost, the leader
// records a failure with the old metadata and keeps it (a later update
// with the same incarnation is ignored). The reconciler adds back only
// alive servers, so a failed one is as safe to remove; waiting for "left"
// there would wait for ever.
func (s *Server) askLeaderToRemove(ctx context.Context) error {
	id, addr, err := s.leaderHTTP()
	if err != nil {
		return err
	}
	if id == s.config.NodeID {
		if err := s.raft.LeadershipTransfer().Error(); err != nil {
			return fmt.Errorf("hand over leadership: %w", err)
		}
		return ErrNotLeader
	}
	cl := s.peers.api(addr)
	cl.RetryNoLeader = 0
	members, err := cl.Members(ctx)
	if err != nil {
		return err
	}
	for _, m := range members.Members {
		if m.ID != s.config.NodeID {
			continue
		}
		switch m.GossipState {
		case "left", "leaving", "failed":
		default:
			return fmt.Errorf("leader %s does not see this server as left yet (it sees it %s)", id, m.GossipState)
		}
	}
	err = cl.RemoveMember(ctx, s.config.NodeID, false)
	var apiErr *api.Error
	if errors.As(err, &apiErr) && apiErr.StatusCode == http.StatusNotFound {
		return nil // already removed
	}
	return err
}

func (s *Server) inRaftConfig(id string) bool {
	f := s.raft.GetConfiguration()
	if err := f.Error(); err != nil {
		return true
	}
	for _, srv := range f.Configuration().Servers {
		if string(srv.ID) == id {
			return true
		}
	}
	return false
}

// ID returns the node ID.
func (s *Server) ID() string { return s.config.NodeID }

// leaderID returns the node ID of the leader this server knows, or "".
func (s *Server) leaderID() string {
	_, id := s.raft.LeaderWithID()
	return string(id)
}

// HTTPAddr returns the bound HTTP API address.
func (s *Server) HTTPAddr() string { return s.httpAddr }

// HTTPURL returns the base URL of the HTTP API: https:// when the server
// has its certificate (Config.PeerTLS), http:// otherwise.
func (s *Server) HTTPURL() string {
	if s.config.PeerTLS != nil {
		return "https://" + s.httpAddr
	}
	return "http://" + s.httpAddr
}

// AgentAddr returns the bound agent (QUIC) address, or "".
func (s *Server) AgentAddr() string { return s.agentAddr }

// RaftAddr returns the bound Raft address.
func (s *Server) RaftAddr() string { return s.raftAddr }

// GossipAddr returns the bound gossip address.
func (s *Server) GossipAddr() string { return s.gossipAddr }

// State returns the local FSM replica. Reads from it are stale reads.
func (s *Server) State() *fsm.FSM { return s.fsm }

// Raft returns the Raft node (tests and diagnostics).
func (s *Server) Raft() *raft.Raft { return s.raft }

// IsLeader reports whether this server is the Raft leader.
func (s *Server) IsLeader() bool { return s.raft.State() == raft.Leader }

package cluster

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/memberlist"
	"github.com/hashicorp/raft"

	"github.com/meteor-edge/meteor/cluster/api"
	"github.com/meteor-edge/meteor/fsm"
	"github.com/meteor-edge/meteor/scheduler"
)

// Version is the Meteor server version reported in gossip and the API.
const Version = "0.1.0"

// Server is one Meteor server node.
type Server struct {
	config Config
	logger hclog.Logger

	fsm        *fsm.FSM
	rparts     *raftParts
	raft       *raft.Raft
	gossip     *memberlist.Memberlist
	events     *eventDelegate
	gossipMeta *gossipDelegate

	httpSrv *http.Server
	httpLn  net.Listener
	client  *http.Client // for forwarding to the leader and peer status

	// Addresses actually bound (ports resolved).
	httpAddr, raftAddr, gossipAddr, agentAddr string

	// agents serves device agents; nil unless Config.AgentAddr is set.
	agents *agentServer
	// status turns the reports of the devices this server owns into
	// committed status transitions.
	status *statusOwner
	// sessionRec commits device session events in batches.
	sessionRec *sessionRecorder
	// planner serves the device API when no agents are served here.
	plannerOnce sync.Once
	planner     *scheduler.Planner

	// readyForReads is set by the leader loop once a barrier has applied
	// every entry of earlier terms; linearizable reads wait for it.
	readyForReads atomic.Bool

	eventCh     chan struct{} // gossip changes, for the leader loop
	bootstrapCh chan struct{} // gossip changes, for the bootstrap loop
	leaderCh    chan bool     // raft leadership changes (raft.Config.NotifyCh)
	shutdownCh  chan struct{}
	wg          sync.WaitGroup

	leaveOnce    sync.Once
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
	state, err := fsm.New(cfg.FSM)
	if err != nil {
		return nil, err
	}
	s := &Server{
		config:      cfg,
		logger:      cfg.Logger.Named("server").With("server", cfg.NodeID),
		fsm:         state,
		client:      &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 256, IdleConnTimeout: 90 * time.Second}},
		eventCh:     make(chan struct{}, 1),
		bootstrapCh: make(chan struct{}, 1),
		leaderCh:    make(chan bool, 8),
		shutdownCh:  make(chan struct{}),
	}
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

	if s.rparts, err = s.setupRaft(); err != nil {
		return nil, err
	}
	s.raft = s.rparts.raft

	if cfg.AgentAddr != "" {
		if s.agents, err = s.listenAgents(); err != nil {
			return nil, err
		}
	}
	if s.gossip, err = s.setupGossip(); err != nil {
		return nil, err
	}

	// The status owner exists before the HTTP server serves: another
	// server may forward a report here as soon as the port answers.
	s.status = newStatusOwner(s)
	s.sessionRec = newSessionRecorder(s)
	s.httpSrv = &http.Server{Handler: s.handler(), ReadHeaderTimeout: 10 * time.Second}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		if err := s.httpSrv.Serve(s.httpLn); err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.logger.Error("HTTP server stopped", "error", err)
		}
	}()

	s.status.start()
	s.wg.Add(1)
	go s.sessionRec.loop()
	if s.agents != nil {
		s.agents.start()
	}
	s.wg.Add(4)
	go s.reconnectLoop()
	go s.joinLoop()
	go s.bootstrapLoop()
	go s.monitorLeadership()
	ok = true
	s.logger.Info("server started", "region", cfg.Region, "http", s.httpAddr, "raft", s.raftAddr, "gossip", s.gossipAddr, "existing_state", s.rparts.hasState)
	return s, nil
}

// Run blocks until ctx ends, then shuts the server down.
func (s *Server) Run(ctx context.Context) error {
	select {
	case <-ctx.Done():
	case <-s.shutdownCh:
	}
	return s.Shutdown()
}

// Shutdown stops the server without leaving the cluster: a restart with the
// same data dir rejoins with its state. It is safe to call more than once.
func (s *Server) Shutdown() error {
	s.shutdownOnce.Do(func() {
		close(s.shutdownCh)
		var errs []error
		if s.agents != nil {
			s.agents.close()
		}
		if s.httpSrv != nil {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			if err := s.httpSrv.Shutdown(ctx); err != nil {
				s.httpSrv.Close()
			}
			cancel()
		} else if s.httpLn != nil {
			s.httpLn.Close()
		}
		if s.gossip != nil {
			if err := s.gossip.Shutdown(); err != nil {
				errs = append(errs, fmt.Errorf("stop gossip: %w", err))
			}
		}
		if s.rparts != nil {
			if err := s.rparts.close(); err != nil {
				errs = append(errs, err)
			}
		}
		s.wg.Wait()
		s.client.CloseIdleConnections()
		s.shutdownErr = errors.Join(errs...)
		s.logger.Info("server stopped")
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
	// Announce the departure first: from then on the leader's reconcile
	// loop removes this server instead of adding it back.
	s.gossipMeta.setLeaving()
	if err := s.gossip.UpdateNode(timeout / 4); err != nil {
		s.logger.Warn("announce leaving", "error", err)
	}
	if err := s.gossip.Leave(timeout / 4); err != nil {
		s.logger.Warn("gossip leave", "error", err)
	}
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
		select {
		case <-ctx.Done():
			return fmt.Errorf("leave: still in the Raft configuration (%v); remove it with 'meteor members remove %s'", err, s.config.NodeID)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// askLeaderToRemove waits until the leader's gossip view shows this server
// as left (so its reconcile loop will not add it back), then asks it to
// remove this server. It returns nil once the leader confirms.
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
	cl := api.NewClient(addr, s.client)
	cl.RetryNoLeader = 0
	members, err := cl.Members(ctx)
	if err != nil {
		return err
	}
	for _, m := range members.Members {
		if m.ID == s.config.NodeID && m.GossipState != "left" && m.GossipState != "leaving" {
			return fmt.Errorf("leader %s does not see this server as left yet", id)
		}
	}
	err = cl.RemoveMember(ctx, s.config.NodeID)
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

// now reads the server's wall clock (Config.Now).
func (s *Server) now() time.Time {
	if s.config.Now != nil {
		return s.config.Now()
	}
	return time.Now()
}

// HTTPAddr returns the bound HTTP API address.
func (s *Server) HTTPAddr() string { return s.httpAddr }

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

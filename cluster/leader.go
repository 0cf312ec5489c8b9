package cluster

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/memberlist"
	"github.com/hashicorp/raft"
)

// LeaderWorker is work that runs on the leader only, such as reconciling
// the Raft configuration with gossip membership (or the rollout engine).
// A server runs each registered worker (Config.LeaderWorkers) while it
// leads, from when a barrier has applied every entry of earlier terms
// (so the local replica is as new as the log) until it loses leadership,
// when the worker's context is cancelled and the server waits for Run to
// return before it may lead again.
type LeaderWorker interface {
	// Name names the worker in logs.
	Name() string
	// Run works until ctx ends. An error before then is logged and Run is
	// called again after a backoff (100 ms doubling to 10 s, back to 100 ms
	// after a run of 10 s or more), as long as the server leads; nil means
	// the worker is done for this term.
	Run(ctx context.Context) error
}

// Backoff between runs of a leader worker that failed.
const (
	workerRetryMin = 100 * time.Millisecond
	workerRetryMax = 10 * time.Second
)

// leadership is the component that follows Raft leadership: while this
// server leads it commits a barrier, sets ready (readyForReads, which
// linearizable reads wait for), and runs the leader-only workers; when
// leadership is lost it cancels them, waits for them, and clears ready.
//
// Goroutines: Run reads changes (raft.Config.NotifyCh) and owns one
// goroutine per term, which owns one goroutine per worker.
type leadership struct {
	logger  hclog.Logger
	clock   Clock
	changes <-chan bool
	// barrier blocks until every entry of earlier terms is applied
	// locally (raft.Barrier); it fails once leadership is lost.
	barrier func() error
	ready   *atomic.Bool
	workers []LeaderWorker
}

// Run follows leadership changes until ctx ends, then stops the workers of
// the current term and returns.
func (l *leadership) Run(ctx context.Context) error {
	var stop context.CancelFunc
	var term sync.WaitGroup
	stepDown := func() {
		if stop != nil {
			// Linearizable reads stop at once, before the workers are
			// waited for: should leadership come back meanwhile, its
			// term's barrier must run again before reads are served.
			l.ready.Store(false)
			stop()
			term.Wait()
			stop = nil
		}
	}
	defer stepDown()
	for {
		select {
		case <-ctx.Done():
			return nil
		case isLeader := <-l.changes:
			switch {
			case isLeader && stop == nil:
				stop = l.startTerm(ctx, &term)
				l.logger.Info("became leader")
			case !isLeader && stop != nil:
				stepDown()
				l.logger.Info("lost leadership")
			}
		}
	}
}

// startTerm starts lead in term and returns what ends it.
func (l *leadership) startTerm(ctx context.Context, term *sync.WaitGroup) context.CancelFunc {
	ctx, cancel := context.WithCancel(ctx)
	term.Go(func() { l.lead(ctx) })
	return cancel
}

// lead runs one term: first a barrier, so that every entry of earlier
// terms is applied locally (only then can the leader answer linearizable
// reads from its own FSM), then the workers until ctx ends.
func (l *leadership) lead(ctx context.Context) {
	defer l.ready.Store(false)
	for {
		err := l.barrier()
		if err == nil {
			break
		}
		l.logger.Warn("leader barrier failed, retrying", "error", err)
		if !sleep(l.clock, 100*time.Millisecond, ctx.Done()) {
			return
		}
	}
	if ctx.Err() != nil {
		return
	}
	l.ready.Store(true)
	var workers sync.WaitGroup
	for _, w := range l.workers {
		workers.Go(func() { l.runWorker(ctx, w) })
	}
	workers.Wait()
}

func (l *leadership) runWorker(ctx context.Context, w LeaderWorker) {
	backoff := workerRetryMin
	for {
		started := l.clock.Mono()
		err := w.Run(ctx)
		if ctx.Err() != nil || err == nil {
			return
		}
		if l.clock.Mono().Sub(started) >= workerRetryMax {
			// It ran well for a while: this failure is a new one, not
			// the last one's repeat, and is retried as soon as a first.
			backoff = workerRetryMin
		}
		l.logger.Warn("leader worker failed, restarting", "worker", w.Name(), "error", err, "retry_in", backoff)
		if !sleep(l.clock, backoff, ctx.Done()) {
			return
		}
		backoff = min(2*backoff, workerRetryMax)
	}
}

// raftMembership is the part of the Raft node the membership reconciler
// changes (*raft.Raft).
type raftMembership interface {
	GetConfiguration() raft.ConfigurationFuture
	AddVoter(id raft.ServerID, address raft.ServerAddress, prevIndex uint64, timeout time.Duration) raft.IndexFuture
	RemoveServer(id raft.ServerID, prevIndex uint64, timeout time.Duration) raft.IndexFuture
}

// peerVerifier proves a server's identity by its certificate before the
// server takes part in Raft (tlsLayer); nil without Config.PeerTLS.
type peerVerifier interface {
	verify(addr raft.ServerAddress, id string) error
}

// verifyPeer checks, if v is set, that the server at addr holds the
// certificate of node ID id. Gossip metadata alone never makes a voter.
func verifyPeer(v peerVerifier, addr, id string) error {
	if v == nil {
		return nil
	}
	if err := v.verify(raft.ServerAddress(addr), id); err != nil {
		return fmt.Errorf("identity of %s at %s not proven: %w", id, addr, err)
	}
	return nil
}

// memberSource lists the servers gossip knows (eventDelegate).
type memberSource interface {
	members() []member
}

// membershipReconciler is the leader worker that keeps the Raft
// configuration in step with gossip membership, every interval and on
// every gossip event (events).
type membershipReconciler struct {
	logger       hclog.Logger
	self         string
	clock        Clock
	raft         raftMembership
	gossip       memberSource
	peers        peerVerifier // nil without PeerTLS
	events       <-chan struct{}
	interval     time.Duration
	applyTimeout time.Duration
	// activeLevel reads the cluster's active feature level; levelMu
	// orders adding a server with raising that level (levelRaiser), so
	// that no server below the level joins as it is raised.
	activeLevel func() uint16
	levelMu     *sync.Mutex
	// refused holds the servers not added for their feature level, and
	// the level they ran then: each is logged once a level.
	refused map[string]uint16
}

func (s *Server) membership() *membershipReconciler {
	return &membershipReconciler{
		logger: s.logger, self: s.config.NodeID, clock: s.clock, raft: s.raft, gossip: s.gossip,
		peers:  s.peerVerifier(),
		events: s.eventCh, interval: s.config.ReconcileInterval, applyTimeout: s.config.ApplyTimeout,
		activeLevel: func() uint16 { return s.fsm.Read().ActiveLevel() },
		levelMu:     &s.levelMu,
		refused:     map[string]uint16{},
	}
}

// peerVerifier returns the Raft TLS layer, or nil without PeerTLS.
func (s *Server) peerVerifier() peerVerifier {
	if s.rparts == nil || s.rparts.tls == nil {
		return nil
	}
	return s.rparts.tls
}

func (r *membershipReconciler) Name() string { return "membership" }

func (r *membershipReconciler) Run(ctx context.Context) error {
	ticker := r.clock.NewTicker(r.interval)
	defer ticker.Stop()
	for {
		r.reconcile()
		select {
		case <-ctx.Done():
			return nil
		case <-ticker.C():
		case <-r.events:
		}
	}
}

// reconcile adds alive gossip members missing from the Raft configuration
// as voters, and removes members that left gracefully. Failed members are
// kept: they count against quorum until they return or an operator
// removes them ('meteor members remove').
func (r *membershipReconciler) reconcile() {
	f := r.raft.GetConfiguration()
	if err := f.Error(); err != nil {
		r.logger.Warn("read raft configuration", "error", err)
		return
	}
	inConfig := map[string]raft.Server{}
	for _, srv := range f.Configuration().Servers {
		inConfig[string(srv.ID)] = srv
	}
	for _, m := range r.gossip.members() {
		srv, known := inConfig[m.ID]
		switch {
		case m.State == memberlist.StateAlive && !known && !m.Leaving:
			if err := verifyPeer(r.peers, m.RaftAddr, m.ID); err != nil {
				r.logger.Warn("not adding server", "peer", m.ID, "error", err)
				continue
			}
			r.add(m)
		case m.State == memberlist.StateAlive && known && string(srv.Address) != m.RaftAddr:
			if err := verifyPeer(r.peers, m.RaftAddr, m.ID); err != nil {
				r.logger.Warn("not moving server", "peer", m.ID, "error", err)
				continue
			}
			r.logger.Info("server changed its raft address", "peer", m.ID, "old", srv.Address, "new", m.RaftAddr)
			if err := r.raft.AddVoter(raft.ServerID(m.ID), raft.ServerAddress(m.RaftAddr), 0, r.applyTimeout).Error(); err != nil {
				r.logger.Warn("update server address", "peer", m.ID, "error", err)
			}
		case (m.State == memberlist.StateLeft || m.Leaving) && known && m.ID != r.self:
			r.logger.Info("removing server that left", "peer", m.ID)
			if err := r.raft.RemoveServer(raft.ServerID(m.ID), 0, r.applyTimeout).Error(); err != nil {
				r.logger.Warn("remove server", "peer", m.ID, "error", err)
			}
		}
	}
}

// add adds m to the Raft configuration as a voter, unless it runs a
// feature level below the cluster's active one: its replica would apply
// the log the way an earlier release did and so diverge (or stop at the
// first entry it cannot apply). Such a server stays outside until it is
// upgraded; the leader says so once.
func (r *membershipReconciler) add(m member) {
	r.levelMu.Lock()
	defer r.levelMu.Unlock()
	if level, active := m.featureLevel(), r.activeLevel(); level < active {
		if r.refused[m.ID] != level {
			r.logger.Warn("not adding server: it runs a feature level below the cluster's active one; upgrade it, and it joins",
				"peer", m.ID, "level", level, "active_level", active)
			r.refused[m.ID] = level
		}
		return
	}
	delete(r.refused, m.ID)
	r.logger.Info("adding server to the raft configuration", "peer", m.ID, "raft", m.RaftAddr)
	if err := r.raft.AddVoter(raft.ServerID(m.ID), raft.ServerAddress(m.RaftAddr), 0, r.applyTimeout).Error(); err != nil {
		r.logger.Warn("add server", "peer", m.ID, "error", err)
	}
}

// bootstrapLoop forms a new cluster once BootstrapExpect servers see each
// other and none of them has Raft state. A server with existing state never
// bootstraps; it rejoins the cluster it belonged to.
func (s *Server) bootstrapLoop(ctx context.Context) {
	if s.config.Dev || s.config.BootstrapExpect == 0 || s.rparts.hasState {
		return
	}
	ticker := s.clock.NewTicker(500 * time.Millisecond)
	defer ticker.Stop()
	for {
		done, err := s.tryBootstrap(ctx)
		if err != nil {
			s.logger.Warn("bootstrap", "error", err)
		}
		if done {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-ticker.C():
		case <-s.bootstrapCh:
		}
	}
}

// tryBootstrap returns true when no further bootstrap attempts are needed.
func (s *Server) tryBootstrap(ctx context.Context) (bool, error) {
	if s.raft.LastIndex() > 0 {
		return true, nil // configuration arrived from a leader
	}
	var alive []member
	for _, m := range s.members() {
		if m.State != memberlist.StateAlive {
			continue
		}
		if m.BootstrapExpect != 0 && m.BootstrapExpect != s.config.BootstrapExpect {
			return false, fmt.Errorf("server %s expects %d servers but this one expects %d: start every server with the same --bootstrap-expect", m.ID, m.BootstrapExpect, s.config.BootstrapExpect)
		}
		alive = append(alive, m)
	}
	if len(alive) < s.config.BootstrapExpect {
		return false, nil
	}
	// Ask every peer whether it already belongs to a cluster; if one does,
	// this server must be added by that cluster's leader instead.
	for _, m := range alive {
		if m.ID == s.config.NodeID {
			continue
		}
		st, err := s.peers.status(ctx, m.HTTPAddr)
		if err != nil {
			return false, fmt.Errorf("ask %s for its raft state: %w", m.ID, err)
		}
		if st.LastIndex > 0 {
			s.logger.Info("found a server with raft state, waiting to be added to its cluster", "peer", m.ID)
			return true, nil
		}
	}
	for _, m := range alive {
		if m.ID == s.config.NodeID {
			continue
		}
		if err := verifyPeer(s.peerVerifier(), m.RaftAddr, m.ID); err != nil {
			return false, err
		}
	}
	slices.SortFunc(alive, func(a, b member) int { return strings.Compare(a.ID, b.ID) })
	var conf raft.Configuration
	for _, m := range alive {
		conf.Servers = append(conf.Servers, raft.Server{ID: raft.ServerID(m.ID), Address: raft.ServerAddress(m.RaftAddr), Suffrage: raft.Voter})
	}
	if err := s.raft.BootstrapCluster(conf).Error(); err != nil && err != raft.ErrCantBootstrap {
		return false, fmt.Errorf("bootstrap cluster: %w", err)
	}
	s.logger.Info("bootstrapped cluster", "servers", len(conf.Servers))
	return true, nil
}

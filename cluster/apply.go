package cluster

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/hashicorp/go-memdb"
	"github.com/hashicorp/raft"

	"github.com/meteor-edge/meteor/cluster/api"
	"github.com/meteor-edge/meteor/fsm"
)

// Errors of the write and read paths. They map to API error codes.
var (
	// ErrNotLeader means this server is not the leader; nothing was done.
	ErrNotLeader = errors.New("this server is not the leader")
	// ErrNoLeader means the cluster has no leader right now.
	ErrNoLeader = errors.New("no cluster leader: an election is in progress or a majority of servers is unreachable")
	// ErrNotReady means a new leader has not applied earlier terms yet.
	ErrNotReady = errors.New("the leader is still applying entries of earlier terms")
)

// OutcomeUnknownError wraps a failure after the command may have been
// committed: the write may or may not have taken effect.
type OutcomeUnknownError struct{ Err error }

func (e *OutcomeUnknownError) Error() string {
	return fmt.Sprintf("the write may or may not have been applied (%v): read the intent before retrying, or retry with If-Match", e.Err)
}
func (e *OutcomeUnknownError) Unwrap() error { return e.Err }

// Propose commits a command through Raft on the leader and returns its
// result. It must run on the leader (ErrNotLeader otherwise; nothing is
// written then). Concurrent proposals share disk writes: the Raft leader
// takes everything queued on its apply channel into one log append.
func (s *Server) Propose(ctx context.Context, t fsm.MessageType, req any) (fsm.ApplyResult, uint64, error) {
	data, err := fsm.Encode(t, req)
	if err != nil {
		return fsm.ApplyResult{}, 0, err
	}
	return s.proposeRaw(ctx, t, data)
}

// proposeRaw commits an encoded command (see Propose).
func (s *Server) proposeRaw(ctx context.Context, t fsm.MessageType, data []byte) (fsm.ApplyResult, uint64, error) {
	timeout := s.config.ApplyTimeout
	if dl, ok := ctx.Deadline(); ok {
		timeout = min(timeout, time.Until(dl))
	}
	p, err := s.startProposal(t, data, timeout)
	if err != nil {
		return fsm.ApplyResult{}, 0, err
	}
	return s.awaitProposal(ctx, p)
}

// proposal is a command handed to Raft whose commit is not known yet.
type proposal struct {
	f     raft.ApplyFuture
	start time.Time
}

// startProposal hands an encoded command to Raft, to be committed within
// timeout, and returns without waiting for the commit: the proposals of
// one forwarded batch are all queued, in order, before the first is
// waited for, so that they share log appends. It fails, with nothing
// written, where the command may not be proposed here.
func (s *Server) startProposal(t fsm.MessageType, data []byte, timeout time.Duration) (*proposal, error) {
	if s.raft.State() != raft.Leader {
		return nil, ErrNotLeader
	}
	if s.restoring.Load() {
		return nil, ErrRestoring
	}
	if err := s.requireFeature(t.Level(), fmt.Sprintf("command %s (type %d)", t, uint8(t))); err != nil {
		return nil, err
	}
	return &proposal{f: s.raft.Apply(data, timeout), start: s.clock.Mono()}, nil
}

// awaitProposal waits for p's commit and returns its result.
func (s *Server) awaitProposal(ctx context.Context, p *proposal) (fsm.ApplyResult, uint64, error) {
	var err error
	done := make(chan error, 1)
	go func() { done <- p.f.Error() }()
	select {
	case err = <-done:
	case <-ctx.Done():
		return fsm.ApplyResult{}, 0, &OutcomeUnknownError{Err: fmt.Errorf("gave up waiting for the commit: %w", ctx.Err())}
	case <-s.ctx.Done():
		return fsm.ApplyResult{}, 0, &OutcomeUnknownError{Err: raft.ErrRaftShutdown}
	}
	switch {
	case err == nil:
	case errors.Is(err, raft.ErrNotLeader), errors.Is(err, raft.ErrLeadershipTransferInProgress):
		// Refused before the entry was appended: nothing was written (a
		// transfer is what a draining leader does).
		return fsm.ApplyResult{}, 0, ErrNotLeader
	case errors.Is(err, raft.ErrAbortedByRestore):
		// Replaced by an operator restore's state.
		return fsm.ApplyResult{}, 0, ErrRestoring
	case errors.Is(err, raft.ErrEnqueueTimeout):
		return fsm.ApplyResult{}, 0, fmt.Errorf("%w: the leader's apply queue is full", ErrNotReady)
	default:
		return fsm.ApplyResult{}, 0, &OutcomeUnknownError{Err: err}
	}
	s.metrics.commitSeconds.Observe(s.clock.Mono().Sub(p.start).Seconds())
	res, ok := p.f.Response().(fsm.ApplyResult)
	if !ok {
		return fsm.ApplyResult{}, 0, fmt.Errorf("unexpected apply response %T", p.f.Response())
	}
	return res, p.f.Index(), nil
}

// ConsistentRead confirms that this server is still the leader and has
// applied every committed entry, so that a read of the local FSM that
// follows is linearizable: it reflects every write acknowledged before the
// read began. A leader cut off from its majority fails here.
func (s *Server) ConsistentRead(ctx context.Context) error {
	if s.raft.State() != raft.Leader {
		return ErrNotLeader
	}
	f := s.raft.VerifyLeader()
	done := make(chan error, 1)
	go func() { done <- f.Error() }()
	select {
	case err := <-done:
		if err != nil {
			return fmt.Errorf("%w: leadership not confirmed: %v", ErrNoLeader, err)
		}
	case <-ctx.Done():
		return fmt.Errorf("%w: leadership not confirmed before the deadline: %v", ErrNoLeader, ctx.Err())
	}
	if !s.readyForReads.Load() {
		return ErrNotReady
	}
	return nil
}

// leaderHTTP returns the leader's node ID and HTTP address.
func (s *Server) leaderHTTP() (string, string, error) {
	m, err := s.leaderMember()
	return m.ID, m.HTTPAddr, err
}

// leaderMember returns what gossip says of the leader (ID, HTTP address,
// the server-to-server API it serves). Without a leader, or with one
// gossip does not know an HTTP address of yet, it fails with ErrNoLeader
// and the leader's ID if there is one.
func (s *Server) leaderMember() (member, error) {
	_, id := s.raft.LeaderWithID()
	if id == "" {
		return member{}, ErrNoLeader
	}
	m, ok := s.gossip.memberByID(string(id))
	if !ok || m.HTTPAddr == "" {
		m.ID, m.HTTPAddr = string(id), ""
		return m, fmt.Errorf("%w: leader %s is not known through gossip yet", ErrNoLeader, id)
	}
	return m, nil
}

// catchUp waits until this server's replica holds every command the
// leader has applied (every write it acknowledged) when asked. The leader
// itself holds them once it is ready for reads (the barrier of its term);
// a follower asks the leader (/v1/internal/self, state_index), since one
// that just restarted does not know how far behind it is until the leader
// reaches it. It fails without a leader or once ctx ends.
func (s *Server) catchUp(ctx context.Context) error {
	if s.IsLeader() {
		t := s.clock.NewTicker(5 * time.Millisecond)
		defer t.Stop()
		for !s.readyForReads.Load() {
			select {
			case <-t.C():
			case <-ctx.Done():
				return fmt.Errorf("this leader has not applied the entries of earlier terms yet: %w", ctx.Err())
			}
		}
		return nil
	}
	_, addr, err := s.leaderHTTP()
	if err != nil {
		return err
	}
	st, err := s.peers.status(ctx, addr)
	if err != nil {
		return fmt.Errorf("ask the leader how far it applied: %w", err)
	}
	for {
		ws := memdb.NewWatchSet()
		have := s.fsm.Read().WatchIndex(ws)
		if have >= st.StateIndex {
			return nil
		}
		if err := ws.WatchCtx(ctx); err != nil {
			return fmt.Errorf("this replica is at index %d, the leader's at %d: %w", have, st.StateIndex, err)
		}
	}
}

// selfStatus is this server's own view, served at /v1/internal/self and
// /v1/health.
type selfStatus = api.Health

func (s *Server) self() *selfStatus {
	_, leader := s.raft.LeaderWithID()
	r := s.fsm.Read()
	st := &selfStatus{
		Node: s.config.NodeID, Region: s.config.Region,
		RaftState: s.raft.State().String(), Leader: string(leader), Term: s.raft.CurrentTerm(),
		AppliedIndex: s.raft.AppliedIndex(), LastIndex: s.raft.LastIndex(), CommitIndex: s.raft.CommitIndex(), StateIndex: r.Index(),
		Revision: r.Revision(), Version: Version, FeatureLevel: s.config.featureLevel(), ActiveLevel: r.ActiveLevel(),
	}
	if m := r.RestoreMark(); m.Seq > 0 {
		st.RestoreSeq, st.RestoreID = m.Seq, m.ID
	}
	switch {
	case leader == "":
		st.Message = "no cluster leader known: an election is in progress or a majority of servers is unreachable"
	case !s.inRaftConfig(s.config.NodeID):
		st.Message = "this server is not (yet) a member of the Raft configuration"
	default:
		st.Healthy = true
	}
	return st
}

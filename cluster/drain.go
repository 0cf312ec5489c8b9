package cluster

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/memberlist"
	"github.com/hashicorp/raft"

	"github.com/meteor-edge/meteor/wire"
)

// Graceful shutdown (Server.Drain, which Run does before Shutdown when its
// context ends: SIGTERM in `meteor server`). A server that only stops for
// a while (an upgrade, a reboot) should disturb the cluster as little as
// it can: it announces in gossip that it drains, so that the other servers
// send it no agents and take over the devices it owns; hands leadership
// over if it leads, so that no election waits for its timeout; and tells
// every agent to go (GoAway, shutting down) with the addresses of the
// other servers, the device's owner first, where the agent resumes its
// session at once (0-RTT with the shared session tickets). Agents that
// arrive meanwhile are refused the same way.
//
// Shutdown used to close the sessions one by one, and a QUIC connection's
// close returns only once its packets queued and its CONNECTION_CLOSE
// have been written to the socket and its goroutine has ended: a stop
// took the sum of those waits over every session, which grows with a slow
// or congested egress and a busy host. Sessions are now told and closed
// concurrently, and the drain has a deadline.

// DefaultDrainTimeout bounds Drain in `meteor server`.
const DefaultDrainTimeout = 5 * time.Second

// shutdownRetryAfter is the retry-after of the GoAway and Reject a
// draining server sends: agents keep away from it that long at least.
const shutdownRetryAfter = 5 * time.Second

// goAwayWriteTimeout bounds the write of one GoAway: a device whose link
// is stalled is closed by Shutdown instead.
const goAwayWriteTimeout = time.Second

// drainParallel bounds the GoAways written at once.
const drainParallel = 256

// Drain prepares the server to stop (see above) and returns once its
// agents have left or timeout has passed; then call Shutdown. It does not
// leave the cluster: the server starts again with its data dir.
func (s *Server) Drain(timeout time.Duration) {
	if s.draining.Swap(true) {
		return
	}
	start := s.clock.Mono()
	deadline := start.Add(timeout)
	// The three go on at once: the gossip update waits for its
	// broadcast, the hand-over for an election, and neither needs to come
	// before the agents are told (their new servers' records reach
	// whichever server leads; a record that meets the hand-over is
	// retried).
	var wg sync.WaitGroup
	wg.Go(func() { s.gossip.setDraining(min(time.Second, timeout/4)) })
	if s.IsLeader() && s.otherVoters() {
		wg.Go(func() { s.handOverLeadership(deadline) })
	}
	var st drainStats
	if s.agents != nil {
		st = s.agents.drain(s.ctx, deadline.Sub(s.clock.Mono()))
	}
	wg.Wait()
	s.logger.Info("drained", "took", s.clock.Mono().Sub(start), "sessions_told", st.told, "told_in", st.toldIn, "sessions_left", st.left, "leader", s.leaderID())
}

// drainStats say how an agent server's drain went: sessions told to go,
// how long telling them took, and sessions still open at the end.
type drainStats struct {
	told, left int
	toldIn     time.Duration
}

// otherVoters reports whether the Raft configuration has a voter besides
// this server, which leadership could go to.
func (s *Server) otherVoters() bool {
	f := s.raft.GetConfiguration()
	if f.Error() != nil {
		return false
	}
	for _, srv := range f.Configuration().Servers {
		if srv.Suffrage == raft.Voter && string(srv.ID) != s.config.NodeID {
			return true
		}
	}
	return false
}

// handOverLeadership transfers leadership to another voter, waiting until
// deadline at most.
func (s *Server) handOverLeadership(deadline time.Time) {
	fut := s.raft.LeadershipTransfer()
	done := make(chan error, 1)
	go func() { done <- fut.Error() }()
	wait := s.clock.NewTimer(max(deadline.Sub(s.clock.Mono()), 0))
	defer wait.Stop()
	select {
	case err := <-done:
		if err != nil {
			s.logger.Warn("hand over leadership before stopping", "error", err)
			return
		}
		s.logger.Info("handed over leadership before stopping")
	case <-wait.C():
		s.logger.Warn("hand over leadership before stopping: no new leader before the drain's deadline")
	}
}

// setDraining announces through gossip that the server drains: the other
// servers stop redirecting agents to it and take over its devices.
func (g *membership) setDraining(timeout time.Duration) {
	g.meta.mu.Lock()
	g.meta.meta.Draining = true
	g.meta.mu.Unlock()
	if err := g.ml.UpdateNode(timeout); err != nil {
		g.logger.Warn("announce draining", "error", err)
	}
}

// drain tells every session to go elsewhere and refuses new ones, then
// waits until the sessions ended or grace passed.
func (a *agentServer) drain(ctx context.Context, grace time.Duration) drainStats {
	start := a.clock.Mono()
	a.draining.Store(true)
	a.mu.Lock()
	sessions := make([]*agentSession, 0, len(a.sessions))
	for sess := range a.sessions {
		sessions = append(sessions, sess)
	}
	a.mu.Unlock()
	// Telling them is bounded too: each GoAway has goAwayWriteTimeout, but
	// many stalled agents would add up. Those not told by the deadline
	// are closed by Shutdown.
	var told atomic.Int64
	allTold := make(chan struct{})
	go func() {
		defer close(allTold)
		sem := make(chan struct{}, drainParallel)
		var wg sync.WaitGroup
		for _, sess := range sessions {
			sem <- struct{}{}
			wg.Go(func() {
				defer func() { <-sem }()
				sess.goAway()
				told.Add(1)
			})
		}
		wg.Wait()
	}()
	timer := a.clock.NewTimer(grace)
	defer timer.Stop()
	var st drainStats
	select {
	case <-allTold:
	case <-timer.C():
		st.told, st.toldIn, st.left = int(told.Load()), a.clock.Mono().Sub(start), a.count()
		return st
	case <-ctx.Done():
		st.told, st.toldIn, st.left = int(told.Load()), a.clock.Mono().Sub(start), a.count()
		return st
	}
	st.told, st.toldIn = len(sessions), a.clock.Mono().Sub(start)
	for {
		a.mu.Lock()
		st.left = len(a.sessions)
		ch := a.emptied
		if st.left > 0 && ch == nil {
			ch = make(chan struct{})
			a.emptied = ch
		}
		a.mu.Unlock()
		if st.left == 0 {
			return st
		}
		select {
		case <-ch:
		case <-timer.C():
			st.left = a.count()
			return st
		case <-ctx.Done():
			st.left = a.count()
			return st
		}
	}
}

// goAway tells the session's agent to go elsewhere: a GoAway (shutting
// down) with the other servers' addresses, the device's owner among them
// first, then the end of the control stream. The agent closes the
// connection and resumes its session there. Once per session.
func (sess *agentSession) goAway() {
	sess.goAwayOnce.Do(func() {
		read := sess.a.state.Read()
		reason := fmt.Sprintf("server %s is shutting down", sess.a.cfg.NodeID)
		// A write blocked on the agent's flow-control window holds wmu:
		// the deadline, set before taking the lock, ends it, and bounds
		// every write after it, this GoAway's included.
		by := time.Now().Add(goAwayWriteTimeout)
		sess.leaveBy.Store(by.UnixNano())
		sess.stream.SetWriteDeadline(by)
		sess.wmu.Lock()
		defer sess.wmu.Unlock()
		err := sess.writeLocked(&wire.GoAway{Code: wire.CodeShuttingDown, Reason: reason, RetryAfter: shutdownRetryAfter,
			Redirect: sess.a.redirectsFor(sess.deviceID, sess.placementLabels(read))})
		if err == nil {
			err = sess.stream.Close()
		}
		if err != nil {
			sess.logger.Debug("GoAway not sent", "error", err)
		}
	})
}

// refuseDraining answers the Hello of an agent arriving at a draining
// server: Reject (shutting down) with the other servers' addresses.
func (sess *agentSession) refuseDraining() error {
	read := sess.a.state.Read()
	reason := fmt.Sprintf("server %s is shutting down", sess.a.cfg.NodeID)
	sess.write(&wire.Reject{Code: wire.CodeShuttingDown, Reason: reason, RetryAfter: shutdownRetryAfter,
		Redirect: sess.a.redirectsFor(sess.deviceID, sess.placementLabels(read))})
	return flushAndClose(wire.CloseShuttingDown, reason)
}

// redirectsFor lists the other servers' agent addresses for a device
// leaving this server: its home owner among them first (so that the
// sessions of a stopping server spread as the devices' home ownership
// does, each to its own region's servers; there the device's session
// makes that server its owner too), then the others as redirects
// orders them.
func (a *agentServer) redirectsFor(deviceID string, labels map[string]string) []string {
	var cands []ownerCandidate
	addr := map[string]string{}
	for _, m := range a.peers.members() {
		if m.AgentAddr == "" || m.ID == a.cfg.NodeID || m.State != memberlist.StateAlive || m.Leaving || m.Draining {
			continue
		}
		cands = append(cands, ownerCandidate{ID: m.ID, Region: m.Region, PeerAPI: m.PeerAPI})
		addr[m.ID] = m.AgentAddr
	}
	out := a.redirects()
	if owner := ownerOf(deviceID, labels["region"], cands); owner != "" {
		first := addr[owner]
		rest := out[:0:0]
		for _, r := range out {
			if r != first {
				rest = append(rest, r)
			}
		}
		out = append([]string{first}, rest...)
	}
	if len(out) > wire.MaxRedirects {
		out = out[:wire.MaxRedirects]
	}
	return out
}

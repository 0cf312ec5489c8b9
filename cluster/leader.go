package cluster

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/memberlist"
	"github.com/hashicorp/raft"
)

// monitorLeadership runs leaderLoop while this server leads.
func (s *Server) monitorLeadership() {
	defer s.wg.Done()
	var stop chan struct{}
	var done sync.WaitGroup
	stepDown := func() {
		if stop != nil {
			close(stop)
			done.Wait()
			stop = nil
		}
	}
	defer stepDown()
	for {
		select {
		case <-s.shutdownCh:
			return
		case isLeader := <-s.leaderCh:
			switch {
			case isLeader && stop == nil:
				stop = make(chan struct{})
				done.Add(1)
				go func(stop chan struct{}) {
					defer done.Done()
					s.leaderLoop(stop)
				}(stop)
				s.logger.Info("became leader")
			case !isLeader && stop != nil:
				stepDown()
				s.logger.Info("lost leadership")
			}
		}
	}
}

// leaderLoop runs while this server leads. First it commits a barrier so
// that every entry of earlier terms is applied locally: only then can the
// leader answer linearizable reads from its own FSM. Then it keeps the Raft
// configuration in step with gossip membership.
func (s *Server) leaderLoop(stop <-chan struct{}) {
	defer s.readyForReads.Store(false)
	for {
		err := s.raft.Barrier(s.config.ApplyTimeout).Error()
		if err == nil {
			break
		}
		s.logger.Warn("leader barrier failed, retrying", "error", err)
		select {
		case <-stop:
			return
		case <-time.After(100 * time.Millisecond):
		}
	}
	s.readyForReads.Store(true)

	ticker := time.NewTicker(s.config.ReconcileInterval)
	defer ticker.Stop()
	for {
		s.reconcileMembers()
		select {
		case <-stop:
			return
		case <-ticker.C:
		case <-s.eventCh:
		}
	}
}

// reconcileMembers adds alive gossip members missing from the Raft
// configuration as voters, and removes members that left gracefully.
// Failed members are kept: they count against quorum until they return or
// an operator removes them ('meteor members remove').
func (s *Server) reconcileMembers() {
	f := s.raft.GetConfiguration()
	if err := f.Error(); err != nil {
		s.logger.Warn("read raft configuration", "error", err)
		return
	}
	inConfig := map[string]raft.Server{}
	for _, srv := range f.Configuration().Servers {
		inConfig[string(srv.ID)] = srv
	}
	for _, m := range s.members() {
		srv, known := inConfig[m.ID]
		switch {
		case m.State == memberlist.StateAlive && !known && !m.Leaving:
			s.logger.Info("adding server to the raft configuration", "peer", m.ID, "raft", m.RaftAddr)
			if err := s.raft.AddVoter(raft.ServerID(m.ID), raft.ServerAddress(m.RaftAddr), 0, s.config.ApplyTimeout).Error(); err != nil {
				s.logger.Warn("add server", "peer", m.ID, "error", err)
			}
		case m.State == memberlist.StateAlive && known && string(srv.Address) != m.RaftAddr:
			s.logger.Info("server changed its raft address", "peer", m.ID, "old", srv.Address, "new", m.RaftAddr)
			if err := s.raft.AddVoter(raft.ServerID(m.ID), raft.ServerAddress(m.RaftAddr), 0, s.config.ApplyTimeout).Error(); err != nil {
				s.logger.Warn("update server address", "peer", m.ID, "error", err)
			}
		case (m.State == memberlist.StateLeft || m.Leaving) && known && m.ID != s.config.NodeID:
			s.logger.Info("removing server that left", "peer", m.ID)
			if err := s.raft.RemoveServer(raft.ServerID(m.ID), 0, s.config.ApplyTimeout).Error(); err != nil {
				s.logger.Warn("remove server", "peer", m.ID, "error", err)
			}
		}
	}
}

// bootstrapLoop forms a new cluster once BootstrapExpect servers see each
// other and none of them has Raft state. A server with existing state never
// bootstraps; it rejoins the cluster it belonged to.
func (s *Server) bootstrapLoop() {
	defer s.wg.Done()
	if s.config.Dev || s.config.BootstrapExpect == 0 || s.rparts.hasState {
		return
	}
	ticker := time.NewTicker(500 * time.Millisecond)
	defer ticker.Stop()
	for {
		done, err := s.tryBootstrap()
		if err != nil {
			s.logger.Warn("bootstrap", "error", err)
		}
		if done {
			return
		}
		select {
		case <-s.shutdownCh:
			return
		case <-ticker.C:
		case <-s.bootstrapCh:
		}
	}
}

// tryBootstrap returns true when no further bootstrap attempts are needed.
func (s *Server) tryBootstrap() (bool, error) {
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
		st, err := s.peerStatus(m.HTTPAddr)
		if err != nil {
			return false, fmt.Errorf("ask %s for its raft state: %w", m.ID, err)
		}
		if st.LastIndex > 0 {
			s.logger.Info("found a server with raft state, waiting to be added to its cluster", "peer", m.ID)
			return true, nil
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

// peerStatus fetches a peer's /v1/internal/self.
func (s *Server) peerStatus(httpAddr string) (*selfStatus, error) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+httpAddr+"/v1/internal/self", nil)
	if err != nil {
		return nil, err
	}
	resp, err := s.client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s answered %s", httpAddr, resp.Status)
	}
	var st selfStatus
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		return nil, fmt.Errorf("decode status from %s: %w", httpAddr, err)
	}
	return &st, nil
}

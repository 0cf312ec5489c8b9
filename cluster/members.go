package cluster

import (
	"context"
	"net/http"
	"slices"
	"strings"
	"sync"

	"github.com/hashicorp/memberlist"
	"github.com/hashicorp/raft"

	"github.com/meteor-edge/meteor/cluster/api"
)

// Members returns every server the cluster knows, from gossip and the Raft
// configuration, with each server's own figures (asked over HTTP; a
// server that does not answer shows the error instead). The leader is the
// one this server's Raft follows, if the configuration has it as a voter
// (raftLeader); each replica's state is compared with the leader's at the
// same index (compareStates).
func (s *Server) Members() api.Members {
	leader, _ := s.raftLeader()
	out := api.Members{Leader: leader}
	suffrage := map[string]raft.ServerSuffrage{}
	raftAddr := map[string]string{}
	if f := s.raft.GetConfiguration(); f.Error() == nil {
		for _, srv := range f.Configuration().Servers {
			suffrage[string(srv.ID)] = srv.Suffrage
			raftAddr[string(srv.ID)] = string(srv.Address)
		}
	}
	seen := map[string]bool{}
	for _, m := range s.members() {
		seen[m.ID] = true
		am := api.Member{
			ID: m.ID, Region: m.Region, HTTPAddr: m.HTTPAddr, RaftAddr: m.RaftAddr,
			GossipAddr: m.GossipAddr, GossipState: gossipState(m), Version: m.Version,
			FeatureLevel: m.featureLevel(), WireMinor: max(m.WireMinor, 1),
			Suffrage: "none", RaftRole: "none",
		}
		if sf, ok := suffrage[m.ID]; ok {
			am.Suffrage = suffrageName(sf)
		}
		out.Members = append(out.Members, am)
	}
	for id, sf := range suffrage {
		if !seen[id] {
			out.Members = append(out.Members, api.Member{ID: id, RaftAddr: raftAddr[id], GossipState: "unknown", Suffrage: suffrageName(sf), RaftRole: "unknown"})
		}
	}
	slices.SortFunc(out.Members, func(a, b api.Member) int { return strings.Compare(a.ID, b.ID) })

	var wg sync.WaitGroup
	var states *stateView
	wg.Go(func() { states = s.stateChecks(context.Background(), 0, membersCheckTimeout) })
	for i := range out.Members {
		m := &out.Members[i]
		m.Leader = m.ID == out.Leader
		if m.HTTPAddr == "" || m.GossipState == "left" {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			var st *selfStatus
			if m.ID == s.config.NodeID {
				st = s.self()
			} else {
				var err error
				if st, err = s.peers.status(context.Background(), m.HTTPAddr); err != nil {
					m.Error = err.Error()
					return
				}
			}
			m.AppliedIndex, m.LastIndex = st.AppliedIndex, st.LastIndex
			if m.Suffrage != "none" {
				m.RaftRole = roleName(st.RaftState)
			}
		}()
	}
	wg.Wait()
	for i := range out.Members {
		m := &out.Members[i]
		if c, ok := states.checks[m.ID]; ok && states.leader == out.Leader {
			m.StateCheck, m.Diverged = c, c.Result == api.StateDiverged
		}
	}
	return out
}

// gossipState is a server's gossip state as the members list shows it:
// alive, suspect, failed, left, or leaving (alive, and announced that it
// leaves).
func gossipState(m member) string {
	if m.Leaving && m.State == memberlist.StateAlive {
		return "leaving"
	}
	return stateName(m.State)
}

func suffrageName(s raft.ServerSuffrage) string {
	switch s {
	case raft.Voter:
		return "voter"
	case raft.Nonvoter:
		return "nonvoter"
	case raft.Staging:
		return "staging"
	}
	return "none"
}

func roleName(state string) string {
	switch state {
	case raft.Leader.String():
		return "leader"
	case raft.Follower.String():
		return "follower"
	case raft.Candidate.String():
		return "candidate"
	}
	return "unknown"
}

func (h *httpAPI) handleMembers(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, h.admin.Members())
}

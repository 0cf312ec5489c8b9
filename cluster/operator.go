package cluster

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"

	"github.com/hashicorp/raft"

	"github.com/meteor-edge/meteor/cluster/api"
	"github.com/meteor-edge/meteor/fsm"
)

// The operator's view of Raft (GET /v1/operator/raft, 'meteor operator
// raft list-peers'), the removal of a server from the configuration
// (DELETE /v1/cluster/members/{id}, 'meteor members remove' and 'meteor
// operator raft remove-peer') and the hand-over of leadership (POST
// /v1/operator/raft/transfer-leader). Recovery of a cluster that lost its
// majority for good works on a stopped server's data dir (recover.go).

// raftConfiguration is the Raft configuration with every server's figures,
// as Members sees them, and what the configuration can stand.
func (s *Server) raftConfiguration() api.RaftConfiguration {
	members := s.Members()
	out := api.RaftConfiguration{Leader: members.Leader}
	var leaderLast uint64
	for _, m := range members.Members {
		if m.Leader {
			leaderLast = m.LastIndex
		}
	}
	for _, m := range members.Members {
		if m.Suffrage == "none" {
			continue
		}
		p := api.RaftPeer{
			ID: m.ID, Address: m.RaftAddr, Suffrage: m.Suffrage, Leader: m.Leader, GossipState: m.GossipState,
			Alive:        m.GossipState == "alive" && m.Error == "",
			AppliedIndex: m.AppliedIndex, LastIndex: m.LastIndex, Version: m.Version, FeatureLevel: m.FeatureLevel, Error: m.Error,
		}
		if leaderLast > p.AppliedIndex {
			p.TrailsBy = leaderLast - p.AppliedIndex
		}
		if p.Suffrage == "voter" {
			out.Voters++
			if p.Alive {
				out.AliveVoters++
			}
		}
		out.Peers = append(out.Peers, p)
	}
	out.Quorum = out.Voters/2 + 1
	out.FailureTolerance = out.AliveVoters - out.Quorum
	return out
}

func (h *httpAPI) handleRaftConfiguration(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, h.admin.raftConfiguration())
}

// liveServer reports whether server id is alive: alive in gossip, not
// leaving, and answering this server's status query. A server just killed
// is still alive in gossip for a moment; it no longer answers.
func (s *Server) liveServer(ctx context.Context, id string) bool {
	if id == s.config.NodeID {
		return true
	}
	m, ok := s.gossip.memberByID(id)
	if !ok || gossipState(m) != "alive" {
		return false
	}
	_, err := s.peers.status(ctx, m.HTTPAddr)
	return err == nil
}

// checkRemoval returns, as a 409, why removing server id from the Raft
// configuration would do harm, or nil. A failed server may always go:
// removing it can only lower the quorum. A live one is refused, since the
// membership reconciler adds a live server back at once (make it leave
// instead), and above all when the voters left would not have a majority
// alive: the cluster would stop taking writes.
func (s *Server) checkRemoval(ctx context.Context, id string) error {
	f := s.raft.GetConfiguration()
	if err := f.Error(); err != nil {
		return err
	}
	var target *raft.Server
	var rest []raft.Server
	for _, srv := range f.Configuration().Servers {
		if string(srv.ID) == id {
			target = &srv
		} else if srv.Suffrage == raft.Voter {
			rest = append(rest, srv)
		}
	}
	if target == nil || !s.liveServer(ctx, id) {
		return nil
	}
	alive := 0
	for _, srv := range rest {
		if s.liveServer(ctx, string(srv.ID)) {
			alive++
		}
	}
	quorum := len(rest)/2 + 1
	if target.Suffrage == raft.Voter && alive < quorum {
		return &api.Error{StatusCode: http.StatusConflict, Code: api.CodeConflict, Message: fmt.Sprintf(
			"server %s is alive, and removing it would leave %d voters of which %d are alive, fewer than the %d a commit needs: the cluster would stop taking writes. Bring the failed voters back or remove them first; --force (force=true) removes it anyway",
			id, len(rest), alive, quorum)}
	}
	return &api.Error{StatusCode: http.StatusConflict, Code: api.CodeConflict, Message: fmt.Sprintf(
		"server %s is alive (gossip and its API answer): the leader would add it back as a voter at once. Make it leave for good with 'meteor members leave --addr ITS-HTTP-ADDRESS', or stop it first; --force (force=true) removes it anyway",
		id)}
}

// handleRemoveMember removes a server from the Raft configuration, on the
// leader, once checkRemoval finds no harm in it (or with force=true).
func (h *httpAPI) handleRemoveMember(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	force, err := boolParam(r, "force")
	if err != nil {
		writeError(w, badRequest("%v", err))
		return
	}
	if !h.admin.inRaftConfig(id) {
		writeError(w, toAPIError(fmt.Errorf("server %q is not in the Raft configuration: %w", id, fsm.ErrNotFound)))
		return
	}
	if !force {
		if err := h.admin.checkRemoval(r.Context(), id); err != nil {
			writeError(w, toAPIError(err))
			return
		}
	}
	err = h.admin.removeServer(id)
	change := "remove"
	if force {
		change = "remove-forced"
	}
	h.auditMember(r, change, id, err)
	if err != nil {
		writeError(w, toAPIError(err))
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"removed": id})
}

// transferLeadership hands leadership over, to voter to if set, and waits
// until another server leads; it returns that server's ID.
func (s *Server) transferLeadership(ctx context.Context, to string) (string, error) {
	if !s.IsLeader() {
		return "", ErrNotLeader
	}
	var fut raft.Future
	if to == "" {
		fut = s.raft.LeadershipTransfer()
	} else {
		if to == s.config.NodeID {
			return "", badRequest("server %s leads already", to)
		}
		f := s.raft.GetConfiguration()
		if err := f.Error(); err != nil {
			return "", err
		}
		var addr raft.ServerAddress
		for _, srv := range f.Configuration().Servers {
			if string(srv.ID) == to && srv.Suffrage == raft.Voter {
				addr = srv.Address
			}
		}
		switch {
		case addr == "":
			return "", toAPIError(fmt.Errorf("server %q is not a voter of the Raft configuration: %w", to, fsm.ErrNotFound))
		case !s.liveServer(ctx, to):
			return "", &api.Error{StatusCode: http.StatusConflict, Code: api.CodeConflict, Message: fmt.Sprintf("server %s is not alive: it cannot take leadership", to)}
		}
		fut = s.raft.LeadershipTransferToServer(raft.ServerID(to), addr)
	}
	if err := fut.Error(); err != nil {
		return "", fmt.Errorf("hand over leadership: %w", err)
	}
	// Raft returns once the target started its election; wait until this
	// server follows someone else.
	deadline := s.clock.Mono().Add(s.config.ApplyTimeout)
	for {
		if id := s.leaderID(); id != "" && id != s.config.NodeID {
			return id, nil
		}
		if s.clock.Mono().After(deadline) || !sleep(s.clock, 20*time.Millisecond, ctx.Done()) {
			return "", fmt.Errorf("%w: leadership was handed over, but no new leader is known yet", ErrNoLeader)
		}
	}
}

func (h *httpAPI) handleTransferLeader(w http.ResponseWriter, r *http.Request) {
	var req api.TransferLeaderRequest
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, 4096))
	if err == nil && len(body) > 0 {
		err = json.Unmarshal(body, &req)
	}
	if err != nil {
		writeError(w, badRequest("transfer-leader body: %v (want {\"to\": \"ID\"} or nothing)", err))
		return
	}
	leader, err := h.admin.transferLeadership(r.Context(), req.To)
	target := req.To
	if target == "" {
		target = leader
	}
	h.auditMember(r, "transfer-leader", target, err)
	if err != nil {
		writeError(w, toAPIError(err))
		return
	}
	writeJSON(w, http.StatusOK, api.TransferLeaderResponse{Previous: h.cfg.NodeID, Leader: leader})
}

// boolParam reads an optional true/false query parameter.
func boolParam(r *http.Request, name string) (bool, error) {
	v := r.URL.Query().Get(name)
	if v == "" {
		return false, nil
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		return false, fmt.Errorf("query parameter %s=%q: want true or false", name, v)
	}
	return b, nil
}

package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/hashicorp/raft"

	"github.com/meteor-edge/meteor/cluster/api"
	"github.com/meteor-edge/meteor/fsm"
)

// The leader and divergence of /v1/health and /v1/cluster/members.
//
// The leader shown is the one this server's Raft follows, and only if the
// Raft configuration has it as a voter at that address: a peer's claim
// (gossip metadata, its /v1/internal/self) never names it.
//
// A replica has diverged when its state differs from the leader's at the
// same Raft index. Replicas rarely stand at the same index while writes
// flow, so each keeps its state as of every 16th index among its recent
// ones (fsm.FSM.Checkpoints) and hashes one only when asked
// (fsm.FSM.StateHashAt). A check asks every replica which checkpoints it
// keeps, takes for each the newest it shares with the leader, and compares
// the two hashes there. Replicas at different indexes are never compared,
// so a lagging follower is not reported; one without a checkpoint in
// common with the leader, or that does not answer, is "unchecked".

// raftLeader returns the leader this server's Raft follows, if the Raft
// configuration has it as a voter at the address Raft gives; otherwise ""
// and why not.
func (s *Server) raftLeader() (id, note string) {
	id, note, _ = s.raftLeaderIn()
	return id, note
}

// raftLeaderIn is raftLeader, with the Raft configuration it checked the
// leader in (empty when it found no leader to check).
func (s *Server) raftLeaderIn() (id, note string, conf raft.Configuration) {
	addr, lid := s.raft.LeaderWithID()
	if lid == "" {
		return "", "no cluster leader known: an election is in progress or a majority of servers is unreachable", conf
	}
	f := s.raft.GetConfiguration()
	if err := f.Error(); err != nil {
		return "", fmt.Sprintf("cannot read the Raft configuration to check leader %s: %v", lid, err), conf
	}
	conf = f.Configuration()
	id, note = verifyLeader(addr, lid, conf)
	return id, note, conf
}

// verifyLeader accepts the leader Raft follows (addr, id) only if conf has
// it as a voter at that address.
func verifyLeader(addr raft.ServerAddress, id raft.ServerID, conf raft.Configuration) (string, string) {
	for _, srv := range conf.Servers {
		if srv.ID != id {
			continue
		}
		switch {
		case srv.Suffrage != raft.Voter:
			return "", fmt.Sprintf("Raft follows leader %s, which is not a voter of the Raft configuration", id)
		case srv.Address != addr:
			return "", fmt.Sprintf("Raft follows leader %s at %s, but the Raft configuration has %s at %s", id, addr, id, srv.Address)
		}
		return string(id), ""
	}
	return "", fmt.Sprintf("Raft follows leader %s at %s, which is not in the Raft configuration", id, addr)
}

// healthCheckAge is how old a state comparison /v1/health may report: a
// comparison hashes the whole state on every server (at a checkpoint; new
// ones come every 16 indexes while writes flow), which a monitor polling
// health every second must not make every second (it cost the leader 8 %
// of its CPU under 1,300 writes/s, go run ./bench/intents -skip-etcd
// -perf-leader). Divergence is a bug's outcome, not a transient state;
// half a minute to report it is soon enough.
// healthCheckTimeout bounds a new one, so the health answer stays quick
// when a server is slow.
//
// A large state takes longer: a server holding 10,000 intents with 16
// revisions each took about 2 s to hash it, and with health polled on
// every server, a quarter of the servers' CPU went to hashing during a
// write load (make bench-intents, which reads each window's Raft term
// from /v1/health). So health reuses a comparison for longer when the
// hash is dear (healthCheckAgeFor): long enough that hashing stays within
// healthHashBudget of a CPU.
const (
	healthCheckAge      = 30 * time.Second
	healthCheckTimeout  = 300 * time.Millisecond
	membersCheckTimeout = time.Second
	healthHashBudget    = 0.05
)

// healthCheckAgeFor is how old a comparison health may report when a
// hash of this server's state costs cost and the Raft configuration has
// servers servers: each of them may make a comparison in that time (its
// own health), and each comparison may make every server hash once.
func healthCheckAgeFor(cost time.Duration, servers int) time.Duration {
	return max(healthCheckAge, time.Duration(float64(cost)*float64(max(servers, 1))/healthHashBudget))
}

// health is the answer to GET /v1/health: this server's own figures, the
// leader its Raft follows (if the configuration has it), and the servers
// whose state diverged from the leader's.
func (s *Server) health(ctx context.Context) *api.Health {
	st := s.self()
	leader, note, conf := s.raftLeaderIn()
	st.Leader = leader
	if leader == "" {
		st.Healthy, st.Message = false, note
		return st
	}
	v := s.stateChecks(ctx, healthCheckAgeFor(s.fsm.HashCost(), len(conf.Servers)), healthCheckTimeout)
	for _, c := range v.checks {
		if c.Result == api.StateDiverged {
			st.Diverged = append(st.Diverged, *c)
		}
	}
	if len(st.Diverged) > 0 && st.Healthy {
		ids := make([]string, len(st.Diverged))
		for i, c := range st.Diverged {
			ids[i] = c.Server
		}
		st.Healthy = false
		st.Message = fmt.Sprintf("the state of %v differs from leader %s's at the same index: restore the diverged servers from the leader's state (docs/operations.md)", ids, v.leader)
	}
	return st
}

// stateView is the outcome of one comparison of the replicas' states.
type stateView struct {
	at     time.Time // monotonic clock reading when it was made
	leader string
	checks map[string]*api.StateCheck // by server ID; none for the leader
}

// stateCheckCache keeps the last comparison so that health requests do not
// each start one, and lets only one run at a time.
type stateCheckCache struct {
	mu      sync.Mutex // guards last and running
	last    *stateView
	running chan struct{} // closed when the comparison in flight ends
}

// stateChecks returns a comparison no older than maxAge, making one
// (bounded by timeout) if needed. While one is being made, a caller with
// an older one at hand gets that rather than wait, unless maxAge is 0.
func (s *Server) stateChecks(ctx context.Context, maxAge, timeout time.Duration) *stateView {
	c := &s.stateCache
	c.mu.Lock()
	last, running := c.last, c.running
	if last != nil && s.clock.Mono().Sub(last.at) <= maxAge {
		c.mu.Unlock()
		return last
	}
	if running == nil {
		done := make(chan struct{})
		c.running = done
		c.mu.Unlock()
		// Not cut short by the caller going away: others take it too.
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), timeout)
		v := s.compareStates(cctx)
		cancel()
		c.mu.Lock()
		c.last, c.running = v, nil
		c.mu.Unlock()
		close(done)
		return v
	}
	c.mu.Unlock()
	if last != nil && maxAge > 0 {
		return last
	}
	select {
	case <-running:
		// Finished while this call waited: recent enough.
		c.mu.Lock()
		defer c.mu.Unlock()
		return c.last
	case <-ctx.Done():
		return &stateView{at: s.clock.Mono()}
	}
}

// replicaRef is a server holding a replica: in the Raft configuration,
// reached at its HTTP address ("" for this server itself).
type replicaRef struct {
	id, addr string
}

// compareStates compares the state of every server in the Raft
// configuration with the leader's at their newest common checkpoint.
func (s *Server) compareStates(ctx context.Context) *stateView {
	v := &stateView{at: s.clock.Mono(), checks: map[string]*api.StateCheck{}}
	leader, note := s.raftLeader()
	v.leader = leader
	f := s.raft.GetConfiguration()
	if err := f.Error(); err != nil {
		return v
	}
	alive := map[string]member{}
	for _, m := range s.members() {
		alive[m.ID] = m
	}
	var refs []replicaRef
	for _, srv := range f.Configuration().Servers {
		id := string(srv.ID)
		ref := replicaRef{id: id}
		if id != s.config.NodeID {
			m, ok := alive[id]
			if !ok || m.HTTPAddr == "" || stateName(m.State) != "alive" {
				if id != leader {
					v.checks[id] = unchecked(id, "not alive through gossip")
				}
				continue
			}
			ref.addr = m.HTTPAddr
		}
		refs = append(refs, ref)
	}
	if leader == "" {
		for _, r := range refs {
			v.checks[r.id] = unchecked(r.id, note)
		}
		return v
	}
	// Which checkpoints each keeps.
	kept := make([][]uint64, len(refs))
	errs := make([]error, len(refs))
	li := slices.IndexFunc(refs, func(r replicaRef) bool { return r.id == leader })
	runEach(len(refs), func(i int) { kept[i], errs[i] = s.checkpointsOf(ctx, refs[i]) })
	if li < 0 || errs[li] != nil {
		why := "the leader is not alive through gossip"
		if li >= 0 {
			why = fmt.Sprintf("leader %s did not say which checkpoints it keeps: %v", leader, errs[li])
		}
		for i, r := range refs {
			if i != li {
				v.checks[r.id] = unchecked(r.id, why)
			}
		}
		return v
	}
	// The newest checkpoint each shares with the leader.
	at := make([]uint64, len(refs))
	for i, r := range refs {
		switch {
		case i == li:
		case errs[i] != nil:
			v.checks[r.id] = unchecked(r.id, fmt.Sprintf("did not say which checkpoints it keeps: %v", errs[i]))
		default:
			if at[i] = newestCommon(kept[li], kept[i]); at[i] == 0 {
				v.checks[r.id] = unchecked(r.id, fmt.Sprintf("no checkpoint in common with the leader yet (the leader keeps %s, this server %s)", span(kept[li]), span(kept[i])))
			}
		}
	}
	// The hashes there, the leader's once per checkpoint.
	var points []uint64
	for i := range refs {
		if at[i] != 0 && !slices.Contains(points, at[i]) {
			points = append(points, at[i])
		}
	}
	hashes := make([]fsm.StateHash, len(refs)+len(points))
	herrs := make([]error, len(refs)+len(points))
	runEach(len(refs)+len(points), func(i int) {
		switch {
		case i >= len(refs):
			hashes[i], herrs[i] = s.stateHashOf(ctx, refs[li], points[i-len(refs)])
		case at[i] != 0:
			hashes[i], herrs[i] = s.stateHashOf(ctx, refs[i], at[i])
		}
	})
	for i, r := range refs {
		c := at[i]
		if c == 0 {
			continue
		}
		lh, lerr := hashes[len(refs)+slices.Index(points, c)], herrs[len(refs)+slices.Index(points, c)]
		switch {
		case lerr != nil:
			v.checks[r.id] = unchecked(r.id, fmt.Sprintf("leader %s did not hash its state at index %d: %v", leader, c, lerr))
		case herrs[i] != nil:
			v.checks[r.id] = unchecked(r.id, fmt.Sprintf("did not hash its state at index %d: %v", c, herrs[i]))
		default:
			res := api.StateSame
			if hashes[i].Hash != lh.Hash {
				res = api.StateDiverged
			}
			v.checks[r.id] = &api.StateCheck{Server: r.id, Result: res, Index: c, Hash: hashes[i].Hash, LeaderHash: lh.Hash}
		}
	}
	return v
}

func unchecked(id, note string) *api.StateCheck {
	return &api.StateCheck{Server: id, Result: api.StateUnchecked, Note: note}
}

// newestCommon returns the greatest value in both ascending lists, or 0.
func newestCommon(a, b []uint64) uint64 {
	for i := len(a) - 1; i >= 0; i-- {
		if _, ok := slices.BinarySearch(b, a[i]); ok {
			return a[i]
		}
	}
	return 0
}

func span(cps []uint64) string {
	if len(cps) == 0 {
		return "none"
	}
	return fmt.Sprintf("%d to %d", cps[0], cps[len(cps)-1])
}

// runEach runs f(0) ... f(n-1) at once and waits for them.
func runEach(n int, f func(int)) {
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { f(i) })
	}
	wg.Wait()
}

func (s *Server) checkpointsOf(ctx context.Context, r replicaRef) ([]uint64, error) {
	if r.addr == "" {
		return s.fsm.Checkpoints(), nil
	}
	var out checkpointList
	if err := s.peers.getInternal(ctx, r.addr, "/v1/internal/checkpoints", &out); err != nil {
		return nil, err
	}
	if !slices.IsSorted(out.Checkpoints) {
		return nil, fmt.Errorf("checkpoints out of order: %v", out.Checkpoints)
	}
	return out.Checkpoints, nil
}

func (s *Server) stateHashOf(ctx context.Context, r replicaRef, at uint64) (fsm.StateHash, error) {
	if r.addr == "" {
		return s.fsm.StateHashAt(at)
	}
	var out fsm.StateHash
	err := s.peers.getInternal(ctx, r.addr, "/v1/internal/checkpoints/"+strconv.FormatUint(at, 10), &out)
	if err == nil && out.At != at {
		err = fmt.Errorf("asked for the hash at index %d, got one at %d", at, out.At)
	}
	return out, err
}

// checkpointList is the answer to GET /v1/internal/checkpoints.
type checkpointList struct {
	Checkpoints []uint64 `json:"checkpoints"`
}

// checkpointReplica is what the checkpoint endpoints read of the local
// replica (*fsm.FSM).
type checkpointReplica interface {
	Checkpoints() []uint64
	StateHashAt(at uint64) (fsm.StateHash, error)
}

// handleCheckpoints answers with the checkpoints this replica keeps.
func (h *httpAPI) handleCheckpoints(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, checkpointList{Checkpoints: h.state.Checkpoints()})
}

// handleCheckpointHash answers with the hash of this replica's state at a
// checkpoint it keeps (404 if it does not keep it).
func (h *httpAPI) handleCheckpointHash(w http.ResponseWriter, r *http.Request) {
	at, err := strconv.ParseUint(r.PathValue("index"), 10, 64)
	if err != nil {
		writeError(w, badRequest("checkpoint %q: must be a Raft index", r.PathValue("index")))
		return
	}
	st, err := h.state.StateHashAt(at)
	switch {
	case errors.Is(err, fsm.ErrNoCheckpoint):
		writeError(w, &api.Error{StatusCode: http.StatusNotFound, Code: api.CodeNotFound, Message: err.Error()})
	case err != nil:
		writeError(w, &api.Error{StatusCode: http.StatusInternalServerError, Code: api.CodeInternal, Message: fmt.Sprintf("hash the state at index %d: %v", at, err)})
	default:
		writeJSON(w, http.StatusOK, st)
	}
}

// getInternal reads an internal endpoint of the server at addr into out,
// as a request of this server's own.
func (p *peerClient) getInternal(ctx context.Context, addr, path string, out any) error {
	u := p.base(addr)
	u.Path = path
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return err
	}
	req.Header.Set(headerForwarded, p.self)
	if err := p.signForwarded(req, fsm.Actor{}, p.now()); err != nil {
		return err
	}
	resp, err := p.hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		var e api.Error
		if json.NewDecoder(resp.Body).Decode(&e) == nil && e.Message != "" {
			return fmt.Errorf("%s answered %s: %s", addr, resp.Status, e.Message)
		}
		return fmt.Errorf("%s answered %s", addr, resp.Status)
	}
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		return fmt.Errorf("decode %s from %s: %w", path, addr, err)
	}
	return nil
}

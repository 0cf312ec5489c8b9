package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/http/pprof"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/meteor-edge/meteor/cluster/api"
	"github.com/meteor-edge/meteor/fsm"
	"github.com/meteor-edge/meteor/fsm/acl"
	"github.com/meteor-edge/meteor/scheduler"
	"github.com/meteor-edge/meteor/wire"
)

// headerForwarded marks a request forwarded by another server, so a
// request never travels more than one hop.
const headerForwarded = "X-Meteor-Forwarded-By"

// maxBodyBytes bounds request bodies; intent documents are at most 1 MiB.
const maxBodyBytes = 2 << 20

// httpAPI serves the HTTP API (docs/api.md) and the internal endpoints
// other servers call. The HTTP server's goroutines run its handlers; it
// keeps no state of its own but the leave it may start (leaveOnce).
//
// It reads the local replica (replica), commits through a proposer, asks
// the Raft node whether it leads and for linearizable reads (leaderNode),
// the server for its own figures and membership changes (clusterAdmin),
// and hands forwarded reports to the status owner (reportIngester).
type httpAPI struct {
	cfg     *Config
	logger  hclog.Logger
	clock   Clock
	state   replica
	propose proposer
	node    leaderNode
	admin   clusterAdmin
	owners  ownerView
	reports reportIngester
	peers   *peerClient
	planner *scheduler.Planner
	// auth authenticates operator requests; nil when Config.ACL is nil.
	auth *authenticator
	// done is closed when the server stops, ending event streams and
	// blocking reads (http.Server.Shutdown would wait for them).
	done <-chan struct{}
	// waiting counts the blocking reads waiting on this replica.
	waiting atomic.Int64
	// metrics serves GET /metrics (metrics.go); nil serves a 404.
	metrics http.Handler
	// fleet is the last answer of GET /v1/status (handleFleetStatus).
	fleet fleetStatusCache

	leaveOnce sync.Once
}

// replica is the local replica (*fsm.FSM): reads, and the hash of the
// whole state the chaos checks compare.
type replica interface {
	stateReader
	eventSource
	StateHash() (fsm.StateHash, error)
	checkpointReplica
	// Snapshot captures the whole state (snapshot saves).
	Snapshot() *fsm.Snapshot
}

// leaderNode is what the HTTP API asks of the Raft node (Server).
type leaderNode interface {
	IsLeader() bool
	// leaderID is the leader's node ID ("" if none is known);
	// leaderHTTP adds its HTTP address, known through gossip.
	leaderID() string
	leaderHTTP() (id, addr string, err error)
	// ConsistentRead confirms leadership before a linearizable read.
	ConsistentRead(ctx context.Context) error
	// proposeRaw commits an encoded command on the leader.
	proposeRaw(ctx context.Context, t fsm.MessageType, data []byte) (fsm.ApplyResult, uint64, error)
	// proposeBatch proposes the commands of a forwarded batch that are
	// not refused, all before waiting for the first, and sends each
	// outcome to outs as it is known.
	proposeBatch(ctx context.Context, cmds []batchCommand, refused []*api.Error, outs chan<- indexedOutcome)
}

// clusterAdmin is what the cluster endpoints ask of the server (Server).
type clusterAdmin interface {
	self() *selfStatus
	// health is self with the leader checked against the Raft
	// configuration and the servers whose state diverged; raftLeader is
	// that leader (divergence.go).
	health(ctx context.Context) *api.Health
	raftLeader() (id, note string)
	Members() api.Members
	inRaftConfig(id string) bool
	removeServer(id string) error
	// checkRemoval, raftConfiguration and transferLeadership serve the
	// operator's Raft endpoints (operator.go).
	checkRemoval(ctx context.Context, id string) error
	raftConfiguration() api.RaftConfiguration
	transferLeadership(ctx context.Context, to string) (string, error)
	Leave(timeout time.Duration) error
	// RestoreSnapshot restores a backup over the whole cluster
	// (restore.go).
	RestoreSnapshot(ctx context.Context, r io.Reader, o RestoreOptions) (*api.RestoreResult, error)
}

// reportIngester takes in the reports of devices this server owns
// (statusOwner.ingest).
type reportIngester interface {
	ingest(ctx context.Context, device string, acked uint64, rep *wire.Report) error
}

func (h *httpAPI) handler() http.Handler {
	mux := http.NewServeMux()
	read := func(next http.HandlerFunc) http.HandlerFunc { return h.authorize(acl.ActionRead, h.reader(next)) }
	mux.HandleFunc("PUT /v1/intents/{name}", h.authorize("", h.scopedOnLeader(h.handlePutIntent)))
	mux.HandleFunc("DELETE /v1/intents/{name}", h.authorize("", h.scopedOnLeader(h.handleDeleteIntent)))
	mux.HandleFunc("GET /v1/intents", read(h.handleListIntents))
	mux.HandleFunc("GET /v1/intents/{name}", read(h.handleGetIntent))
	mux.HandleFunc("GET /v1/devices", read(h.handleListDevices))
	mux.HandleFunc("GET /v1/devices/{id}", read(h.handleGetDevice))
	mux.HandleFunc("GET /v1/devices/{id}/timeline", read(h.handleTimeline))
	mux.HandleFunc("GET /v1/devices/{id}/labels", read(h.handleDeviceLabels))
	mux.HandleFunc("PUT /v1/devices/{id}/labels", h.authorize("", h.onLeader(h.handleSetDeviceLabels)))
	mux.HandleFunc("POST /v1/devices/{id}/revoke", h.authorize("", h.onLeader(h.handleRevokeDevice)))
	mux.HandleFunc("DELETE /v1/devices/{id}/revoke", h.authorize(acl.ActionUnrevokeDevice, h.onLeader(h.handleUnrevokeDevice)))
	mux.HandleFunc("POST /v1/devices/{id}/unlock", h.authorize("", h.onLeader(h.handleUnlockDevice)))
	mux.HandleFunc("GET /v1/revocations", read(h.handleListRevoked))
	mux.HandleFunc("GET /v1/intents/{name}/progress", read(h.handleIntentProgress))
	mux.HandleFunc("GET /v1/status", read(h.handleFleetStatus))
	mux.HandleFunc("GET /v1/events", h.authorize(acl.ActionRead, h.handleEvents))
	mux.HandleFunc("GET /v1/rollouts", read(h.handleListRollouts))
	mux.HandleFunc("GET /v1/rollouts/{name}", read(h.handleGetRollout))
	mux.HandleFunc("GET /v1/rollouts/{name}/history", read(h.handleRolloutHistory))
	mux.HandleFunc("GET /v1/rollouts/{name}/events", read(h.handleRolloutEvents))
	for _, action := range []string{fsm.RolloutApprove, fsm.RolloutPause, fsm.RolloutResume, fsm.RolloutAbort} {
		mux.HandleFunc("POST /v1/rollouts/{name}/"+action, h.authorize("", h.onLeader(h.handleRolloutControl(action))))
	}
	mux.HandleFunc("POST /v1/rollouts/{name}/undo", h.authorize("", h.onLeader(h.handleRolloutUndo)))
	mux.HandleFunc("POST /v1/plan", read(h.handlePlan))
	mux.HandleFunc("GET /v1/classes", read(h.handleListClasses))
	mux.HandleFunc("PUT /v1/classes/{name}", h.authorize(acl.ActionConfigure, h.onLeader(h.handlePutClass)))
	mux.HandleFunc("DELETE /v1/classes/{name}", h.authorize(acl.ActionConfigure, h.onLeader(h.handleDeleteClass)))
	mux.HandleFunc("GET /v1/maintenance-windows", read(h.handleListWindows))
	mux.HandleFunc("PUT /v1/maintenance-windows/{name}", h.authorize(acl.ActionConfigure, h.onLeader(h.handlePutWindow)))
	mux.HandleFunc("DELETE /v1/maintenance-windows/{name}", h.authorize(acl.ActionConfigure, h.onLeader(h.handleDeleteWindow)))
	mux.HandleFunc("GET /v1/cluster/members", h.authorize(acl.ActionRead, h.handleMembers))
	mux.HandleFunc("GET /v1/cluster/ownership", h.authorize(acl.ActionRead, h.handleOwnership))
	mux.HandleFunc("DELETE /v1/cluster/members/{id}", h.authorize(acl.ActionManageMembers, h.onLeader(h.handleRemoveMember)))
	mux.HandleFunc("POST /v1/cluster/leave", h.authorize(acl.ActionManageMembers, h.handleLeave))
	mux.HandleFunc("GET /v1/operator/raft", h.authorize(acl.ActionRead, h.reader(h.handleRaftConfiguration)))
	mux.HandleFunc("POST /v1/operator/raft/transfer-leader", h.authorize(acl.ActionManageMembers, h.onLeader(h.handleTransferLeader)))
	mux.HandleFunc("GET /v1/cluster/keyring", h.authorize(acl.ActionManageMembers, h.handleKeyringList))
	mux.HandleFunc("POST /v1/cluster/keyring/install", h.authorize(acl.ActionManageMembers, h.handleKeyringChange(keyringInstall)))
	mux.HandleFunc("POST /v1/cluster/keyring/use", h.authorize(acl.ActionManageMembers, h.handleKeyringChange(keyringUse)))
	mux.HandleFunc("POST /v1/cluster/keyring/remove", h.authorize(acl.ActionManageMembers, h.handleKeyringChange(keyringRemove)))
	mux.HandleFunc("GET /v1/snapshot", h.authorize(acl.ActionSnapshot, h.reader(h.handleSnapshotSave)))
	mux.HandleFunc("PUT /v1/snapshot", h.authorize(acl.ActionSnapshot, h.handleSnapshotRestore))
	mux.HandleFunc("GET /v1/health", h.authorize(acl.ActionRead, h.handleHealth))
	mux.HandleFunc("GET /v1/healthz", h.handleHealthz)
	mux.HandleFunc("POST /v1/tokens", h.authorize(acl.ActionManageTokens, h.handleCreateToken))
	mux.HandleFunc("GET /v1/tokens", h.authorize(acl.ActionManageTokens, h.reader(h.handleListTokens)))
	mux.HandleFunc("DELETE /v1/tokens/{accessor}", h.authorize(acl.ActionManageTokens, h.handleRevokeToken))
	mux.HandleFunc("GET /v1/audit", h.authorize(acl.ActionReadAudit, h.reader(h.handleAudit)))
	mux.HandleFunc("GET /metrics", h.authorize(acl.ActionRead, h.handleMetrics))
	mux.HandleFunc("POST /v1/internal/apply", h.handleInternalApply)
	mux.HandleFunc("POST /v1/internal/apply-batch", h.handleInternalApplyBatch)
	mux.HandleFunc("POST /v1/internal/report", h.handleInternalReport)
	mux.HandleFunc("POST /v1/internal/report-batch", h.handleInternalReportBatch)
	mux.HandleFunc("POST /v1/internal/keyring", h.handleInternalKeyring)
	mux.HandleFunc("GET /v1/internal/self", h.fromServer(func(w http.ResponseWriter, r *http.Request) { writeJSON(w, http.StatusOK, h.admin.self()) }))
	mux.HandleFunc("GET /v1/internal/state-hash", h.fromServer(h.handleStateHash))
	mux.HandleFunc("GET /v1/cluster/state-hash", h.authorize(acl.ActionRead, h.handleStateHash))
	mux.HandleFunc("GET /v1/internal/checkpoints", h.fromServer(h.handleCheckpoints))
	mux.HandleFunc("GET /v1/internal/checkpoints/{index}", h.fromServer(h.handleCheckpointHash))
	if h.cfg.EnableDebug {
		// Profiles show the server's memory and goroutines: admins only.
		debug := func(next http.HandlerFunc) http.HandlerFunc { return h.authorize(acl.ActionManageMembers, next) }
		mux.HandleFunc("/debug/pprof/", debug(pprof.Index))
		mux.HandleFunc("/debug/pprof/profile", debug(pprof.Profile))
		mux.HandleFunc("/debug/pprof/symbol", debug(pprof.Symbol))
		mux.HandleFunc("/debug/pprof/trace", debug(pprof.Trace))
	}
	h.routeConsole(mux) // the web console at /ui/ (console.go)
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		// This catch-all takes the place of the mux's own 405: a path
		// served for other methods is a 405 naming them, not a 404.
		if allow := allowedMethods(mux, r); len(allow) > 0 {
			w.Header().Set("Allow", strings.Join(allow, ", "))
			writeError(w, &api.Error{StatusCode: http.StatusMethodNotAllowed, Code: api.CodeMethod, Message: fmt.Sprintf("%s %s: the endpoint takes %s (see docs/api.md)", r.Method, r.URL.Path, strings.Join(allow, ", "))})
			return
		}
		writeError(w, &api.Error{StatusCode: http.StatusNotFound, Code: api.CodeNotFound, Message: fmt.Sprintf("no such endpoint: %s %s (see docs/api.md)", r.Method, r.URL.Path)})
	})
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set(api.HeaderServedBy, h.cfg.NodeID)
		mux.ServeHTTP(w, r)
	})
}

// allowedMethods returns the methods mux serves r's path with, other than
// through its catch-all "/".
func allowedMethods(mux *http.ServeMux, r *http.Request) []string {
	var out []string
	for _, m := range []string{http.MethodGet, http.MethodPut, http.MethodPost, http.MethodDelete} {
		probe := &http.Request{Method: m, URL: r.URL, Host: r.Host, Header: http.Header{}}
		if _, pattern := mux.Handler(probe); pattern != "" && pattern != "/" {
			out = append(out, m)
		}
	}
	return out
}

// onLeader runs next on the leader; a follower forwards the request.
func (h *httpAPI) onLeader(next http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if h.node.IsLeader() {
			next(w, r)
			return
		}
		h.forward(w, r)
	}
}

// scopedOnLeader runs an intent change by a scoped token on the leader,
// whose replica has every committed change, so the scope is checked
// against the intent as it stands (allowIntentChange); a follower forwards
// the request. Other changes are served here.
func (h *httpAPI) scopedOnLeader(next http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if principalOf(r.Context()).scoped() && !h.node.IsLeader() {
			h.forward(w, r)
			return
		}
		next(w, r)
	}
}

// reader serves a read: from the local replica when the client asked for
// ?stale, otherwise on the leader after ConsistentRead.
func (h *httpAPI) reader(next http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		stale := false
		if v := r.URL.Query().Get("stale"); v != "" {
			var err error
			if stale, err = strconv.ParseBool(v); err != nil {
				writeError(w, badRequest("query parameter stale=%q: want true or false", v))
				return
			}
		}
		index, wait, blocking, err := blockingRead(r.URL.Query())
		if err != nil {
			writeError(w, err.(*api.Error))
			return
		}
		if stale {
			if blocking {
				h.waitIndex(r.Context(), index, wait)
			}
			w.Header().Set(api.HeaderConsistency, "stale")
			w.Header().Set(api.HeaderLeader, h.node.leaderID())
			next(w, r)
			return
		}
		if !h.node.IsLeader() {
			if blocking {
				// The leader blocks; stopping this server ends the wait.
				ctx, cancel := h.untilDone(r.Context())
				defer cancel()
				r = r.WithContext(ctx)
			}
			h.forward(w, r)
			return
		}
		if blocking {
			h.waitIndex(r.Context(), index, wait)
		}
		ctx, cancel := context.WithTimeout(r.Context(), h.cfg.ApplyTimeout)
		defer cancel()
		if err := h.node.ConsistentRead(ctx); err != nil {
			writeError(w, toAPIError(err))
			return
		}
		w.Header().Set(api.HeaderConsistency, "linearizable")
		w.Header().Set(api.HeaderLeader, h.cfg.NodeID)
		next(w, r)
	}
}

// forward proxies r to the leader's HTTP API.
func (h *httpAPI) forward(w http.ResponseWriter, r *http.Request) {
	if by := r.Header.Get(headerForwarded); by != "" {
		writeError(w, toAPIError(fmt.Errorf("%w: %s forwarded this request here, but leadership has moved", ErrNoLeader, by)))
		return
	}
	leaderID, addr, err := h.node.leaderHTTP()
	if err != nil {
		writeError(w, toAPIError(err))
		return
	}
	target := h.peers.base(addr)
	proxy := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(target)
			pr.Out.Host = r.Host
			pr.Out.Header.Set(headerForwarded, h.cfg.NodeID)
			if h.auth != nil {
				// This server authenticated the caller: the leader
				// takes the actor from the signed request.
				if err := h.peers.signForwarded(pr.Out, principalOf(r.Context()).actor(), h.clock.Now()); err != nil {
					// Unsigned, the leader refuses it (401).
					h.logger.Warn("forward: cannot sign the request", "error", err)
					pr.Out.Header.Del(headerSignature)
				}
			}
		},
		Transport: h.peers.hc.Transport,
		ModifyResponse: func(resp *http.Response) error {
			resp.Header.Del(api.HeaderServedBy)
			resp.Header.Set(api.HeaderServedBy, resp.Request.Header.Get(headerForwarded)+"->"+leaderID)
			return nil
		},
		ErrorHandler: func(w http.ResponseWriter, req *http.Request, err error) {
			var op *net.OpError
			if errors.As(err, &op) && op.Op == "dial" {
				// Nothing reached the leader.
				writeError(w, toAPIError(fmt.Errorf("%w: cannot reach leader %s at %s: %v", ErrNoLeader, leaderID, addr, err)))
				return
			}
			if req.Method == http.MethodGet {
				writeError(w, toAPIError(fmt.Errorf("%w: forwarding to leader %s failed: %v", ErrNoLeader, leaderID, err)))
				return
			}
			writeError(w, toAPIError(&OutcomeUnknownError{Err: fmt.Errorf("forwarding to leader %s failed: %w", leaderID, err)}))
		},
	}
	proxy.ServeHTTP(w, r)
}

func (h *httpAPI) handlePutIntent(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	body, e := readIntentBody(w, r)
	if e != nil {
		writeError(w, e)
		return
	}
	in, err := parseIntent(body)
	if err != nil {
		writeError(w, badRequest("%v", err))
		return
	}
	if in.Name != name {
		writeError(w, badRequest("intent %q: the document's name does not match the URL's %q", in.Name, name))
		return
	}
	if level, what := fsm.IntentLevel(in); level > h.state.Read().ActiveLevel() {
		// The state machine would refuse it too; say so before the log.
		writeError(w, toAPIError(&fsm.FeatureLevelError{What: fmt.Sprintf("intent %q: %s", name, what), Level: level, Active: h.state.Read().ActiveLevel()}))
		return
	}
	ifMatch, err := parseIfMatch(r)
	if err != nil {
		writeError(w, badRequest("%v", err))
		return
	}
	p := principalOf(r.Context())
	if err := h.allowIntentChange(p, acl.ActionWriteIntent, name, in.Selector, &ifMatch); err != nil {
		writeError(w, toAPIError(err))
		return
	}
	h.writeResult(w, r, name, fsm.PutIntentType, &fsm.PutIntentRequest{Intent: in, IfMatch: ifMatch, Time: h.clock.Now().UnixNano(), Actor: p.actor()})
}

func (h *httpAPI) handleDeleteIntent(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	ifMatch, err := parseIfMatch(r)
	if err != nil {
		writeError(w, badRequest("%v", err))
		return
	}
	p := principalOf(r.Context())
	if err := h.allowIntentChange(p, acl.ActionDeleteIntent, name, nil, &ifMatch); err != nil {
		writeError(w, toAPIError(err))
		return
	}
	h.writeResult(w, r, name, fsm.DeleteIntentType, &fsm.DeleteIntentRequest{Name: name, IfMatch: ifMatch, Time: h.clock.Now().UnixNano(), Actor: p.actor()})
}

// allowIntentChange checks that p may make change a to intent name: a put
// carries the new selector, a delete nil. A token without a scope needs
// only its policy. A scoped token must cover the new selector and the
// stored intent's, as this server's replica has it; the write is then
// made conditional on that revision (ifMatch), so the leader cannot apply
// it to a version of the intent that was not checked. Such a request is
// served on the leader (scopedOnLeader), where the replica is current.
func (h *httpAPI) allowIntentChange(p *principal, a acl.Action, name string, selector map[string]string, ifMatch **uint64) error {
	if !p.scoped() {
		return p.allowIntent(a, selector)
	}
	put := a == acl.ActionWriteIntent
	if put {
		if err := p.allowIntent(a, selector); err != nil {
			return err
		}
	}
	var checked uint64 // 0: the intent does not exist
	rec, err := h.state.Read().Intent(nil, name)
	switch {
	case errors.Is(err, fsm.ErrNotFound) && put:
	case err != nil:
		return err
	default:
		if err := p.allowIntent(a, rec.Intent.Selector); err != nil {
			return err
		}
		checked = rec.Revision
	}
	if *ifMatch != nil && **ifMatch != checked {
		return &api.Error{StatusCode: http.StatusConflict, Code: api.CodeConflict, CurrentRevision: &checked,
			Message: fmt.Sprintf("intent %q: If-Match %d, but this server checked the token's scope against revision %d", name, **ifMatch, checked)}
	}
	*ifMatch = &checked
	return nil
}

func (h *httpAPI) writeResult(w http.ResponseWriter, r *http.Request, name string, t fsm.MessageType, req any) {
	res, index, ok := h.commit(w, r.Context(), t, req)
	if !ok {
		return
	}
	w.Header().Set("ETag", strconv.Quote(strconv.FormatUint(res.Revision, 10)))
	w.Header().Set(api.HeaderRevision, strconv.FormatUint(res.Revision, 10))
	writeJSON(w, http.StatusOK, api.WriteResponse{Name: name, Revision: res.Revision, Index: index, Unchanged: res.Unchanged})
}

// commit commits a command for a request and sets the index header; if
// the command failed or was rejected it answers the request instead and
// returns false.
func (h *httpAPI) commit(w http.ResponseWriter, ctx context.Context, t fsm.MessageType, req any) (fsm.ApplyResult, uint64, bool) {
	res, index, err := applied(ctx, h.propose, t, req)
	if err != nil {
		writeError(w, toAPIError(err))
		return res, index, false
	}
	w.Header().Set(api.HeaderIndex, strconv.FormatUint(index, 10))
	return res, index, true
}

// applied commits a command through p and returns the state machine's
// rejection, if any, as the error.
func applied(ctx context.Context, p proposer, t fsm.MessageType, req any) (fsm.ApplyResult, uint64, error) {
	res, index, err := p.apply(ctx, t, req)
	if err == nil {
		err = res.Err
	}
	return res, index, err
}

func (h *httpAPI) handleGetIntent(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	read := h.state.Read()
	h.setReadHeaders(w, read)
	if v := r.URL.Query().Get("revision"); v != "" {
		rev, err := strconv.ParseUint(v, 10, 64)
		if err != nil || rev == 0 {
			writeError(w, badRequest("revision %q: must be a positive integer", v))
			return
		}
		if rev > read.Revision() {
			writeError(w, badRequest("revision %d is in the future: the cluster is at revision %d", rev, read.Revision()))
			return
		}
		h, err := read.IntentAt(name, rev)
		if err != nil {
			writeError(w, toAPIError(err))
			return
		}
		in, err := h.Intent()
		if err != nil {
			writeError(w, toAPIError(err))
			return
		}
		writeJSON(w, http.StatusOK, api.IntentResponse{Name: name, Revision: h.Revision, UpdatedAt: time.Unix(0, h.Time).UTC(), Intent: in})
		return
	}
	rec, err := read.Intent(nil, name)
	if err != nil {
		writeError(w, toAPIError(err))
		return
	}
	w.Header().Set("ETag", strconv.Quote(strconv.FormatUint(rec.Revision, 10)))
	writeJSON(w, http.StatusOK, api.IntentResponse{
		Name: name, Revision: rec.Revision, CreateRevision: rec.CreateRevision,
		UpdatedAt: time.Unix(0, rec.UpdatedAt).UTC(), Intent: rec.Intent,
	})
}

func (h *httpAPI) handleListIntents(w http.ResponseWriter, r *http.Request) {
	read := h.state.Read()
	h.setReadHeaders(w, read)
	recs, err := read.Intents(nil)
	if err != nil {
		writeError(w, toAPIError(err))
		return
	}
	out := api.IntentList{Revision: read.Revision(), Intents: make([]api.IntentSummary, 0, len(recs))}
	for _, rec := range recs {
		out.Intents = append(out.Intents, api.IntentSummary{
			Name: rec.Name, Revision: rec.Revision, Selector: rec.Intent.Selector,
			Resources: len(rec.Intent.Resources), UpdatedAt: time.Unix(0, rec.UpdatedAt).UTC(),
		})
	}
	writeJSON(w, http.StatusOK, out)
}

func (h *httpAPI) setReadHeaders(w http.ResponseWriter, read *fsm.Read) {
	w.Header().Set(api.HeaderRevision, strconv.FormatUint(read.Revision(), 10))
	w.Header().Set(api.HeaderIndex, strconv.FormatUint(read.Index(), 10))
}

// handleHealthz is the liveness probe, open with the ACL on too: it tells
// only whether this server knows a leader (one the Raft configuration has
// as a voter) and is a member.
func (h *httpAPI) handleHealthz(w http.ResponseWriter, r *http.Request) {
	leader, _ := h.admin.raftLeader()
	ok := leader != "" && h.admin.self().Healthy
	code := http.StatusOK
	if !ok {
		code = http.StatusServiceUnavailable
	}
	writeJSON(w, code, map[string]bool{"ok": ok})
}

// handleHealth answers with this server's health (Server.health): not
// healthy without a leader the Raft configuration has as a voter, or
// while a server's state diverged from the leader's.
func (h *httpAPI) handleHealth(w http.ResponseWriter, r *http.Request) {
	st := h.admin.health(r.Context())
	code := http.StatusOK
	if !st.Healthy {
		code = http.StatusServiceUnavailable
		w.Header().Set("Retry-After", "1")
	}
	writeJSON(w, code, st)
}

// handleLeave makes the contacted server leave the cluster for good: it
// answers at once, then hands over leadership if it leads, is removed from
// the Raft configuration and shuts down (Server.Leave).
func (h *httpAPI) handleLeave(w http.ResponseWriter, r *http.Request) {
	h.leaveOnce.Do(func() {
		h.auditMember(r, "leave", h.cfg.NodeID, nil)
		go func() {
			if err := h.admin.Leave(30 * time.Second); err != nil {
				h.logger.Error("leave", "error", err)
			}
		}()
	})
	writeJSON(w, http.StatusAccepted, map[string]string{"leaving": h.cfg.NodeID})
}

// parseIfMatch reads an If-Match header holding a revision number.
func parseIfMatch(r *http.Request) (*uint64, error) {
	v := strings.TrimSpace(r.Header.Get("If-Match"))
	if v == "" {
		return nil, nil
	}
	v = strings.TrimPrefix(v, "W/")
	if uq, err := strconv.Unquote(v); err == nil {
		v = uq
	}
	rev, err := strconv.ParseUint(v, 10, 64)
	if err != nil {
		return nil, fmt.Errorf("If-Match %q: must be a revision number (0 means: only if the intent does not exist)", r.Header.Get("If-Match"))
	}
	return &rev, nil
}

func badRequest(format string, args ...any) *api.Error {
	return &api.Error{StatusCode: http.StatusBadRequest, Code: api.CodeBadRequest, Message: fmt.Sprintf(format, args...)}
}

// toAPIError maps an error to its status, code and retry hint.
func toAPIError(err error) *api.Error {
	var apiErr *api.Error
	var conflict *fsm.ConflictError
	var unknown *OutcomeUnknownError
	var heldBack *HeldBackError
	var inactive *fsm.FeatureLevelError
	switch {
	case errors.As(err, &heldBack), errors.As(err, &inactive):
		return &api.Error{StatusCode: http.StatusConflict, Code: api.CodeHeldBack, Message: err.Error()}
	case errors.As(err, &apiErr):
		return apiErr
	case errors.As(err, &conflict):
		cur := conflict.Current
		return &api.Error{StatusCode: http.StatusConflict, Code: api.CodeConflict, Message: err.Error(), CurrentRevision: &cur}
	case errors.Is(err, fsm.ErrNotFound), errors.Is(err, fsm.ErrCompacted):
		return &api.Error{StatusCode: http.StatusNotFound, Code: api.CodeNotFound, Message: err.Error()}
	case errors.As(err, &unknown):
		return &api.Error{StatusCode: http.StatusServiceUnavailable, Code: api.CodeUnknownOutcome, Message: err.Error(), RetryAfterMS: 1000}
	case errors.Is(err, ErrNoLeader), errors.Is(err, ErrNotLeader):
		return &api.Error{StatusCode: http.StatusServiceUnavailable, Code: api.CodeNoLeader, Message: err.Error() + "; nothing was written", RetryAfterMS: 1000}
	case errors.Is(err, ErrRestoring):
		return &api.Error{StatusCode: http.StatusServiceUnavailable, Code: api.CodeNoLeader, Message: err.Error() + "; nothing was written", RetryAfterMS: 1000}
	case errors.Is(err, ErrNotReady):
		return &api.Error{StatusCode: http.StatusServiceUnavailable, Code: api.CodeNoLeader, Message: err.Error() + "; nothing was written", RetryAfterMS: 200}
	case isValidation(err):
		return &api.Error{StatusCode: http.StatusBadRequest, Code: api.CodeBadRequest, Message: err.Error()}
	}
	return &api.Error{StatusCode: http.StatusInternalServerError, Code: api.CodeInternal, Message: err.Error()}
}

func writeError(w http.ResponseWriter, e *api.Error) {
	if e.RetryAfterMS > 0 {
		w.Header().Set("Retry-After", strconv.FormatInt(max(1, (e.RetryAfterMS+999)/1000), 10))
	}
	writeJSON(w, e.StatusCode, e)
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

// handleStateHash answers with the hash of this server's whole replicated
// state (fsm.FSM.StateHash) and the Raft index it reflects: servers at
// the same index must give the same hash. Chaos checks compare them.
func (h *httpAPI) handleStateHash(w http.ResponseWriter, r *http.Request) {
	st, err := h.state.StateHash()
	if err != nil {
		writeError(w, &api.Error{StatusCode: http.StatusInternalServerError, Code: api.CodeInternal, Message: fmt.Sprintf("hash the state: %v", err)})
		return
	}
	writeJSON(w, http.StatusOK, st)
}

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
	"time"

	"github.com/meteor-edge/meteor/cluster/api"
	"github.com/meteor-edge/meteor/fsm"
)

// headerForwarded marks a request forwarded by another server, so a
// request never travels more than one hop.
const headerForwarded = "X-Meteor-Forwarded-By"

// maxBodyBytes bounds request bodies; intent documents are at most 1 MiB.
const maxBodyBytes = 2 << 20

func (s *Server) handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("PUT /v1/intents/{name}", s.handlePutIntent)
	mux.HandleFunc("DELETE /v1/intents/{name}", s.handleDeleteIntent)
	mux.HandleFunc("GET /v1/intents", s.reader(s.handleListIntents))
	mux.HandleFunc("GET /v1/intents/{name}", s.reader(s.handleGetIntent))
	mux.HandleFunc("GET /v1/devices", s.reader(s.handleListDevices))
	mux.HandleFunc("GET /v1/devices/{id}", s.reader(s.handleGetDevice))
	mux.HandleFunc("GET /v1/devices/{id}/timeline", s.reader(s.handleTimeline))
	mux.HandleFunc("GET /v1/intents/{name}/progress", s.reader(s.handleIntentProgress))
	mux.HandleFunc("GET /v1/status", s.reader(s.handleFleetStatus))
	mux.HandleFunc("GET /v1/cluster/members", s.handleMembers)
	mux.HandleFunc("GET /v1/cluster/ownership", s.handleOwnership)
	mux.HandleFunc("DELETE /v1/cluster/members/{id}", s.onLeader(s.handleRemoveMember))
	mux.HandleFunc("POST /v1/cluster/leave", s.handleLeave)
	mux.HandleFunc("GET /v1/health", s.handleHealth)
	mux.HandleFunc("POST /v1/internal/apply", s.handleInternalApply)
	mux.HandleFunc("POST /v1/internal/report", s.handleInternalReport)
	mux.HandleFunc("GET /v1/internal/self", func(w http.ResponseWriter, r *http.Request) { writeJSON(w, http.StatusOK, s.self()) })
	mux.HandleFunc("GET /v1/internal/state-hash", s.handleStateHash)
	if s.config.EnableDebug {
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	}
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, &api.Error{StatusCode: http.StatusNotFound, Code: api.CodeNotFound, Message: fmt.Sprintf("no such endpoint: %s %s (see docs/api.md)", r.Method, r.URL.Path)})
	})
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set(api.HeaderServedBy, s.config.NodeID)
		mux.ServeHTTP(w, r)
	})
}

// onLeader runs h on the leader; a follower forwards the request.
func (s *Server) onLeader(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if s.IsLeader() {
			h(w, r)
			return
		}
		s.forward(w, r)
	}
}

// reader serves a read: from the local replica when the client asked for
// ?stale, otherwise on the leader after ConsistentRead.
func (s *Server) reader(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if stale, _ := strconv.ParseBool(r.URL.Query().Get("stale")); stale {
			w.Header().Set(api.HeaderConsistency, "stale")
			_, leader := s.raft.LeaderWithID()
			w.Header().Set(api.HeaderLeader, string(leader))
			h(w, r)
			return
		}
		if !s.IsLeader() {
			s.forward(w, r)
			return
		}
		ctx, cancel := context.WithTimeout(r.Context(), s.config.ApplyTimeout)
		defer cancel()
		if err := s.ConsistentRead(ctx); err != nil {
			writeError(w, toAPIError(err))
			return
		}
		w.Header().Set(api.HeaderConsistency, "linearizable")
		w.Header().Set(api.HeaderLeader, s.config.NodeID)
		h(w, r)
	}
}

// forward proxies r to the leader's HTTP API.
func (s *Server) forward(w http.ResponseWriter, r *http.Request) {
	if by := r.Header.Get(headerForwarded); by != "" {
		writeError(w, toAPIError(fmt.Errorf("%w: %s forwarded this request here, but leadership has moved", ErrNoLeader, by)))
		return
	}
	leaderID, addr, err := s.leaderHTTP()
	if err != nil {
		writeError(w, toAPIError(err))
		return
	}
	target := s.peers.base(addr)
	proxy := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(target)
			pr.Out.Host = r.Host
			pr.Out.Header.Set(headerForwarded, s.config.NodeID)
		},
		Transport: s.peers.hc.Transport,
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

func (s *Server) handlePutIntent(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBodyBytes))
	if err != nil {
		writeError(w, badRequest("read intent document: %v", err))
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
	ifMatch, err := parseIfMatch(r)
	if err != nil {
		writeError(w, badRequest("%v", err))
		return
	}
	s.writeResult(w, r, name, fsm.PutIntentType, &fsm.PutIntentRequest{Intent: in, IfMatch: ifMatch, Time: s.now().UnixNano()})
}

func (s *Server) handleDeleteIntent(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	ifMatch, err := parseIfMatch(r)
	if err != nil {
		writeError(w, badRequest("%v", err))
		return
	}
	s.writeResult(w, r, name, fsm.DeleteIntentType, &fsm.DeleteIntentRequest{Name: name, IfMatch: ifMatch, Time: s.now().UnixNano()})
}

func (s *Server) writeResult(w http.ResponseWriter, r *http.Request, name string, t fsm.MessageType, req any) {
	res, index, err := s.apply(r.Context(), t, req)
	if err == nil {
		err = res.Err
	}
	if err != nil {
		writeError(w, toAPIError(err))
		return
	}
	w.Header().Set("ETag", strconv.Quote(strconv.FormatUint(res.Revision, 10)))
	w.Header().Set(api.HeaderRevision, strconv.FormatUint(res.Revision, 10))
	w.Header().Set(api.HeaderIndex, strconv.FormatUint(index, 10))
	writeJSON(w, http.StatusOK, api.WriteResponse{Name: name, Revision: res.Revision, Index: index})
}

func (s *Server) handleGetIntent(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	read := s.fsm.Read()
	s.setReadHeaders(w, read)
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

func (s *Server) handleListIntents(w http.ResponseWriter, r *http.Request) {
	read := s.fsm.Read()
	s.setReadHeaders(w, read)
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

func (s *Server) setReadHeaders(w http.ResponseWriter, read *fsm.Read) {
	w.Header().Set(api.HeaderRevision, strconv.FormatUint(read.Revision(), 10))
	w.Header().Set(api.HeaderIndex, strconv.FormatUint(read.Index(), 10))
}

func (s *Server) handleHealth(w http.ResponseWriter, r *http.Request) {
	st := s.self()
	code := http.StatusOK
	if !st.Healthy {
		code = http.StatusServiceUnavailable
		w.Header().Set("Retry-After", "1")
	}
	writeJSON(w, code, st)
}

func (s *Server) handleRemoveMember(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if !s.inRaftConfig(id) {
		writeError(w, toAPIError(fmt.Errorf("server %q is not in the Raft configuration: %w", id, fsm.ErrNotFound)))
		return
	}
	if err := s.removeServer(id); err != nil {
		writeError(w, toAPIError(err))
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"removed": id})
}

// handleLeave makes the contacted server leave the cluster for good: it
// answers at once, then hands over leadership if it leads, is removed from
// the Raft configuration and shuts down (Server.Leave).
func (s *Server) handleLeave(w http.ResponseWriter, r *http.Request) {
	s.leaveOnce.Do(func() {
		go func() {
			if err := s.Leave(30 * time.Second); err != nil {
				s.logger.Error("leave", "error", err)
			}
		}()
	})
	writeJSON(w, http.StatusAccepted, map[string]string{"leaving": s.config.NodeID})
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
	switch {
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
func (s *Server) handleStateHash(w http.ResponseWriter, r *http.Request) {
	st, err := s.fsm.StateHash()
	if err != nil {
		writeError(w, &api.Error{StatusCode: http.StatusInternalServerError, Code: api.CodeInternal, Message: fmt.Sprintf("hash the state: %v", err)})
		return
	}
	writeJSON(w, http.StatusOK, st)
}

package cluster

import (
	"context"
	"crypto/hmac"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"

	"github.com/meteor-edge/meteor/cluster/api"
	"github.com/meteor-edge/meteor/fsm"
)

// headerSignature carries the HMAC-SHA256 of a server-to-server request
// body under the cluster secret.
const headerSignature = "X-Meteor-Signature"

// applyResponse answers /v1/internal/apply.
type applyResponse struct {
	Revision uint64 `json:"revision"`
	Index    uint64 `json:"index"`
	// Rejected is the state machine's deterministic rejection, if any, as
	// the API would report it.
	Rejected *api.Error `json:"rejected,omitempty"`
	// Unchanged says a put-intent changed nothing (fsm.ApplyResult).
	Unchanged bool `json:"unchanged,omitempty"`
}

// apply commits a command from any server: on the leader it proposes
// directly, elsewhere it encodes the command here and forwards it to the
// leader over HTTP, signed with the cluster secret. Writes through the API
// and session serving use it, so neither needs to run on the leader, and
// the leader receives compact, already validated commands. A rejection
// forwarded back is an *api.Error in ApplyResult.Err.
func (s *Server) apply(ctx context.Context, t fsm.MessageType, req any) (fsm.ApplyResult, uint64, error) {
	data, err := fsm.Encode(t, req)
	if err != nil {
		return fsm.ApplyResult{}, 0, err
	}
	if s.IsLeader() {
		res, index, err := s.proposeRaw(ctx, t, data)
		if !errors.Is(err, ErrNotLeader) {
			return res, index, err
		}
	}
	res, index, err := s.forwardApply(ctx, t, data)
	return res, index, err
}

// forwardApply hands an encoded command to the leader: batched with the
// others forwarded meanwhile (applyBatcher) where the leader takes
// batches, in a request of its own where it runs an earlier release.
func (s *Server) forwardApply(ctx context.Context, t fsm.MessageType, data []byte) (fsm.ApplyResult, uint64, error) {
	m, err := s.leaderMember()
	if err != nil {
		return fsm.ApplyResult{}, 0, err
	}
	if m.PeerAPI >= peerAPIBatch && forwardBatched(t) {
		return s.forwarder.apply(ctx, m.HTTPAddr, t, data)
	}
	return s.peers.apply(ctx, m.HTTPAddr, t, data)
}

func statusOf(code string) int {
	switch code {
	case api.CodeBadRequest:
		return http.StatusBadRequest
	case api.CodeNotFound:
		return http.StatusNotFound
	case api.CodeConflict:
		return http.StatusConflict
	}
	return http.StatusInternalServerError
}

// readSigned reads a server-to-server request body and checks its
// signature; on failure it answers the request and returns false.
func (h *httpAPI) readSigned(w http.ResponseWriter, r *http.Request) ([]byte, bool) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBodyBytes))
	if err != nil || len(body) == 0 {
		writeError(w, badRequest("read request body: %v", err))
		return nil, false
	}
	if err := checkServerPeer(h.cfg.PeerTLS != nil, r); err != nil {
		writeError(w, &api.Error{StatusCode: http.StatusForbidden, Code: api.CodeForbidden, Message: err.Error()})
		return nil, false
	}
	got, err := hex.DecodeString(r.Header.Get(headerSignature))
	want, _ := hex.DecodeString(h.peers.sign(body))
	if err != nil || !hmac.Equal(got, want) {
		writeError(w, &api.Error{StatusCode: http.StatusForbidden, Code: api.CodeBadRequest, Message: "bad or missing request signature: servers must share the cluster secret"})
		return nil, false
	}
	return body, true
}

// checkServerPeer checks, on a server whose HTTP API speaks mutual TLS
// with the other servers (mtls: Config.PeerTLS), that r came over TLS
// from a server of the cluster whose certificate names the server the
// request says it comes from (headerForwarded). Without mtls it checks
// nothing: the cluster secret's signature is all there is.
func checkServerPeer(mtls bool, r *http.Request) error {
	if !mtls {
		return nil
	}
	id := peerServerOf(r)
	if id == "" {
		return errors.New("servers only: present a server certificate of this cluster's CA")
	}
	if by := r.Header.Get(headerForwarded); by != id {
		return fmt.Errorf("servers only: the certificate names server %q, the request says it comes from %q", id, by)
	}
	return nil
}

// forwardable says whether another server may forward a command of type
// t, and why not if it may not. Commands about devices are accepted only
// where servers share the cluster secret; intent writes carry nothing the
// public API would not accept.
func (h *httpAPI) forwardable(t fsm.MessageType) *api.Error {
	switch t {
	case fsm.PutIntentType, fsm.DeleteIntentType:
	case fsm.CreateTokenType, fsm.RevokeTokenType, fsm.UseEnrollTokenType, fsm.AuditMemberChangeType, fsm.DeviceSessionType, fsm.DeviceSessionBatchType, fsm.UpsertDeviceType, fsm.StatusBatchType, fsm.RolloutControlType, fsm.AuditOperationType:
		if len(h.cfg.ClusterSecret) == 0 {
			return &api.Error{StatusCode: http.StatusForbidden, Code: api.CodeBadRequest, Message: "device commands need a cluster secret shared by all servers (--cluster-secret-file)"}
		}
	default:
		return badRequest("command %s may not be forwarded", t)
	}
	return nil
}

// handleInternalApply proposes a command forwarded by another server.
// Commands about devices are accepted only from servers that share the
// cluster secret; intent writes carry nothing the public API would not
// accept (and the state machine validates them again).
func (h *httpAPI) handleInternalApply(w http.ResponseWriter, r *http.Request) {
	data, ok := h.readSigned(w, r)
	if !ok {
		return
	}
	t := fsm.MessageType(data[0])
	if e := h.forwardable(t); e != nil {
		writeError(w, e)
		return
	}
	if !h.node.IsLeader() {
		writeError(w, toAPIError(fmt.Errorf("%w: leadership moved while the command was forwarded", ErrNoLeader)))
		return
	}
	res, index, err := h.node.proposeRaw(r.Context(), t, data)
	if err != nil {
		writeError(w, toAPIError(err))
		return
	}
	writeJSON(w, http.StatusOK, responseOf(res, index))
}

// responseOf is the leader's answer to a forwarded command committed at
// index with result res; the state machine's rejection goes as the API
// would report it.
func responseOf(res fsm.ApplyResult, index uint64) applyResponse {
	out := applyResponse{Revision: res.Revision, Index: index, Unchanged: res.Unchanged}
	if res.Err != nil {
		out.Rejected = toAPIError(res.Err)
	}
	return out
}

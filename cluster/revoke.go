package cluster

import (
	"encoding/json"
	"fmt"
	"net/http"
	"time"

	"github.com/meteor-edge/meteor/cluster/api"
	"github.com/meteor-edge/meteor/fsm"
	"github.com/meteor-edge/meteor/fsm/acl"
	"github.com/meteor-edge/meteor/wire"
)

// Device revocation at the servers (docs/security.md, "Device
// revocation"). A revoked device's Hello is refused on every server whose
// replica has the revocation, and every session of it is closed by its
// own watch (deviceWatch, devicewatch.go) once the server's replica applies the
// revocation: a server partitioned during the revoke closes the session
// when it catches up.

// revokedReason says why a revoked device is refused, for its agent's log.
func revokedReason(id string, rev *fsm.RevokedDevice) string {
	reason := fmt.Sprintf("device %s is revoked (at index %d", id, rev.Index)
	if rev.Reason != "" {
		reason += ": " + rev.Reason
	}
	return reason + "); an operator can undo it with 'meteor device unrevoke " + id + "'"
}

// refuseRevoked refuses the Hello of a device the replica holds revoked
// with a Reject (unauthorized), and closes the connection.
func (sess *agentSession) refuseRevoked(read *fsm.Read) error {
	revoked, rev, err := read.DeviceRevoked(nil, sess.deviceID)
	if err != nil {
		return closeWith(wire.CloseInternalError, "read revocation: %v", err)
	}
	if !revoked {
		return nil
	}
	reason := revokedReason(sess.deviceID, rev)
	sess.logger.Info("refused a revoked device", "reason", rev.Reason)
	sess.write(&wire.Reject{Code: wire.CodeUnauthorized, Reason: reason})
	return flushAndClose(wire.CloseUnauthorized, reason)
}

// allowDevice checks that the request's principal may do a to a device
// selected by each of labels (a label change: the current labels and the
// new ones). Without ACL, or for a server, everything is allowed.
func (h *httpAPI) allowDevice(r *http.Request, a acl.Action, labels ...map[string]string) error {
	p := principalOf(r.Context())
	if p == nil || p.token == nil {
		return nil
	}
	if !p.scoped() {
		return p.allow(a)
	}
	for _, l := range labels {
		if err := p.refusal(a, p.token.Grant().AllowDevice(a, l)); err != nil {
			h.logger.Warn("forbidden request", "method", r.Method, "path", r.URL.Path, "actor", p.actor().String(), "error", err)
			return err
		}
	}
	return nil
}

// deviceSelection returns the labels a device is selected by in the
// local replica, or nil for a device it does not know.
func (h *httpAPI) deviceSelection(id string) map[string]string {
	rec, err := h.state.Read().Device(nil, id)
	if err != nil {
		return nil
	}
	return h.cfg.recordSelection(rec)
}

// handleRevokeDevice revokes a device (POST /v1/devices/{id}/revoke),
// known or not: an identity can be revoked before it first connects. It
// runs on the leader, so a scoped token's scope is checked against the
// device's labels as every committed change left them.
func (h *httpAPI) handleRevokeDevice(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	var req api.RevokeDeviceRequest
	if body, e := readBody(w, r, maxBodyBytes, "revoke request"); e != nil {
		writeError(w, e)
		return
	} else if len(body) > 0 {
		if err := json.Unmarshal(body, &req); err != nil {
			writeError(w, badRequest("revoke request: %v", err))
			return
		}
	}
	if err := h.allowDevice(r, acl.ActionRevokeDevice, h.deviceSelection(id)); err != nil {
		writeError(w, toAPIError(err))
		return
	}
	now := h.clock.Now()
	cmd := &fsm.RevokeDeviceRequest{ID: id, Reason: req.Reason, Actor: principalOf(r.Context()).actor(), Time: now.UnixNano()}
	_, index, ok := h.commit(w, r.Context(), fsm.RevokeDeviceType, cmd)
	if !ok {
		return
	}
	writeJSON(w, http.StatusOK, api.RevokedDevice{ID: id, Reason: req.Reason, Actor: cmd.Actor.String(), Time: now.UTC(), Index: index})
}

// handleUnrevokeDevice undoes a revocation (DELETE /v1/devices/{id}/revoke).
func (h *httpAPI) handleUnrevokeDevice(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	cmd := &fsm.UnrevokeDeviceRequest{ID: id, Actor: principalOf(r.Context()).actor(), Time: h.clock.Now().UnixNano()}
	if _, _, ok := h.commit(w, r.Context(), fsm.UnrevokeDeviceType, cmd); !ok {
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"unrevoked": id})
}

// handleListRevoked lists the revocations (GET /v1/revocations).
func (h *httpAPI) handleListRevoked(w http.ResponseWriter, r *http.Request) {
	read := h.state.Read()
	h.setReadHeaders(w, read)
	recs, err := read.RevokedDevices(nil)
	if err != nil {
		writeError(w, toAPIError(err))
		return
	}
	out := api.RevokedDeviceList{Devices: make([]api.RevokedDevice, 0, len(recs))}
	for _, rec := range recs {
		out.Devices = append(out.Devices, api.RevokedDevice{
			ID: rec.ID, Reason: rec.Reason, Actor: rec.Actor.String(), Time: time.Unix(0, rec.Time).UTC(), Index: rec.Index,
		})
	}
	writeJSON(w, http.StatusOK, out)
}

package cluster

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"

	"github.com/meteor-edge/meteor/cluster/api"
	"github.com/meteor-edge/meteor/cluster/snapshot"
	"github.com/meteor-edge/meteor/fsm"
)

// handleSnapshotSave streams a backup of the whole state (GET
// /v1/snapshot, package snapshot's file format). It runs behind reader:
// on the leader after ConsistentRead, so the backup holds every write
// acknowledged before the request, or with ?stale=true from this
// server's replica (a backup of a survivor when the cluster has no
// leader). One memdb snapshot is written twice, once to measure its size
// and SHA-256 and once to send it, so nothing is buffered. The save is
// recorded in the audit log (audit-operation), when the cluster runs
// feature level 2 and can commit.
func (h *httpAPI) handleSnapshotSave(w http.ResponseWriter, r *http.Request) {
	snap := h.state.Snapshot()
	state := func(w io.Writer) error { _, err := snap.WriteTo(w); return err }
	hdr, err := snapshot.Prepare(snapshot.Header{
		Server: h.cfg.NodeID, MeteorVersion: Version, TakenAt: h.clock.Now().UTC(),
		Stale: w.Header().Get(api.HeaderConsistency) == "stale",
	}, state)
	if err != nil {
		writeError(w, &api.Error{StatusCode: http.StatusInternalServerError, Code: api.CodeInternal, Message: err.Error()})
		return
	}
	w.Header().Set("Content-Type", api.SnapshotContentType)
	w.Header().Set("Content-Length", strconv.FormatInt(hdr.Len(), 10))
	w.Header().Set(api.HeaderIndex, strconv.FormatUint(hdr.Index, 10))
	w.Header().Set(api.HeaderRevision, strconv.FormatUint(hdr.Revision, 10))
	if err := hdr.Write(w, state); err != nil {
		// The client sees a body shorter than Content-Length, or bytes
		// whose checksum fails: never a backup.
		h.logger.Warn("snapshot save cut short", "error", err)
		panic(http.ErrAbortHandler)
	}
	p := principalOf(r.Context())
	h.logger.Info("snapshot saved", "index", hdr.Index, "revision", hdr.Revision, "bytes", hdr.Size, "sha256", hdr.SHA256, "actor", p.actor().String())
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), h.cfg.ApplyTimeout)
	defer cancel()
	if _, _, err := applied(ctx, h.propose, fsm.AuditOperationType, &fsm.OperationRequest{
		Action: "snapshot-save", Target: "snapshot/" + hdr.SHA256, Actor: p.actor(), Time: h.clock.Now().UnixNano(),
		Summary: fmt.Sprintf("saved index %d, revision %d (%d bytes) from %s", hdr.Index, hdr.Revision, hdr.Size, h.cfg.NodeID),
	}); err != nil {
		h.logger.Warn("snapshot save not recorded in the audit log", "actor", p.actor().String(), "sha256", hdr.SHA256, "error", err)
	}
}

// handleSnapshotRestore restores a backup over the whole cluster (PUT
// /v1/snapshot, Server.RestoreSnapshot). Only the leader restores, and the
// body is too large to forward: a follower answers 421 not_leader with the
// leader's address, which api.Client follows.
func (h *httpAPI) handleSnapshotRestore(w http.ResponseWriter, r *http.Request) {
	if !h.node.IsLeader() {
		id, addr, err := h.node.leaderHTTP()
		if err != nil {
			writeError(w, toAPIError(err))
			return
		}
		writeError(w, &api.Error{StatusCode: http.StatusMisdirectedRequest, Code: api.CodeNotLeader, LeaderAddr: addr,
			Message: fmt.Sprintf("a snapshot restore runs on the leader: send it to %s at %s", id, addr)})
		return
	}
	var o RestoreOptions
	if v := r.URL.Query().Get("min_revision"); v != "" {
		rev, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			writeError(w, badRequest("min_revision %q: want a revision number", v))
			return
		}
		o.MinRevision = rev
	}
	if v := r.URL.Query().Get("restore_credentials"); v != "" {
		b, err := strconv.ParseBool(v)
		if err != nil {
			writeError(w, badRequest("restore_credentials %q: want true or false", v))
			return
		}
		o.RestoreCredentials = b
	}
	o.Actor = principalOf(r.Context()).actor()
	res, err := h.admin.RestoreSnapshot(r.Context(), r.Body, o)
	if err != nil {
		writeError(w, toAPIError(err))
		return
	}
	writeJSON(w, http.StatusOK, res)
}

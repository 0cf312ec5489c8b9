package cluster

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"

	"github.com/hashicorp/go-memdb"

	"github.com/meteor-edge/meteor/cluster/api"
	"github.com/meteor-edge/meteor/fsm"
	"github.com/meteor-edge/meteor/wire"
)

// forwardedReport is a report a session server hands to the device's
// owner. It names no labels: the owner selects by its replica's
// (statusOwner.ingest), and owners of earlier releases ignored the ones
// session servers sent.
type forwardedReport struct {
	Device string `json:"device"`
	// Report is the wire encoding of the Report message.
	Report []byte `json:"report"`
	// Acked is the desired revision the device had acknowledged to the
	// session server (statusOwner.ingest); an owner of a release before
	// it ignores it, but the session server leaves acknowledgements to
	// the owner only once every server runs fsm.LevelAckWithStatus.
	Acked uint64 `json:"acked,omitempty"`
}

// deliverReport hands a device's report, and the revision the device had
// acknowledged when it sent it, to its owner and returns once the owner
// has made them durable (or found they change nothing). The session
// server acknowledges the report to the agent only then.
func (s *Server) deliverReport(ctx context.Context, device string, labels map[string]string, acked uint64, rep *wire.Report) error {
	owner := s.reportOwner(ctx, device, labels)
	if owner == "" || owner == s.config.NodeID {
		return s.status.ingest(ctx, device, acked, rep)
	}
	m, ok := s.gossip.memberByID(owner)
	if !ok {
		return fmt.Errorf("owner %s of %s is not known through gossip", owner, device)
	}
	fr := &forwardedReport{Device: device, Report: reportFor(rep, m.WireMinor).Append(nil), Acked: acked}
	if m.PeerAPI >= peerAPIReportBatch {
		return s.reportFwd.report(ctx, owner, m.HTTPAddr, fr)
	}
	return s.peers.report(ctx, owner, m.HTTPAddr, fr)
}

// reportOwner returns the owner that a report of a device in session on
// this server goes to. When this server would own the device once its
// replica records the session here (deviceOwner), and the replica does not
// yet, it waits for that record, up to recordWait, and the report is then
// committed here with no forward. That is the case of a device's first
// report after it connects or moves here. For a device new to the
// cluster the owner it would otherwise go to waits for its record too
// (statusOwner.waitRecorded); for one whose session moved here the wait
// is the commit of the session record, normally milliseconds behind the
// Welcome. If the record does not come in time (its commit is being
// retried through an election), the report goes to the owner the replica
// names.
func (s *Server) reportOwner(ctx context.Context, device string, labels map[string]string) string {
	self := s.config.NodeID
	cands := s.gossip.ownerCandidates()
	ws := memdb.NewWatchSet()
	rec, err := s.fsm.Read().Device(ws, device)
	if err == nil && rec.Connected && rec.Server == self {
		return deviceOwner(rec, cands)
	}
	here := fsm.DeviceRecord{ID: device, Labels: labels, Connected: true, Server: self}
	if err == nil {
		here.Labels = rec.Labels
	}
	if deviceOwner(&here, cands) != self {
		return s.OwnerOf(device, labels)
	}
	wait, cancel := context.WithTimeout(ctx, recordWait)
	defer cancel()
	for ws.WatchCtx(wait) == nil {
		ws = memdb.NewWatchSet()
		if rec, err := s.fsm.Read().Device(ws, device); err == nil && rec.Connected && rec.Server == self {
			return deviceOwner(rec, s.gossip.ownerCandidates())
		}
	}
	return s.OwnerOf(device, labels)
}

// reportFor returns rep as an owner speaking agent protocol minor takes
// it (0: a server from before servers said, which speaks 1.1): an owner
// of an earlier minor refuses the later report flags, as during a rolling
// upgrade.
func reportFor(rep *wire.Report, minor uint16) *wire.Report {
	minor = max(minor, wire.MinorReportStates)
	if minor < wire.MinorEdge {
		rep = rep.WithoutEdge()
	}
	if minor < wire.MinorReportTraffic {
		rep = rep.WithoutTraffic()
	}
	if minor < wire.MinorReportCorrections {
		rep = rep.WithoutCorrections()
	}
	return rep
}

// handleInternalReport ingests a report forwarded by the device's session
// server. Only servers that share the cluster secret may forward reports.
func (h *httpAPI) handleInternalReport(w http.ResponseWriter, r *http.Request) {
	body, ok := h.readForwardedReports(w, r)
	if !ok {
		return
	}
	var fr forwardedReport
	if err := json.Unmarshal(body, &fr); err != nil {
		writeError(w, badRequest("decode forwarded report: %v", err))
		return
	}
	var rep wire.Report
	if err := rep.Decode(fr.Report); err != nil {
		writeError(w, badRequest("decode report of %s: %v", fr.Device, err))
		return
	}
	if err := h.reports.ingest(r.Context(), fr.Device, fr.Acked, &rep); err != nil {
		writeError(w, h.reportNotRecorded(fr.Device, err))
		return
	}
	writeJSON(w, http.StatusOK, map[string]uint64{"seq": rep.Seq})
}

// readForwardedReports reads the body of a request that forwards reports
// (/v1/internal/report, /v1/internal/report-batch): only servers that
// share the cluster secret may forward them.
func (h *httpAPI) readForwardedReports(w http.ResponseWriter, r *http.Request) ([]byte, bool) {
	if len(h.cfg.ClusterSecret) == 0 {
		writeError(w, &api.Error{StatusCode: http.StatusForbidden, Code: api.CodeBadRequest, Message: "forwarded reports need a cluster secret shared by all servers (--cluster-secret-file)"})
		return nil, false
	}
	return h.readSigned(w, r)
}

// reportNotRecorded is the answer for a forwarded report of device that
// this owner could not record.
func (h *httpAPI) reportNotRecorded(device string, err error) *api.Error {
	return &api.Error{StatusCode: http.StatusServiceUnavailable, Code: api.CodeTimeout, RetryAfterMS: 1000,
		Message: fmt.Sprintf("owner %s could not record the report of %s: %v; the agent will send it again", h.cfg.NodeID, device, err)}
}

// reportedState is the name of a reported resource's state as
// fsm.ResourceStatus keeps it. It is empty for a report without typed
// states (from an agent of protocol 1.0, or through a 1.0 session): such
// an agent starts the Detail with the state, and the scheduler reads it
// from there for those records only.
func reportedState(rep *wire.Report, r wire.ResourceReport) string {
	if !rep.States || r.State == wire.StateUnknown {
		return ""
	}
	return r.State.String()
}

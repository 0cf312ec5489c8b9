package cluster

import (
	"net/http"
	"time"

	"github.com/meteor-edge/meteor/cluster/api"
	"github.com/meteor-edge/meteor/fsm"
	"github.com/meteor-edge/meteor/scheduler"
)

// devicePlanner computes desired states for the device API; sessions
// share theirs through agentServer.
func (s *Server) devicePlanner() *scheduler.Planner {
	if s.agents != nil {
		return s.agents.planner
	}
	s.plannerOnce.Do(func() { s.planner = scheduler.NewPlanner() })
	return s.planner
}

func (h *httpAPI) deviceView(read *fsm.Read, rec *fsm.DeviceRecord, owners []ownerCandidate) (api.DeviceSummary, scheduler.DeviceView, error) {
	desired, err := h.planner.Desired(read, rec.Labels)
	if err != nil {
		return api.DeviceSummary{}, scheduler.DeviceView{}, err
	}
	v := scheduler.Compare(desired, rec)
	sum := api.DeviceSummary{
		ID: rec.ID, Labels: rec.Labels, Connected: rec.Connected, Server: rec.Server, Owner: ownerOf(rec.ID, rec.Labels["region"], owners),
		DesiredRevision: desired.Revision, AckedRevision: rec.AckedRevision,
		Converged: v.Converged, Resources: len(desired.Resources), Counts: v.Counts,
		Status: deviceStatus(rec), StatusReason: rec.StatusReason,
		StatusSince: unixTime(rec.StatusSince), NextRetry: unixTime(rec.NextRetry),
	}
	if rec.LastSeen != 0 {
		sum.LastSeen = time.Unix(0, rec.LastSeen).UTC()
	}
	return sum, v, nil
}

func (h *httpAPI) handleListDevices(w http.ResponseWriter, r *http.Request) {
	read := h.state.Read()
	h.setReadHeaders(w, read)
	recs, err := read.Devices(nil)
	if err != nil {
		writeError(w, toAPIError(err))
		return
	}
	out := api.DeviceList{Revision: read.Revision(), Devices: make([]api.DeviceSummary, 0, len(recs))}
	owners := h.owners.ownerCandidates()
	for _, rec := range recs {
		sum, _, err := h.deviceView(read, rec, owners)
		if err != nil {
			writeError(w, toAPIError(err))
			return
		}
		out.Devices = append(out.Devices, sum)
	}
	writeJSON(w, http.StatusOK, out)
}

func (h *httpAPI) handleGetDevice(w http.ResponseWriter, r *http.Request) {
	read := h.state.Read()
	h.setReadHeaders(w, read)
	rec, err := read.Device(nil, r.PathValue("id"))
	if err != nil {
		writeError(w, toAPIError(err))
		return
	}
	sum, v, err := h.deviceView(read, rec, h.owners.ownerCandidates())
	if err != nil {
		writeError(w, toAPIError(err))
		return
	}
	out := api.Device{
		DeviceSummary: sum, SessionID: rec.SessionID, ReportSeq: rec.ReportSeq,
		AgentStatus: rec.AgentStatus, BlockedReason: rec.BlockedReason,
		States: make([]api.ResourceState, 0, len(v.Resources)),
	}
	for _, rv := range v.Resources {
		st := api.ResourceState{Key: rv.Key, State: rv.State, IntendedDigest: rv.IntendedDigest, IntendedRevision: rv.IntendedRevision}
		if rep := rv.Reported; rep != nil {
			st.AppliedDigest, st.AppliedRevision = rep.AppliedDigest, rep.AppliedRevision
			st.Effective, st.Detail, st.LastError, st.Attempts = rep.Effective, rep.Detail, rep.LastError, rep.Attempts
			st.AgentState, _ = scheduler.ReportedState(rep)
			if rep.UpdatedAt != 0 {
				t := time.Unix(0, rep.UpdatedAt).UTC()
				st.UpdatedAt = &t
			}
		}
		out.States = append(out.States, st)
	}
	writeJSON(w, http.StatusOK, out)
}

package cluster

import (
	"encoding/json"
	"net/http"
	"time"

	"github.com/meteor-edge/meteor/cluster/api"
	"github.com/meteor-edge/meteor/fsm"
	"github.com/meteor-edge/meteor/fsm/acl"
	"github.com/meteor-edge/meteor/fsm/intent"
	"github.com/meteor-edge/meteor/scheduler"
	"github.com/meteor-edge/meteor/wire"
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

// trustReported reports whether the cluster selects intents for a device
// the control plane has not labelled by the labels it reports
// (Config.TrustReportedLabels; a Dev server does).
func (c *Config) trustReported() bool { return c.TrustReportedLabels || c.Dev }

// selectionLabels are the labels every part of a server selects a device's
// intents by (sessions, the status owner, the device and fleet
// endpoints): the replica's control-plane labels once the device has
// them, otherwise the labels it reports if the cluster trusts them, and
// none if not. reported are the labels the device reports now (its
// session's Hello), which its record takes once its session is committed;
// rec is nil while it is not.
func (c *Config) selectionLabels(rec *fsm.DeviceRecord, reported map[string]string) map[string]string {
	switch {
	case rec != nil && rec.LabelsControlled:
		return rec.Labels
	case c.trustReported():
		return reported
	}
	return nil
}

// recordSelection is selectionLabels for a device known only by its
// record.
func (c *Config) recordSelection(rec *fsm.DeviceRecord) map[string]string {
	return rec.SelectionLabels(c.trustReported())
}

// deviceView is rec's summary and view, its desired state from memo (one
// for every device a request reads).
func (h *httpAPI) deviceView(memo *scheduler.DesiredMemo, rec *fsm.DeviceRecord, owners []ownerCandidate) (api.DeviceSummary, scheduler.DeviceView, error) {
	labels := h.cfg.recordSelection(rec)
	desired, err := memo.Desired(rec.ID, labels)
	if err != nil {
		return api.DeviceSummary{}, scheduler.DeviceView{}, err
	}
	v := scheduler.Compare(desired, rec)
	sum := api.DeviceSummary{
		// The labels the device is selected by; its reported ones are
		// facts (GET /v1/devices/{id}/labels).
		ID: rec.ID, Labels: labels, Connected: rec.Connected, Server: rec.Server, Owner: deviceOwner(rec, owners),
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

// handleListDevices answers GET /v1/devices: every device, or those a
// query's filters select, paged or grouped (deviceQuery).
func (h *httpAPI) handleListDevices(w http.ResponseWriter, r *http.Request) {
	dq, err := parseDeviceQuery(r.URL.Query())
	if err != nil {
		writeError(w, toAPIError(err))
		return
	}
	read := h.state.Read()
	h.setReadHeaders(w, read)
	out, err := h.queryDevices(read, dq)
	if err != nil {
		writeError(w, toAPIError(err))
		return
	}
	writeJSON(w, http.StatusOK, out)
}

// readDevice reads the device a request names from the replica, or
// answers the error.
func (h *httpAPI) readDevice(w http.ResponseWriter, r *http.Request) (*fsm.Read, *fsm.DeviceRecord, bool) {
	read := h.state.Read()
	h.setReadHeaders(w, read)
	rec, err := read.Device(nil, r.PathValue("id"))
	if err != nil {
		writeError(w, toAPIError(err))
		return nil, nil, false
	}
	return read, rec, true
}

func (h *httpAPI) handleGetDevice(w http.ResponseWriter, r *http.Request) {
	read, rec, ok := h.readDevice(w, r)
	if !ok {
		return
	}
	memo, err := h.planner.Memo(read)
	if err != nil {
		writeError(w, toAPIError(err))
		return
	}
	sum, v, err := h.deviceView(memo, rec, h.owners.ownerCandidates())
	if err != nil {
		writeError(w, toAPIError(err))
		return
	}
	out := api.Device{
		DeviceSummary: sum, ReportedLabels: rec.ReportedLabels, LabelsControlled: rec.LabelsControlled,
		SessionID: rec.SessionID, ReportSeq: rec.ReportSeq,
		AgentStatus: rec.AgentStatus, BlockedReason: rec.BlockedReason,
		States:  make([]api.ResourceState, 0, len(v.Resources)),
		Traffic: deviceTraffic(rec.Traffic),
		Link:    linkHistory(rec.Link),
	}
	out.Locks, out.Unlocks = deviceLocks(rec, h.clock.Now())
	if r := rec.Recovery; r != nil {
		out.Recovery = &api.DeviceRecovery{At: time.Unix(0, r.At).UTC(), Unclean: r.Unclean, Desired: r.Total, AppliedBefore: r.Applied, Story: r.Story()}
		for _, s := range r.Steps {
			out.Recovery.Interrupted = append(out.Recovery.Interrupted, api.RecoveredStep{Resource: s.Key, Outcome: s.Outcome, Process: s.Child})
		}
	}
	// Each resource's status as the owner judges it, as of now.
	desired, err := memo.Desired(rec.ID, h.cfg.recordSelection(rec))
	if err != nil {
		writeError(w, toAPIError(err))
		return
	}
	intended := scheduler.IntendedOf(desired)
	judged := scheduler.Classify(v, rec, h.cfg.effectiveClasses(read), intended, h.clock.Now(), scheduler.ProgressMark{})
	status := map[string]scheduler.ResourceStatus{}
	for _, rs := range judged.Resources {
		status[rs.Key] = rs
	}
	rotations := map[string]*intent.Rotation{}
	for _, r := range desired.Resources {
		rotations[r.Key] = r.Resource.Rotation
	}
	for _, rv := range v.Resources {
		st := resourceState(rv)
		st.Status, st.Reason = status[rv.Key].Status, status[rv.Key].Reason
		if w := rotations[rv.Key]; w != nil {
			st.Rotation = &api.Rotation{NotBefore: w.NotBefore, Deadline: w.Deadline}
		}
		out.States = append(out.States, st)
	}
	writeJSON(w, http.StatusOK, out)
}

// linkHistory is a device's link history as the API shows it; nil for
// none.
func linkHistory(h *fsm.LinkHistory) *api.LinkHistory {
	if h == nil {
		return nil
	}
	out := &api.LinkHistory{OfflineSince: unixTime(h.OfflineSince)}
	for _, g := range h.Gaps {
		from, to := time.Unix(0, g.From).UTC(), time.Unix(0, g.To).UTC()
		out.Gaps = append(out.Gaps, api.LinkGap{From: from, To: to, Duration: to.Sub(from).Round(time.Second).String()})
	}
	return out
}

// apiHold is a reported hold as the API shows it; nil for none.
func apiHold(h *fsm.ResourceHold) *api.Hold {
	if h == nil {
		return nil
	}
	return &api.Hold{Kind: h.Kind, Since: unixTime(h.Since), Until: unixTime(h.Until), Count: h.Count, Holder: h.Holder, Note: h.Note}
}

// deviceTraffic is a device's reported traffic as the API shows it; nil
// for none.
func deviceTraffic(t *fsm.DeviceTraffic) *api.DeviceTraffic {
	if t == nil {
		return nil
	}
	day := wire.TrafficDayStart(t.Day)
	out := &api.DeviceTraffic{
		AsOf: time.Unix(0, t.AsOf).UTC(), Day: day.Format(time.DateOnly), Today: api.TrafficCounts(t.Total()),
		Servers:     make([]api.ServerTraffic, len(t.Servers)),
		PreviousDay: day.AddDate(0, 0, -1).Format(time.DateOnly), Previous: api.TrafficCounts(t.Previous),
	}
	for i, s := range t.Servers {
		out.Servers[i] = api.ServerTraffic{Server: s.Server, TrafficCounts: api.TrafficCounts(s.TrafficCounts)}
	}
	return out
}

// trafficOn returns a device's traffic on a UTC day as its agent last
// reported it: that day's counts, or the previous day's total of a report
// from the day after (an agent whose clock is ahead of this server's);
// zero if the report is of another day, nil if there is none.
func trafficOn(t *fsm.DeviceTraffic, day uint32) *api.TrafficCounts {
	var c api.TrafficCounts
	switch {
	case t == nil:
		return nil
	case t.Day == day:
		c = api.TrafficCounts(t.Total())
	case t.Day == day+1:
		c = api.TrafficCounts(t.Previous)
	}
	return &c
}

// resourceState is a resource's three states as the API shows them.
func resourceState(rv scheduler.ResourceView) api.ResourceState {
	st := api.ResourceState{Key: rv.Key, State: rv.State, IntendedDigest: rv.IntendedDigest, IntendedRevision: rv.IntendedRevision}
	if rep := rv.Reported; rep != nil {
		st.AppliedDigest, st.AppliedRevision = rep.AppliedDigest, rep.AppliedRevision
		st.Effective, st.Detail, st.LastError, st.Attempts, st.Corrections = rep.Effective, rep.Detail, rep.LastError, rep.Attempts, rep.Corrections
		st.AgentState, _ = scheduler.ReportedState(rep)
		st.Hold = apiHold(rep.Hold)
		if rep.UpdatedAt != 0 {
			t := time.Unix(0, rep.UpdatedAt).UTC()
			st.UpdatedAt = &t
		}
	}
	return st
}

// handleDeviceLabels shows where a device's labels come from (GET
// /v1/devices/{id}/labels).
func (h *httpAPI) handleDeviceLabels(w http.ResponseWriter, r *http.Request) {
	_, rec, ok := h.readDevice(w, r)
	if !ok {
		return
	}
	writeJSON(w, http.StatusOK, h.deviceLabels(rec))
}

func (h *httpAPI) deviceLabels(rec *fsm.DeviceRecord) api.DeviceLabels {
	out := api.DeviceLabels{
		ID: rec.ID, Controlled: rec.LabelsControlled, Reported: rec.ReportedLabels,
		Selection: h.cfg.recordSelection(rec), TrustReported: h.cfg.trustReported(),
	}
	if rec.LabelsControlled {
		out.Labels = rec.Labels
	} else if rec.ReportedLabels == nil {
		// A record from before reported labels were kept apart: its labels
		// are what the device reported.
		out.Reported = rec.Labels
	}
	return out
}

// handleSetDeviceLabels sets a device's control-plane labels (PUT
// /v1/devices/{id}/labels). It runs on the leader, whose replica has every
// committed change: a scoped token must cover the device as it is
// selected now and as it will be.
func (h *httpAPI) handleSetDeviceLabels(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	var req api.SetDeviceLabelsRequest
	body, e := readBody(w, r, maxBodyBytes, "labels request")
	if e != nil {
		writeError(w, e)
		return
	}
	if err := json.Unmarshal(body, &req); err != nil {
		writeError(w, badRequest("labels request: %v", err))
		return
	}
	rec, err := h.state.Read().Device(nil, id)
	if err != nil {
		writeError(w, toAPIError(err))
		return
	}
	cmd := &fsm.SetDeviceLabelsRequest{
		ID: id, Labels: req.Labels, Remove: req.Remove, Replace: req.Replace,
		Actor: principalOf(r.Context()).actor(), Time: h.clock.Now().UnixNano(),
	}
	if err := h.allowDevice(r, acl.ActionLabelDevice, h.cfg.recordSelection(rec), cmd.NextLabels(rec)); err != nil {
		writeError(w, toAPIError(err))
		return
	}
	if _, _, ok := h.commit(w, r.Context(), fsm.SetDeviceLabelsType, cmd); !ok {
		return
	}
	// On the leader, the replica has applied what it committed.
	if rec, err = h.state.Read().Device(nil, id); err != nil {
		writeError(w, toAPIError(err))
		return
	}
	writeJSON(w, http.StatusOK, h.deviceLabels(rec))
}

package cluster

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/meteor-edge/meteor/cluster/api"
	"github.com/meteor-edge/meteor/fsm"
	"github.com/meteor-edge/meteor/fsm/acl"
	"github.com/meteor-edge/meteor/fsm/intent"
	"github.com/meteor-edge/meteor/scheduler"
)

// The rollout endpoints (docs/api.md, "Rollouts"). What they show of a
// rollout in progress is what the leader's rollout worker decides on:
// judgeRollout and scheduler.Decide, with the decision's step left
// uncommitted.

// maxReasonBytes bounds the reason an operator gives a rollout action; it
// goes into the replicated timeline.
const maxReasonBytes = 1024

// noRolloutReason is the reason shown for an intent without a rollout.
const noRolloutReason = "no rollout block: every revision reaches every device at once"

func (h *httpAPI) handleListRollouts(w http.ResponseWriter, r *http.Request) {
	read := h.state.Read()
	h.setReadHeaders(w, read)
	recs, err := read.Intents(nil)
	if err != nil {
		writeError(w, toAPIError(err))
		return
	}
	now := h.clock.Now()
	out := api.RolloutList{Revision: read.Revision(), Rollouts: make([]api.RolloutStatus, 0, len(recs))}
	for _, rec := range recs {
		st, err := h.rolloutStatus(read, rec, now)
		if err != nil {
			writeError(w, toAPIError(err))
			return
		}
		out.Rollouts = append(out.Rollouts, *st)
	}
	writeJSON(w, http.StatusOK, out)
}

func (h *httpAPI) handleGetRollout(w http.ResponseWriter, r *http.Request) {
	read := h.state.Read()
	h.setReadHeaders(w, read)
	rec, err := read.Intent(nil, r.PathValue("name"))
	if err != nil {
		writeError(w, toAPIError(err))
		return
	}
	st, err := h.rolloutStatus(read, rec, h.clock.Now())
	if err != nil {
		writeError(w, toAPIError(err))
		return
	}
	writeJSON(w, http.StatusOK, st)
}

// rolloutStatus judges the rollout of intent rec as of now.
func (h *httpAPI) rolloutStatus(read *fsm.Read, rec *fsm.IntentRecord, now time.Time) (*api.RolloutStatus, error) {
	ro, err := read.Rollout(nil, rec.Name)
	if errors.Is(err, fsm.ErrNotFound) {
		return h.immediateStatus(read, rec)
	}
	if err != nil {
		return nil, err
	}
	in, err := judgeRollout(read, h.cfg, h.planner, ro, now)
	if err != nil {
		return nil, fmt.Errorf("judge the rollout of %s revision %d: %w", ro.Intent, ro.Revision, err)
	}
	if ro.State == fsm.RolloutCompleted {
		// The releases were dropped: every target holds the revision as
		// the stable one, in the wave it fell in.
		if err := h.judgeHeld(read, rec, ro.Revision, ro.EndedAt, &in); err != nil {
			return nil, err
		}
	}
	d := scheduler.Decide(in)
	st := &api.RolloutStatus{
		Intent: ro.Intent, Revision: ro.Revision, StableRevision: ro.Stable,
		State: ro.State, Reason: ro.Reason, Wave: ro.Wave + 1,
		Counts:    apiCounts(d.Counts),
		StartedAt: unixTime(ro.StartedAt), UpdatedAt: unixTime(ro.UpdatedAt), EndedAt: unixTime(ro.EndedAt),
		AppliedBy: ro.Actor.String(),
	}
	if !fsm.RolloutEnded(ro.State) {
		st.WaitingFor = d.Waiting
	}
	current := ro.Wave
	if d.Step != nil {
		current = d.Step.Wave
	}
	for w, v := range d.Waves {
		wave := api.RolloutWave{
			Number: v.Number, Name: v.Name, State: v.State, Devices: v.Devices,
			Released: v.Released, Converged: v.Converged, Failed: v.Failed, Stuck: v.Stuck, Unreachable: v.Unreachable,
			WaitingFor: v.Waiting, SampleFailed: v.Sample,
		}
		if w < len(in.Spec.Waves) {
			wave.Approval = in.Spec.Waves[w].Approval
		}
		if w < len(ro.Waves) {
			wave.ApprovedBy = ro.Waves[w].ApprovedBy
		}
		if w == current && wave.WaitingFor == "" && !fsm.RolloutEnded(ro.State) {
			wave.WaitingFor = d.Waiting
		}
		st.Waves = append(st.Waves, wave)
	}
	return st, nil
}

// immediateStatus is the status of an intent without a rollout: its
// current revision, held by every device it selects.
func (h *httpAPI) immediateStatus(read *fsm.Read, rec *fsm.IntentRecord) (*api.RolloutStatus, error) {
	devices, err := read.Devices(nil)
	if err != nil {
		return nil, err
	}
	var counts fsm.RolloutCounts
	for _, d := range devices {
		labels := h.cfg.recordSelection(d)
		if !rec.Intent.Matches(labels) {
			continue
		}
		want, err := h.planner.Resources(read, rec, rec.Revision, labels)
		if err != nil {
			return nil, err
		}
		acked := d.AckedRevision >= rec.Revision
		counts.Targeted++
		counts.Released++
		if acked {
			counts.Acked++
		}
		switch scheduler.Judge(rec.Name, want, d, acked) {
		case scheduler.ProgressConverged:
			counts.Converged++
		case scheduler.ProgressFailed, scheduler.ProgressUnhealthy:
			counts.Failed++
		}
	}
	return &api.RolloutStatus{
		Intent: rec.Name, Revision: rec.Revision, StableRevision: rec.Revision,
		State: fsm.RolloutCompleted, Reason: noRolloutReason, Waves: []api.RolloutWave{},
		Counts: apiCounts(counts), UpdatedAt: unixTime(rec.UpdatedAt),
	}, nil
}

// judgeHeld judges the targets of a revision every target holds (a
// completed rollout): each as if released in the wave it falls in when
// the rollout ended, acknowledged once its agent acknowledged a desired
// state at or after the revision.
func (h *httpAPI) judgeHeld(read *fsm.Read, rec *fsm.IntentRecord, rev uint64, at int64, in *scheduler.Input) error {
	waves := scheduler.Assign(rec.Name, in.Spec, in.Targets)
	for i := range in.Targets {
		t := &in.Targets[i]
		d, err := read.Device(nil, t.ID)
		if err != nil {
			return err
		}
		want, err := h.planner.Resources(read, rec, rev, t.Labels)
		if err != nil {
			return err
		}
		t.Release = &fsm.ReleaseRecord{Intent: rec.Name, Device: t.ID, Revision: rev, Wave: waves[i], Time: at}
		t.Acked = d.AckedRevision >= rev
		t.Progress = scheduler.Judge(rec.Name, want, d, t.Acked)
	}
	return nil
}

func apiCounts(c fsm.RolloutCounts) api.RolloutCounts {
	return api.RolloutCounts{Targeted: c.Targeted, Released: c.Released, Acknowledged: c.Acked, Converged: c.Converged, Failed: c.Failed}
}

// readOptionalJSON decodes a request body into v; an empty body leaves v
// as it is. what names the request in errors.
func readOptionalJSON(w http.ResponseWriter, r *http.Request, v any, what string) *api.Error {
	body, e := readBody(w, r, maxBodyBytes, what+": request body")
	if e != nil {
		return e
	}
	if len(body) == 0 {
		return nil
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return badRequest("%s: request body: %v", what, err)
	}
	return nil
}

// handleRolloutControl commits an operator's action on a rollout
// (approve, pause, resume, abort) and answers the rollout's new status.
// The token must be allowed to write the intent.
func (h *httpAPI) handleRolloutControl(action string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		name := r.PathValue("name")
		var body api.RolloutControl
		if e := readOptionalJSON(w, r, &body, fmt.Sprintf("rollout %s of %q", action, name)); e != nil {
			writeError(w, e)
			return
		}
		switch {
		case body.Wave < 0:
			writeError(w, badRequest("rollout %s of %q: wave %d: waves count from 1", action, name, body.Wave))
			return
		case body.Wave != 0 && action != fsm.RolloutApprove:
			writeError(w, badRequest("rollout %s of %q: only approve takes a wave", action, name))
			return
		case len(body.Reason) > maxReasonBytes:
			writeError(w, badRequest("rollout %s of %q: the reason is %d bytes, at most %d", action, name, len(body.Reason), maxReasonBytes))
			return
		}
		rec, err := h.state.Read().Intent(nil, name)
		if err != nil {
			writeError(w, toAPIError(err))
			return
		}
		p := principalOf(r.Context())
		if err := p.allowIntent(acl.ActionWriteIntent, rec.Intent.Selector); err != nil {
			writeError(w, toAPIError(err))
			return
		}
		now := h.clock.Now()
		res, index, err := h.propose.apply(r.Context(), fsm.RolloutControlType, &fsm.RolloutControlRequest{
			Intent: name, Revision: body.Revision, Action: action, Wave: body.Wave,
			Reason: body.Reason, Time: now.UnixNano(), Actor: p.actor(),
		})
		if err != nil {
			writeError(w, toAPIError(err))
			return
		}
		if res.Err != nil {
			// The state machine's refusal: nothing to pause, a wave that
			// started already, a newer revision.
			msg := res.Err.Error()
			var fwd *api.Error
			if errors.As(res.Err, &fwd) {
				msg = fwd.Message
			}
			writeError(w, &api.Error{StatusCode: http.StatusConflict, Code: api.CodeConflict, Message: msg})
			return
		}
		w.Header().Set(api.HeaderIndex, strconv.FormatUint(index, 10))
		read := h.state.Read()
		if rec, err = read.Intent(nil, name); err == nil {
			var st *api.RolloutStatus
			if st, err = h.rolloutStatus(read, rec, now); err == nil {
				writeJSON(w, http.StatusOK, st)
				return
			}
		}
		writeError(w, toAPIError(fmt.Errorf("rollout %s of %q committed at index %d, but its status cannot be read: %w", action, name, index, err)))
	}
}

// handleRolloutUndo makes an earlier document of an intent desired again
// as a new revision, through the put-intent path: conditional on the
// current revision, with the same permission as a put, rolled out by that
// document's own rollout block. History is never rewritten.
func (h *httpAPI) handleRolloutUndo(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	var body api.UndoRequest
	if e := readOptionalJSON(w, r, &body, fmt.Sprintf("undo %q", name)); e != nil {
		writeError(w, e)
		return
	}
	read := h.state.Read()
	rec, err := read.Intent(nil, name)
	if err != nil {
		writeError(w, toAPIError(err))
		return
	}
	from, doc, err := undoTarget(read, rec, body.ToRevision)
	if err != nil {
		writeError(w, toAPIError(err))
		return
	}
	if err := doc.Validate(); err != nil {
		writeError(w, &api.Error{StatusCode: http.StatusConflict, Code: api.CodeConflict,
			Message: fmt.Sprintf("undo %q to revision %d: that document does not pass today's validation (%v): apply a corrected copy of it (meteor get intent %s --revision %d)", name, from, err, name, from)})
		return
	}
	ifMatch := new(uint64)
	*ifMatch = rec.Revision
	p := principalOf(r.Context())
	if err := h.allowIntentChange(p, acl.ActionWriteIntent, name, doc.Selector, &ifMatch); err != nil {
		writeError(w, toAPIError(err))
		return
	}
	res, index, ok := h.commit(w, r.Context(), fsm.PutIntentType, &fsm.PutIntentRequest{Intent: doc, IfMatch: ifMatch, Time: h.clock.Now().UnixNano(), Actor: p.actor()})
	if !ok {
		return
	}
	w.Header().Set("ETag", strconv.Quote(strconv.FormatUint(res.Revision, 10)))
	w.Header().Set(api.HeaderRevision, strconv.FormatUint(res.Revision, 10))
	writeJSON(w, http.StatusOK, api.UndoResponse{
		WriteResponse: api.WriteResponse{Name: name, Revision: res.Revision, Index: index, Unchanged: res.Unchanged},
		FromRevision:  from,
	})
}

// undoTarget returns the revision an undo of intent rec goes back to, and
// its document: to, if not 0 (the intent as it was at that revision);
// else the stable revision while a rollout of the current one is in
// progress or ended without completing; else the revision before the
// current one.
func undoTarget(read *fsm.Read, rec *fsm.IntentRecord, to uint64) (uint64, *intent.Intent, error) {
	conflict := func(format string, args ...any) error {
		return &api.Error{StatusCode: http.StatusConflict, Code: api.CodeConflict, Message: fmt.Sprintf(format, args...)}
	}
	name := rec.Name
	if to == 0 {
		ro, err := read.Rollout(nil, name)
		switch {
		case err == nil && ro.Revision == rec.Revision && ro.State != fsm.RolloutCompleted && ro.Stable != 0:
			to = ro.Stable
		case err != nil && !errors.Is(err, fsm.ErrNotFound):
			return 0, nil, err
		default:
			hist, err := read.History(name)
			if err != nil {
				return 0, nil, err
			}
			var prev *fsm.HistoryRecord
			for _, hr := range hist {
				if hr.Revision < rec.Revision {
					prev = hr
				}
			}
			switch {
			case prev == nil:
				return 0, nil, conflict("undo %q: revision %d is the oldest the history keeps: there is nothing before it to go back to", name, rec.Revision)
			case prev.Deleted:
				return 0, nil, conflict("undo %q: the revision before %d is the intent's deletion at revision %d: name the revision to go back to (meteor rollout history %s lists them; meteor rollout undo %s --to-revision N)", name, rec.Revision, prev.Revision, name, name)
			}
			to = prev.Revision
		}
	}
	switch {
	case to > rec.Revision:
		return 0, nil, badRequest("undo %q to revision %d: the intent's current revision is %d", name, to, rec.Revision)
	case to == rec.Revision:
		return 0, nil, conflict("undo %q to revision %d: that is the current revision, nothing to undo", name, to)
	}
	hr, err := read.IntentAt(name, to)
	switch {
	case errors.Is(err, fsm.ErrCompacted):
		return 0, nil, &api.Error{StatusCode: http.StatusNotFound, Code: api.CodeNotFound,
			Message: fmt.Sprintf("undo %q to revision %d: %v; meteor rollout history %s lists the revisions kept", name, to, err, name)}
	case errors.Is(err, fsm.ErrNotFound):
		if deletedAt(read, name, to) != 0 {
			return 0, nil, conflict("undo %q to revision %d: %v: name a revision at which the intent existed (meteor rollout history %s)", name, to, err, name)
		}
		return 0, nil, &api.Error{StatusCode: http.StatusNotFound, Code: api.CodeNotFound,
			Message: fmt.Sprintf("undo %q to revision %d: the intent did not exist then: %v", name, to, err)}
	case err != nil:
		return 0, nil, err
	}
	if hr.Revision == rec.Revision {
		return 0, nil, conflict("undo %q to revision %d: the intent has not changed since, nothing to undo", name, to)
	}
	doc, err := hr.Intent()
	if err != nil {
		return 0, nil, err
	}
	return hr.Revision, doc, nil
}

// deletedAt returns the revision of the deletion that was the newest
// change of intent name at or before rev, or 0.
func deletedAt(read *fsm.Read, name string, rev uint64) uint64 {
	hist, err := read.History(name)
	if err != nil {
		return 0
	}
	var last *fsm.HistoryRecord
	for _, hr := range hist {
		if hr.Revision <= rev {
			last = hr
		}
	}
	if last != nil && last.Deleted {
		return last.Revision
	}
	return 0
}

// handleRolloutHistory lists an intent's retained revisions, each with
// who applied it, when, and how its rollout ended. A deleted intent's
// history is still served.
func (h *httpAPI) handleRolloutHistory(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	read := h.state.Read()
	h.setReadHeaders(w, read)
	hist, err := read.History(name)
	if err != nil {
		writeError(w, toAPIError(err))
		return
	}
	rec, err := read.Intent(nil, name)
	switch {
	case errors.Is(err, fsm.ErrNotFound) && len(hist) > 0:
		rec = nil
	case err != nil:
		writeError(w, toAPIError(err))
		return
	}
	outcomes, err := read.RolloutOutcomes(name)
	if err != nil {
		writeError(w, toAPIError(err))
		return
	}
	ro, err := read.Rollout(nil, name)
	if err != nil && !errors.Is(err, fsm.ErrNotFound) {
		writeError(w, toAPIError(err))
		return
	}
	out := api.RolloutHistory{Intent: name, Revisions: make([]api.RolloutRevision, 0, len(hist))}
	for _, hr := range hist {
		rv := api.RolloutRevision{
			Revision: hr.Revision, Time: time.Unix(0, hr.Time).UTC(), AppliedBy: hr.Actor.String(),
			Deleted: hr.Deleted, Current: rec != nil && rec.Revision == hr.Revision,
		}
		if !hr.Deleted {
			rv.Rollout = outcomeOf(hr, ro, outcomes)
		}
		out.Revisions = append(out.Revisions, rv)
	}
	writeJSON(w, http.StatusOK, out)
}

// outcomeOf says how the rollout of revision hr ended, or stands: the
// rollout record if it is of hr, else the last outcome recorded for hr; a
// revision without a rollout block reached every device at once. Nil when
// nothing is kept.
func outcomeOf(hr *fsm.HistoryRecord, ro *fsm.RolloutRecord, outcomes []*fsm.RolloutRecord) *api.RolloutOutcome {
	of := func(o *fsm.RolloutRecord) *api.RolloutOutcome {
		return &api.RolloutOutcome{State: o.State, Reason: o.Reason, StartedAt: unixTime(o.StartedAt), EndedAt: unixTime(o.EndedAt)}
	}
	if ro != nil && ro.Revision == hr.Revision {
		return of(ro)
	}
	for i := len(outcomes) - 1; i >= 0; i-- {
		if outcomes[i].Revision == hr.Revision {
			return of(outcomes[i])
		}
	}
	doc, err := hr.Intent()
	if err != nil || doc == nil {
		return nil
	}
	if spec, err := doc.RolloutSpec(); err != nil || spec == nil || spec.Strategy == intent.StrategyImmediate {
		return &api.RolloutOutcome{State: fsm.RolloutCompleted, Reason: noRolloutReason, StartedAt: unixTime(hr.Time), EndedAt: unixTime(hr.Time)}
	}
	return nil
}

// handleRolloutEvents serves an intent's rollout timeline, oldest first;
// ?revision=R keeps the events of revision R.
func (h *httpAPI) handleRolloutEvents(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	var rev uint64
	if v := r.URL.Query().Get("revision"); v != "" {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil || n == 0 {
			writeError(w, badRequest("revision %q: must be a positive integer", v))
			return
		}
		rev = n
	}
	read := h.state.Read()
	h.setReadHeaders(w, read)
	events, err := read.RolloutEvents(nil, name)
	if err != nil {
		writeError(w, toAPIError(err))
		return
	}
	if len(events) == 0 {
		if _, err := read.Intent(nil, name); err != nil {
			writeError(w, toAPIError(err))
			return
		}
	}
	out := api.RolloutEvents{Intent: name, Events: []api.RolloutEvent{}}
	for _, e := range events {
		if rev != 0 && e.Revision != rev {
			continue
		}
		ev := api.RolloutEvent{
			Time: time.Unix(0, e.Time).UTC(), Revision: e.Revision, Kind: e.Kind, Wave: e.Wave,
			Message: e.Message, Devices: e.Devices, Index: e.Index,
		}
		if e.Counts != nil {
			c := apiCounts(*e.Counts)
			ev.Counts = &c
		}
		if !e.Actor.IsSystem() {
			ev.Actor = e.Actor.String()
		}
		out.Events = append(out.Events, ev)
	}
	writeJSON(w, http.StatusOK, out)
}

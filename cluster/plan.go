package cluster

import (
	"errors"
	"net/http"

	"github.com/meteor-edge/meteor/cluster/api"
	"github.com/meteor-edge/meteor/fsm"
	"github.com/meteor-edge/meteor/fsm/acl"
	"github.com/meteor-edge/meteor/fsm/intent"
	"github.com/meteor-edge/meteor/scheduler"
)

// handlePlan answers POST /v1/plan: for each intent document of the body
// (a YAML or JSON stream), what applying it would do, from the committed
// state (scheduler.Plan); nothing is committed. The token needs read
// permission and permission to write every intent the body names, as a
// put would check it.
func (h *httpAPI) handlePlan(w http.ResponseWriter, r *http.Request) {
	body, e := readIntentBody(w, r)
	if e != nil {
		writeError(w, e)
		return
	}
	docs, err := intent.ParseAll(body)
	if err != nil {
		writeError(w, badRequest("%v", err))
		return
	}
	p := principalOf(r.Context())
	for _, doc := range docs {
		var ifMatch *uint64 // checked, not committed
		if err := h.allowIntentChange(p, acl.ActionWriteIntent, doc.Name, doc.Selector, &ifMatch); err != nil {
			writeError(w, toAPIError(err))
			return
		}
	}
	read := h.state.Read()
	h.setReadHeaders(w, read)
	out, err := h.plan(read, docs)
	if err != nil {
		writeError(w, toAPIError(err))
		return
	}
	writeJSON(w, http.StatusOK, out)
}

// plan plans docs against the state of read.
func (h *httpAPI) plan(read *fsm.Read, docs []*intent.Intent) (api.Plan, error) {
	devices, err := read.Devices(nil)
	if err != nil {
		return api.Plan{}, err
	}
	memo, err := h.planner.Memo(read)
	if err != nil {
		return api.Plan{}, err
	}
	targets := make([]scheduler.PlanTarget, len(devices))
	for i, d := range devices {
		labels := h.cfg.recordSelection(d)
		desired, err := memo.Desired(d.ID, labels)
		if err != nil {
			return api.Plan{}, err
		}
		targets[i] = scheduler.PlanTarget{ID: d.ID, Labels: labels, Record: d, Desired: desired}
	}
	others := make(map[string]*intent.Intent, len(docs))
	for _, doc := range docs {
		others[doc.Name] = doc
	}
	out := api.Plan{Revision: read.Revision(), Intents: make([]api.IntentPlan, 0, len(docs))}
	for _, doc := range docs {
		in, cur, err := planInput(read, doc, targets, others)
		if err != nil {
			return api.Plan{}, err
		}
		plan, err := scheduler.Plan(in)
		if err != nil {
			return api.Plan{}, err
		}
		out.Intents = append(out.Intents, apiPlan(doc.Name, cur, plan))
	}
	return out, nil
}

// planInput gathers what the plan of doc is made from: the intent's
// current document, the stable one a new rollout would start from (that
// of a rollout in progress, else the current one), and which devices hold
// a release of it. It returns the current revision too (0: a new intent).
func planInput(read *fsm.Read, doc *intent.Intent, devices []scheduler.PlanTarget, others map[string]*intent.Intent) (scheduler.PlanInput, uint64, error) {
	in := scheduler.PlanInput{Doc: doc, Devices: devices, Others: others}
	rec, err := read.Intent(nil, doc.Name)
	if errors.Is(err, fsm.ErrNotFound) {
		return in, 0, nil
	}
	if err != nil {
		return in, 0, err
	}
	in.Current, in.Stable = rec.Intent, rec.Intent
	ro, err := read.Rollout(nil, doc.Name)
	switch {
	case errors.Is(err, fsm.ErrNotFound):
		return in, rec.Revision, nil
	case err != nil:
		return in, 0, err
	}
	in.Stable = nil
	if ro.Stable != 0 {
		if in.Stable, err = read.IntentDoc(rec, ro.Stable); err != nil {
			return in, 0, err
		}
	}
	rels, err := read.Releases(doc.Name)
	if err != nil {
		return in, 0, err
	}
	if len(rels) > 0 {
		released := make(map[string]bool, len(rels))
		for _, rel := range rels {
			released[rel.Device] = true
		}
		in.Devices = make([]scheduler.PlanTarget, len(devices))
		for i, d := range devices {
			d.Released = released[d.ID]
			in.Devices[i] = d
		}
	}
	return in, rec.Revision, nil
}

func apiPlan(name string, cur uint64, p *scheduler.IntentPlan) api.IntentPlan {
	out := api.IntentPlan{
		Intent: name, Action: p.Action, CurrentRevision: cur, Rollout: p.Rollout,
		Targeted: p.Targeted, Changed: len(p.Devices), Devices: make([]api.DevicePlan, 0, len(p.Devices)),
	}
	for _, d := range p.Devices {
		dp := api.DevicePlan{ID: d.ID, Wave: d.Wave + 1, Changes: make([]api.ResourceChange, 0, len(d.Changes))}
		for _, c := range d.Changes {
			dp.Changes = append(dp.Changes, api.ResourceChange{Key: c.Key, Action: c.Action, DigestFrom: c.DigestFrom, DigestTo: c.DigestTo, DigestDesired: c.DigestDesired})
		}
		out.Devices = append(out.Devices, dp)
	}
	for i, wv := range p.Waves {
		out.Waves = append(out.Waves, api.PlanWave{Number: i + 1, Name: wv.Name, Devices: wv.Devices})
	}
	for _, c := range p.Conflicts {
		out.Conflicts = append(out.Conflicts, api.PlanConflict{Key: c.Key, OtherIntent: c.OtherIntent, OtherKey: c.OtherKey, Target: c.Target, Devices: c.Devices, Sample: c.Sample})
	}
	return out
}

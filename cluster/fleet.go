package cluster

import (
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/meteor-edge/meteor/cluster/api"
	"github.com/meteor-edge/meteor/fsm"
	"github.com/meteor-edge/meteor/scheduler"
)

// Fleet status endpoints. Everything here is computed from the replicated
// state (device records with the status their owners committed, and their
// timelines), so every server answers the same.

func unixTime(ns int64) *time.Time {
	if ns == 0 {
		return nil
	}
	t := time.Unix(0, ns).UTC()
	return &t
}

func deviceStatus(rec *fsm.DeviceRecord) string {
	if rec.Status == "" {
		return scheduler.StatusPending
	}
	return rec.Status
}

// statusCounts counts devices by status: /v1/status's by_status, and
// the metrics' meteor_fleet_devices.
func statusCounts(devices []*fsm.DeviceRecord) map[string]int {
	out := map[string]int{}
	for _, d := range devices {
		out[deviceStatus(d)]++
	}
	return out
}

func (h *httpAPI) handleTimeline(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	read := h.state.Read()
	h.setReadHeaders(w, read)
	if _, err := read.Device(nil, id); err != nil {
		writeError(w, toAPIError(err))
		return
	}
	entries, err := read.Timeline(nil, id)
	if err != nil {
		writeError(w, toAPIError(err))
		return
	}
	out := api.Timeline{Device: id, Entries: make([]api.TimelineEntry, 0, len(entries))}
	for _, e := range entries {
		out.Entries = append(out.Entries, api.TimelineEntry{
			Time: time.Unix(0, e.Time).UTC(), Revision: e.Revision, Status: e.Status,
			Reason: e.Reason, Owner: e.Owner, Resources: e.Resources,
		})
	}
	writeJSON(w, http.StatusOK, out)
}

// viewCache computes the view of each of a request's devices once,
// however many intents ask for it, from desired states computed once for
// all the devices that share them (scheduler.DesiredMemo).
type viewCache struct {
	cfg  *Config
	memo *scheduler.DesiredMemo
	// views[i] is the view of the request's device i, once done[i].
	views []scheduler.DeviceView
	done  []bool
}

// view is the view of d, the request's device i.
func (c *viewCache) view(i int, d *fsm.DeviceRecord) (scheduler.DeviceView, error) {
	if c.done[i] {
		return c.views[i], nil
	}
	desired, err := c.memo.Desired(d.ID, c.cfg.recordSelection(d))
	if err != nil {
		return scheduler.DeviceView{}, err
	}
	c.views[i], c.done[i] = scheduler.Compare(desired, d), true
	return c.views[i], nil
}

// newViewCache is a viewCache of the n devices a request read from read.
func (h *httpAPI) newViewCache(read *fsm.Read, n int) (*viewCache, error) {
	memo, err := h.planner.Memo(read)
	if err != nil {
		return nil, err
	}
	return &viewCache{cfg: h.cfg, memo: memo, views: make([]scheduler.DeviceView, n), done: make([]bool, n)}, nil
}

// intentProgress counts where the devices an intent's current revision
// targets are with it, and builds the series from their timelines.
func (h *httpAPI) intentProgress(read *fsm.Read, views *viewCache, rec *fsm.IntentRecord, devices []*fsm.DeviceRecord, series bool) (api.IntentProgress, error) {
	out := api.IntentProgress{Name: rec.Name, Revision: rec.Revision, UpdatedAt: time.Unix(0, rec.UpdatedAt).UTC(), Index: read.Index()}
	prefix := rec.Name + "/"
	var targeted []*fsm.DeviceRecord
	for i, d := range devices {
		if !rec.Intent.Matches(h.cfg.recordSelection(d)) {
			continue
		}
		targeted = append(targeted, d)
		out.Targeted++
		// A device the revision is not released to yet holds an earlier
		// one: whatever it has converged on, it is not this revision.
		assigned, since, err := views.memo.Assignment(rec, d.ID)
		if err != nil {
			return out, err
		}
		if assigned != rec.Revision {
			continue
		}
		out.Released++
		if d.AckedRevision >= max(rec.Revision, since) {
			out.Acknowledged++
		}
		if deviceStatus(d) == scheduler.StatusUnreachable {
			out.Unreachable++
		}
		v, err := views.view(i, d)
		if err != nil {
			return out, err
		}
		converged, failed, drifted := true, false, false
		for _, r := range v.Resources {
			if !strings.HasPrefix(r.Key, prefix) {
				continue
			}
			switch r.State {
			case scheduler.StateConverged:
				continue
			case scheduler.StateFailed:
				failed = true
			case scheduler.StateDrifted:
				drifted = true
			}
			converged = false
		}
		if converged {
			out.Converged++
		}
		if failed {
			out.Failed++
		}
		if drifted {
			out.Drifted++
		}
	}
	if series {
		pts, err := progressSeries(read, targeted, rec.UpdatedAt)
		if err != nil {
			return out, err
		}
		out.Series = pts
	}
	return out, nil
}

// progressSeries replays the targeted devices' timelines since the
// revision's time: the count of devices per status after each transition.
func progressSeries(read *fsm.Read, devices []*fsm.DeviceRecord, since int64) ([]api.ProgressPoint, error) {
	type event struct {
		t      int64
		device string
		status string
	}
	current := map[string]string{}
	var events []event
	for _, d := range devices {
		entries, err := read.Timeline(nil, d.ID)
		if err != nil {
			return nil, err
		}
		current[d.ID] = scheduler.StatusPending
		for _, e := range entries {
			if e.Time < since {
				current[d.ID] = e.Status
				continue
			}
			events = append(events, event{e.Time, d.ID, e.Status})
		}
	}
	slices.SortStableFunc(events, func(a, b event) int {
		switch {
		case a.t < b.t:
			return -1
		case a.t > b.t:
			return 1
		}
		return 0
	})
	counts := map[string]int{}
	for _, st := range current {
		counts[st]++
	}
	snapshot := func(t int64) api.ProgressPoint {
		c := make(map[string]int, len(counts))
		for k, v := range counts {
			if v > 0 {
				c[k] = v
			}
		}
		return api.ProgressPoint{Time: time.Unix(0, t).UTC(), Counts: c}
	}
	pts := []api.ProgressPoint{snapshot(since)}
	for _, e := range events {
		counts[current[e.device]]--
		current[e.device] = e.status
		counts[e.status]++
		pts = append(pts, snapshot(e.t))
	}
	const maxPoints = 120
	if len(pts) > maxPoints {
		thin := make([]api.ProgressPoint, 0, maxPoints)
		for i := range maxPoints - 1 {
			thin = append(thin, pts[i*(len(pts)-1)/(maxPoints-1)])
		}
		pts = append(thin, pts[len(pts)-1])
	}
	return pts, nil
}

func (h *httpAPI) handleIntentProgress(w http.ResponseWriter, r *http.Request) {
	read := h.state.Read()
	h.setReadHeaders(w, read)
	rec, err := read.Intent(nil, r.PathValue("name"))
	if err != nil {
		writeError(w, toAPIError(err))
		return
	}
	devices, err := read.Devices(nil)
	if err != nil {
		writeError(w, toAPIError(err))
		return
	}
	views, err := h.newViewCache(read, len(devices))
	if err != nil {
		writeError(w, toAPIError(err))
		return
	}
	out, err := h.intentProgress(read, views, rec, devices, true)
	if err != nil {
		writeError(w, toAPIError(err))
		return
	}
	writeJSON(w, http.StatusOK, out)
}

// fleetStatusCache keeps the last answer of GET /v1/status with the
// state it was computed from (fsm.Read.StateID). The answer follows from
// the replica alone (and the server's fixed configuration), so while the
// replica has applied nothing since, it is the answer again: a dashboard
// polling a quiet fleet of 100,000 devices does not cost its server 0.1 s
// of CPU a poll. Concurrent requests wait for one computation.
type fleetStatusCache struct {
	mu    sync.Mutex
	state fsm.StateID      // guarded by mu
	last  *api.FleetStatus // nil: none yet; guarded by mu
}

func (h *httpAPI) handleFleetStatus(w http.ResponseWriter, r *http.Request) {
	read := h.state.Read()
	h.setReadHeaders(w, read)
	out, err := h.fleetStatus(read)
	if err != nil {
		writeError(w, toAPIError(err))
		return
	}
	writeJSON(w, http.StatusOK, out)
}

// fleetStatus is GET /v1/status's answer as of read: the last one if the
// replica has applied nothing since (fleetStatusCache).
func (h *httpAPI) fleetStatus(read *fsm.Read) (*api.FleetStatus, error) {
	c := &h.fleet
	c.mu.Lock()
	defer c.mu.Unlock()
	state := read.StateID()
	if c.last != nil && c.state == state {
		return c.last, nil
	}
	devices, err := read.Devices(nil)
	if err != nil {
		return nil, err
	}
	intents, err := read.Intents(nil)
	if err != nil {
		return nil, err
	}
	out := &api.FleetStatus{Revision: read.Revision(), Index: read.Index(), Devices: len(devices), ByStatus: statusCounts(devices)}
	views, err := h.newViewCache(read, len(devices))
	if err != nil {
		return nil, err
	}
	for _, rec := range intents {
		p, err := h.intentProgress(read, views, rec, devices, false)
		if err != nil {
			return nil, err
		}
		out.Intents = append(out.Intents, p)
	}
	c.state, c.last = state, out
	return out, nil
}

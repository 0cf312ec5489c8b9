package cluster

import (
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-memdb"

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
	out := newIntentProgress(read, rec)
	var targeted []*fsm.DeviceRecord
	for i, d := range devices {
		part, err := h.progressPartOf(views, rec, i, d)
		if err != nil {
			return out, err
		}
		part.addTo(&out)
		if part&partTargeted != 0 {
			targeted = append(targeted, d)
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

func newIntentProgress(read *fsm.Read, rec *fsm.IntentRecord) api.IntentProgress {
	return api.IntentProgress{Name: rec.Name, Revision: rec.Revision, UpdatedAt: time.Unix(0, rec.UpdatedAt).UTC(), Index: read.Index()}
}

// progressPart is what a device counts for in an intent's progress
// (api.IntentProgress), as flags.
type progressPart uint8

const (
	partTargeted progressPart = 1 << iota
	partReleased
	partAcknowledged
	partUnreachable
	partConverged
	partFailed
	partDrifted
)

// progressPartOf is what d, the request's device i, counts for in the
// progress of the intent whose current revision is rec.
func (h *httpAPI) progressPartOf(views *viewCache, rec *fsm.IntentRecord, i int, d *fsm.DeviceRecord) (progressPart, error) {
	if !rec.Intent.Matches(h.cfg.recordSelection(d)) {
		return 0, nil
	}
	part := partTargeted
	// A device the revision is not released to yet holds an earlier
	// one: whatever it has converged on, it is not this revision.
	assigned, since, err := views.memo.Assignment(rec, d.ID)
	if err != nil {
		return 0, err
	}
	if assigned != rec.Revision {
		return part, nil
	}
	part |= partReleased
	if d.AckedRevision >= max(rec.Revision, since) {
		part |= partAcknowledged
	}
	if deviceStatus(d) == scheduler.StatusUnreachable {
		part |= partUnreachable
	}
	v, err := views.view(i, d)
	if err != nil {
		return 0, err
	}
	prefix := rec.Name + "/"
	converged := true
	for _, r := range v.Resources {
		if !strings.HasPrefix(r.Key, prefix) {
			continue
		}
		switch r.State {
		case scheduler.StateConverged:
			continue
		case scheduler.StateFailed:
			part |= partFailed
		case scheduler.StateDrifted:
			part |= partDrifted
		}
		converged = false
	}
	if converged {
		part |= partConverged
	}
	return part, nil
}

// addTo counts the part in out.
func (p progressPart) addTo(out *api.IntentProgress) {
	count := func(flag progressPart, n *int) {
		if p&flag != 0 {
			*n++
		}
	}
	count(partTargeted, &out.Targeted)
	count(partReleased, &out.Released)
	count(partAcknowledged, &out.Acknowledged)
	count(partUnreachable, &out.Unreachable)
	count(partConverged, &out.Converged)
	count(partFailed, &out.Failed)
	count(partDrifted, &out.Drifted)
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
//
// It also keeps what each device counted for in each intent's progress
// (progressPart). A device's part follows from its own record and from
// what devices are judged by beside it (fsm.Read.WatchJudgement: intents,
// their history, rollouts, classes, the revision), so while the latter
// stands, a device whose record is the very one the last computation read
// counts for the same again: during a change, when the owners' commits
// move the records of some hundreds of devices between two polls, only
// those are compared again.
type fleetStatusCache struct {
	mu    sync.Mutex
	state fsm.StateID      // guarded by mu
	last  *api.FleetStatus // nil: none yet; guarded by mu
	// What the last computation read, guarded by mu: world fires once
	// anything devices are judged by beside their records changes (or
	// the state is restored), intents and devices (sorted by ID) what it
	// read, and parts[j][i] what device i counted for in intent j's
	// progress.
	world   memdb.WatchSet
	intents []*fsm.IntentRecord
	devices []*fsm.DeviceRecord
	parts   [][]progressPart
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
// replica has applied nothing since, and otherwise computed again with the
// parts of the devices whose records have not changed since taken from the
// last computation (fleetStatusCache).
func (h *httpAPI) fleetStatus(read *fsm.Read) (*api.FleetStatus, error) {
	c := &h.fleet
	c.mu.Lock()
	defer c.mu.Unlock()
	state := read.StateID()
	if c.last != nil && c.state == state {
		return c.last, nil
	}
	// Watched before reading: a change from here on fires it.
	world := memdb.NewWatchSet()
	if err := read.WatchJudgement(world); err != nil {
		return nil, err
	}
	devices, err := read.Devices(nil)
	if err != nil {
		return nil, err
	}
	intents, err := read.Intents(nil)
	if err != nil {
		return nil, err
	}
	// prior[i] is device i's place in the last computation, if its record
	// is the one read then and nothing it is judged by has changed since
	// (a read no older than that one, and the watch not fired); else -1.
	var prior []int
	if c.last != nil && read.Index() >= c.state.Index() && !fired(c.world) && slices.Equal(intents, c.intents) {
		prior = make([]int, len(devices))
		k := 0
		for i, d := range devices {
			for k < len(c.devices) && c.devices[k].ID < d.ID {
				k++
			}
			prior[i] = -1
			if k < len(c.devices) && c.devices[k] == d {
				prior[i] = k
			}
		}
	}
	out := &api.FleetStatus{Revision: read.Revision(), Index: read.Index(), Devices: len(devices), ByStatus: statusCounts(devices)}
	views, err := h.newViewCache(read, len(devices))
	if err != nil {
		return nil, err
	}
	parts := make([][]progressPart, len(intents))
	for j, rec := range intents {
		p := newIntentProgress(read, rec)
		parts[j] = make([]progressPart, len(devices))
		for i, d := range devices {
			var part progressPart
			if prior != nil && prior[i] >= 0 {
				part = c.parts[j][prior[i]]
			} else if part, err = h.progressPartOf(views, rec, i, d); err != nil {
				return nil, err
			}
			parts[j][i] = part
			part.addTo(&p)
		}
		out.Intents = append(out.Intents, p)
	}
	c.state, c.last = state, out
	c.world, c.intents, c.devices, c.parts = world, intents, devices, parts
	return out, nil
}

package cluster

import (
	"cmp"
	"fmt"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"github.com/meteor-edge/meteor/cluster/api"
	"github.com/meteor-edge/meteor/fsm"
	"github.com/meteor-edge/meteor/scheduler"
	"github.com/meteor-edge/meteor/wire"
)

// deviceQuery is what GET /v1/devices asks for: filters that every
// listed device passes, paging, and an optional grouping. It is parsed
// from the query string (parseDeviceQuery) and answered from one replica
// read.
type deviceQuery struct {
	intent        string // devices the intent's current revision targets
	intentStates  map[string]bool
	resource      string // devices that hold or are meant to hold this resource key
	appliedDigest string // hex prefix of the resource's applied digest, or "none"
	statuses      map[string]bool
	reason        string // lower-cased substring of the status reason
	selector      map[string]string
	region        string
	server        string
	owner         string
	connected     *bool
	converged     *bool
	retried       *bool
	desired       *uint64
	acked         *uint64
	ackedBelow    *uint64
	limit         int
	after         string
	groupBy       string
	sort          string // "traffic", or "" for ID order
}

// The values of ?intent_state: a device's state on one intent.
const (
	intentStateConverged   = "converged"    // every resource of the intent converged on the revision it holds
	intentStateNotReleased = "not-released" // a rollout has not released the current revision to it yet
	intentStateFailed      = "failed"
	intentStateDrifted     = "drifted"
	intentStateProgressing = "progressing"
	intentStatePending     = "pending"
	intentStateNotConv     = "not-converged" // a filter only: any state but converged
)

// sortTraffic is the ?sort that lists the devices that exchanged the most
// bytes today first.
const sortTraffic = "traffic"

// deviceGroupings are the values of ?group_by.
var deviceGroupings = []string{"status", "intent-state", "applied-digest", "acked-revision", "desired-revision", "region", "server", "owner", "connected"}

var deviceStatuses = scheduler.Statuses()

var intentStates = []string{intentStateConverged, intentStateNotConv, intentStateNotReleased, intentStateFailed, intentStateDrifted, intentStateProgressing, intentStatePending}

// intentStateRank orders a resource's states on an intent, worst last: a
// device's state on the intent is its worst resource's.
var intentStateRank = map[string]int{intentStateConverged: 0, intentStatePending: 1, intentStateProgressing: 2, intentStateDrifted: 3, intentStateFailed: 4}

// groupSample is how many device IDs a group names.
const groupSample = 5

// parseDeviceQuery reads a device query from q. Every error names the
// parameter; parameters it does not know are errors too, so that a typo
// does not silently list every device.
func parseDeviceQuery(q url.Values) (*deviceQuery, error) {
	dq := &deviceQuery{}
	for key, vals := range q {
		if len(vals) != 1 {
			return nil, badRequest("query parameter %s given %d times; give it once (several values: comma-separated)", key, len(vals))
		}
		v := strings.TrimSpace(vals[0])
		var err error
		switch key {
		case "stale", "index", "wait":
			// Checked by httpAPI.reader before the query is parsed.
		case "intent":
			dq.intent = v
		case "intent_state":
			dq.intentStates, err = parseSet(v, intentStates)
		case "resource":
			dq.resource = v
		case "applied_digest":
			dq.appliedDigest = strings.ToLower(v)
			if dq.appliedDigest != "none" && (len(v) < 4 || strings.Trim(dq.appliedDigest, "0123456789abcdef") != "") {
				err = fmt.Errorf("want at least 4 hex digits of the digest, or none")
			}
		case "status":
			dq.statuses, err = parseSet(v, deviceStatuses)
		case "reason":
			dq.reason = strings.ToLower(v)
		case "selector":
			dq.selector, err = parseSelector(v)
		case "region":
			dq.region = v
		case "server":
			dq.server = v
		case "owner":
			dq.owner = v
		case "connected":
			dq.connected, err = parseBoolPtr(v)
		case "converged":
			dq.converged, err = parseBoolPtr(v)
		case "retried":
			dq.retried, err = parseBoolPtr(v)
		case "desired_revision":
			dq.desired, err = parseUintPtr(v)
		case "acked_revision":
			dq.acked, err = parseUintPtr(v)
		case "acked_below":
			dq.ackedBelow, err = parseUintPtr(v)
		case "limit":
			var n uint64
			if n, err = strconv.ParseUint(v, 10, 31); err == nil && n == 0 {
				err = fmt.Errorf("want a positive number")
			}
			dq.limit = int(n)
		case "after":
			dq.after = v
		case "group_by":
			if !slices.Contains(deviceGroupings, v) {
				err = fmt.Errorf("want one of %s", strings.Join(deviceGroupings, ", "))
			}
			dq.groupBy = v
		case "sort":
			if v != sortTraffic {
				err = fmt.Errorf("want %s (the default order is by ID)", sortTraffic)
			}
			dq.sort = v
		default:
			return nil, badRequest("unknown query parameter %q for /v1/devices (known: intent, intent_state, resource, applied_digest, status, reason, selector, region, server, owner, connected, converged, retried, desired_revision, acked_revision, acked_below, limit, after, group_by, sort, stale)", key)
		}
		if err != nil {
			return nil, badRequest("query parameter %s=%q: %v", key, v, err)
		}
	}
	switch {
	case dq.intentStates != nil && dq.intent == "":
		return nil, badRequest("query parameter intent_state needs intent: the state is a device's state on one intent")
	case dq.appliedDigest != "" && dq.resource == "":
		return nil, badRequest("query parameter applied_digest needs resource: a digest is a resource's")
	case dq.groupBy == "intent-state" && dq.intent == "":
		return nil, badRequest("group_by=intent-state needs intent")
	case dq.groupBy == "applied-digest" && dq.resource == "":
		return nil, badRequest("group_by=applied-digest needs resource")
	case dq.groupBy != "" && (dq.limit != 0 || dq.after != ""):
		return nil, badRequest("group_by counts every matching device: it takes no limit or after")
	case dq.sort != "" && dq.groupBy != "":
		return nil, badRequest("sort orders a list of devices; group_by lists none")
	case dq.sort != "" && dq.after != "":
		return nil, badRequest("sort=traffic lists the heaviest devices first, without pages: give limit, not after")
	}
	return dq, nil
}

func parseSet(v string, known []string) (map[string]bool, error) {
	out := map[string]bool{}
	for _, s := range strings.Split(v, ",") {
		s = strings.TrimSpace(s)
		if !slices.Contains(known, s) {
			return nil, fmt.Errorf("%q is not one of %s", s, strings.Join(known, ", "))
		}
		out[s] = true
	}
	return out, nil
}

// parseSelector parses "k=v,k2=v2": every label must have that value.
func parseSelector(v string) (map[string]string, error) {
	out := map[string]string{}
	for _, kv := range strings.Split(v, ",") {
		k, val, ok := strings.Cut(strings.TrimSpace(kv), "=")
		if !ok || k == "" {
			return nil, fmt.Errorf("%q is not key=value", kv)
		}
		if _, dup := out[k]; dup {
			return nil, fmt.Errorf("label %s given twice", k)
		}
		out[k] = val
	}
	return out, nil
}

func parseBoolPtr(v string) (*bool, error) {
	b, err := strconv.ParseBool(v)
	if err != nil {
		return nil, fmt.Errorf("want true or false")
	}
	return &b, nil
}

func parseUintPtr(v string) (*uint64, error) {
	n, err := strconv.ParseUint(v, 10, 64)
	if err != nil {
		return nil, fmt.Errorf("want a revision number")
	}
	return &n, nil
}

// needsView reports whether answering the query compares desired and
// reported state (the device's view), which costs a desired-state lookup
// per device.
func (dq *deviceQuery) needsView() bool {
	return dq.intent != "" || dq.resource != "" || dq.converged != nil || dq.retried != nil || dq.desired != nil || dq.groupBy == "desired-revision"
}

// queryDevices answers a device query from one replica read: the devices
// that pass every filter, in ID order, paged, or with sort=traffic the
// heaviest of the day first (up to limit); or, with group_by, their
// counts per value with a sample of IDs.
func (h *httpAPI) queryDevices(read *fsm.Read, dq *deviceQuery) (api.DeviceList, error) {
	out := api.DeviceList{Revision: read.Revision(), Index: read.Index(), Devices: []api.DeviceSummary{}}
	var irec *fsm.IntentRecord
	if dq.intent != "" {
		var err error
		if irec, err = read.Intent(nil, dq.intent); err != nil {
			return out, err
		}
	}
	recs, err := read.Devices(nil)
	if err != nil {
		return out, err
	}
	memo, err := h.planner.Memo(read)
	if err != nil {
		return out, err
	}
	owners := h.owners.ownerCandidates()
	groups := map[string]*api.DeviceGroup{}
	today := wire.TrafficDay(h.clock.Now())
	for _, rec := range recs {
		if dq.after != "" && rec.ID <= dq.after { // never with group_by
			continue
		}
		labels := h.cfg.recordSelection(rec)
		if !dq.cheapMatch(rec, labels, irec) {
			continue
		}
		var sum api.DeviceSummary
		if dq.needsView() || dq.groupBy == "" {
			var v scheduler.DeviceView
			if sum, v, err = h.deviceView(memo, rec, owners); err != nil {
				return out, err
			}
			if dq.owner != "" && sum.Owner != dq.owner || !dq.viewMatch(read, rec, &sum, v, irec) {
				continue
			}
		} else {
			sum = api.DeviceSummary{ID: rec.ID, Labels: labels, Connected: rec.Connected, Server: rec.Server,
				Owner: deviceOwner(rec, owners), AckedRevision: rec.AckedRevision, Status: deviceStatus(rec)}
			if dq.owner != "" && sum.Owner != dq.owner {
				continue
			}
		}
		out.Matched++
		if dq.groupBy != "" {
			key := groupKey(dq.groupBy, &sum)
			g := groups[key]
			if g == nil {
				g = &api.DeviceGroup{Value: key}
				groups[key] = g
			}
			g.Count++
			if len(g.Sample) < groupSample {
				g.Sample = append(g.Sample, rec.ID)
			}
			continue
		}
		if dq.sort == sortTraffic {
			sum.TrafficToday = trafficOn(rec.Traffic, today)
		} else if dq.limit > 0 && len(out.Devices) == dq.limit {
			out.Next = out.Devices[len(out.Devices)-1].ID
			continue // keep counting what matched
		}
		out.Devices = append(out.Devices, sum)
	}
	if dq.sort == sortTraffic {
		out.Sort = dq.sort
		slices.SortStableFunc(out.Devices, func(a, b api.DeviceSummary) int {
			return cmp.Compare(trafficBytes(b.TrafficToday), trafficBytes(a.TrafficToday)) // then by ID, as listed
		})
		if dq.limit > 0 && len(out.Devices) > dq.limit {
			out.Devices = out.Devices[:dq.limit]
		}
	}
	if dq.groupBy != "" {
		out.Devices = nil
		out.GroupBy = dq.groupBy
		for _, g := range groups {
			out.Groups = append(out.Groups, *g)
		}
		slices.SortFunc(out.Groups, func(a, b api.DeviceGroup) int {
			return cmp.Or(cmp.Compare(b.Count, a.Count), cmp.Compare(a.Value, b.Value))
		})
	}
	return out, nil
}

// trafficBytes is what sort=traffic orders by: the bytes sent and
// received, none for a device that reported no traffic.
func trafficBytes(c *api.TrafficCounts) uint64 {
	if c == nil {
		return 0
	}
	return c.Bytes()
}

// cheapMatch applies the filters that need only the record.
func (dq *deviceQuery) cheapMatch(rec *fsm.DeviceRecord, labels map[string]string, irec *fsm.IntentRecord) bool {
	status := deviceStatus(rec)
	switch {
	case irec != nil && !irec.Intent.Matches(labels):
		return false
	case dq.statuses != nil && !dq.statuses[status]:
		return false
	case dq.reason != "" && !strings.Contains(strings.ToLower(rec.StatusReason), dq.reason):
		return false
	case dq.region != "" && labels["region"] != dq.region:
		return false
	case dq.server != "" && rec.Server != dq.server:
		return false
	case dq.connected != nil && rec.Connected != *dq.connected:
		return false
	case dq.acked != nil && rec.AckedRevision != *dq.acked:
		return false
	case dq.ackedBelow != nil && rec.AckedRevision >= *dq.ackedBelow:
		return false
	}
	for k, v := range dq.selector {
		if got, ok := labels[k]; !ok || got != v {
			return false
		}
	}
	return true
}

// viewMatch applies the filters that need the device's view, and fills
// in the summary's intent and resource detail.
func (dq *deviceQuery) viewMatch(read *fsm.Read, rec *fsm.DeviceRecord, sum *api.DeviceSummary, v scheduler.DeviceView, irec *fsm.IntentRecord) bool {
	if dq.converged != nil && sum.Converged != *dq.converged {
		return false
	}
	if dq.desired != nil && sum.DesiredRevision != *dq.desired {
		return false
	}
	retried := false
	if irec != nil {
		is, r := intentState(read, irec, rec, v)
		if dq.intentStates != nil && !dq.intentStates[is.State] && !(dq.intentStates[intentStateNotConv] && is.State != intentStateConverged) {
			return false
		}
		sum.Intent, retried = is, r
	}
	if dq.resource != "" {
		i := slices.IndexFunc(v.Resources, func(rv scheduler.ResourceView) bool { return rv.Key == dq.resource })
		if i < 0 {
			return false
		}
		st := resourceState(v.Resources[i])
		if dq.appliedDigest != "" {
			if dq.appliedDigest == "none" && st.AppliedDigest != "" || dq.appliedDigest != "none" && !strings.HasPrefix(st.AppliedDigest, dq.appliedDigest) {
				return false
			}
		}
		sum.Resource = &st
		retried = st.Attempts > 1
	}
	if irec == nil && dq.resource == "" {
		for _, rv := range v.Resources {
			if rv.Reported != nil && rv.Reported.Attempts > 1 {
				retried = true
			}
		}
	}
	if dq.retried != nil && retried != *dq.retried {
		return false
	}
	return true
}

// intentState is a device's state on one intent: the revision a rollout
// assigned it and how that revision's resources stand there. It also
// reports whether any of them took more than one attempt.
func intentState(read *fsm.Read, irec *fsm.IntentRecord, rec *fsm.DeviceRecord, v scheduler.DeviceView) (*api.DeviceIntent, bool) {
	out := &api.DeviceIntent{Name: irec.Name, CurrentRevision: irec.Revision}
	if assigned, _, err := read.Assignment(irec, rec.ID); err == nil {
		out.Revision = assigned
	}
	prefix := irec.Name + "/"
	worst, retried := intentStateConverged, false
	for _, rv := range v.Resources {
		if !strings.HasPrefix(rv.Key, prefix) {
			continue
		}
		out.Resources++
		if rv.Reported != nil && rv.Reported.Attempts > 1 {
			retried = true
		}
		var s string
		switch rv.State {
		case scheduler.StateConverged:
			out.Converged++
			continue
		case scheduler.StateFailed:
			s = intentStateFailed
		case scheduler.StateDrifted:
			s = intentStateDrifted
		case scheduler.StatePending:
			s = intentStatePending
		default: // progressing, applied (not verified yet), removing
			s = intentStateProgressing
		}
		if intentStateRank[s] > intentStateRank[worst] {
			worst = s
		}
	}
	out.State = worst
	if out.Revision != irec.Revision {
		out.State = intentStateNotReleased
	}
	return out, retried
}

// groupKey is the value a device is counted under for group_by g.
func groupKey(g string, sum *api.DeviceSummary) string {
	switch g {
	case "status":
		return sum.Status
	case "intent-state":
		return sum.Intent.State
	case "applied-digest":
		if sum.Resource.AppliedDigest == "" {
			return "none"
		}
		return sum.Resource.AppliedDigest
	case "acked-revision":
		return strconv.FormatUint(sum.AckedRevision, 10)
	case "desired-revision":
		return strconv.FormatUint(sum.DesiredRevision, 10)
	case "region":
		return cmp.Or(sum.Labels["region"], "none")
	case "server":
		return cmp.Or(sum.Server, "none")
	case "owner":
		return cmp.Or(sum.Owner, "none")
	case "connected":
		return strconv.FormatBool(sum.Connected)
	}
	return ""
}

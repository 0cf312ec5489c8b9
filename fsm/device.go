package fsm

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/hashicorp/go-memdb"
)

// Device status updates do not take a cluster revision: revisions count
// changes of desired state (intents, device labels), and a report changes
// nothing a device should hold. They are ordered by Raft index instead.

func (f *FSM) device(txn *memdb.Txn, id string) (*DeviceRecord, error) {
	raw, err := txn.First(tableDevices, "id", id)
	if err != nil || raw == nil {
		return nil, err
	}
	return raw.(*DeviceRecord), nil
}

func (f *FSM) applyDeviceSession(txn *memdb.Txn, index uint64, body []byte) (ApplyResult, error) {
	var req DeviceSessionRequest
	if err := decodeCommand(body, &req); err != nil {
		return ApplyResult{}, fmt.Errorf("decode: %w", err)
	}
	return f.applySession(txn, index, &req)
}

func (f *FSM) applyDeviceSessionBatch(txn *memdb.Txn, index uint64, body []byte) (ApplyResult, error) {
	var req DeviceSessionBatchRequest
	if err := decodeCommand(body, &req); err != nil {
		return ApplyResult{}, fmt.Errorf("decode: %w", err)
	}
	for i := range req.Sessions {
		// A rejected event changes nothing; the others still apply.
		if _, err := f.applySession(txn, index, &req.Sessions[i]); err != nil {
			return ApplyResult{}, err
		}
	}
	return ApplyResult{Revision: metaValue(txn, metaRevision)}, nil
}

// applySession applies one session event (see DeviceSessionRequest).
func (f *FSM) applySession(txn *memdb.Txn, index uint64, req *DeviceSessionRequest) (ApplyResult, error) {
	if req.ID == "" {
		return rejected(txn, fmt.Errorf("device session: empty device ID"))
	}
	cur, err := f.device(txn, req.ID)
	if err != nil {
		return ApplyResult{}, err
	}
	rec := &DeviceRecord{ID: req.ID, CreateIndex: index}
	if cur != nil {
		c := *cur
		rec = &c
	} else if !req.Connected {
		return rejected(txn, fmt.Errorf("device %q: %w", req.ID, ErrNotFound))
	}
	if !req.Connected {
		// A disconnect only counts for the connection it ends: the device
		// may already be connected elsewhere, or again on the same server
		// in the same session (a resumed session keeps its ID).
		if rec.SessionID != req.SessionID || rec.Server != req.Server || rec.Conn != req.Conn {
			return ApplyResult{Revision: metaValue(txn, metaRevision)}, nil
		}
		if rec.Connected && activeLevel(txn) >= LevelEdge {
			link := rec.Link.clone()
			link.OfflineSince = req.Time
			rec.Link = link
		}
		rec.Connected = false
		f.emit(index, Event{Kind: KindSession, Action: "disconnected", Time: req.Time, Device: req.ID, Message: "from " + req.Server})
	} else {
		revoked, err := txn.First(tableRevoked, "id", req.ID)
		if err != nil {
			return ApplyResult{}, err
		}
		if revoked != nil {
			return rejected(txn, fmt.Errorf("device %q: %w", req.ID, ErrDeviceRevoked))
		}
		if cur == nil {
			f.emit(index, Event{Kind: KindDevice, Action: "registered", Time: req.Time, Device: req.ID, Message: "first session, on " + req.Server})
		}
		if cur == nil || !cur.Connected || cur.Server != req.Server || cur.Conn != req.Conn {
			f.emit(index, Event{Kind: KindSession, Action: "connected", Time: req.Time, Device: req.ID, Message: "to " + req.Server})
		}
		if cur != nil && !cur.Connected && cur.Link != nil && cur.Link.OfflineSince != 0 && activeLevel(txn) >= LevelEdge {
			// The end of a gap: it goes into the link history.
			link := cur.Link.clone()
			if req.Time > link.OfflineSince {
				link.Gaps = append(link.Gaps, LinkGap{From: link.OfflineSince, To: req.Time})
				if n := len(link.Gaps); n > LinkGapLimit {
					link.Gaps = link.Gaps[n-LinkGapLimit:]
				}
			}
			link.OfflineSince = 0
			rec.Link = link
		}
		rec.SessionID, rec.Server, rec.Conn, rec.Connected = req.SessionID, req.Server, req.Conn, true
		changed := false
		if req.Labels != nil {
			changed = reportLabels(rec, req.Labels)
		}
		if changed || cur == nil {
			rev, err := nextRevision(txn)
			if err != nil {
				return ApplyResult{}, err
			}
			rec.Revision = rev
		}
	}
	rec.AckedRevision = max(rec.AckedRevision, req.AckedRevision)
	rec.LastSeen = max(rec.LastSeen, req.Time)
	rec.ModifyIndex, rec.UpdatedAt = index, req.Time
	if err := txn.Insert(tableDevices, rec); err != nil {
		return ApplyResult{}, err
	}
	return ApplyResult{Revision: metaValue(txn, metaRevision)}, nil
}

// withoutEdge returns tr without what a replica of feature level 2 does
// not know of a transition: the edge report's holds, locks, lock breaks
// and recovery.
func (tr StatusTransition) withoutEdge() StatusTransition {
	tr.Edge, tr.Locks, tr.Unlocked, tr.Recovery = false, nil, nil, nil
	if slices.ContainsFunc(tr.Resources, func(r ResourceStatus) bool { return r.Hold != nil }) {
		res := slices.Clone(tr.Resources)
		for i := range res {
			res[i].Hold = nil
		}
		tr.Resources = res
	}
	return tr
}

// clone returns a copy of the history to change (an empty one for nil):
// records in the state are never changed in place.
func (h *LinkHistory) clone() *LinkHistory {
	if h == nil {
		return &LinkHistory{}
	}
	return &LinkHistory{OfflineSince: h.OfflineSince, Gaps: slices.Clone(h.Gaps)}
}

// MergeResources applies a report to stored resource states: a full
// report replaces them, a partial one updates the resources it names.
// The result is sorted by key, so replicas store the same bytes.
func MergeResources(cur, update []ResourceStatus, full bool) []ResourceStatus {
	byKey := map[string]ResourceStatus{}
	if !full {
		for _, r := range cur {
			byKey[r.Key] = r
		}
	}
	for _, r := range update {
		byKey[r.Key] = r
	}
	out := make([]ResourceStatus, 0, len(byKey))
	for _, r := range byKey {
		out = append(out, r)
	}
	slices.SortFunc(out, func(a, b ResourceStatus) int { return strings.Compare(a.Key, b.Key) })
	return out
}

// applyStatusBatch applies owners' status transitions. Each one updates the
// device record and appends to its timeline when the status or a
// resource's state changed; the timeline keeps the newest TimelineLimit
// entries per device.
func (f *FSM) applyStatusBatch(txn *memdb.Txn, index uint64, body []byte) (ApplyResult, error) {
	var req StatusBatchRequest
	if err := decodeCommand(body, &req); err != nil {
		return ApplyResult{}, fmt.Errorf("decode: %w", err)
	}
	level := activeLevel(txn)
	edge := level >= LevelEdge
	req.Owner = f.intern.String(req.Owner)
	for _, tr := range req.Transitions {
		cur, err := f.device(txn, tr.Device)
		if err != nil {
			return ApplyResult{}, err
		}
		if cur == nil {
			continue // a device only reports within a session, which registers it
		}
		// The record and its timeline keep the keys, digests, states and
		// reasons that every device of a fleet repeats: one copy of each
		// (intern.go).
		f.intern.transition(&tr)
		if !edge {
			// Before the level is active a replica of an earlier release
			// applies this entry too, and drops what it does not know.
			tr = tr.withoutEdge()
		}
		rec := *cur
		var corrected map[string]uint32
		if tr.Seq > rec.ReportSeq {
			rec.ReportSeq = tr.Seq
			rec.Resources = MergeResources(cur.Resources, tr.Resources, tr.Full)
			corrected = correctionsGrown(cur.Resources, tr.Resources)
			rec.AgentStatus, rec.BlockedReason = tr.AgentStatus, tr.BlockedReason
			rec.ReportRevision = max(rec.ReportRevision, tr.Revision)
			if tr.Traffic != nil {
				rec.Traffic = tr.Traffic
			}
			if tr.Edge {
				rec.Locks = tr.Locks
			}
			f.recordUnlocked(index, &rec, tr.Unlocked, tr.Time, req.Owner)
			f.recordRecovery(index, &rec, tr.Recovery, tr.Time, req.Owner)
		}
		rec.LastSeen = max(rec.LastSeen, tr.LastSeen)
		rec.ProgressAt = max(rec.ProgressAt, tr.ProgressAt)
		if level >= LevelAckWithStatus {
			// A fact of the device, like its report: taken even from a
			// transition whose status is stale (below).
			rec.AckedRevision = max(rec.AckedRevision, tr.AckedRevision)
		}
		rec.ModifyIndex, rec.UpdatedAt = index, tr.Time
		if rec.StatusOwner != "" && rec.StatusOwner != req.Owner && tr.Basis < rec.StatusIndex {
			// Judged on a status another owner has since replaced.
			if err := txn.Insert(tableDevices, &rec); err != nil {
				return ApplyResult{}, err
			}
			continue
		}
		changed := tr.Status != rec.Status || tr.Reason != rec.StatusReason || len(tr.ResourceStates) > 0 || len(corrected) > 0
		if tr.Status != rec.Status {
			rec.StatusSince = tr.Time
		}
		rec.Status, rec.StatusReason, rec.NextRetry, rec.StatusRevision = tr.Status, tr.Reason, tr.NextRetry, tr.Revision
		rec.StatusOwner, rec.StatusIndex = req.Owner, index
		if changed {
			entry := &TimelineEntry{
				Device: rec.ID, Time: tr.Time, Index: index, Revision: tr.Revision,
				Status: tr.Status, Reason: tr.Reason, Owner: req.Owner, Resources: tr.ResourceStates,
			}
			if len(corrected) > 0 {
				// A correction shows in the timeline even when the device
				// was back to converged before anyone saw the drift.
				entry.Resources = maps.Clone(tr.ResourceStates)
				if entry.Resources == nil {
					entry.Resources = map[string]string{}
				}
				for key := range corrected {
					if _, ok := entry.Resources[key]; !ok {
						entry.Resources[key] = ResourceCorrected
					}
				}
			}
			f.appendTimeline(&rec, entry)
			f.emitStatus(index, req.Owner, &tr, corrected)
		}
		if err := txn.Insert(tableDevices, &rec); err != nil {
			return ApplyResult{}, err
		}
	}
	return ApplyResult{Revision: metaValue(txn, metaRevision)}, nil
}

// appendTimeline numbers entry as rec's next timeline entry and gives rec
// a timeline with it, less the entry that falls out of the timeline limit.
//
// A timeline is its entries by sequence number, one entry a number, as
// when each entry was a memdb row of its own, and this changes it exactly
// as that did, so that replicas of either release agree: the entry
// replaces one of the same number (a record replaced whole by a label
// upsert of the first release numbers from 1 again), and only the entry
// the limit leaves behind at this number is dropped (after a lower limit,
// older ones stay).
func (f *FSM) appendTimeline(rec *DeviceRecord, entry *TimelineEntry) {
	rec.TimelineSeq++
	entry.Device, entry.Seq = rec.ID, rec.TimelineSeq
	var drop uint64 // none: sequence numbers start at 1
	if rec.TimelineSeq > uint64(f.timelineLimit) {
		drop = rec.TimelineSeq - uint64(f.timelineLimit)
	}
	entries := make([]*TimelineEntry, 0, len(rec.Timeline)+1)
	added := false
	for _, e := range rec.Timeline {
		switch {
		case e.Seq == drop:
			continue
		case !added && e.Seq >= entry.Seq:
			entries, added = append(entries, entry), true
			if e.Seq == entry.Seq {
				continue
			}
		}
		entries = append(entries, e)
	}
	if !added {
		entries = append(entries, entry)
	}
	rec.Timeline = entries
}

// ResourceCorrected marks, in a timeline entry's resources, a resource
// whose drift the agent corrected since the last entry.
const ResourceCorrected = "corrected"

// correctionsGrown returns the resources of a report whose drift
// correction count grew over what is stored (cur, sorted by key as
// MergeResources leaves it), with the new count. A count
// that fell is an agent that restarted (it counts from its start).
func correctionsGrown(cur, update []ResourceStatus) map[string]uint32 {
	var out map[string]uint32
	for _, u := range update {
		if u.Corrections == 0 {
			continue
		}
		var was uint32
		if i, ok := slices.BinarySearchFunc(cur, u.Key, func(c ResourceStatus, key string) int { return strings.Compare(c.Key, key) }); ok {
			was = cur[i].Corrections
		}
		if u.Corrections > was {
			if out == nil {
				out = map[string]uint32{}
			}
			out[u.Key] = u.Corrections
		}
	}
	return out
}

// emitStatus publishes a device's status transition, a drift event for
// each resource that drifted or whose local change is now tolerated, and
// one for each resource whose drift the agent corrected.
func (f *FSM) emitStatus(index uint64, owner string, tr *StatusTransition, corrected map[string]uint32) {
	f.emit(index, Event{
		Kind: KindStatus, Time: tr.Time, Device: tr.Device, Revision: tr.Revision,
		Status: tr.Status, Reason: tr.Reason, Resources: tr.ResourceStates, Message: "judged by " + owner,
	})
	for _, key := range slices.Sorted(maps.Keys(tr.ResourceStates)) {
		switch st := tr.ResourceStates[key]; st {
		case "drifted", "overridden": // scheduler.StatusDrifted, StatusOverridden
			detail := ""
			for _, r := range tr.Resources {
				if r.Key == key {
					detail = r.Detail
				}
			}
			f.emit(index, Event{
				Kind: KindDrift, Action: st, Time: tr.Time, Device: tr.Device, Revision: tr.Revision,
				Status: st, Resources: map[string]string{key: st}, Message: detail,
			})
		}
	}
	for _, key := range slices.Sorted(maps.Keys(corrected)) {
		f.emit(index, Event{
			Kind: KindDrift, Action: ResourceCorrected, Time: tr.Time, Device: tr.Device, Revision: tr.Revision,
			Resources: map[string]string{key: ResourceCorrected},
			Message:   fmt.Sprintf("drift corrected by the agent (%s since it started)", times(corrected[key])),
		})
	}
}

func times(n uint32) string {
	if n == 1 {
		return "once"
	}
	return fmt.Sprintf("%d times", n)
}

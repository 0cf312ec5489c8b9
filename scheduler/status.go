package scheduler

import (
	"slices"
	"strings"

	"github.com/meteor-edge/meteor/fsm"
)

// Resource states, from a comparison of intended, applied and effective.
const (
	StatePending     = "pending"     // the agent has not acknowledged the revision that asks for it
	StateProgressing = "progressing" // acknowledged, not applied yet
	StateFailed      = "failed"      // the last apply failed
	StateApplied     = "applied"     // applied, effective state not verified (no probe result)
	StateConverged   = "converged"   // applied matches intended and the probe agrees
	StateDrifted     = "drifted"     // applied, but the probe sees something else
	StateRemoving    = "removing"    // held by the device, no longer intended
)

// ResourceView puts the three states of one resource side by side.
type ResourceView struct {
	Key              string
	IntendedDigest   string // hex; empty when no longer intended
	IntendedRevision uint64
	Reported         *fsm.ResourceStatus // nil when the agent never reported it
	State            string
}

// DeviceView compares a device's desired state with its last report.
type DeviceView struct {
	DesiredRevision uint64
	Resources       []ResourceView
	// Converged is true when every intended resource is converged and
	// nothing else is held.
	Converged bool
	Counts    map[string]int
}

// Compare builds the view of a device from its desired state and record.
func Compare(d *DesiredState, rec *fsm.DeviceRecord) DeviceView {
	v := DeviceView{DesiredRevision: d.Revision, Counts: map[string]int{}}
	if len(d.Resources) > 0 {
		v.Resources = make([]ResourceView, 0, len(d.Resources))
	}
	if reportedSorted(rec.Resources) {
		// Both lists are sorted by key, as a record's resources always
		// are (fsm.MergeResources): walk them side by side.
		v.Resources = compareSorted(v.Resources, d, rec)
	} else {
		v.Resources = compareByMap(v.Resources, d, rec)
	}
	v.Converged = true
	for _, r := range v.Resources {
		v.Counts[r.State]++
		if r.State != StateConverged {
			v.Converged = false
		}
	}
	return v
}

// intendedView is the view of r, intended by d, as rec reports rep.
func intendedView(d *DesiredState, rec *fsm.DeviceRecord, r *Resource, rep *fsm.ResourceStatus) ResourceView {
	rv := ResourceView{Key: r.Key, IntendedDigest: r.hexDigest(), IntendedRevision: r.Revision, Reported: rep}
	// A revision released by a rollout reaches the agent with the
	// desired state of the release, not with the intent's revision.
	rv.State = resourceState(rv, rec.AckedRevision, max(r.Revision, d.Since[r.Intent]))
	return rv
}

// heldView is the view of a resource rec holds and d no longer intends.
func heldView(rep *fsm.ResourceStatus) ResourceView {
	return ResourceView{Key: rep.Key, Reported: rep, State: StateRemoving}
}

// compareSorted appends to out the views of d's resources and rec's,
// both sorted by key, each key once.
func compareSorted(out []ResourceView, d *DesiredState, rec *fsm.DeviceRecord) []ResourceView {
	i, j := 0, 0
	for i < len(d.Resources) || j < len(rec.Resources) {
		switch {
		case j == len(rec.Resources) || i < len(d.Resources) && d.Resources[i].Key < rec.Resources[j].Key:
			out = append(out, intendedView(d, rec, d.Resources[i], nil))
			i++
		case i == len(d.Resources) || rec.Resources[j].Key < d.Resources[i].Key:
			out = append(out, heldView(&rec.Resources[j]))
			j++
		default:
			out = append(out, intendedView(d, rec, d.Resources[i], &rec.Resources[j]))
			i, j = i+1, j+1
		}
	}
	return out
}

// compareByMap is compareSorted for a record whose resources are in any
// order (the last of a key counts).
func compareByMap(out []ResourceView, d *DesiredState, rec *fsm.DeviceRecord) []ResourceView {
	reported := map[string]*fsm.ResourceStatus{}
	for i := range rec.Resources {
		reported[rec.Resources[i].Key] = &rec.Resources[i]
	}
	for _, r := range d.Resources {
		out = append(out, intendedView(d, rec, r, reported[r.Key]))
		delete(reported, r.Key)
	}
	for _, rep := range reported {
		out = append(out, heldView(rep))
	}
	slices.SortFunc(out, func(a, b ResourceView) int { return strings.Compare(a.Key, b.Key) })
	return out
}

// reportedSorted reports whether rs is sorted by key, each key once.
func reportedSorted(rs []fsm.ResourceStatus) bool {
	for i := 1; i < len(rs); i++ {
		if rs[i-1].Key >= rs[i].Key {
			return false
		}
	}
	return true
}

func resourceState(rv ResourceView, acked, sent uint64) string {
	rep := rv.Reported
	switch {
	case rep != nil && rep.AppliedDigest == rv.IntendedDigest:
		switch rep.Effective {
		case "ok":
			return StateConverged
		case "mismatch":
			return StateDrifted
		}
		return StateApplied
	case rep != nil && rep.LastError != "":
		return StateFailed
	case acked < sent:
		return StatePending
	}
	return StateProgressing
}

package scheduler

import (
	"encoding/hex"
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
	reported := map[string]*fsm.ResourceStatus{}
	for i := range rec.Resources {
		reported[rec.Resources[i].Key] = &rec.Resources[i]
	}
	v := DeviceView{DesiredRevision: d.Revision, Counts: map[string]int{}}
	for _, r := range d.Resources {
		rv := ResourceView{Key: r.Key, IntendedDigest: hex.EncodeToString(r.Digest[:]), IntendedRevision: r.Revision, Reported: reported[r.Key]}
		// A revision released by a rollout reaches the agent with the
		// desired state of the release, not with the intent's revision.
		rv.State = resourceState(rv, rec.AckedRevision, max(r.Revision, d.Since[r.Intent]))
		delete(reported, r.Key)
		v.Resources = append(v.Resources, rv)
	}
	for key, rep := range reported {
		v.Resources = append(v.Resources, ResourceView{Key: key, Reported: rep, State: StateRemoving})
	}
	slices.SortFunc(v.Resources, func(a, b ResourceView) int { return strings.Compare(a.Key, b.Key) })
	v.Converged = true
	for _, r := range v.Resources {
		v.Counts[r.State]++
		if r.State != StateConverged {
			v.Converged = false
		}
	}
	return v
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

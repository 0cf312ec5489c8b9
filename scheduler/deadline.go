package scheduler

import (
	"fmt"
	"time"

	"github.com/meteor-edge/meteor/fsm"
)

// Intended is what Classify needs of a desired resource beyond its view:
// its class, and its rotation window (intent.Rotation), whose deadline
// the servers watch.
type Intended struct {
	Class string
	// NotBefore and Deadline are the rotation window's; zero for none.
	NotBefore, Deadline time.Time
}

// IntendedOf returns what Classify needs of each resource of a desired
// state, by key.
func IntendedOf(d *DesiredState) map[string]Intended {
	out := make(map[string]Intended, len(d.Resources))
	for _, r := range d.Resources {
		nb, dl := r.Resource.Rotation.Times()
		out[r.Key] = Intended{Class: r.Resource.EffectiveClass(), NotBefore: nb, Deadline: dl}
	}
	return out
}

// deadlineMargin is how many times the time a device is expected to need
// must fit before a deadline for it not to be at risk: a device is
// flagged well before it misses.
const deadlineMargin = 2

// judgeDeadline judges a resource with a rotation deadline that its
// device has not applied yet: deadline-missed once the deadline passed,
// deadline-at-risk when the device will not make it at its current rate,
// judged from its own link history (how long it is offline now, how long
// its recent gaps lasted) and its class's cadence and backoff; "" when
// neither. status is the resource's status otherwise, and reason its
// reason, which the deadline's reason keeps.
func judgeDeadline(rv ResourceView, in Intended, rec *fsm.DeviceRecord, cl Class, status, reason string, now time.Time) (string, string) {
	if in.Deadline.IsZero() || rv.IntendedDigest == "" {
		return "", ""
	}
	if rep := rv.Reported; rep != nil && rep.AppliedDigest == rv.IntendedDigest {
		return "", "" // applied: the deadline is met
	}
	deadline := in.Deadline.UTC().Format(time.RFC3339)
	if !now.Before(in.Deadline) {
		return StatusDeadlineMissed, fmt.Sprintf("rotation deadline %s missed %s ago; %s: %s", deadline, fmtDuration(now.Sub(in.Deadline)), status, reason)
	}
	need, why := expectedApply(rv, rec, cl, now)
	start := now
	if in.NotBefore.After(now) {
		start = in.NotBefore
		why += fmt.Sprintf("; its window opens at %s", in.NotBefore.UTC().Format(time.RFC3339))
	}
	if start.Add(deadlineMargin * need).Before(in.Deadline) {
		return "", ""
	}
	return StatusDeadlineAtRisk, fmt.Sprintf("rotation deadline %s at risk (%s left): expected applied in about %s (%s); %s: %s",
		deadline, fmtDuration(in.Deadline.Sub(now)), fmtDuration(need), why, status, reason)
}

// expectedApply is how long the device is expected to take to apply a
// change it has not applied, and why: until it is reached (nothing while
// connected; offline, the longest of its recent gaps, or as long again
// as it has been offline when that is longer), then a pull (a change
// waits for one when a push is lost) and, for a failing resource, the
// class's next retry.
func expectedApply(rv ResourceView, rec *fsm.DeviceRecord, cl Class, now time.Time) (time.Duration, string) {
	var reach time.Duration
	why := "connected"
	if !rec.Connected {
		// The owner measures silence on its own clock (LastSeen as it
		// judges it); the gaps are durations, which no clock skews.
		offline := time.Duration(0)
		if rec.LastSeen != 0 {
			offline = now.Sub(time.Unix(0, rec.LastSeen))
		}
		longest := rec.Link.LongestGap()
		if longest > offline {
			reach = longest - offline
			why = fmt.Sprintf("offline for %s, its recent gaps lasted up to %s", fmtDuration(offline), fmtDuration(longest))
		} else {
			reach = offline
			why = fmt.Sprintf("offline for %s, longer than any recent gap", fmtDuration(offline))
		}
	}
	need := reach + cl.PullInterval
	why += fmt.Sprintf("; then a pull (%s)", fmtDuration(cl.PullInterval))
	if rep := rv.Reported; rep != nil && rep.LastError != "" {
		retry := cl.RetryDelay(int(rep.Attempts) + 1)
		need += retry
		why += fmt.Sprintf(" and a retry after %s (attempt %d failed)", fmtDuration(retry), rep.Attempts)
	}
	return need, why
}

package scheduler

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/meteor-edge/meteor/fsm"
	"github.com/meteor-edge/meteor/fsm/intent"
)

// DefaultClass is the class of a resource that names none, or names one
// that is not configured.
const DefaultClass = "default"

// Class is the cadence and risk profile of one reconcile class
// (intent.Class). A device is judged by the strictest class among its
// resources.
type Class = intent.Class

// Classes maps class names to their profiles.
type Classes map[string]Class

// DefaultClasses returns the built-in classes (intent.BuiltinClasses).
func DefaultClasses() Classes { return intent.BuiltinClasses() }

// For returns the named class; an unknown or empty name gets the default
// class (the built-in one if c has none).
func (c Classes) For(name string) Class {
	if cl, ok := c[name]; ok {
		return cl
	}
	if cl, ok := c[DefaultClass]; ok {
		return cl
	}
	return DefaultClasses()[DefaultClass]
}

// Validate checks that a default class exists and every class is sane.
func (c Classes) Validate() error {
	var errs []error
	if _, ok := c[DefaultClass]; !ok {
		errs = append(errs, fmt.Errorf("no %q class", DefaultClass))
	}
	for _, name := range slices.Sorted(maps.Keys(c)) {
		if c[name].Name != name {
			errs = append(errs, fmt.Errorf("class %q: name %q does not match its key", name, c[name].Name))
		}
		if err := c[name].Validate(); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// Device (and resource) statuses, as the API reports them. Resources
// take the first seven and the deadline ones; unreachable and stuck are
// judgements on the device.
const (
	StatusPending     = "pending"     // the desired revision is not acknowledged yet
	StatusProgressing = "progressing" // acknowledged and moving
	StatusConverged   = "converged"   // applied matches intended and the probe agrees
	StatusDrifted     = "drifted"     // the probe sees something other than what was applied
	StatusOverridden  = "overridden"  // a local change the drift policy tolerates
	StatusBlocked     = "blocked"     // a precondition or workload lock holds a step back
	StatusFailed      = "failed"      // the last apply failed; retrying with backoff
	StatusUnreachable = "unreachable" // no contact past the class threshold: a comms gap
	StatusStuck       = "stuck"       // connected, but no progress past the progress deadline
	StatusFighting    = "fighting"    // something on the device keeps undoing a resource; corrections back off
	// StatusDeadlineAtRisk: a resource's rotation deadline will be missed
	// at the device's current rate (its link history, its class's
	// backoff); StatusDeadlineMissed: it passed with the resource not
	// applied.
	StatusDeadlineAtRisk = "deadline-at-risk"
	StatusDeadlineMissed = "deadline-missed"
)

// Statuses lists every device status, most urgent first.
func Statuses() []string {
	out := slices.Clone(byUrgency)
	slices.Reverse(out)
	return out
}

// byUrgency orders the statuses, least urgent first (Urgency).
var byUrgency = []string{StatusConverged, StatusOverridden, StatusDrifted, StatusProgressing,
	StatusPending, StatusStuck, StatusFighting, StatusBlocked, StatusFailed, StatusUnreachable, StatusDeadlineAtRisk, StatusDeadlineMissed}

// Urgency ranks statuses for the device level, most urgent highest:
// deadline-missed > deadline-at-risk > unreachable > failed > blocked >
// fighting > stuck > pending > progressing > drifted > overridden >
// converged. An unknown status ranks below all.
//
// A missed or threatened deadline comes first: it is the one an operator
// must act on before a date, and a device offline for long is the usual
// reason for it (its reason says so). Unreachable comes next because
// nothing else the control plane knows is current during a comms gap;
// stuck ranks below failed and blocked, which already explain why the
// device does not move, and above pending and progressing, which it
// qualifies.
func Urgency(status string) int { return slices.Index(byUrgency, status) }

// DeviceStatus is the classified status of a device.
type DeviceStatus struct {
	Status string
	// Reason is one sentence a person can act on.
	Reason string
	// Since is when the evidence for the status dates from: the last
	// contact (unreachable), the last progress (stuck, pending,
	// progressing, converged), or the last change of the resource that
	// decided it (failed, blocked, drifted, overridden). Zero if unknown.
	Since time.Time
	// NextRetry is when the agent will next retry (failed only; zero for
	// a terminal failure).
	NextRetry time.Time
	// Resources are the per-resource statuses, sorted by key. While the
	// device is unreachable they are the last known ones.
	Resources []ResourceStatus
	// Recheck is the earliest time at which the same view, record and
	// progress mark could be judged otherwise, by time alone: when a
	// connected device with work left turns stuck, or a silent one
	// unreachable. It is now itself when a resource has a rotation window
	// or deadline (its judgement moves with the time left), and zero when
	// time alone cannot change the judgement (a device that is done or
	// waits on its own side, stuck, unreachable, or never seen).
	Recheck time.Time
}

// ResourceStatus is the classified status of one resource.
type ResourceStatus struct {
	Key    string
	Class  string
	Status string
	Reason string
	// NextRetry is set for a failed resource that will be retried.
	NextRetry time.Time
}

// ProgressMark records the last time a device made progress. The caller
// (the device's owner) keeps one per device: on every new observation it
// calls NextProgressMark with the stored mark and stores the result, then
// passes that to Classify. A mark is a plain value and can be persisted;
// a zero mark means "not observed yet" and never makes a device stuck.
type ProgressMark struct {
	// Revision is the acknowledged revision at the mark.
	Revision uint64
	// Fingerprint identifies the per-resource states at the mark; it
	// changes whenever any of them does.
	Fingerprint string
	// Remaining is how many steps the device had left to converged.
	Remaining int
	// At is when the device last progressed.
	At time.Time
}

// NextProgressMark returns prev advanced to now if the device progressed:
// it acknowledged a higher revision, or its resources took a net step
// toward converged (fewer steps remaining), or it had nothing left to do
// at the mark and now has (new work starts the clock). Otherwise At stays
// and only the observed states are updated, so a regression followed by a
// recovery counts as progress. Feeding the same observation twice
// returns the same mark. A mark restored with only Revision and At (no
// Fingerprint, e.g. after the owner moved) keeps At until the device
// acknowledges a higher revision; its states are recorded for next time.
func NextProgressMark(prev ProgressMark, v DeviceView, rec *fsm.DeviceRecord, now time.Time) ProgressMark {
	h := sha256.New()
	remaining := 0
	for _, rv := range v.Resources {
		st := rv.State
		if rv.Reported != nil {
			if agent, _ := ReportedState(rv.Reported); agent == StatusOverridden {
				st = StatusOverridden
			}
		}
		fmt.Fprintf(h, "%s=%s\n", rv.Key, st)
		remaining += stepsLeft(st)
	}
	next := ProgressMark{Revision: rec.AckedRevision, Fingerprint: hex.EncodeToString(h.Sum(nil)[:8]), Remaining: remaining, At: prev.At}
	known := prev.Fingerprint != "" // states at the mark are known
	if prev.At.IsZero() || rec.AckedRevision > prev.Revision || known && (remaining < prev.Remaining || prev.Remaining == 0 && remaining > 0) {
		next.At = now
	}
	return next
}

// stepsLeft is how far a resource state is from converged.
func stepsLeft(state string) int {
	switch state {
	case StatePending:
		return 3
	case StateProgressing, StateFailed:
		return 2
	case StateApplied, StateDrifted, StateRemoving:
		return 1
	}
	return 0 // converged, overridden
}

// Classify turns a device's view (Compare) and record into a status.
// classes may be nil (DefaultClasses); resources maps each desired key to
// its class and rotation window (IntendedOf; a missing key is of the
// default class); progress is the device's mark after NextProgressMark
// for the same observation. It is pure: the same input gives the same
// output.
func Classify(v DeviceView, rec *fsm.DeviceRecord, classes Classes, resources map[string]Intended, now time.Time, progress ProgressMark) DeviceStatus {
	if classes == nil {
		classes = DefaultClasses()
	}
	var out DeviceStatus
	var subject *ResourceStatus // the resource that decides the device status
	var since time.Time
	counts := map[string]int{}
	pendingRev := uint64(0)
	out.Resources = make([]ResourceStatus, 0, len(v.Resources))
	var deadlines []int          // resources whose rotation deadline is missed or at risk
	waiting := map[string]bool{} // resources whose rotation window has not opened
	windowed := false            // a resource has a rotation window or deadline
	for _, rv := range v.Resources {
		in := resources[rv.Key]
		windowed = windowed || !in.Deadline.IsZero() || !in.NotBefore.IsZero()
		cl := classes.For(in.Class)
		rs, updated := classifyResource(rv, rec, cl)
		if in.NotBefore.After(now) && (rs.Status == StatusPending || rs.Status == StatusProgressing) &&
			(rv.Reported == nil || rv.Reported.AppliedDigest != rv.IntendedDigest) {
			// Not due yet: no step before its window opens.
			rs.Reason = "its rotation window opens at " + in.NotBefore.UTC().Format(time.RFC3339) + "; " + rs.Reason
			waiting[rv.Key] = true
		}
		if st, why := judgeDeadline(rv, in, rec, cl, rs.Status, rs.Reason, now); st != "" {
			rs.Status, rs.Reason, rs.NextRetry = st, why, time.Time{}
			deadlines = append(deadlines, len(out.Resources))
			out.Resources = append(out.Resources, rs)
			continue // judged at the device level after the comms gap
		}
		out.Resources = append(out.Resources, rs) // capacity is fixed: pointers stay valid
		counts[rs.Status]++
		if rs.Status == StatusPending {
			pendingRev = max(pendingRev, rv.IntendedRevision)
		}
		if subject == nil || Urgency(rs.Status) > Urgency(subject.Status) || rs.Status == StatusFailed && subject.Status == StatusFailed && earlierRetry(rs.NextRetry, subject.NextRetry) {
			subject, since = &out.Resources[len(out.Resources)-1], updated
		}
	}
	out.Status, out.Since = StatusConverged, progress.At
	switch {
	case subject == nil && rec.BlockedReason == "" && len(deadlines) > 0:
		out.Reason = "" // the deadline below decides
	case subject == nil && rec.BlockedReason == "":
		out.Reason = "no resources are desired"
	case subject == nil || subject.Status != StatusBlocked && Urgency(subject.Status) < Urgency(StatusBlocked) && rec.BlockedReason != "":
		out.Status, out.Reason, out.Since = StatusBlocked, rec.BlockedReason, time.Time{}
	default:
		out.Status = subject.Status
		more := counts[subject.Status] - 1
		switch subject.Status {
		case StatusConverged:
			out.Reason = fmt.Sprintf("all %d resources converged", len(out.Resources))
			if len(out.Resources) == 1 {
				out.Reason = "its 1 resource converged"
			}
		case StatusPending:
			out.Reason = fmt.Sprintf("desired revision %d not acknowledged yet (device acknowledged %d)", pendingRev, rec.AckedRevision)
		case StatusProgressing:
			of := "resources"
			if len(out.Resources) == 1 {
				of = "resource"
			}
			out.Reason = fmt.Sprintf("%d of %d %s converged; %s: %s", counts[StatusConverged], len(out.Resources), of, subject.Key, subject.Reason)
		case StatusBlocked:
			out.Reason, out.Since = rec.BlockedReason, since
			if out.Reason == "" {
				out.Reason = subject.Key + ": " + subject.Reason
			}
		default: // failed, drifted, overridden
			out.Reason, out.Since, out.NextRetry = subject.Key+": "+subject.Reason, since, subject.NextRetry
			if more > 0 {
				out.Reason += fmt.Sprintf("; %d more %s", more, subject.Status)
			}
		}
	}

	// Stuck: connected, with work left, and no progress past the
	// strictest deadline among the resources still moving.
	// A resource waiting for its rotation window is not late.
	moving := func(rs ResourceStatus) bool {
		return (rs.Status == StatusPending || rs.Status == StatusProgressing) && !waiting[rs.Key]
	}
	if rec.Connected && !progress.At.IsZero() && (out.Status == StatusPending || out.Status == StatusProgressing) && slices.ContainsFunc(out.Resources, moving) {
		cl := strictest(classes, out.Resources, moving, func(c Class) time.Duration { return c.ProgressDeadline })
		if idle := now.Sub(progress.At); idle > cl.ProgressDeadline {
			out.Status, out.Since = StatusStuck, progress.At
			out.Reason = fmt.Sprintf("no progress for %s (%s allows %s); last state: %s %s: %s",
				fmtDuration(idle), cl.Name, fmtDuration(cl.ProgressDeadline), subject.Key, subject.Status, subject.Reason)
		} else {
			out.Recheck = progress.At.Add(cl.ProgressDeadline + 1) // the first instant idle exceeds it
		}
	}

	// Unreachable: disconnected and silent past the strictest threshold
	// among all its resources. A device never seen is not judged.
	if !rec.Connected && rec.LastSeen != 0 {
		cl := strictest(classes, out.Resources, func(ResourceStatus) bool { return true },
			func(c Class) time.Duration { return c.UnreachableAfter })
		last := time.Unix(0, rec.LastSeen)
		if gap := now.Sub(last); gap > cl.UnreachableAfter {
			out.Status, out.Since, out.NextRetry = StatusUnreachable, last, time.Time{}
			out.Reason = fmt.Sprintf("no contact for %s (%s allows %s)", fmtDuration(gap), cl.Name, fmtDuration(cl.UnreachableAfter))
		} else {
			out.Recheck = last.Add(cl.UnreachableAfter + 1)
		}
	}
	if windowed {
		// A window opening, a deadline passing and the time left against
		// the time needed (judgeDeadline) all move with the clock.
		out.Recheck = now
	}

	// A rotation deadline missed or at risk, most urgent of all.
	var worst *ResourceStatus
	more := 0
	for _, i := range deadlines {
		rs := &out.Resources[i]
		switch {
		case worst == nil || Urgency(rs.Status) > Urgency(worst.Status):
			worst, more = rs, 0
		case rs.Status == worst.Status:
			more++
		}
	}
	if worst != nil {
		out.Status, out.Since, out.NextRetry = worst.Status, time.Time{}, time.Time{}
		out.Reason = worst.Key + ": " + worst.Reason
		if more > 0 {
			out.Reason += fmt.Sprintf("; %d more %s", more, worst.Status)
		}
	}
	return out
}

// classifyResource returns a resource's status and when the agent last
// saw it change (zero if unknown).
func classifyResource(rv ResourceView, rec *fsm.DeviceRecord, cl Class) (ResourceStatus, time.Time) {
	rs := ResourceStatus{Key: rv.Key, Class: cl.Name}
	rep := rv.Reported
	var state, detail, lastErr string
	var updated time.Time
	if rep != nil {
		state, detail = ReportedState(rep)
		lastErr = rep.LastError
		if rep.UpdatedAt != 0 {
			updated = time.Unix(0, rep.UpdatedAt)
		} else if rec.LastSeen != 0 {
			updated = time.Unix(0, rec.LastSeen)
		}
	}
	set := func(status, reason string) { rs.Status, rs.Reason = status, reason }
	switch {
	case rv.State == StatePending:
		set(StatusPending, fmt.Sprintf("revision %d not acknowledged yet (device acknowledged %d)", rv.IntendedRevision, rec.AckedRevision))
	case rv.State == StateFailed || lastErr != "" && (state == StatusFailed || rv.State == StateRemoving):
		attempts := int(rep.Attempts)
		switch {
		case strings.HasPrefix(detail, "terminal"):
			set(StatusFailed, fmt.Sprintf("apply failed (attempt %d, terminal): %s; change the intent to retry", attempts, lastErr))
		case updated.IsZero():
			set(StatusFailed, fmt.Sprintf("apply failed (attempt %d): %s; retrying", attempts, lastErr))
		default:
			// An absolute time keeps the reason stable between evaluations.
			rs.NextRetry = updated.Add(cl.RetryDelay(attempts))
			set(StatusFailed, fmt.Sprintf("apply failed (attempt %d): %s; next retry at %s", attempts, lastErr, rs.NextRetry.UTC().Format(time.RFC3339)))
		}
	case rv.State == StateRemoving:
		set(StatusProgressing, "no longer desired; the device has not removed it yet")
	case rep != nil && rep.Hold != nil && rep.Hold.Kind == HoldFighting:
		h := rep.Hold
		set(StatusFighting, fmt.Sprintf("something on the device keeps undoing it: drift corrected %d times since %s; corrections back off, the next not before %s",
			h.Count, nsTime(h.Since), nsTime(h.Until)))
	case state == StatusBlocked && rv.State != StateConverged:
		set(StatusBlocked, or(detail, "blocked by a precondition"))
	case rep != nil && rep.Hold != nil && rep.Hold.Kind == HoldOverride:
		h := rep.Hold
		set(StatusOverridden, fmt.Sprintf("overridden on the device by %s until %s: %s", h.Holder, nsTime(h.Until), h.Note))
	case state == StatusOverridden:
		set(StatusOverridden, or(detail, "a tolerated local change"))
	case rv.State == StateDrifted || state == StatusDrifted:
		set(StatusDrifted, or(detail, "the probe sees something other than what was applied"))
	case rv.State == StateConverged:
		set(StatusConverged, "applied and confirmed by the probe")
	case rv.State == StateApplied:
		set(StatusProgressing, "applied; the probe has not confirmed it yet")
	default:
		set(StatusProgressing, "acknowledged; not applied yet")
	}
	return rs, updated
}

// ReportedState returns the agent's state of a reported resource (one of
// the first seven statuses, or empty if unknown) and its detail.
//
// Agents of protocol 1.1 report the state as a field. A resource without
// one was reported by an agent of protocol 1.0 (or committed before
// fsm.ResourceStatus had the field), whose detail starts with the state
// instead ("blocked: requires app/db"): for those records, and only for
// them, the state is read from that prefix (legacyDetail).
func ReportedState(rep *fsm.ResourceStatus) (state, detail string) {
	if rep.State != "" {
		return rep.State, rep.Detail
	}
	return legacyDetail(rep.Detail)
}

// legacyDetail splits the detail of a protocol 1.0 agent into the state
// it starts with and the rest. A detail that does not start with a known
// state is all rest.
func legacyDetail(detail string) (state, rest string) {
	state, rest, _ = strings.Cut(detail, ":")
	switch state {
	case StatusPending, StatusProgressing, StatusConverged, StatusDrifted, StatusOverridden, StatusBlocked, StatusFailed:
		return state, strings.TrimSpace(rest)
	}
	return "", detail
}

// Hold kinds an agent reports (fsm.ResourceHold.Kind), as classifying
// reads them.
const (
	HoldOverride     = "override"
	HoldFighting     = "fighting"
	HoldWindow       = "window"
	HoldLock         = "lock"
	HoldPrecondition = "precondition"
	HoldSchedule     = "schedule"
)

// nsTime formats a time in Unix nanoseconds for a reason.
func nsTime(ns int64) string { return time.Unix(0, ns).UTC().Format(time.RFC3339) }

// earlierRetry orders retry times, a zero time (no retry) last.
func earlierRetry(a, b time.Time) bool {
	return !a.IsZero() && (b.IsZero() || a.Before(b))
}

// strictest returns the class with the smallest limit among the classes
// of the resources that match; the default class if none does.
func strictest(classes Classes, rs []ResourceStatus, match func(ResourceStatus) bool, limit func(Class) time.Duration) Class {
	var best Class
	found := false
	for _, r := range rs {
		if cl := classes.For(r.Class); match(r) && (!found || limit(cl) < limit(best)) {
			best, found = cl, true
		}
	}
	if !found {
		return classes.For(DefaultClass)
	}
	return best
}

// fmtDuration prints whole seconds and drops zero trailing units: 7m12s,
// 2m, 1h, 1h5m.
func fmtDuration(d time.Duration) string {
	if d >= time.Second {
		d = d.Truncate(time.Second)
	}
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = s[:len(s)-2]
	}
	if strings.HasSuffix(s, "h0m") {
		s = s[:len(s)-2]
	}
	return s
}

func or(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

package scheduler

import (
	"cmp"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/meteor-edge/meteor/fsm"
	"github.com/meteor-edge/meteor/fsm/intent"
)

// AssignmentKey names the revisions a device is assigned among the intents
// that have a rollout: two devices with equal selection labels and equal
// keys have the same desired state.
func AssignmentKey(read *fsm.Read, device string) (string, error) {
	ros, err := read.Rollouts(nil)
	if err != nil {
		return "", err
	}
	var b strings.Builder
	for _, ro := range ros {
		rel, err := read.Release(ro.Intent, device)
		if err != nil {
			return "", err
		}
		rev := ro.Stable
		if rel != nil {
			rev = rel.Revision
		}
		b.WriteString(ro.Intent)
		b.WriteByte('=')
		b.WriteString(strconv.FormatUint(rev, 10))
		b.WriteByte(',')
	}
	return b.String(), nil
}

// Progress of one targeted device with a rollout's revision.
const (
	// ProgressWaiting: not released yet; the device holds the stable
	// revision.
	ProgressWaiting = "waiting"
	// ProgressPending: released; the agent has not acknowledged it.
	ProgressPending = "pending"
	// ProgressApplying: acknowledged, not converged yet.
	ProgressApplying = "applying"
	// ProgressConverged: every resource of the revision is applied and
	// its effective probe agrees, and nothing the revision dropped is
	// still held.
	ProgressConverged = "converged"
	// ProgressFailed: an apply failed (the agent retries).
	ProgressFailed = "failed"
	// ProgressUnhealthy: applied, but the effective probe disagrees.
	ProgressUnhealthy = "unhealthy"
	// ProgressStuck: released longer than the progress deadline without
	// converging.
	ProgressStuck = "stuck"
	// ProgressUnreachable: not converged, and its owner has not heard
	// from it within its class's bound (a comms gap, not a failure).
	ProgressUnreachable = "unreachable"
)

// Judge returns the progress of a device released revision want of an
// intent: want are the resources the revision asks of the device (none if
// its selector no longer matches), rec what the device last reported, and
// acked whether the agent acknowledged the desired state with the release.
// It compares digests and the effective probe: an apply that succeeded is
// not converged until the probe agrees. acked tells a device that has not
// received the release (pending) from one working on it (applying).
func Judge(intentName string, want []*Resource, rec *fsm.DeviceRecord, acked bool) string {
	reported := make(map[string]*fsm.ResourceStatus, len(rec.Resources))
	for i := range rec.Resources {
		r := &rec.Resources[i]
		if name, _, ok := intent.SplitResourceKey(r.Key); ok && name == intentName {
			reported[r.Key] = r
		}
	}
	converged, failed, unhealthy := true, false, false
	for _, r := range want {
		rep := reported[r.Key]
		delete(reported, r.Key)
		switch {
		case rep == nil:
			converged = false
		case rep.AppliedDigest == r.hexDigest():
			switch rep.Effective {
			case "ok":
			case "mismatch":
				unhealthy, converged = true, false
			default:
				converged = false
			}
		case rep.LastError != "":
			failed, converged = true, false
		default:
			converged = false
		}
	}
	if len(reported) > 0 {
		// Resources the revision dropped are still held.
		converged = false
	}
	switch {
	case failed:
		return ProgressFailed
	case unhealthy:
		return ProgressUnhealthy
	case !converged && rec.Status == StatusUnreachable:
		return ProgressUnreachable
	case converged:
		// What it holds is what the revision asks, probe included, as the
		// device view (Compare) says, whether or not the agent has
		// acknowledged the release yet (a device that already held this
		// content, as after an undo, needs nothing).
		return ProgressConverged
	case !acked:
		return ProgressPending
	}
	return ProgressApplying
}

// Target is one device a rollout targets: it matches the selector of the
// revision rolled out, or of the stable one.
type Target struct {
	ID     string
	Labels map[string]string
	// Release is the device's release of the rollout's revision; nil if
	// it has none.
	Release *fsm.ReleaseRecord
	// Progress is Judge's verdict for a released device (ignored for one
	// not released). Acked says the agent acknowledged the release.
	Progress string
	Acked    bool
	// Window is the device's maintenance window as of Input.Now, for a
	// rollout released in the devices' maintenance windows
	// (intent.Rollout.Maintenance); nil when none selects the device.
	Window *TargetWindow
}

// TargetWindow says whether a device's maintenance window is open.
type TargetWindow struct {
	Open bool
	// Opens is when the next one opens, Name which, while none is open.
	Opens time.Time
	Name  string
}

// Input is what a rollout decision is made from.
type Input struct {
	Now     time.Time
	Rollout *fsm.RolloutRecord
	Spec    *intent.Rollout
	Targets []Target
}

// WaveView is one wave of a rollout, as judged now.
type WaveView struct {
	Number int    `json:"number"`
	Name   string `json:"name"`
	// State is pending, waiting-approval, progressing, done or paused.
	State     string `json:"state"`
	Devices   int    `json:"devices"`
	Released  int    `json:"released"`
	Converged int    `json:"converged"`
	Failed    int    `json:"failed"`
	Stuck     int    `json:"stuck"`
	// Unreachable counts released devices not converged that are out of
	// contact: they hold no maxParallel slot, and still count against the
	// gate until they converge.
	Unreachable int      `json:"unreachable"`
	Waiting     string   `json:"waiting_for,omitempty"`
	Sample      []string `json:"sample_failed,omitempty"`
}

// Decision is the outcome of Decide: the step to commit (nil when nothing
// changes) and the view of the rollout it was decided on.
type Decision struct {
	Step   *fsm.RolloutStepRequest
	Waves  []WaveView
	Counts fsm.RolloutCounts
	// Waiting says what the rollout waits for, if anything.
	Waiting string
}

// Wave states in WaveView.State.
const (
	WavePending         = "pending"
	WaveWaitingApproval = "waiting-approval"
	WaveProgressing     = "progressing"
	WaveDone            = "done"
	WavePaused          = "paused"
)

// waveOrder is a device's place in the order devices are released in: a
// hash of the intent and the device, so each intent picks a different but
// stable pilot set, independent of the revision.
func waveOrder(intentName, device string) uint64 {
	h := sha256.Sum256([]byte(intentName + "\x00" + device))
	return binary.BigEndian.Uint64(h[:8])
}

// Assign returns the wave (index) of each target: a selector wave claims
// the devices it matches (the first such wave); the others are taken in
// a stable order by hash and fill the count and percentage waves in order,
// percentages being shares of those devices, cumulative. Devices left over
// go to the last wave. A released device stays in the wave that released
// it.
func Assign(intentName string, spec *intent.Rollout, targets []Target) []int {
	out := make([]int, len(targets))
	n := max(len(spec.Waves), 1)
	for i, t := range targets {
		out[i] = -1
		if t.Release != nil && t.Release.Wave < n {
			out[i] = t.Release.Wave
			continue
		}
		for w, wave := range spec.Waves {
			if len(wave.Selector) > 0 && (&intent.Intent{Selector: wave.Selector}).Matches(t.Labels) {
				out[i] = w
				break
			}
		}
	}
	// Released devices of count and percentage waves keep their place in
	// the order: count every target not claimed by a selector.
	var ordered []int
	for i, t := range targets {
		if out[i] < 0 || (t.Release != nil && len(spec.Waves) > 0 && len(spec.Waves[out[i]].Selector) == 0) {
			ordered = append(ordered, i)
		}
	}
	slices.SortFunc(ordered, func(a, b int) int { return releaseCmp(intentName, targets[a].ID, targets[b].ID) })
	m := len(ordered)
	last := n - 1
	for w := len(spec.Waves) - 1; w >= 0; w-- {
		if len(spec.Waves[w].Selector) == 0 {
			last = w
			break
		}
	}
	bound, pos := 0, 0
	for w := 0; w < n && pos < m; w++ {
		var wave intent.Wave
		if w < len(spec.Waves) {
			wave = spec.Waves[w]
		}
		switch {
		case len(wave.Selector) > 0:
			continue
		case wave.Count > 0:
			bound += wave.Count
		case wave.Percent > 0:
			bound = max(bound, int(math.Ceil(wave.Percent*float64(m)/100-1e-9)))
		default:
			bound = m
		}
		if w == last {
			bound = m
		}
		for ; pos < min(bound, m); pos++ {
			if i := ordered[pos]; out[i] < 0 {
				out[i] = w
			}
		}
	}
	for i := range out {
		if out[i] < 0 {
			out[i] = last
		}
	}
	return out
}

func pct(part, whole int) float64 {
	if whole == 0 {
		return 100
	}
	return 100 * float64(part) / float64(whole)
}

func share(part, whole int) string {
	return fmt.Sprintf("%d of %d (%s)", part, whole, strconv.FormatFloat(math.Floor(pct(part, whole)*10)/10, 'f', -1, 64)+"%")
}

// Decide judges a rollout and returns what to commit. It is pure: the same
// input gives the same decision, on any server. A rollout that has ended
// or is paused gets a view and no step.
func Decide(in Input) Decision {
	ro, spec := in.Rollout, in.Spec
	now := in.Now.UnixNano()
	assign := Assign(ro.Intent, spec, in.Targets)
	nw := len(ro.Waves)
	type waveDevs struct{ released, unreleased []int }
	devs := make([]waveDevs, nw)
	views := make([]WaveView, nw)
	var counts fsm.RolloutCounts
	counts.Targeted = len(in.Targets)
	for w := range views {
		views[w] = WaveView{Number: w + 1, Name: waveName(spec, w), State: WavePending}
	}
	deadline := spec.ProgressDeadline
	for i, t := range in.Targets {
		w := min(assign[i], nw-1)
		v := &views[w]
		v.Devices++
		if t.Release == nil {
			devs[w].unreleased = append(devs[w].unreleased, i)
			continue
		}
		devs[w].released = append(devs[w].released, i)
		v.Released++
		counts.Released++
		if t.Acked {
			counts.Acked++
		}
		switch p := progressOf(t, now, deadline); p {
		case ProgressConverged:
			v.Converged++
			counts.Converged++
		case ProgressUnreachable:
			v.Unreachable++
		case ProgressFailed, ProgressUnhealthy, ProgressStuck:
			v.Failed++
			counts.Failed++
			if p == ProgressStuck {
				v.Stuck++
			}
			if len(v.Sample) < 5 {
				v.Sample = append(v.Sample, t.ID+" ("+p+")")
			}
		}
	}
	for w := range views {
		switch ws := ro.Waves[w]; {
		case ws.DoneAt != 0:
			views[w].State = WaveDone
		case w == ro.Wave && ro.State == fsm.RolloutPaused:
			views[w].State = WavePaused
		case w == ro.Wave && ro.State == fsm.RolloutWaitingApproval:
			views[w].State = WaveWaitingApproval
		case ws.StartedAt != 0:
			views[w].State = WaveProgressing
		}
	}
	d := Decision{Waves: views, Counts: counts}
	if RolloutStopped(ro.State) {
		d.Waiting = ro.Reason
		return d
	}

	step := &fsm.RolloutStepRequest{
		Intent: ro.Intent, Revision: ro.Revision, Basis: ro.Seq, Time: now,
		State: ro.State, Reason: ro.Reason, Wave: ro.Wave, Waves: slices.Clone(ro.Waves),
	}
	changed := false
	event := func(kind string, wave int, format string, args ...any) {
		step.Events = append(step.Events, fsm.RolloutEvent{Kind: kind, Wave: wave, Message: fmt.Sprintf(format, args...), Counts: &counts})
		changed = true
	}
	setState := func(state, reason string) {
		if step.State != state || step.Reason != reason {
			step.State, step.Reason = state, reason
			changed = true
		}
	}
	fail := func(w int, reason string) {
		if spec.OnFailure.Action == intent.ActionRevert {
			step.Revert = true
			setState(fsm.RolloutReverted, reason+": reverted to "+stableName(ro.Stable))
			event(fsm.EventReverted, w+1, "%s", step.Reason)
			return
		}
		setState(fsm.RolloutPaused, reason+": paused")
		event(fsm.EventPaused, w+1, "%s", step.Reason)
	}

	// The failure policy watches every wave released so far: a device of
	// an earlier wave can fail after its wave passed.
	for w := 0; w <= step.Wave && w < nw; w++ {
		v := views[w]
		if v.Failed > 0 && pct(v.Failed, v.Devices) > spec.OnFailure.Threshold {
			fail(w, fmt.Sprintf("wave %d: %s devices failed, stuck or unhealthy, above the %s threshold (%s)",
				w+1, share(v.Failed, v.Devices), fmtPct(spec.OnFailure.Threshold), strings.Join(v.Sample, ", ")))
			d.Step, d.Waiting = step, step.Reason
			return d
		}
	}

	for w := step.Wave; w < nw; w++ {
		step.Wave = w
		ws := &step.Waves[w]
		v := &views[w]
		wave := waveSpec(spec, w)
		if ws.StartedAt == 0 && wave.Approval && !ws.Approved {
			reason := fmt.Sprintf("wave %d (%s) waits for approval: meteor rollout approve %s --wave %d", w+1, v.Name, ro.Intent, w+1)
			if step.State != fsm.RolloutWaitingApproval {
				event(fsm.EventWaiting, w+1, "%s", reason)
			}
			setState(fsm.RolloutWaitingApproval, reason)
			v.State = WaveWaitingApproval
			d.Waiting = reason
			break
		}
		if step.State == fsm.RolloutWaitingApproval {
			setState(fsm.RolloutProgressing, "")
		}
		// Release within the window and maxParallel.
		if len(devs[w].unreleased) > 0 {
			if spec.Window != nil && !spec.Window.Contains(in.Now) {
				reason := fmt.Sprintf("wave %d waits for the window %s (opens %s)", w+1, spec.Window, spec.Window.NextOpen(in.Now).UTC().Format(time.RFC3339))
				setState(fsm.RolloutProgressing, reason)
				d.Waiting = reason
				break
			}
			unreleased := devs[w].unreleased
			if spec.Maintenance {
				open, next := inMaintenance(in.Targets, unreleased)
				if len(open) == 0 {
					reason := fmt.Sprintf("wave %d waits for its devices' maintenance windows (%s, the next to open, opens %s)", w+1, next.Name, next.Opens.UTC().Format(time.RFC3339))
					setState(fsm.RolloutProgressing, reason)
					d.Waiting = reason
					break
				}
				unreleased = open
			}
			budget := len(unreleased)
			if mp := spec.WaveMaxParallel(w); mp > 0 {
				// Devices that failed, got stuck or are out of contact
				// hold no slot: the failure policy judges the first, and
				// the gate waits for all of them, but they must not
				// stall the rest of the wave.
				inFlight := v.Released - v.Converged - v.Failed - v.Unreachable
				budget = min(budget, max(0, mp-inFlight))
			}
			budget = min(budget, fsm.MaxReleasesPerStep)
			if budget > 0 {
				pick := releaseOrder(ro.Intent, in.Targets, unreleased)[:budget]
				for _, i := range pick {
					step.Release = append(step.Release, in.Targets[i].ID)
				}
				step.ReleaseWave = w
				if ws.StartedAt == 0 {
					ws.StartedAt = now
				}
				v.State = WaveProgressing
				changed = true
				setState(fsm.RolloutProgressing, "")
			} else {
				d.Waiting = fmt.Sprintf("wave %d: %d devices in progress, maxParallel %d", w+1, v.Released-v.Converged-v.Failed-v.Unreachable, spec.WaveMaxParallel(w))
			}
			break
		}
		// Everything in the wave is released: the gate.
		if ws.StartedAt == 0 {
			ws.StartedAt = now
			changed = true
		}
		gate := spec.WaveGate(w)
		ok := pct(v.Converged, v.Devices) >= gate.Converged
		switch {
		case ok && ws.GateSince == 0:
			ws.GateSince = now
			changed = true
			if gate.Hold > 0 {
				event(fsm.EventGate, w+1, "wave %d gate met: %s converged; holding for %v", w+1, share(v.Converged, v.Devices), gate.Hold)
			}
		case !ok && ws.GateSince != 0:
			ws.GateSince = 0
			event(fsm.EventGate, w+1, "wave %d gate lost: %s converged, need %s", w+1, share(v.Converged, v.Devices), fmtPct(gate.Converged))
		}
		if ok && now-ws.GateSince >= int64(gate.Hold) {
			ws.DoneAt = now
			v.State = WaveDone
			event(fsm.EventWaveDone, w+1, "wave %d passed its gate: %s converged", w+1, share(v.Converged, v.Devices))
			if w == nw-1 {
				step.Complete = true
				setState(fsm.RolloutCompleted, fmt.Sprintf("every wave passed its gate: %s devices converged", share(counts.Converged, counts.Targeted)))
				event(fsm.EventCompleted, 0, "%s", step.Reason)
				break
			}
			continue
		}
		if gate.Timeout > 0 && now-ws.StartedAt > int64(gate.Timeout) {
			fail(w, fmt.Sprintf("wave %d gate not met within %v: %s converged, need %s", w+1, gate.Timeout, share(v.Converged, v.Devices), fmtPct(gate.Converged)))
			break
		}
		if ok {
			d.Waiting = fmt.Sprintf("wave %d gate holds since %s, for %v", w+1, time.Unix(0, ws.GateSince).UTC().Format(time.RFC3339), gate.Hold)
		} else {
			d.Waiting = fmt.Sprintf("wave %d gate: %s converged, need %s", w+1, share(v.Converged, v.Devices), fmtPct(gate.Converged))
		}
		break
	}
	if step.Wave != ro.Wave {
		changed = true
	}
	if changed {
		d.Step = step
	}
	if d.Waiting == "" {
		d.Waiting = step.Reason
	}
	return d
}

// RolloutStopped reports whether a rollout in state s releases nothing
// until an operator acts: it ended or is paused.
func RolloutStopped(s string) bool { return s == fsm.RolloutPaused || fsm.RolloutEnded(s) }

func progressOf(t Target, now int64, deadline time.Duration) string {
	p := t.Progress
	if p != ProgressConverged && deadline > 0 && t.Release != nil && now-t.Release.Time > int64(deadline) {
		return ProgressStuck
	}
	return p
}

// inMaintenance returns the devices of idx that may be released now (a
// maintenance window that selects them is open, or none does), and,
// when none may, the window that opens first.
func inMaintenance(targets []Target, idx []int) (open []int, next TargetWindow) {
	for _, i := range idx {
		w := targets[i].Window
		switch {
		case w == nil || w.Open:
			open = append(open, i)
		case next.Opens.IsZero() || w.Opens.Before(next.Opens):
			next = *w
		}
	}
	return open, next
}

// releaseOrder sorts a wave's unreleased devices in release order.
func releaseOrder(intentName string, targets []Target, idx []int) []int {
	out := slices.Clone(idx)
	slices.SortFunc(out, func(a, b int) int { return releaseCmp(intentName, targets[a].ID, targets[b].ID) })
	return out
}

// releaseCmp orders two devices as a rollout of the intent releases them:
// by waveOrder, then by ID.
func releaseCmp(intentName, a, b string) int {
	if c := cmp.Compare(waveOrder(intentName, a), waveOrder(intentName, b)); c != 0 {
		return c
	}
	return strings.Compare(a, b)
}

func waveSpec(spec *intent.Rollout, w int) intent.Wave {
	if w < len(spec.Waves) {
		return spec.Waves[w]
	}
	return intent.Wave{Percent: 100}
}

func waveName(spec *intent.Rollout, w int) string {
	if n := waveSpec(spec, w).Name; n != "" {
		return n
	}
	return fmt.Sprintf("wave-%d", w+1)
}

func fmtPct(p float64) string { return strconv.FormatFloat(p, 'f', -1, 64) + "%" }

func stableName(rev uint64) string {
	if rev == 0 {
		return "no revision (the intent is removed from the released devices)"
	}
	return fmt.Sprintf("revision %d", rev)
}

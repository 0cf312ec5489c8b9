package agent

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/meteor-edge/meteor/agent/driver"
	"github.com/meteor-edge/meteor/agent/journal"
	"github.com/meteor-edge/meteor/fsm/intent"
	"github.com/meteor-edge/meteor/wire"
)

// errInterrupted ends a step that a crash or restart interrupted when the
// re-check finds the device not at the desired state; the step runs again.
var errInterrupted = errors.New("step interrupted by a restart and the device differs; applying again")

// reconciler brings the device to the journaled desired set. It is level
// based: each pass reads the desired set, the applied records and, where
// due, the device itself, and acts on the differences; it never relies on
// having seen an event. One goroutine runs passes; nothing else runs
// drivers.
type reconciler struct {
	cfg     *Config
	j       *journal.Journal
	drivers *driver.Registry
	log     hclog.Logger
	st      *statusStore
	rp      *reporter
	book    *settingsBook // each class's cadence
	locks   *lockBook     // the workload locks held
	kick    chan struct{} // desired set or settings changed; capacity 1
	// hook, when set (tests), is called after each journal write of a
	// step: "begin", "apply" (driver returned), "end"; "started" when a
	// command of the step started, "orphan" when one survived a restart.
	hook func(event, key string)

	// Owned by the goroutine running passes.
	cache map[string]*item     // decoded desired resources by key
	rt    map[string]*resState // runtime state by key
	// recovered are the steps found in flight and resolved since the
	// agent started; startup, until the first pass is done, is how the
	// agent found the journal at its start (Agent.Run), which the first
	// pass completes and records.
	recovered []journal.RecoveredStep
	startup   *journal.Recovery
}

// resState is what the reconciler remembers about a resource between
// passes, beyond the journal. It is reset when the desired digest changes.
type resState struct {
	digest     string    // desired digest the fields refer to
	nextRetry  time.Time // earliest next apply after a failure
	terminal   bool      // the last failure cannot be fixed by retrying
	nextProbe  time.Time // next drift check and probe; zero: now
	checkedAt  time.Time // when the last check ran; zero: none yet
	probeFails int       // consecutive probes that were not OK
	eff        driver.Effective
	drift      string // "", StateDrifted or StateOverridden
	driftWhy   string
	// hold says what holds a step of the resource back in this pass (an
	// override, a rotation window not open yet, a maintenance window);
	// checkHold what the last check found holding its correction back (a
	// maintenance window, a fight). The zero Hold for nothing.
	hold, checkHold wire.Hold
	// pin is the site operator's override in force this pass; nil for
	// none.
	pin *journal.Override
	// fight is the resource's drift corrections of late, and the fight
	// they make (fight.go). It is reset with the desired digest.
	fight fight
	// corrections counts drift corrections; it survives digest changes.
	corrections int
}

func newReconciler(cfg *Config, j *journal.Journal, drivers *driver.Registry, st *statusStore, rp *reporter, book *settingsBook, log hclog.Logger) *reconciler {
	return &reconciler{
		cfg: cfg, j: j, drivers: drivers, st: st, rp: rp, book: book, log: log,
		locks: &lockBook{j: j, dir: cfg.lockDir(), fileMaxHold: cfg.LockMaxHold},
		kick:  make(chan struct{}, 1),
		cache: map[string]*item{},
		rt:    map[string]*resState{},
	}
}

// trigger asks for a pass soon; it never blocks.
func (r *reconciler) trigger() {
	select {
	case r.kick <- struct{}{}:
	default:
	}
}

// run runs passes until ctx ends: on a kick, when a retry or probe is due,
// and when a periodic report is due.
func (r *reconciler) run(ctx context.Context) {
	failures := 0
	for {
		next, err := r.pass(ctx)
		if ctx.Err() != nil {
			return
		}
		now := r.cfg.Clock.Now()
		if err != nil {
			failures++
			wait := backoff(r.cfg.RetryMin, r.cfg.RetryMax, failures)
			r.log.Error("reconcile pass failed", "error", err, "retry_in", wait)
			next = now.Add(wait)
		} else {
			failures = 0
		}
		due, err := r.rp.maybeQueue()
		if err != nil {
			r.log.Error("queue report", "error", err)
			due = now.Add(r.cfg.RetryMin)
		}
		if next.IsZero() || due.Before(next) {
			next = due
		}
		select {
		case <-ctx.Done():
			return
		case <-r.kick:
		case <-r.cfg.Clock.After(max(0, next.Sub(now))):
		}
	}
}

// pass runs one reconcile pass and returns when the next one is due (zero
// when only a change of the desired set calls for one). An error means the
// journal failed; driver failures are per resource and not errors.
func (r *reconciler) pass(ctx context.Context) (next time.Time, err error) {
	set, err := r.j.Desired()
	if err != nil {
		return next, err
	}
	items := r.decode(set)
	if err := r.resolveInFlight(ctx, items); err != nil {
		return next, err
	}
	if err := r.recordStartup(); err != nil {
		return next, err
	}
	all, err := r.j.AppliedAll()
	if err != nil {
		return next, err
	}
	applied := make(map[string]journal.Applied, len(all))
	for _, a := range all {
		if _, ok := items[a.Key]; ok {
			applied[a.Key] = a
			continue
		}
		// Left the desired set: forget it. Its state stays on the
		// device; version 1 never deletes what a resource created.
		if err := r.j.ForgetApplied(a.Key); err != nil {
			return next, err
		}
		r.log.Info("forgot resource no longer desired; its state stays on the device", "resource", a.Key, "digest", a.Digest)
	}
	for k := range r.rt {
		if _, ok := items[k]; !ok {
			delete(r.rt, k)
		}
	}
	classes := make([]string, 0, len(items))
	for _, it := range items {
		classes = append(classes, it.res.EffectiveClass())
	}
	r.book.setInUse(classes)

	pins, err := r.overrides()
	if err != nil {
		return next, err
	}
	locks, err := r.locks.held()
	if err != nil {
		return next, err
	}
	if err := r.handleUnlocks(locks); err != nil {
		return next, err
	}
	labels := r.deviceLabels()
	now := r.cfg.Clock.Now()
	ordered, cycles := order(items)
	ready := make(map[string]bool, len(items))
	states := make(map[string]string, len(items))
	list := make([]ResourceStatus, 0, len(items))
	wake := func(t time.Time) {
		if !t.IsZero() && (next.IsZero() || t.Before(next)) {
			next = t
		}
	}
	for _, it := range ordered {
		if err := ctx.Err(); err != nil {
			return next, err
		}
		rs := r.state(it)
		rs.pin = nil
		if o, ok := pins[it.key]; ok {
			rs.pin = &o
			wake(o.Until) // correction resumes then
		}
		a, ok := applied[it.key]
		if !ok {
			a = journal.Applied{Key: it.key}
		}
		blocked := blockedReason(it, items, ready, states, cycles)
		var preHold wire.Hold
		if blocked == "" && len(it.pre) > 0 {
			if blocked, preHold = r.unmet(it, locks, labels, now); blocked != "" {
				// Look again soon: a lock file or the disk may change
				// without a word to the agent.
				wake(now.Add(min(15*time.Second, r.book.paceOf(it.res.EffectiveClass()).probe)))
			}
		}
		if a, err = r.reconcileOne(ctx, it, rs, a, blocked); err != nil {
			return next, err
		}
		if preHold.Kind != wire.HoldNone && rs.hold.Kind == wire.HoldNone && (a.Digest != it.digest || rs.drift != "") {
			rs.hold = preHold
		}
		rs2 := r.status(it, rs, a, blocked)
		states[it.key] = rs2.State
		ready[it.key] = a.Digest == it.digest && rs.eff.Result == driver.EffectiveOK
		list = append(list, rs2)
		switch {
		case a.Digest == it.digest:
			wake(rs.nextProbe)
		case rs.hold.Kind == wire.HoldSchedule || rs.hold.Kind == wire.HoldWindow:
			wake(time.Unix(0, rs.hold.Until))
		case !rs.terminal && blocked == "" && it.err == nil:
			wake(rs.nextRetry)
		}
	}
	r.st.setResources(set.Revision, list, r.cfg.Clock.Now())
	unlocked, err := r.j.Unlocks()
	if err != nil {
		return next, err
	}
	r.st.setLocks(wireLocks(locks), wireUnlocked(unlocked))
	return next, nil
}

// decode returns the desired set as items, reusing decoded bodies whose
// digest did not change.
func (r *reconciler) decode(set journal.DesiredSet) map[string]*item {
	items := make(map[string]*item, len(set.Resources))
	for _, d := range set.Resources {
		it, ok := r.cache[d.Key]
		if !ok || it.digest != d.Digest || it.revision != d.Revision {
			it = decodeItem(d)
			if it.err == nil {
				if _, err := r.drivers.Lookup(it.res.Type); err != nil {
					it.err = fmt.Errorf("resource %q: %w", it.key, err)
				}
			}
		}
		items[d.Key] = it
	}
	r.cache = items
	return items
}

// state returns the runtime state of it, reset if its digest changed.
func (r *reconciler) state(it *item) *resState {
	rs, ok := r.rt[it.key]
	if !ok {
		rs = &resState{}
		r.rt[it.key] = rs
	}
	if rs.digest != it.digest {
		*rs = resState{digest: it.digest, corrections: rs.corrections}
	}
	return rs
}

// resolveInFlight ends the steps a crash left in flight. The journal
// cannot say whether their driver ran, so the device is asked: if it is
// already at the step's desired state the step counts as applied,
// otherwise it ends as interrupted and the pass applies it again. A step
// whose processes may outlive the agent (exec) is re-checked only once
// they have ended (settleOrphans), so that it never runs twice at once.
// Each step resolved goes into the recovery of this start (r.recovered).
func (r *reconciler) resolveInFlight(ctx context.Context, items map[string]*item) error {
	steps, err := r.j.InFlight()
	if err != nil {
		return err
	}
	for _, st := range steps {
		it, ok := items[st.Key]
		outcome := errInterrupted
		how := wire.StepDropped
		budget := defaultStepBudget
		var drv driver.Driver
		if ok && it.err == nil {
			if drv, err = r.drivers.Lookup(it.res.Type); err != nil {
				drv = nil
			} else if b, ok := drv.(driver.Budgeted); ok {
				budget = b.StepBudget(it.res)
			}
		}
		child := r.settleOrphans(ctx, st, st.BegunAt.Add(budget))
		if drv != nil && it.digest == st.Digest {
			if outcome = recheck(ctx, drv, it.res); outcome == nil {
				how = wire.StepAlreadyApplied
			} else {
				how = wire.StepAppliedAgain
			}
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if err := r.j.EndStep(st.Key, st.Digest, st.Revision, outcome); err != nil {
			return err
		}
		r.log.Info("resolved step interrupted by a restart", "resource", st.Key, "digest", st.Digest,
			"applied", outcome == nil, "outcome", errString(outcome), "process", child)
		r.recovered = append(r.recovered, journal.RecoveredStep{Key: st.Key, Digest: st.Digest, Outcome: how.String(), Child: childName(child)})
		r.st.update(func(s *Status) { s.Interrupted++ })
	}
	return nil
}

// defaultStepBudget bounds the wait for the processes of an interrupted
// step whose driver gives no budget.
const defaultStepBudget = 90 * time.Second

// childName is a child outcome as the journal keeps it ("" for none).
func childName(c wire.ChildOutcome) string {
	if c == wire.ChildNone {
		return ""
	}
	return c.String()
}

// recheck reads the device: nil when it is at r's desired state.
func recheck(ctx context.Context, drv driver.Driver, r intent.Resource) error {
	cur, err := drv.Current(ctx, r)
	if err != nil {
		return fmt.Errorf("re-check after restart: %w", err)
	}
	diff, err := drv.Diff(r, cur)
	if err != nil {
		return fmt.Errorf("re-check after restart: %w", err)
	}
	if diff.Changed {
		return fmt.Errorf("%w (%s)", errInterrupted, strings.Join(diff.Reasons, "; "))
	}
	return nil
}

// blockedReason says why it may not take a step now, or "".
func blockedReason(it *item, items map[string]*item, ready map[string]bool, states map[string]string, cycles map[string]string) string {
	if c, ok := cycles[it.key]; ok {
		return c
	}
	for _, req := range it.requires {
		if _, ok := items[req]; !ok {
			return fmt.Sprintf("requires %s, which is not in the desired set", req)
		}
		if !ready[req] {
			return fmt.Sprintf("requires %s, which is %s", req, states[req])
		}
	}
	return ""
}

// reconcileOne takes the step it needs, if any, and re-checks it when due.
// It returns the applied record as it stands afterwards.
func (r *reconciler) reconcileOne(ctx context.Context, it *item, rs *resState, a journal.Applied, blocked string) (journal.Applied, error) {
	if it.err != nil {
		return a, nil
	}
	now := r.cfg.Clock.Now()
	if p := r.book.paceOf(it.res.EffectiveClass()); rs.probeFails == 0 && !rs.checkedAt.IsZero() {
		// The class's cadence may have shortened since the last check
		// (settings changed live): the next check comes no later than
		// one new interval after the last.
		if due := rs.checkedAt.Add(p.probe); due.Before(rs.nextProbe) {
			rs.nextProbe = due
		}
	}
	rs.hold = wire.Hold{}
	if rs.pin != nil {
		rs.hold = overrideHold(rs.pin)
		if a.Digest != it.digest {
			return a, nil // pinned: not even a new desired state
		}
	}
	if a.Digest != it.digest {
		if nb, _ := it.res.Rotation.Times(); nb.After(now) {
			// Its rotation window has not opened: no step before.
			rs.hold = wire.Hold{Kind: wire.HoldSchedule, Until: nb.UnixNano()}
			return a, nil
		}
		if rs.terminal || blocked != "" || now.Before(rs.nextRetry) {
			return a, nil
		}
		if it.res.Disruptive {
			if rs.hold = r.book.maintenanceHold(now); rs.hold.Kind != wire.HoldNone {
				return a, nil // outside the device's maintenance windows
			}
		}
		var err error
		a, err = r.apply(ctx, it, rs, "apply")
		if err != nil || a.Digest != it.digest {
			return a, err
		}
		rs.nextProbe = time.Time{} // probe what was just applied
	}
	if now.Before(rs.nextProbe) {
		return a, nil
	}
	return r.check(ctx, it, rs, a, blocked)
}

// apply runs one journaled step for it and records the outcome in rs.
func (r *reconciler) apply(ctx context.Context, it *item, rs *resState, why string) (journal.Applied, error) {
	drv, err := r.drivers.Lookup(it.res.Type)
	if err != nil {
		return journal.Applied{}, err // decode checked it; the registry changed
	}
	if err := r.j.BeginStep(it.key, it.digest, it.revision); err != nil {
		if errors.Is(err, journal.ErrRevisionRegression) {
			// Never go back to an older revision (invariant 2).
			r.log.Error("refusing step", "resource", it.key, "error", err)
			rs.terminal = true
			a, _, rerr := r.j.Applied(it.key)
			return a, rerr
		}
		return journal.Applied{}, err
	}
	r.call("begin", it.key)
	actx := ctx
	if _, ok := drv.(driver.Budgeted); ok {
		// Its commands may outlive the agent: journal how to find them.
		if actx, err = r.trackProcesses(ctx, it.key); err != nil {
			return journal.Applied{}, err
		}
	}
	applyErr := drv.Apply(actx, it.res)
	r.call("apply", it.key)
	if err := r.j.EndStep(it.key, it.digest, it.revision, applyErr); err != nil {
		return journal.Applied{}, err
	}
	r.call("end", it.key)
	a, _, err := r.j.Applied(it.key)
	if err != nil {
		return a, err
	}
	now := r.cfg.Clock.Now()
	if applyErr != nil {
		rs.terminal = isTerminal(applyErr)
		rs.nextRetry = now.Add(r.book.paceOf(it.res.EffectiveClass()).retryAfter(a.Attempts, jitterRand))
		rs.nextProbe = rs.nextRetry
		r.log.Warn("step failed", "resource", it.key, "why", why, "attempts", a.Attempts,
			"terminal", rs.terminal, "retry_at", rs.nextRetry, "error", applyErr)
		return a, nil
	}
	rs.nextRetry, rs.terminal = time.Time{}, false
	r.log.Info("applied", "resource", it.key, "why", why, "digest", short(it.digest), "revision", it.revision)
	return a, nil
}

// check re-reads an applied resource (drift) and probes it (effective
// state), acting on drift per the resource's policy.
func (r *reconciler) check(ctx context.Context, it *item, rs *resState, a journal.Applied, blocked string) (journal.Applied, error) {
	drv, err := r.drivers.Lookup(it.res.Type)
	if err != nil {
		return a, err
	}
	p := r.book.paceOf(it.res.EffectiveClass())
	interval := p.probe
	now := r.cfg.Clock.Now()
	rs.checkedAt = now
	cur, err := drv.Current(ctx, it.res)
	var diff driver.Diff
	if err == nil {
		diff, err = drv.Diff(it.res, cur)
	}
	if ctx.Err() != nil {
		return a, ctx.Err()
	}
	if err != nil {
		rs.eff = driver.Effective{Result: driver.EffectiveUnknown, Detail: "read current state: " + err.Error()}
		rs.probeFails++
		rs.nextProbe = now.Add(min(interval, backoff(p.retryBase, p.retryMax, rs.probeFails)))
		return a, nil
	}
	rs.drift, rs.driftWhy, rs.checkHold = "", "", wire.Hold{}
	if !diff.Changed {
		r.fightSettles(it, rs, now)
	}
	if diff.Changed {
		why := strings.Join(diff.Reasons, "; ")
		policy := it.res.EffectiveDrift()
		if rs.pin != nil {
			policy = "" // pinned: left as it is
		}
		switch policy {
		case "":
			rs.drift, rs.driftWhy = StateOverridden, pinText(rs.pin)+": "+why
		case intent.DriftTolerate:
			rs.drift, rs.driftWhy = StateOverridden, "local override tolerated: "+why
		case intent.DriftReport:
			rs.drift, rs.driftWhy = StateDrifted, "drift reported, not corrected: "+why
		default: // correct
			if blocked != "" {
				rs.drift, rs.driftWhy = StateDrifted, "drift correction "+blocked+": "+why
				break
			}
			if it.res.Disruptive {
				if rs.checkHold = r.book.maintenanceHold(now); rs.checkHold.Kind != wire.HoldNone {
					rs.drift, rs.driftWhy = StateDrifted, "drift correction "+windowText(rs.checkHold)+": "+why
					break
				}
			}
			if rs.fight.held(now) {
				rs.checkHold = rs.fight.hold()
				rs.drift, rs.driftWhy = StateDrifted, fightText(rs.checkHold)+": "+why
				break
			}
			r.fightCorrected(it, rs, now)
			rs.corrections++
			r.log.Info("correcting drift", "resource", it.key, "drift", why, "corrections", rs.corrections)
			if a, err = r.apply(ctx, it, rs, "drift"); err != nil {
				return a, err
			}
			if a.LastError != "" && a.LastStepDigest == it.digest {
				rs.drift, rs.driftWhy = StateDrifted, "drift correction failed: "+why
				return a, nil // retried when nextProbe (= nextRetry) is due
			}
		}
	}
	eff, err := drv.Probe(ctx, it.res)
	if ctx.Err() != nil {
		return a, ctx.Err()
	}
	if err != nil {
		eff = driver.Effective{Result: driver.EffectiveUnknown, Detail: "probe: " + err.Error()}
	}
	rs.eff = eff
	if eff.Result == driver.EffectiveOK {
		rs.probeFails = 0
		rs.nextProbe = now.Add(interval)
	} else {
		rs.probeFails++
		rs.nextProbe = now.Add(min(interval, backoff(p.retryBase, p.retryMax, rs.probeFails)))
	}
	if k := rs.checkHold.Kind; k == wire.HoldWindow || k == wire.HoldFighting {
		// Check again, and correct, when the window opens or the fight's
		// backoff ends.
		rs.nextProbe = minTime(rs.nextProbe, time.Unix(0, rs.checkHold.Until))
	}
	if rs.checkHold.Kind == wire.HoldNone && rs.fight.on {
		rs.checkHold = rs.fight.hold() // corrected, not settled yet
	}
	return a, nil
}

// status renders the reconciler's view of one resource.
func (r *reconciler) status(it *item, rs *resState, a journal.Applied, blocked string) ResourceStatus {
	s := ResourceStatus{
		Key:             it.key,
		DesiredDigest:   it.digest,
		DesiredRevision: it.revision,
		AppliedDigest:   a.Digest,
		AppliedRevision: a.Revision,
		Corrections:     rs.corrections,
		Hold:            rs.hold,
	}
	if s.Hold.Kind == wire.HoldNone && a.Digest == it.digest {
		s.Hold = rs.checkHold
	}
	if a.LastStepDigest == it.digest {
		s.Attempts, s.LastError = a.Attempts, a.LastError
	}
	failedStep := s.LastError != ""
	switch {
	case it.err != nil:
		s.State, s.LastError, s.Detail = StateFailed, it.err.Error(), "terminal: waiting for a new desired state"
	case a.Digest != it.digest && rs.hold.Kind == wire.HoldSchedule:
		s.State, s.Detail = StatePending, "rotation window opens at "+time.Unix(0, rs.hold.Until).UTC().Format(time.RFC3339)
	case a.Digest != it.digest && rs.hold.Kind == wire.HoldWindow:
		s.State, s.Detail = StateBlocked, windowText(rs.hold)
	case a.Digest != it.digest && rs.hold.Kind == wire.HoldOverride:
		s.State, s.Detail = StateOverridden, pinText(rs.pin)+": the desired change waits for it to end"
	case a.Digest != it.digest && blocked != "":
		s.State, s.Detail = StateBlocked, blocked
	case a.Digest != it.digest && failedStep && rs.terminal:
		s.State, s.Detail = StateFailed, "terminal: waiting for a new desired state"
	case a.Digest != it.digest && failedStep:
		s.State, s.Detail = StateFailed, "retrying at "+rs.nextRetry.UTC().Format(time.RFC3339)
	case a.Digest != it.digest:
		s.State = StatePending
	case failedStep:
		s.State, s.Detail = StateFailed, rs.driftWhy
	case rs.drift != "":
		s.State, s.Detail = rs.drift, rs.driftWhy
	case rs.eff.Result == driver.EffectiveOK && s.Hold.Kind == wire.HoldFighting:
		s.State, s.Detail = StateConverged, fightText(s.Hold)+"; corrected, not settled yet"
	case rs.eff.Result == driver.EffectiveOK:
		s.State = StateConverged
	default:
		s.State = StateProgressing
	}
	if a.Digest == it.digest {
		s.Effective = wireEffective(rs.eff.Result)
		if s.Detail == "" {
			s.Detail = rs.eff.Detail
		} else if rs.eff.Detail != "" {
			s.Detail += "; effective: " + rs.eff.Detail
		}
	}
	if _, dl := it.res.Rotation.Times(); !dl.IsZero() && a.Digest != it.digest {
		if now := r.cfg.Clock.Now(); !now.Before(dl) {
			s.Detail += " (rotation deadline " + dl.UTC().Format(time.RFC3339) + " passed)"
		}
	}
	switch {
	case rs.corrections == 1:
		s.Detail += " (drift corrected once)"
	case rs.corrections > 1:
		s.Detail += fmt.Sprintf(" (drift corrected %d times)", rs.corrections)
	}
	return s
}

func (r *reconciler) call(event, key string) {
	if r.hook != nil {
		r.hook(event, key)
	}
}

// isTerminal reports whether retrying the same desired state cannot help.
func isTerminal(err error) bool {
	return errors.Is(err, driver.ErrInvalidSpec) || errors.Is(err, driver.ErrUnknownType) ||
		errors.Is(err, driver.ErrNotAllowed) || errors.Is(err, errBadBody)
}

func wireEffective(e driver.EffectiveResult) wire.Effective {
	switch e {
	case driver.EffectiveOK:
		return wire.EffectiveOK
	case driver.EffectiveMismatch:
		return wire.EffectiveMismatch
	}
	return wire.EffectiveUnknown
}

// minTime returns the earlier of two times.
func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

// backoff returns min(hi, lo*2^(n-1)) for n >= 1.
func backoff(lo, hi time.Duration, n int) time.Duration {
	d := lo
	for i := 1; i < n && d < hi; i++ {
		d *= 2
	}
	return min(d, hi)
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

func short(digest string) string {
	if len(digest) > 12 {
		return digest[:12]
	}
	return digest
}

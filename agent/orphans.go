package agent

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"time"

	"github.com/meteor-edge/meteor/agent/driver"
	"github.com/meteor-edge/meteor/agent/journal"
	"github.com/meteor-edge/meteor/wire"
)

// After a crash or power loss a step's command may still run: its process
// group outlives the agent (exec commands run in groups of their own).
// Before the agent re-checks such a step it waits for the step's
// processes to end, up to the step's own time budget from when it began,
// and ends their groups past it, so that a step never runs twice at once.
// The processes are found by the marker every command of the step carries
// in its environment (driver.StepEnv), and by their process group, whose
// leader's start time the journal keeps to tell it from a later process
// given the same ID.

// orphanGrace is how long the agent waits for a step's processes to end
// after asking them to (SIGTERM) before it kills them.
const orphanGrace = 5 * time.Second

// orphanPoll is how often the agent looks whether they ended.
const orphanPoll = 100 * time.Millisecond

// settleOrphans waits for the processes of st that survived a crash to
// end, or ends them once deadline passes, and says which it was.
func (r *reconciler) settleOrphans(ctx context.Context, st journal.Step, deadline time.Time) wire.ChildOutcome {
	if st.Proc == nil {
		return wire.ChildNone
	}
	pids := survivors(st.Proc)
	if len(pids) == 0 {
		return wire.ChildNone
	}
	r.log.Warn("a process of a step interrupted by a restart still runs; waiting for it before re-checking",
		"resource", st.Key, "pids", pids, "until", deadline)
	r.call("orphan", st.Key)
	clock := r.cfg.Clock
	for clock.Now().Before(deadline) {
		select {
		case <-ctx.Done():
			return wire.ChildWaited
		case <-clock.After(orphanPoll):
		}
		if len(survivors(st.Proc)) == 0 {
			r.log.Info("the interrupted step's processes ended", "resource", st.Key)
			return wire.ChildWaited
		}
	}
	r.log.Warn("the interrupted step's processes outlived its time budget: ending them", "resource", st.Key, "pids", pids)
	signalGroups(survivors(st.Proc), false)
	for end := clock.Now().Add(orphanGrace); clock.Now().Before(end); {
		select {
		case <-ctx.Done():
			return wire.ChildEnded
		case <-clock.After(orphanPoll):
		}
		if len(survivors(st.Proc)) == 0 {
			return wire.ChildEnded
		}
	}
	signalGroups(survivors(st.Proc), true)
	for range 50 { // SIGKILL is not refused; the kernel takes a moment
		if len(survivors(st.Proc)) == 0 {
			break
		}
		select {
		case <-ctx.Done():
			return wire.ChildEnded
		case <-clock.After(orphanPoll):
		}
	}
	return wire.ChildEnded
}

// trackProcesses journals the marker of the step in flight for key, and
// returns ctx with a hook that journals each process the step's driver
// starts (driver.WithStep): after a crash, settleOrphans finds them by
// it.
func (r *reconciler) trackProcesses(ctx context.Context, key string) (context.Context, error) {
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		return ctx, err
	}
	marker := hex.EncodeToString(b[:])
	if err := r.j.SetStepProcess(key, journal.StepProcess{Marker: marker}); err != nil {
		return ctx, err
	}
	return driver.WithStep(ctx, &driver.StepHook{Marker: marker, Started: func(pid int) {
		if err := r.j.SetStepProcess(key, journal.StepProcess{Marker: marker, PGID: pid, Start: procStart(pid)}); err != nil {
			r.log.Warn("process of a step not journaled; it is found by its marker after a crash", "resource", key, "pid", pid, "error", err)
		}
		r.call("started", key)
	}}), nil
}

// recordStartup completes and records how the agent found the journal at
// its start, once its first pass resolved the steps in flight: after a
// crash or power loss (or with steps in flight) it is journaled and
// reported; otherwise the recovery of an earlier start stays reported.
func (r *reconciler) recordStartup() error {
	s := r.startup
	if s == nil {
		return nil
	}
	r.startup = nil
	if s.Unclean || len(r.recovered) > 0 {
		s.Steps = r.recovered
		if err := r.j.SaveRecovery(*s); err != nil {
			return err
		}
		r.log.Warn("recovered from a crash or power loss", "unclean", s.Unclean, "applied_before", s.Applied, "desired", s.Total, "steps_in_flight", len(s.Steps))
	}
	rec, ok, err := r.j.Recovery()
	if err != nil || !ok {
		return err
	}
	r.st.setRecovery(&rec)
	return nil
}

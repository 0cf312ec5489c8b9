package cluster

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/meteor-edge/meteor/fsm"
	"github.com/meteor-edge/meteor/fsm/intent"
	"github.com/meteor-edge/meteor/scheduler"
)

// rolloutInterval is how often the rollout worker judges every rollout in
// progress.
const rolloutInterval = time.Second

// rolloutSampleEvery is the least time between two samples of a
// revision's counts on its timeline, while they change.
const rolloutSampleEvery = 10 * time.Second

// leaderProposer commits a command through this server's Raft, failing
// unless it leads (Server.Propose): a deposed leader's worker must not
// forward its decisions to the new one.
type leaderProposer interface {
	Propose(ctx context.Context, t fsm.MessageType, req any) (fsm.ApplyResult, uint64, error)
}

// rolloutWorker is the rollout engine's leader-only worker: every interval
// it judges each rollout in progress from the committed state
// (judgeRollout, scheduler.Decide) and commits the decision, so a new
// leader carries on from what is recorded. Decisions apply only on the
// rollout record they were judged on, so a step of a deposed leader, or
// one racing an operator's pause, changes nothing.
//
// Goroutines: Run only.
type rolloutWorker struct {
	logger   hclog.Logger
	clock    Clock
	cfg      *Config
	state    *fsm.FSM
	planner  *scheduler.Planner
	propose  leaderProposer
	interval time.Duration
	// samples remembers, per intent, the counts and time of the last
	// sample committed this term.
	samples map[string]sample
}

type sample struct {
	rev    uint64
	at     time.Time
	counts fsm.RolloutCounts
}

func (s *Server) rolloutWorker() *rolloutWorker {
	interval := s.config.RolloutInterval
	if interval <= 0 {
		interval = rolloutInterval
	}
	return &rolloutWorker{
		logger: s.logger.Named("rollout"), clock: s.clock, cfg: &s.config, state: s.fsm,
		planner: s.devicePlanner(), propose: s, interval: interval,
	}
}

func (w *rolloutWorker) Name() string { return "rollouts" }

func (w *rolloutWorker) Run(ctx context.Context) error {
	w.samples = map[string]sample{}
	ticker := w.clock.NewTicker(w.interval)
	defer ticker.Stop()
	// A pass that failed is not a reason to stop: the rollouts it could
	// not judge or commit are judged again from the committed state at
	// the next pass, and the others must not wait for them (returning
	// would hold every rollout for the leader's growing restart backoff
	// and forget the samples). The error is logged when it changes.
	failing := ""
	for {
		err := w.pass(ctx)
		if ctx.Err() != nil {
			return nil
		}
		switch {
		case err != nil && err.Error() != failing:
			w.logger.Warn("rollout pass failed; judging again at the next pass", "error", err)
			failing = err.Error()
		case err == nil && failing != "":
			w.logger.Info("rollout pass succeeded again")
			failing = ""
		}
		select {
		case <-ctx.Done():
			return nil
		case <-ticker.C():
		}
	}
}

// pass judges every rollout once and commits what changed.
func (w *rolloutWorker) pass(ctx context.Context) error {
	read := w.state.Read()
	ros, err := read.Rollouts(nil)
	if err != nil {
		return err
	}
	var errs []error
	for _, ro := range ros {
		if scheduler.RolloutStopped(ro.State) {
			continue
		}
		if err := w.step(ctx, read, ro); err != nil {
			errs = append(errs, fmt.Errorf("rollout of %s revision %d: %w", ro.Intent, ro.Revision, err))
		}
	}
	return errors.Join(errs...)
}

func (w *rolloutWorker) step(ctx context.Context, read *fsm.Read, ro *fsm.RolloutRecord) error {
	now := w.clock.Now()
	in, err := judgeRollout(read, w.cfg, w.planner, ro, now)
	if err != nil {
		return err
	}
	d := scheduler.Decide(in)
	step := d.Step
	last, ok := w.samples[ro.Intent]
	if !ok || last.rev != ro.Revision || (last.counts != d.Counts && now.Sub(last.at) >= rolloutSampleEvery) || step != nil {
		if step == nil {
			step = &fsm.RolloutStepRequest{
				Intent: ro.Intent, Revision: ro.Revision, Basis: ro.Seq, Time: now.UnixNano(),
				State: ro.State, Reason: ro.Reason, Wave: ro.Wave, Waves: ro.Waves,
			}
		}
		if !ok || last.counts != d.Counts || last.rev != ro.Revision {
			c := d.Counts
			step.Events = append(step.Events, fsm.RolloutEvent{Kind: fsm.EventSample, Counts: &c})
		}
	}
	if step == nil || (len(step.Events) == 0 && len(step.Release) == 0 && !step.Complete && !step.Revert &&
		step.State == ro.State && step.Reason == ro.Reason && step.Wave == ro.Wave && slices.Equal(step.Waves, ro.Waves)) {
		return nil
	}
	res, _, err := w.propose.Propose(ctx, fsm.RolloutStepType, step)
	if err != nil {
		return err
	}
	if res.Err != nil {
		if errors.Is(res.Err, fsm.ErrStaleStep) {
			return nil // judged again on the next pass
		}
		return res.Err
	}
	w.samples[ro.Intent] = sample{rev: ro.Revision, at: now, counts: d.Counts}
	if len(step.Release) > 0 || step.State != ro.State {
		w.logger.Info("rollout step", "intent", ro.Intent, "revision", ro.Revision, "wave", step.Wave+1,
			"released", len(step.Release), "state", step.State, "reason", step.Reason)
	}
	return nil
}

// judgeRollout gathers what a rollout decision is made from: the devices
// the rollout targets (selected by its revision or by the stable one, or
// holding a release), each judged on what it last reported. The worker
// and the API both use it, so what the API shows is what the worker
// decides on.
func judgeRollout(read *fsm.Read, cfg *Config, planner *scheduler.Planner, ro *fsm.RolloutRecord, now time.Time) (scheduler.Input, error) {
	rec, err := read.Intent(nil, ro.Intent)
	if err != nil {
		return scheduler.Input{}, err
	}
	doc, err := read.IntentDoc(rec, ro.Revision)
	if err != nil {
		return scheduler.Input{}, err
	}
	spec, err := doc.RolloutSpec()
	if err != nil || spec == nil {
		return scheduler.Input{}, fmt.Errorf("rollout block of revision %d does not parse: %v", ro.Revision, err)
	}
	var stableDoc interface{ Matches(map[string]string) bool }
	if ro.Stable != 0 {
		if sd, err := read.IntentDoc(rec, ro.Stable); err == nil {
			stableDoc = sd
		}
	}
	devices, err := read.Devices(nil)
	if err != nil {
		return scheduler.Input{}, err
	}
	in := scheduler.Input{Now: now, Rollout: ro, Spec: spec}
	var windows map[string]intent.MaintenanceWindow
	if spec.Maintenance {
		if windows, err = committedWindows(read); err != nil {
			return scheduler.Input{}, err
		}
	}
	for _, d := range devices {
		labels := cfg.recordSelection(d)
		rel, err := read.Release(ro.Intent, d.ID)
		if err != nil {
			return scheduler.Input{}, err
		}
		if !doc.Matches(labels) && (stableDoc == nil || !stableDoc.Matches(labels)) && rel == nil {
			continue
		}
		t := scheduler.Target{ID: d.ID, Labels: labels}
		if spec.Maintenance {
			t.Window = maintenanceOf(d, labels, windows, now)
		}
		if rel != nil && rel.Revision == ro.Revision {
			want, err := planner.Resources(read, rec, ro.Revision, labels)
			if err != nil {
				return scheduler.Input{}, err
			}
			t.Release = rel
			t.Acked = d.AckedRevision >= rel.DesiredRevision
			t.Progress = scheduler.Judge(ro.Intent, want, d, t.Acked)
		}
		in.Targets = append(in.Targets, t)
	}
	return in, nil
}

package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/meteor-edge/meteor/cluster/api"
)

// applyWait is what 'meteor apply --wait' judges in a reading of an
// intent it wrote: the revision is converged, still on its way, or failed.
type applyWait struct {
	intent   string
	revision uint64
}

// errStopped marks a revision that will not converge without an
// operator: its rollout stopped, a newer revision replaced it, or every
// device it reached has settled with some failed.
var errStopped = errors.New("stopped")

// judge says whether the revision is done (every targeted device
// converged on it), or has stopped (an error wrapping errStopped), and
// sums the reading up on one line.
func (a applyWait) judge(r api.IntentReading) (line string, done bool, err error) {
	p, ro := r.Progress, r.Rollout
	line = progressLine(p)
	if ro != nil && ro.Revision == p.Revision && len(ro.Waves) > 0 {
		line += fmt.Sprintf("; rollout %s, wave %d of %d", ro.State, ro.Wave, len(ro.Waves))
		if why := rolloutWhy(ro); why != "" && ro.State != api.RolloutCompleted {
			line += " - " + why
		}
	}
	switch {
	case p.Revision > a.revision:
		return line, false, fmt.Errorf("intent %s revision %d: %w: revision %d replaced it", a.intent, a.revision, errStopped, p.Revision)
	case p.Revision < a.revision:
		// A replica that has not applied the write yet (--stale).
		return line, false, nil
	}
	if ro != nil && ro.Revision == a.revision {
		switch ro.State {
		case api.RolloutPaused, api.RolloutAborted, api.RolloutReverted, api.RolloutSuperseded:
			return line, false, fmt.Errorf("intent %s revision %d: %w: its rollout is %s: %s", a.intent, a.revision, errStopped, ro.State, orDash(ro.Reason))
		}
	}
	switch {
	case p.Converged >= p.Targeted:
		return line, true, nil
	case p.Failed > 0 && p.Released == p.Targeted && p.Converged+p.Failed == p.Targeted:
		others := ""
		if p.Converged > 0 {
			others = fmt.Sprintf(", the other %d converged", p.Converged)
		}
		return line, false, fmt.Errorf("intent %s revision %d: %w: %d of %s failed%s", a.intent, a.revision, errStopped, p.Failed, nDevices(p.Targeted), others)
	}
	return line, false, nil
}

// progressLine sums an intent's progress up on one line.
func progressLine(p *api.IntentProgress) string {
	if p.Targeted == 0 {
		return fmt.Sprintf("%s revision %d: targets no device", p.Name, p.Revision)
	}
	return fmt.Sprintf("%s revision %d: %d of %s converged (%s); %d released, %d acknowledged, %d failed, %d unreachable",
		p.Name, p.Revision, p.Converged, nDevices(p.Targeted), percent(p.Converged, p.Targeted), p.Released, p.Acknowledged, p.Failed, p.Unreachable)
}

// waitApplied follows revision rev of an intent (api.Client.WatchIntent)
// until every device it targets has converged on it, printing a line to
// progress whenever the summary changes. It fails once the revision has
// stopped, or when ctx ends, saying what was still missing and naming a
// few of the devices concerned.
func waitApplied(ctx context.Context, c *api.Client, name string, rev uint64, o api.ReadOptions, progress io.Writer, every time.Duration) error {
	a := applyWait{intent: name, revision: rev}
	var last api.IntentReading
	var shown string
	err := c.WatchIntent(ctx, name, o, every, func(r api.IntentReading) (bool, error) {
		last = r
		line, done, err := a.judge(r)
		if line != shown {
			fmt.Fprintf(progress, "%s  %s\n", time.Now().Format("15:04:05"), line)
			shown = line
		}
		return done, err
	})
	switch {
	case err == nil:
		return nil
	case errors.Is(err, errStopped):
		return fmt.Errorf("%w%s", err, missingDevices(c, name, "failed", o))
	case ctx.Err() != nil && last.Progress != nil:
		p := last.Progress
		return fmt.Errorf("gave up waiting for intent %s revision %d: %d of %s converged, %d not released yet, %d failed, %d unreachable%s",
			name, rev, p.Converged, nDevices(p.Targeted), p.Targeted-p.Released, p.Failed, p.Unreachable, missingDevices(c, name, "not-converged", o))
	case ctx.Err() != nil:
		return fmt.Errorf("gave up waiting for intent %s revision %d before reading its progress: %w", name, rev, err)
	}
	return err
}

// missingDevices names a few of the intent's devices in a state on it,
// with the command that lists them all; "" if none can be read.
func missingDevices(c *api.Client, name, state string, o api.ReadOptions) string {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	list, err := c.QueryDevices(ctx, api.DeviceQuery{Intent: name, IntentState: state, Limit: 5}, o)
	if err != nil || len(list.Devices) == 0 {
		return ""
	}
	var ids []string
	for _, d := range list.Devices {
		id := d.ID
		if d.StatusReason != "" {
			id += " (" + d.StatusReason + ")"
		}
		ids = append(ids, id)
	}
	more := ""
	if n := list.Matched - len(list.Devices); n > 0 {
		more = fmt.Sprintf(" and %d more", n)
	}
	return fmt.Sprintf("; %s: %s%s (meteor get devices --intent %s --intent-state %s)", state, strings.Join(ids, ", "), more, name, state)
}

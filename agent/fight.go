package agent

import (
	"fmt"
	"time"

	"github.com/meteor-edge/meteor/agent/journal"
	"github.com/meteor-edge/meteor/wire"
)

// A fight is something on the device undoing a resource as fast as the
// agent corrects it (a script rewriting a file, another management tool):
// Config.FightThreshold corrections within Config.FightWindow. The agent
// then says so (a fighting hold, which the servers show as the status
// fighting and put in the device's timeline) and backs its corrections
// off, FightBackoffMin doubling up to FightBackoffMax, rather than keep
// rewriting the device every probe. The fight is over once a correction
// has held for a whole FightWindow.
type fight struct {
	fixes []time.Time // corrections within the window, oldest first
	on    bool
	since time.Time // when the fight began: its first correction
	count int       // corrections since it began
	level int       // corrections backed off so far
	next  time.Time // no correction before
}

// held reports whether a correction must wait at now.
func (f *fight) held(now time.Time) bool { return f.on && now.Before(f.next) }

// hold is the fighting hold of the fight.
func (f *fight) hold() wire.Hold {
	return wire.Hold{Kind: wire.HoldFighting, Since: f.since.UnixNano(), Until: f.next.UnixNano(), Count: uint32(min(f.count, 1<<32-1))}
}

// fightCorrected records a correction of it at now, starting a fight when
// it is the FightThreshold-th within FightWindow, and sets when the next
// may come.
func (r *reconciler) fightCorrected(it *item, rs *resState, now time.Time) {
	f := &rs.fight
	f.fixes = append(f.fixes, now)
	for len(f.fixes) > 0 && now.Sub(f.fixes[0]) > r.cfg.FightWindow {
		f.fixes = f.fixes[1:]
	}
	switch {
	case f.on:
		f.count++
		f.level++
	case len(f.fixes) >= r.cfg.FightThreshold:
		f.on, f.since, f.count, f.level = true, f.fixes[0], len(f.fixes), 1
		r.log.Warn("something keeps undoing the resource: backing corrections off", "resource", it.key,
			"corrections", f.count, "within", now.Sub(f.since))
	default:
		return
	}
	f.next = now.Add(backoff(r.cfg.FightBackoffMin, r.cfg.FightBackoffMax, f.level))
}

// fightSettles ends the fight over it once its last correction held for
// a whole FightWindow (the device found as applied at now).
func (r *reconciler) fightSettles(it *item, rs *resState, now time.Time) {
	f := &rs.fight
	if len(f.fixes) == 0 {
		return
	}
	if last := f.fixes[len(f.fixes)-1]; now.Sub(last) >= r.cfg.FightWindow {
		if f.on {
			r.log.Info("fight over: the last correction held", "resource", it.key, "corrections", f.count, "since", f.since)
		}
		rs.fight = fight{}
	}
}

// fightText says what a fighting hold means.
func fightText(h wire.Hold) string {
	return fmt.Sprintf("fighting: drift corrected %d times since %s; next correction not before %s",
		h.Count, time.Unix(0, h.Since).UTC().Format(time.RFC3339), time.Unix(0, h.Until).UTC().Format(time.RFC3339))
}

// overrides returns the local overrides in force, dropping the expired
// ones from the journal: correction resumes with this pass.
func (r *reconciler) overrides() (map[string]journal.Override, error) {
	all, err := r.j.Overrides()
	if err != nil {
		return nil, err
	}
	now := r.cfg.Clock.Now()
	for k, o := range all {
		if o.Until.After(now) {
			continue
		}
		delete(all, k)
		if _, err := r.j.ClearOverride(k); err != nil {
			return nil, err
		}
		r.log.Info("local override expired: correcting the resource again", "resource", k, "by", o.By, "reason", o.Reason)
	}
	return all, nil
}

// overrideHold is the hold of a site operator's override.
func overrideHold(o *journal.Override) wire.Hold {
	return wire.Hold{Kind: wire.HoldOverride, Since: o.At.UnixNano(), Until: o.Until.UnixNano(), Holder: o.By, Note: o.Reason}
}

// pinText says what an override is.
func pinText(o *journal.Override) string {
	return fmt.Sprintf("local override by %s until %s (%s)", o.By, o.Until.UTC().Format(time.RFC3339), o.Reason)
}

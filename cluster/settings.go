package cluster

import (
	"bytes"
	"maps"
	"slices"
	"time"
	_ "time/tzdata" // device time zones, whatever the host has

	"github.com/meteor-edge/meteor/fsm"
	"github.com/meteor-edge/meteor/fsm/intent"
	"github.com/meteor-edge/meteor/scheduler"
	"github.com/meteor-edge/meteor/wire"
)

// What the control plane configures on a device beyond its desired state
// travels in a Settings message (protocol 1.4, docs/wire.md §6.7): the
// reconcile classes in effect, the device's control-plane labels, the
// maintenance windows that select it and its time zone, and the lock
// breaks operators asked for. A session sends it right after the Welcome, and its device watcher
// (deviceWatch) sends it again whenever the replica's version of it
// changes.

// settingsFor returns the settings of the session's device as of read.
func (sess *agentSession) settingsFor(read *fsm.Read) *wire.Settings {
	cfg := sess.a.cfg
	s := &wire.Settings{Seq: read.Index()}
	classes := cfg.effectiveClasses(read)
	for _, name := range slices.Sorted(maps.Keys(classes)) {
		c := classes[name]
		s.Classes = append(s.Classes, wire.SettingsClass{
			Name: name, PullInterval: c.PullInterval, ProbeInterval: c.ProbeInterval, ReportInterval: c.ReportInterval,
			RetryBase: c.RetryBase, RetryMax: c.RetryMax, RetryJitter: c.RetryJitter,
		})
		if len(s.Classes) == wire.MaxClasses {
			break
		}
	}
	labels := sess.selectionLabels(read)
	rec, _ := read.Device(nil, sess.deviceID)
	reported := sess.labels
	var controlled map[string]string
	if rec != nil {
		if len(rec.ReportedLabels) > 0 {
			reported = rec.ReportedLabels
		}
		if rec.LabelsControlled {
			controlled = rec.Labels
		}
	}
	s.Zone = deviceZone(controlled, reported)
	if all, err := committedWindows(read); err == nil {
		for _, w := range intent.WindowsFor(all, labels) {
			ww := wire.MaintenanceWindow{Name: w.Name}
			for _, sp := range w.Spans {
				ww.Spans = append(ww.Spans, wire.Span{Days: sp.Days, Start: uint16(sp.Start), End: uint16(sp.End)})
			}
			s.Windows = append(s.Windows, ww)
		}
	}
	if rec != nil {
		for _, u := range rec.Unlocks {
			if u.Outcome == "" {
				s.Unlocks = append(s.Unlocks, wire.Unlock{Index: u.Index, Lock: u.Lock, Since: u.Since, Reason: u.Reason, Actor: u.Actor.String()})
			}
		}
	}
	if len(labels) > 0 {
		s.Labels = make(map[string]string, len(labels))
		for _, k := range slices.Sorted(maps.Keys(labels)) {
			if len(s.Labels) == wire.MaxLabels {
				break
			}
			s.Labels[k] = labels[k]
		}
	}
	return s
}

// deviceZone returns a device's IANA time zone from its labels
// (intent.ZoneLabel): the control plane's, else the one it reports; ""
// (UTC) when neither names a zone this server knows.
func deviceZone(controlled, reported map[string]string) string {
	for _, labels := range []map[string]string{controlled, reported} {
		if v := labels[intent.ZoneLabel]; v != "" {
			if _, err := time.LoadLocation(intent.ZoneOf(v)); err == nil {
				return intent.ZoneOf(v)
			}
		}
	}
	return ""
}

// committedWindows returns the maintenance windows the replica holds, by
// name.
func committedWindows(read *fsm.Read) (map[string]intent.MaintenanceWindow, error) {
	recs, err := read.Windows(nil)
	if err != nil {
		return nil, err
	}
	all := make(map[string]intent.MaintenanceWindow, len(recs))
	for _, r := range recs {
		all[r.Name] = r.Window
	}
	return all, nil
}

// maintenanceOf says whether a device's maintenance windows are open at
// now, in its time zone (UTC when it has none), for a rollout released in
// maintenance windows; nil when no window selects the device (labels are
// those it is selected by).
func maintenanceOf(d *fsm.DeviceRecord, labels map[string]string, windows map[string]intent.MaintenanceWindow, now time.Time) *scheduler.TargetWindow {
	ws := intent.WindowsFor(windows, labels)
	if len(ws) == 0 {
		return nil
	}
	var controlled map[string]string
	if d.LabelsControlled {
		controlled = d.Labels
	}
	loc := time.UTC
	if z := deviceZone(controlled, d.ReportedLabels); z != "" {
		loc, _ = time.LoadLocation(z)
	}
	out := &scheduler.TargetWindow{}
	for _, w := range ws {
		if intent.SpansOpen(w.Spans, now, loc) {
			return &scheduler.TargetWindow{Open: true, Name: w.Name}
		}
		if next := intent.SpansNextOpen(w.Spans, now, loc); !next.IsZero() && (out.Opens.IsZero() || next.Before(out.Opens)) {
			out.Opens, out.Name = next, w.Name
		}
	}
	return out
}

// sendSettings sends the device's settings as of read if the session
// speaks 1.4, has sent its Welcome, and the agent does not hold them
// already. Called after the Welcome; the device watch computes the
// settings itself and calls sendSettingsOf.
func (sess *agentSession) sendSettings(read *fsm.Read) error {
	if sess.minor < wire.MinorEdge {
		return nil
	}
	s := sess.settingsFor(read)
	return sess.sendSettingsOf(s, settingsBody(s))
}

// settingsBody is what the settings say, for comparing: their encoding
// without Seq, the index they were read at.
func settingsBody(s *wire.Settings) []byte {
	seq := s.Seq
	s.Seq = 0
	body := s.Append(nil)
	s.Seq = seq
	return body
}

// sendSettingsOf sends settings s, whose settingsBody is body, unless the
// Welcome is not written yet, newer settings were sent, or the agent
// holds these already.
func (sess *agentSession) sendSettingsOf(s *wire.Settings, body []byte) error {
	sess.settingsMu.Lock()
	defer sess.settingsMu.Unlock()
	if !sess.welcomed.Load() || s.Seq < sess.settingsSeq {
		return nil
	}
	if bytes.Equal(body, sess.settingsSent) {
		return nil
	}
	if err := sess.write(s); err != nil {
		return err
	}
	sess.settingsSent, sess.settingsSeq = body, s.Seq
	sess.logger.Debug("settings sent", "seq", s.Seq)
	return nil
}

// welcomeSent marks the Welcome written: settings may follow.
func (sess *agentSession) welcomeSent() {
	sess.settingsMu.Lock()
	sess.welcomed.Store(true)
	sess.settingsMu.Unlock()
}

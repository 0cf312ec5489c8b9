package cluster

import (
	"bytes"
	"maps"
	"slices"

	"github.com/meteor-edge/meteor/fsm"
	"github.com/meteor-edge/meteor/wire"
)

// What the control plane configures on a device beyond its desired state
// travels in a Settings message (protocol 1.4, docs/wire.md §6.7): the
// reconcile classes in effect, the device's control-plane labels, its
// maintenance windows and time zone, and the lock breaks operators asked
// for. A session sends it right after the Welcome, and its device watcher
// (watchDevice) sends it again whenever the replica's version of it
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
	if labels := sess.selectionLabels(read); len(labels) > 0 {
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

// sendSettings sends the device's settings as of read if the session
// speaks 1.4, has sent its Welcome, and the agent does not hold them
// already. Called after the Welcome and by watchDevice.
func (sess *agentSession) sendSettings(read *fsm.Read) error {
	if sess.minor < wire.MinorEdge {
		return nil
	}
	s := sess.settingsFor(read)
	sess.settingsMu.Lock()
	defer sess.settingsMu.Unlock()
	if !sess.welcomed || s.Seq < sess.settingsSeq {
		return nil
	}
	// Compare what the settings say, not the index they were read at.
	seq := s.Seq
	s.Seq = 0
	body := s.Append(nil)
	s.Seq = seq
	if bytes.Equal(body, sess.settingsSent) {
		return nil
	}
	if err := sess.write(s); err != nil {
		return err
	}
	sess.settingsSent, sess.settingsSeq = body, seq
	sess.logger.Debug("settings sent", "seq", seq)
	return nil
}

// welcomeSent marks the Welcome written: settings may follow.
func (sess *agentSession) welcomeSent() {
	sess.settingsMu.Lock()
	sess.welcomed = true
	sess.settingsMu.Unlock()
}

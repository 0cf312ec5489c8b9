package fsm

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/hashicorp/go-memdb"

	"github.com/meteor-edge/meteor/fsm/acl"
)

// A device's labels have two sources. The ones its agent sends in its
// Hello are self-asserted: the FSM keeps them as ReportedLabels, facts the
// device states about itself. The control plane (an operator's
// set-device-labels, or the device's enrollment) sets authoritative ones;
// from then on the device is "controlled" and a Hello no longer changes
// DeviceRecord.Labels. A record written before control-plane labels
// existed, or of a device never labelled by the control plane, keeps
// working as before: its Labels are what it reported, and
// SelectionLabels(true) returns them.

// SetDeviceLabelsRequest sets a device's control-plane labels. The new
// labels are the device's current control-plane labels (none if it has
// not had any: reported labels are never carried over), or none if
// Replace, with Labels set and the keys in Remove deleted.
type SetDeviceLabelsRequest struct {
	ID      string            `json:"id"`
	Labels  map[string]string `json:"labels,omitempty"`
	Remove  []string          `json:"remove,omitempty"`
	Replace bool              `json:"replace,omitempty"`
	Actor   Actor             `json:"actor,omitzero"`
	Time    int64             `json:"time"`
}

// NextLabels returns the control-plane labels the request leaves a device
// with whose record is cur.
func (req *SetDeviceLabelsRequest) NextLabels(cur *DeviceRecord) map[string]string {
	labels := map[string]string{}
	if cur.LabelsControlled && !req.Replace {
		maps.Copy(labels, cur.Labels)
	}
	maps.Copy(labels, req.Labels)
	for _, k := range req.Remove {
		delete(labels, k)
	}
	return labels
}

// SelectionLabels returns the labels intent selection must use for the
// device: its control-plane labels once it has them. For a device the
// control plane has not labelled, Labels are self-asserted; they are
// returned only if trustReported (a cluster that accepts a device's word,
// as in development), and otherwise nil, so such a device is selected only
// by intents with an empty selector.
func (d *DeviceRecord) SelectionLabels(trustReported bool) map[string]string {
	if d.LabelsControlled || trustReported {
		return d.Labels
	}
	return nil
}

func (f *FSM) applySetDeviceLabels(txn *memdb.Txn, index uint64, body []byte) (ApplyResult, error) {
	var req SetDeviceLabelsRequest
	if err := json.Unmarshal(body, &req); err != nil {
		return ApplyResult{}, fmt.Errorf("decode: %w", err)
	}
	if err := acl.CheckDeviceLabels(req.Labels); err != nil {
		return rejected(txn, fmt.Errorf("set labels of device %q: %w", req.ID, err))
	}
	cur, err := f.device(txn, req.ID)
	if err != nil {
		return ApplyResult{}, err
	}
	if cur == nil {
		return rejected(txn, fmt.Errorf("set labels of device %q: %w", req.ID, ErrNotFound))
	}
	labels := req.NextLabels(cur)
	if err := f.setControlLabels(txn, index, req.ID, labels, req.Time, false); err != nil {
		return ApplyResult{}, err
	}
	summary := fmt.Sprintf("labels %v", labels)
	f.emit(index, Event{Kind: KindDevice, Action: "labelled", Time: req.Time, Device: req.ID, Message: summary, Actor: req.Actor.String()})
	return f.audited(txn, index, req.Time, req.Actor, "set-device-labels", "device/"+req.ID, summary)
}

// setControlLabels makes labels the device's control-plane labels,
// registering the device if create and it is new. The device takes a
// revision when what selection sees changes: its labels, or their
// becoming authoritative.
func (f *FSM) setControlLabels(txn *memdb.Txn, index uint64, id string, labels map[string]string, t int64, create bool) error {
	cur, err := f.device(txn, id)
	if err != nil {
		return err
	}
	rec := &DeviceRecord{ID: id, CreateIndex: index}
	if cur != nil {
		c := *cur
		rec = &c
	} else if !create {
		return fmt.Errorf("device %q: %w", id, ErrNotFound)
	}
	if cur == nil {
		f.emit(index, Event{Kind: KindDevice, Action: "registered", Time: t, Device: id, Message: "enrolled"})
	}
	if cur == nil || !cur.LabelsControlled || !maps.Equal(cur.Labels, labels) {
		rev, err := nextRevision(txn)
		if err != nil {
			return err
		}
		rec.Revision = rev
	}
	rec.Labels, rec.LabelsControlled, rec.LabelsIndex = labels, true, index
	rec.ModifyIndex, rec.UpdatedAt = index, t
	return txn.Insert(tableDevices, rec)
}

// reportLabels records the labels a device reported. For a device the
// control plane has not labelled they are its labels too (as before
// control-plane labels existed); it reports whether those changed.
func reportLabels(rec *DeviceRecord, reported map[string]string) (changed bool) {
	rec.ReportedLabels = maps.Clone(reported)
	if rec.LabelsControlled || maps.Equal(rec.Labels, reported) {
		return false
	}
	rec.Labels = maps.Clone(reported)
	return true
}

// MapKey is a canonical string of a string map, such as a label set: the
// same for equal maps, different for different ones (keys and values
// cannot hold the NUL byte that separates them).
func MapKey(m map[string]string) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var b strings.Builder
	for _, k := range keys {
		b.WriteString(k)
		b.WriteByte(0)
		b.WriteString(m[k])
		b.WriteByte(0)
	}
	return b.String()
}

package fsm

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/hashicorp/go-memdb"
)

// Workload locks on devices, and how devices recovered from crashes.
//
// Workload locks (docs/agent.md, "Workload locks"): a device's
// agent reports the locks held on it (DeviceRecord.Locks); an operator
// breaks one with an order recorded on the device's record
// (DeviceUnlockType), which the device's sessions send to its agent in
// their settings; the agent breaks the lock if it is still the
// acquisition the order names, and reports the outcome, which a status
// transition records on the order. Orders and outcomes are in the
// device's timeline, orders in the audit log.

// DeviceLock is a workload lock held on a device, as its agent reported
// it.
type DeviceLock struct {
	Name   string `json:"name"`
	Holder string `json:"holder,omitempty"`
	// Since is when it was taken (the device's clock, Unix ns); MaxHold
	// how long it may be held before it is stale (0: no limit).
	Since   int64         `json:"since"`
	MaxHold time.Duration `json:"max_hold,omitempty"`
	// Source is "agent" (taken through the agent) or "file" (a lock file).
	Source string `json:"source"`
}

// Stale reports whether the lock is held past its maximum hold at now.
func (l DeviceLock) Stale(now time.Time) bool {
	return l.MaxHold > 0 && now.Sub(time.Unix(0, l.Since)) > l.MaxHold
}

// UnlockRecord is an operator's order to break a lock on a device, and
// what became of it.
type UnlockRecord struct {
	// Index is the order's Raft index, which numbers it.
	Index uint64 `json:"index"`
	Lock  string `json:"lock"`
	// Since is the acquisition the order breaks (DeviceLock.Since).
	Since  int64  `json:"since"`
	Reason string `json:"reason,omitempty"`
	Actor  Actor  `json:"actor,omitzero"`
	Time   int64  `json:"time"`
	// Outcome is empty until the agent reports "broken", "not held" or
	// "taken again since", at OutcomeAt (the agent's clock, Unix ns).
	Outcome   string `json:"outcome,omitempty"`
	OutcomeAt int64  `json:"outcome_at,omitempty"`
}

// UnlockResult is an agent's outcome of an order, which a status
// transition carries.
type UnlockResult struct {
	Index   uint64 `json:"index"`
	Lock    string `json:"lock"`
	Outcome string `json:"outcome"`
	At      int64  `json:"at"`
}

// MaxUnlocks bounds the orders a device's record keeps (the newest).
const MaxUnlocks = 16

// DeviceUnlockRequest orders a lock on a device broken.
type DeviceUnlockRequest struct {
	ID     string `json:"id"`
	Lock   string `json:"lock"`
	Since  int64  `json:"since"`
	Reason string `json:"reason,omitempty"`
	Actor  Actor  `json:"actor,omitzero"`
	Time   int64  `json:"time"`
}

func (f *FSM) applyDeviceUnlock(txn *memdb.Txn, index uint64, body []byte) (ApplyResult, error) {
	var req DeviceUnlockRequest
	if err := json.Unmarshal(body, &req); err != nil {
		return ApplyResult{}, fmt.Errorf("decode: %w", err)
	}
	if req.Lock == "" || len(req.Lock) > 256 || len(req.Reason) > 1024 {
		return rejected(txn, fmt.Errorf("unlock device %q: a lock name of at most 256 bytes and a reason of at most 1024 are required", req.ID))
	}
	cur, err := f.device(txn, req.ID)
	if err != nil {
		return ApplyResult{}, err
	}
	if cur == nil {
		return rejected(txn, fmt.Errorf("unlock device %q: %w", req.ID, ErrNotFound))
	}
	rec := *cur
	rec.Unlocks = append(append([]UnlockRecord(nil), cur.Unlocks...), UnlockRecord{
		Index: index, Lock: req.Lock, Since: req.Since, Reason: req.Reason, Actor: req.Actor, Time: req.Time,
	})
	if n := len(rec.Unlocks); n > MaxUnlocks {
		rec.Unlocks = rec.Unlocks[n-MaxUnlocks:]
	}
	summary := fmt.Sprintf("break lock %s held since %s", req.Lock, time.Unix(0, req.Since).UTC().Format(time.RFC3339))
	if req.Reason != "" {
		summary += ": " + req.Reason
	}
	f.appendTimeline(&rec, &TimelineEntry{
		Time: req.Time, Index: index, Revision: rec.StatusRevision, Status: rec.Status, Owner: req.Actor.String(),
		Reason: "operator ordered: " + summary,
	})
	rec.ModifyIndex = index
	if err := txn.Insert(tableDevices, &rec); err != nil {
		return ApplyResult{}, err
	}
	f.emit(index, Event{Kind: KindDevice, Action: "unlock", Time: req.Time, Device: req.ID, Reason: req.Reason, Message: summary, Actor: req.Actor.String()})
	return f.audited(txn, index, req.Time, req.Actor, "unlock-device", "device/"+req.ID, summary)
}

// recordUnlocked records an agent's outcomes on the orders of rec, each
// once, with a timeline entry.
func (f *FSM) recordUnlocked(index uint64, rec *DeviceRecord, results []UnlockResult, t int64, owner string) {
	for _, r := range results {
		i := -1
		for j := range rec.Unlocks {
			if rec.Unlocks[j].Index == r.Index && rec.Unlocks[j].Outcome == "" {
				i = j
			}
		}
		if i < 0 {
			continue
		}
		rec.Unlocks = append([]UnlockRecord(nil), rec.Unlocks...)
		u := &rec.Unlocks[i]
		u.Outcome, u.OutcomeAt = r.Outcome, r.At
		f.appendTimeline(rec, &TimelineEntry{
			Time: t, Index: index, Revision: rec.StatusRevision, Status: rec.Status, Owner: owner,
			Reason: fmt.Sprintf("the device reports lock %s %s (order of %s)", u.Lock, u.Outcome, u.Actor.String()),
		})
		f.emit(index, Event{Kind: KindDevice, Action: "unlocked", Time: t, Device: rec.ID, Message: fmt.Sprintf("lock %s %s", u.Lock, u.Outcome)})
	}
}

// DeviceRecovery is how a device's agent recovered at its latest start
// after a crash or a power loss (or with steps in flight), as it reported
// it.
type DeviceRecovery struct {
	// At is when the agent started (the device's clock, Unix ns).
	At      int64 `json:"at"`
	Unclean bool  `json:"unclean"`
	// Total counts the resources desired then, Applied those applied at
	// their desired digest when the agent before stopped.
	Total   int                  `json:"total"`
	Applied int                  `json:"applied"`
	Steps   []DeviceRecoveryStep `json:"steps,omitempty"`
}

// DeviceRecoveryStep is a step a restart interrupted and how it was
// resolved: Outcome "already applied", "applied again" or "no longer
// desired"; Child "waited for", "ended" or "" (no process of it survived).
type DeviceRecoveryStep struct {
	Key     string `json:"key"`
	Outcome string `json:"outcome"`
	Child   string `json:"child,omitempty"`
}

// Story tells the recovery in a sentence for the device's timeline.
func (r *DeviceRecovery) Story() string {
	var b strings.Builder
	if r.Unclean {
		b.WriteString("the agent restarted after a crash or power loss")
	} else {
		b.WriteString("the agent restarted with steps in flight")
	}
	fmt.Fprintf(&b, ": %d of %d resources were applied", r.Applied, r.Total)
	for _, s := range r.Steps {
		fmt.Fprintf(&b, "; %s was interrupted mid-step, re-checked: %s", s.Key, s.Outcome)
		if s.Child != "" {
			fmt.Fprintf(&b, " (a process of it survived and was %s first)", s.Child)
		}
	}
	if rest := r.Total - r.Applied - len(r.Steps); rest > 0 {
		fmt.Fprintf(&b, "; the other %d resumed", rest)
	}
	return b.String()
}

// recordRecovery takes a recovery a transition carries if it is newer
// than the record's, with a timeline entry telling it.
func (f *FSM) recordRecovery(index uint64, rec *DeviceRecord, r *DeviceRecovery, t int64, owner string) {
	if r == nil || rec.Recovery != nil && r.At <= rec.Recovery.At {
		return
	}
	rec.Recovery = r
	story := r.Story()
	f.appendTimeline(rec, &TimelineEntry{Time: t, Index: index, Revision: rec.StatusRevision, Status: rec.Status, Owner: owner, Reason: story})
	f.emit(index, Event{Kind: KindDevice, Action: "recovered", Time: t, Device: rec.ID, Message: story})
}

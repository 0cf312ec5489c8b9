package fsm

import (
	"encoding/json"
	"fmt"
	"maps"

	"github.com/hashicorp/go-memdb"
)

// handler applies one decoded command inside a write transaction. It
// returns the result for the proposer; a non-nil error return means the
// state store itself failed, which is fatal.
type handler func(f *FSM, txn *memdb.Txn, index uint64, body []byte) (ApplyResult, error)

var handlers = map[MessageType]handler{
	PutIntentType:     (*FSM).applyPutIntent,
	DeleteIntentType:  (*FSM).applyDeleteIntent,
	UpsertDeviceType:  (*FSM).applyUpsertDevice,
	DeviceSessionType: (*FSM).applyDeviceSession,
	StatusBatchType:   (*FSM).applyStatusBatch,

	DeviceSessionBatchType: (*FSM).applyDeviceSessionBatch,

	CreateTokenType:       (*FSM).applyCreateToken,
	RevokeTokenType:       (*FSM).applyRevokeToken,
	UseEnrollTokenType:    (*FSM).applyUseEnrollToken,
	SetDeviceLabelsType:   (*FSM).applySetDeviceLabels,
	RevokeDeviceType:      (*FSM).applyRevokeDevice,
	UnrevokeDeviceType:    (*FSM).applyUnrevokeDevice,
	AuditMemberChangeType: (*FSM).applyMemberChange,
	RolloutStepType:       (*FSM).applyRolloutStep,
	RolloutControlType:    (*FSM).applyRolloutControl,
	AuditOperationType:    (*FSM).applyOperation,
	SetFeatureLevelType:   (*FSM).applySetFeatureLevel,
	PutClassType:          (*FSM).applyPutClass,
	PutWindowType:         (*FSM).applyPutWindow,
	DeviceUnlockType:      (*FSM).applyDeviceUnlock,
}

// Apply applies one committed command at Raft index index. It panics on a
// command it does not understand unless the command is flagged ignorable,
// because silently skipping it would let replicas diverge.
func (f *FSM) Apply(index uint64, data []byte) ApplyResult {
	return f.ApplyBatch([]uint64{index}, [][]byte{data})[0]
}

// ApplyBatch applies consecutive committed commands in one state-store
// transaction, so readers and watchers see the batch at once.
func (f *FSM) ApplyBatch(indexes []uint64, data [][]byte) []ApplyResult {
	// Raft applies from one goroutine; the lock keeps a batch's staged
	// events its own when something else applies too (a test injecting
	// an entry past Raft).
	f.applyMu.Lock()
	defer f.applyMu.Unlock()
	db, _ := f.current()
	txn := db.Txn(true)
	defer txn.Abort()
	defer stageMeta(txn)()
	out := make([]ApplyResult, len(data))
	for i, d := range data {
		f.cps.take(txn, indexes[i], f.settle)
		out[i] = f.applyLocked(txn, indexes[i], d)
	}
	if err := f.settle(txn); err != nil {
		panic(fmt.Sprintf("fsm: %v", err))
	}
	txn.Commit()
	f.events.publish()
	return out
}

// settle does what a batch defers to its end, so that txn holds the state
// applying its commands one at a time leaves: it drops the audit records
// beyond the limit (trimAudit) and writes the staged meta values
// (flushMeta). The apply runs it before the commit and before a
// checkpoint's snapshot.
func (f *FSM) settle(txn *memdb.Txn) error {
	if err := f.trimAudit(txn); err != nil {
		return err
	}
	return flushMeta(txn)
}

// applyLocked applies one command in txn. Commands only ever run on the
// single Raft apply goroutine, so txn is the only writer.
func (f *FSM) applyLocked(txn *memdb.Txn, index uint64, data []byte) ApplyResult {
	if len(data) == 0 {
		panic(fmt.Sprintf("fsm: empty command at index %d", index))
	}
	if cur := metaValue(txn, metaIndex); index <= cur {
		// Already applied: Raft replays the entries after a snapshot it
		// installed, and Restore keeps a state newer than an older
		// snapshot. Applying again would count revisions twice.
		return ApplyResult{Revision: metaValue(txn, metaRevision)}
	}
	t := MessageType(data[0])
	ignorable := t&IgnoreUnknownTypeFlag != 0
	t &^= IgnoreUnknownTypeFlag
	h, ok := handlers[t]
	if t.Level() > f.level {
		// A replica of an earlier release does not know the type.
		ok = false
	}
	if !ok {
		if ignorable {
			return f.touchIndex(txn, index)
		}
		panic(fmt.Sprintf("fsm: unknown command type %d at index %d", t, index))
	}
	res, err := h(f, txn, index, data[1:])
	if err != nil {
		panic(fmt.Sprintf("fsm: apply %s at index %d: %v", t, index, err))
	}
	if err := setMeta(txn, metaIndex, index); err != nil {
		panic(fmt.Sprintf("fsm: %v", err))
	}
	return res
}

// ApplyNoop records that index was applied without changing state (Raft
// configuration entries and no-ops use it), keeping Index current.
func (f *FSM) ApplyNoop(index uint64) {
	db, _ := f.current()
	txn := db.Txn(true)
	defer txn.Abort()
	f.cps.take(txn, index, f.settle)
	f.touchIndex(txn, index)
	txn.Commit()
}

func (f *FSM) touchIndex(txn *memdb.Txn, index uint64) ApplyResult {
	if index <= metaValue(txn, metaIndex) {
		return ApplyResult{Revision: metaValue(txn, metaRevision)}
	}
	if err := setMeta(txn, metaIndex, index); err != nil {
		panic(fmt.Sprintf("fsm: %v", err))
	}
	return ApplyResult{Revision: metaValue(txn, metaRevision)}
}

// emit stages an event of the command at index, published with the batch.
func (f *FSM) emit(index uint64, e Event) { f.events.stage(index, e) }

// nextRevision bumps and returns the cluster revision.
func nextRevision(txn *memdb.Txn) (uint64, error) {
	rev := metaValue(txn, metaRevision) + 1
	return rev, setMeta(txn, metaRevision, rev)
}

// rejected is a deterministic rejection: state unchanged.
func rejected(txn *memdb.Txn, err error) (ApplyResult, error) {
	return ApplyResult{Revision: metaValue(txn, metaRevision), Err: err}, nil
}

// putIntentWire is PutIntentRequest as applied: the document stays raw
// too, to be kept in the history as committed.
type putIntentWire struct {
	Intent  json.RawMessage `json:"intent"`
	IfMatch *uint64         `json:"if_match,omitempty"`
	Time    int64           `json:"time"`
	Actor   Actor           `json:"actor,omitzero"`
}

func (f *FSM) applyPutIntent(txn *memdb.Txn, index uint64, body []byte) (ApplyResult, error) {
	var w putIntentWire
	if err := decodeCommand(body, &w); err != nil {
		return ApplyResult{}, fmt.Errorf("decode: %w", err)
	}
	if len(w.Intent) == 0 || string(w.Intent) == "null" {
		return rejected(txn, fmt.Errorf("put intent: no intent in request"))
	}
	req := PutIntentRequest{IfMatch: w.IfMatch, Time: w.Time, Actor: w.Actor}
	if err := decodeCommand(w.Intent, &req.Intent); err != nil {
		return ApplyResult{}, fmt.Errorf("decode intent: %w", err)
	}
	// The log entry may be kept in Raft's cache: keep a copy.
	doc := append(json.RawMessage(nil), w.Intent...)
	// The proposer validated the document (intent.Parse); replicas do not
	// validate it again. Validating here cost every replica a tenth of an
	// apply, and it would make replicas of two releases decide the same
	// entry differently once a release tightens a rule: an entry the old
	// one took, the new one would refuse while replaying the log. Only
	// what the state itself needs is checked.
	if req.Intent.Name == "" {
		return rejected(txn, fmt.Errorf("put intent: the intent has no name"))
	}
	if level, what := IntentLevel(req.Intent); level > activeLevel(txn) {
		return rejected(txn, &FeatureLevelError{What: fmt.Sprintf("intent %q: %s", req.Intent.Name, what), Level: level, Active: activeLevel(txn)})
	}
	name := req.Intent.Name
	raw, err := txn.First(tableIntents, "id", name)
	if err != nil {
		return ApplyResult{}, err
	}
	var cur *IntentRecord
	if raw != nil {
		cur = raw.(*IntentRecord)
	}
	if err := checkIfMatch(name, req.IfMatch, cur); err != nil {
		return rejected(txn, err)
	}
	canonical, err := req.Intent.Canonical()
	if err != nil {
		return rejected(txn, fmt.Errorf("intent %q: %w", req.Intent.Name, err))
	}
	if cur != nil && string(f.canonicalOf(cur)) == string(canonical) {
		// Applying the same document again changes nothing.
		return ApplyResult{Revision: cur.Revision, Unchanged: true}, nil
	}
	rev, err := nextRevision(txn)
	if err != nil {
		return ApplyResult{}, err
	}
	rec := &IntentRecord{
		Name: name, Intent: req.Intent,
		CreateRevision: rev, Revision: rev,
		CreateIndex: index, ModifyIndex: index,
		UpdatedAt: req.Time,
	}
	if cur != nil {
		rec.CreateRevision, rec.CreateIndex = cur.CreateRevision, cur.CreateIndex
	}
	f.canon[name] = canonEntry{rec: rec, canonical: canonical}
	if err := txn.Insert(tableIntents, rec); err != nil {
		return ApplyResult{}, err
	}
	if err := f.startRollout(txn, index, cur, rec, req.Time, req.Actor); err != nil {
		return ApplyResult{}, err
	}
	if err := f.appendHistory(txn, &HistoryRecord{Name: name, Revision: rev, Doc: doc, Index: index, Time: req.Time, Actor: req.Actor}); err != nil {
		return ApplyResult{}, err
	}
	summary := fmt.Sprintf("revision %d", rev)
	if cur == nil {
		summary = fmt.Sprintf("created at revision %d", rev)
	}
	if err := f.audit(txn, index, req.Time, req.Actor, "put-intent", "intent/"+name, summary); err != nil {
		return ApplyResult{}, err
	}
	f.emit(index, Event{Kind: KindIntent, Action: "put", Time: req.Time, Intent: name, Revision: rev, Message: summary, Actor: req.Actor.String()})
	return ApplyResult{Revision: rev}, nil
}

func (f *FSM) applyDeleteIntent(txn *memdb.Txn, index uint64, body []byte) (ApplyResult, error) {
	var req DeleteIntentRequest
	if err := json.Unmarshal(body, &req); err != nil {
		return ApplyResult{}, fmt.Errorf("decode: %w", err)
	}
	raw, err := txn.First(tableIntents, "id", req.Name)
	if err != nil {
		return ApplyResult{}, err
	}
	if raw == nil {
		if req.IfMatch != nil && *req.IfMatch != 0 {
			return rejected(txn, &ConflictError{Name: req.Name, Expected: *req.IfMatch})
		}
		return rejected(txn, fmt.Errorf("intent %q: %w", req.Name, ErrNotFound))
	}
	cur := raw.(*IntentRecord)
	if err := checkIfMatch(req.Name, req.IfMatch, cur); err != nil {
		return rejected(txn, err)
	}
	rev, err := nextRevision(txn)
	if err != nil {
		return ApplyResult{}, err
	}
	if err := txn.Delete(tableIntents, cur); err != nil {
		return ApplyResult{}, err
	}
	delete(f.canon, req.Name)
	if err := f.dropRollout(txn, index, req.Name, rev, req.Time, req.Actor); err != nil {
		return ApplyResult{}, err
	}
	if err := f.appendHistory(txn, &HistoryRecord{Name: req.Name, Revision: rev, Deleted: true, Index: index, Time: req.Time, Actor: req.Actor}); err != nil {
		return ApplyResult{}, err
	}
	summary := fmt.Sprintf("deleted at revision %d (was revision %d)", rev, cur.Revision)
	if err := f.audit(txn, index, req.Time, req.Actor, "delete-intent", "intent/"+req.Name, summary); err != nil {
		return ApplyResult{}, err
	}
	f.emit(index, Event{Kind: KindIntent, Action: "delete", Time: req.Time, Intent: req.Name, Revision: rev, Message: summary, Actor: req.Actor.String()})
	return ApplyResult{Revision: rev}, nil
}

func checkIfMatch(name string, ifMatch *uint64, cur *IntentRecord) error {
	if ifMatch == nil {
		return nil
	}
	var have uint64
	if cur != nil {
		have = cur.Revision
	}
	if have != *ifMatch {
		return &ConflictError{Name: name, Expected: *ifMatch, Current: have}
	}
	return nil
}

// appendHistory stores h and trims the intent's history to the limit,
// keeping the revisions a rollout still has devices hold.
func (f *FSM) appendHistory(txn *memdb.Txn, h *HistoryRecord) error {
	if err := txn.Insert(tableHistory, h); err != nil {
		return err
	}
	it, err := txn.LowerBound(tableHistory, "id", h.Name, uint64(0))
	if err != nil {
		return err
	}
	var recs []*HistoryRecord
	for raw := it.Next(); raw != nil; raw = it.Next() {
		r := raw.(*HistoryRecord)
		if r.Name != h.Name {
			break
		}
		recs = append(recs, r)
	}
	drop := len(recs) - f.historyLimit
	if drop <= 0 {
		return nil
	}
	pins, err := pinned(txn, h.Name)
	if err != nil {
		return err
	}
	// Drop the oldest unpinned records. A record kept after dropped ones
	// says from which revision on they are gone (DroppedFrom), so that
	// IntentAt does not answer for them with an older revision.
	var gapFrom uint64
	kept := 0
	for i, r := range recs {
		if drop > 0 && !pins[r.Revision] && i < len(recs)-1 {
			if err := txn.Delete(tableHistory, r); err != nil {
				return err
			}
			drop--
			if gapFrom == 0 {
				gapFrom = r.Revision
				if r.DroppedFrom != 0 {
					gapFrom = r.DroppedFrom
				}
			}
			continue
		}
		kept++
		if gapFrom == 0 {
			continue
		}
		// Records are immutable once stored: replace with a copy.
		c := *r
		if c.DroppedFrom == 0 || gapFrom < c.DroppedFrom {
			c.DroppedFrom = gapFrom
		}
		c.Truncated = c.Truncated || kept == 1
		if err := txn.Insert(tableHistory, &c); err != nil {
			return err
		}
		gapFrom = 0
	}
	return nil
}

func (f *FSM) applyUpsertDevice(txn *memdb.Txn, index uint64, body []byte) (ApplyResult, error) {
	var req UpsertDeviceRequest
	if err := json.Unmarshal(body, &req); err != nil {
		return ApplyResult{}, fmt.Errorf("decode: %w", err)
	}
	if req.ID == "" {
		return rejected(txn, fmt.Errorf("upsert device: empty device ID"))
	}
	raw, err := txn.First(tableDevices, "id", req.ID)
	if err != nil {
		return ApplyResult{}, err
	}
	rec := &DeviceRecord{ID: req.ID, Labels: maps.Clone(req.Labels), ReportedLabels: maps.Clone(req.Labels), CreateIndex: index, ModifyIndex: index, UpdatedAt: req.Time}
	if raw != nil {
		cur := raw.(*DeviceRecord)
		if cur.LabelsControlled {
			// The control plane's labels stand; the device's are facts.
			c := *cur
			c.ReportedLabels, c.ModifyIndex, c.UpdatedAt = maps.Clone(req.Labels), index, req.Time
			if err := txn.Insert(tableDevices, &c); err != nil {
				return ApplyResult{}, err
			}
			return ApplyResult{Revision: metaValue(txn, metaRevision)}, nil
		}
		if maps.Equal(cur.Labels, req.Labels) {
			return ApplyResult{Revision: metaValue(txn, metaRevision)}, nil
		}
		// The record is replaced whole, its timeline's numbering too, but
		// not the entries kept so far.
		rec.CreateIndex, rec.Timeline = cur.CreateIndex, cur.Timeline
	}
	rev, err := nextRevision(txn)
	if err != nil {
		return ApplyResult{}, err
	}
	rec.Revision = rev
	if err := txn.Insert(tableDevices, rec); err != nil {
		return ApplyResult{}, err
	}
	action := "labelled"
	if raw == nil {
		action = "registered"
	}
	f.emit(index, Event{Kind: KindDevice, Action: action, Time: req.Time, Device: req.ID, Revision: rev, Message: fmt.Sprintf("labels %v", req.Labels)})
	return ApplyResult{Revision: rev}, nil
}

// canonEntry is the canonical encoding of a stored intent record, which a
// put of the same document compares with.
type canonEntry struct {
	rec       *IntentRecord
	canonical []byte
}

// canonicalOf returns rec's canonical encoding: from f.canon if this
// apply goroutine stored rec itself (records are never changed in place,
// so the pointer says it is the same), else computed (a record a
// snapshot restored). Only the apply goroutine calls it.
func (f *FSM) canonicalOf(rec *IntentRecord) []byte {
	if e, ok := f.canon[rec.Name]; ok && e.rec == rec {
		return e.canonical
	}
	c, _ := rec.Intent.Canonical()
	return c
}

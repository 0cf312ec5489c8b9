package fsm

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"

	"github.com/hashicorp/go-memdb"

	"github.com/meteor-edge/meteor/fsm/intent"
)

// Rollout states, the values of RolloutRecord.State.
const (
	// RolloutProgressing: the leader releases the revision wave by wave.
	RolloutProgressing = "progressing"
	// RolloutWaitingApproval: the next wave waits for an operator's
	// approval (RolloutApprove).
	RolloutWaitingApproval = "waiting-approval"
	// RolloutPaused: nothing more is released until an operator resumes;
	// Reason says who or what paused it.
	RolloutPaused = "paused"
	// RolloutCompleted: every targeted device is released; the revision is
	// the intent's stable one.
	RolloutCompleted = "completed"
	// RolloutAborted: an operator aborted; the released devices went back
	// to the stable revision.
	RolloutAborted = "aborted"
	// RolloutReverted: the failure policy reverted; the released devices
	// went back to the stable revision.
	RolloutReverted = "reverted"
	// RolloutSuperseded: a newer revision of the intent took over.
	RolloutSuperseded = "superseded"
)

// RolloutEnded reports whether a rollout in state s is over: it releases
// nothing more unless an operator resumes it (aborted, reverted).
func RolloutEnded(s string) bool {
	switch s {
	case RolloutCompleted, RolloutAborted, RolloutReverted, RolloutSuperseded:
		return true
	}
	return false
}

// Operator actions on a rollout, the values of RolloutControlRequest.Action.
const (
	RolloutApprove = "approve"
	RolloutPause   = "pause"
	RolloutResume  = "resume"
	RolloutAbort   = "abort"
)

// ErrStaleStep rejects a rollout step judged on a rollout record that has
// changed since (an operator paused it, a newer revision superseded it, or
// another step went first). The worker judges again from the new record.
var ErrStaleStep = errors.New("rollout changed since the step was decided")

// RolloutRecord is the rollout of an intent's newest revision, kept for
// every intent whose revision came with a rollout block. An intent without
// one has no record, and every device it selects holds its current
// revision.
//
// A device holds the revision released to it (ReleaseRecord) if there is
// one, else Stable. The leader's rollout worker releases Revision wave by
// wave (RolloutStepRequest); once every targeted device has it, Stable
// becomes Revision and the releases are dropped.
type RolloutRecord struct {
	Intent string `json:"intent"`
	// Revision is the revision being rolled out.
	Revision uint64 `json:"revision"`
	// Stable is the revision a device holds until a newer one is released
	// to it; 0 means none (the intent is new to the devices).
	Stable uint64 `json:"stable,omitempty"`
	State  string `json:"state"`
	// Reason says why the rollout is in State (who paused it, which gate
	// failed, what it waits for).
	Reason string `json:"reason,omitempty"`
	// Wave is the index of the wave in progress (or the last one).
	Wave  int         `json:"wave"`
	Waves []WaveState `json:"waves"`
	// Seq is bumped by every change to the record; a step applies only on
	// the Seq it was decided on (RolloutStepRequest.Basis).
	Seq       uint64 `json:"seq"`
	StartedAt int64  `json:"started_at"`
	UpdatedAt int64  `json:"updated_at"`
	EndedAt   int64  `json:"ended_at,omitempty"`
	// Released counts the devices holding a release, per revision: the
	// revisions the history must keep.
	Released map[uint64]int `json:"released,omitempty"`
	// Actor applied the revision.
	Actor Actor `json:"actor,omitzero"`
}

// WaveState is what the rollout recorded about one wave.
type WaveState struct {
	// StartedAt is when the first device of the wave was released.
	StartedAt int64 `json:"started_at,omitempty"`
	// Approved: an operator approved the wave (ApprovedBy, ApprovedAt).
	Approved   bool   `json:"approved,omitempty"`
	ApprovedBy string `json:"approved_by,omitempty"`
	ApprovedAt int64  `json:"approved_at,omitempty"`
	// GateSince is since when the wave's health gate has held; 0 when it
	// does not.
	GateSince int64 `json:"gate_since,omitempty"`
	// DoneAt is when the wave passed its gate.
	DoneAt int64 `json:"done_at,omitempty"`
}

// ReleaseRecord says that Revision of Intent is released to Device.
type ReleaseRecord struct {
	Intent   string `json:"intent"`
	Device   string `json:"device"`
	Revision uint64 `json:"revision"`
	// Wave is the index of the wave that released it.
	Wave  int    `json:"wave"`
	Time  int64  `json:"time"`
	Index uint64 `json:"index"`
	// DesiredRevision is the cluster revision from which the device's
	// desired state includes the release: an agent that acknowledged it
	// has received it.
	DesiredRevision uint64 `json:"desired_revision"`
}

// RolloutCounts are a revision's devices by progress, at one time.
type RolloutCounts struct {
	Targeted  int `json:"targeted"`
	Released  int `json:"released"`
	Acked     int `json:"acknowledged"`
	Converged int `json:"converged"`
	Failed    int `json:"failed"`
}

// Rollout event kinds, the values of RolloutEvent.Kind.
const (
	EventStarted    = "started"
	EventRelease    = "release"
	EventGate       = "gate"
	EventWaveDone   = "wave-done"
	EventWaiting    = "waiting"
	EventApproved   = "approved"
	EventPaused     = "paused"
	EventResumed    = "resumed"
	EventAborted    = "aborted"
	EventReverted   = "reverted"
	EventCompleted  = "completed"
	EventSuperseded = "superseded"
	EventSample     = "sample"
)

// RolloutEvent is one entry of an intent's rollout timeline: a decision
// (a release, a gate result, a pause and its reason, an approval, a
// revert) or a sample of the revision's counts.
type RolloutEvent struct {
	Intent string `json:"intent"`
	// Index is the Raft index of the command that recorded the event, N
	// its position among the command's events: the event's key.
	Index    uint64 `json:"index"`
	N        int    `json:"n"`
	Time     int64  `json:"time"`
	Revision uint64 `json:"revision"`
	Kind     string `json:"kind"`
	// Wave is the wave's number (1-based); 0 for the rollout as a whole.
	Wave    int    `json:"wave,omitempty"`
	Message string `json:"message,omitempty"`
	// Devices are the devices a release released.
	Devices []string       `json:"devices,omitempty"`
	Counts  *RolloutCounts `json:"counts,omitempty"`
	Actor   Actor          `json:"actor,omitzero"`
}

// rolloutEventLimit is how many events are kept per intent (the newest).
const rolloutEventLimit = 4096

// MaxReleasesPerStep bounds the devices one step releases, keeping log
// entries small; the worker releases the rest in the next steps.
const MaxReleasesPerStep = 1000

// RolloutStepRequest is one decision of the leader's rollout worker about
// the rollout of Intent at Revision, judged on the record at Seq Basis.
type RolloutStepRequest struct {
	Intent   string `json:"intent"`
	Revision uint64 `json:"revision"`
	Basis    uint64 `json:"basis"`
	Time     int64  `json:"time"`
	// Release are devices to release Revision to, in wave ReleaseWave.
	Release     []string `json:"release,omitempty"`
	ReleaseWave int      `json:"release_wave,omitempty"`
	// State, Reason, Wave and Waves replace the record's.
	State  string      `json:"state"`
	Reason string      `json:"reason,omitempty"`
	Wave   int         `json:"wave"`
	Waves  []WaveState `json:"waves"`
	// Complete makes Revision the stable revision and drops every release;
	// Revert drops every release, so devices go back to the stable one.
	Complete bool           `json:"complete,omitempty"`
	Revert   bool           `json:"revert,omitempty"`
	Events   []RolloutEvent `json:"events,omitempty"`
}

// RolloutControlRequest is an operator's action on an intent's rollout.
type RolloutControlRequest struct {
	Intent string `json:"intent"`
	// Revision, when not 0, must be the rollout's revision.
	Revision uint64 `json:"revision,omitempty"`
	Action   string `json:"action"`
	// Wave is the wave to approve (1-based); 0 is the one waiting.
	Wave   int    `json:"wave,omitempty"`
	Reason string `json:"reason,omitempty"`
	Time   int64  `json:"time"`
	Actor  Actor  `json:"actor,omitzero"`
}

// Rollout returns an intent's rollout record, or ErrNotFound.
func (r *Read) Rollout(ws memdb.WatchSet, name string) (*RolloutRecord, error) {
	ch, raw, err := r.txn.FirstWatch(tableRollouts, "id", name)
	if err != nil {
		return nil, fmt.Errorf("read rollout %q: %w", name, err)
	}
	r.watch(ws, ch)
	if raw == nil {
		return nil, fmt.Errorf("rollout of %q: %w", name, ErrNotFound)
	}
	return raw.(*RolloutRecord), nil
}

// Rollouts returns every rollout record, ordered by intent.
func (r *Read) Rollouts(ws memdb.WatchSet) ([]*RolloutRecord, error) {
	return readAll[*RolloutRecord](r, ws, tableRollouts)
}

// WatchReleases adds to ws channels that fire when any rollout or release
// changes: what, with the intents, decides every device's desired state.
func (r *Read) WatchReleases(ws memdb.WatchSet) error {
	for _, table := range []string{tableRollouts, tableReleases} {
		it, err := r.txn.Get(table, "id")
		if err != nil {
			return fmt.Errorf("watch %s: %w", table, err)
		}
		r.watch(ws, it.WatchCh())
	}
	return nil
}

// Release returns the release of an intent to a device, or nil.
func (r *Read) Release(name, device string) (*ReleaseRecord, error) {
	raw, err := r.txn.First(tableReleases, "id", name, device)
	if err != nil {
		return nil, fmt.Errorf("read release of %q to %q: %w", name, device, err)
	}
	if raw == nil {
		return nil, nil
	}
	return raw.(*ReleaseRecord), nil
}

// Releases returns every release of an intent, ordered by device.
func (r *Read) Releases(name string) ([]*ReleaseRecord, error) {
	it, err := r.txn.Get(tableReleases, "id_prefix", name, "")
	if err != nil {
		return nil, fmt.Errorf("read releases of %q: %w", name, err)
	}
	var out []*ReleaseRecord
	for raw := it.Next(); raw != nil; raw = it.Next() {
		out = append(out, raw.(*ReleaseRecord))
	}
	return out, nil
}

// RolloutEvents returns an intent's retained rollout events, oldest first.
func (r *Read) RolloutEvents(ws memdb.WatchSet, name string) ([]*RolloutEvent, error) {
	it, err := r.txn.LowerBound(tableRolloutEvents, "id", name, uint64(0), 0)
	if err != nil {
		return nil, fmt.Errorf("read rollout events of %q: %w", name, err)
	}
	r.watch(ws, it.WatchCh())
	var out []*RolloutEvent
	for raw := it.Next(); raw != nil; raw = it.Next() {
		e := raw.(*RolloutEvent)
		if e.Intent != name {
			break
		}
		out = append(out, e)
	}
	return out, nil
}

// RolloutOutcomes returns how each earlier rollout of an intent ended (the
// record as it was then), oldest first. The rollout in progress, or the
// last one, is Rollout.
func (r *Read) RolloutOutcomes(name string) ([]*RolloutRecord, error) {
	it, err := r.txn.LowerBound(tableRolloutOutcomes, "id", name, uint64(0))
	if err != nil {
		return nil, fmt.Errorf("read rollout outcomes of %q: %w", name, err)
	}
	var out []*RolloutRecord
	for raw := it.Next(); raw != nil; raw = it.Next() {
		o := raw.(*RolloutRecord)
		if o.Intent != name {
			break
		}
		out = append(out, o)
	}
	return out, nil
}

// AssignedRevision returns the revision of intent rec that device should
// hold: its current revision without a rollout; with one, the revision
// released to the device, else the rollout's stable revision. 0 means
// none. Whether the device is selected is up to that revision's selector.
func (r *Read) AssignedRevision(rec *IntentRecord, device string) (uint64, error) {
	rev, _, err := r.Assignment(rec, device)
	return rev, err
}

// Assignment is AssignedRevision and, for a revision released to the
// device, the cluster revision from which its desired state includes it
// (ReleaseRecord.DesiredRevision; 0 otherwise): an agent that acknowledged
// less has not received it.
func (r *Read) Assignment(rec *IntentRecord, device string) (rev, since uint64, err error) {
	ro, err := rolloutOf(r.txn, rec.Name)
	if err != nil {
		return 0, 0, fmt.Errorf("read rollout %q: %w", rec.Name, err)
	}
	return r.assigned(rec, ro, device)
}

// Assigner returns Assignment(rec, device) as a function of the device,
// having read rec's rollout once: for the many devices of one read.
func (r *Read) Assigner(rec *IntentRecord) (func(device string) (rev, since uint64, err error), error) {
	ro, err := rolloutOf(r.txn, rec.Name)
	if err != nil {
		return nil, fmt.Errorf("read rollout %q: %w", rec.Name, err)
	}
	return func(device string) (uint64, uint64, error) { return r.assigned(rec, ro, device) }, nil
}

// assigned is Assignment(rec, device), rec's rollout being ro (nil: none).
func (r *Read) assigned(rec *IntentRecord, ro *RolloutRecord, device string) (rev, since uint64, err error) {
	if ro == nil {
		return rec.Revision, 0, nil
	}
	rel, err := r.Release(rec.Name, device)
	if err != nil {
		return 0, 0, err
	}
	if rel != nil {
		return rel.Revision, rel.DesiredRevision, nil
	}
	return ro.Stable, 0, nil
}

// IntentDoc returns what intent rec said at revision rev (its current
// document, or one kept in the history).
func (r *Read) IntentDoc(rec *IntentRecord, rev uint64) (*intent.Intent, error) {
	if rev == rec.Revision {
		return rec.Intent, nil
	}
	raw, err := r.txn.First(tableHistory, "id", rec.Name, rev)
	if err != nil {
		return nil, fmt.Errorf("read intent %q at revision %d: %w", rec.Name, rev, err)
	}
	if raw == nil {
		return nil, fmt.Errorf("intent %q at revision %d: %w", rec.Name, rev, ErrCompacted)
	}
	in, err := raw.(*HistoryRecord).Intent()
	if err != nil {
		return nil, err
	}
	if in == nil {
		return nil, fmt.Errorf("intent %q at revision %d: %w (a deletion)", rec.Name, rev, ErrNotFound)
	}
	return in, nil
}

// pinned returns the revisions of an intent that devices still hold
// through its rollout, which the history must keep.
func pinned(txn *memdb.Txn, name string) (map[uint64]bool, error) {
	raw, err := txn.First(tableRollouts, "id", name)
	if err != nil || raw == nil {
		return nil, err
	}
	ro := raw.(*RolloutRecord)
	out := map[uint64]bool{ro.Revision: true}
	if ro.Stable != 0 {
		out[ro.Stable] = true
	}
	for rev := range ro.Released {
		out[rev] = true
	}
	return out, nil
}

// startRollout records how the new revision rec of an intent (replacing
// cur, nil for a new intent) reaches devices: with a rollout block, by a
// new rollout that supersedes one in progress; without one, at once.
func (f *FSM) startRollout(txn *memdb.Txn, index uint64, cur, rec *IntentRecord, t int64, actor Actor) error {
	spec, err := rec.Intent.RolloutSpec()
	immediate := err != nil || spec == nil || spec.Strategy == intent.StrategyImmediate
	old, err := rolloutOf(txn, rec.Name)
	if err != nil {
		return err
	}
	stable := uint64(0)
	switch {
	case old != nil:
		stable = old.Stable
	case cur != nil:
		stable = cur.Revision
	}
	var ev []RolloutEvent
	if old != nil && !RolloutEnded(old.State) {
		msg := fmt.Sprintf("superseded by revision %d", rec.Revision)
		if err := f.endRollout(txn, old, RolloutSuperseded, msg, t); err != nil {
			return err
		}
		ev = append(ev, RolloutEvent{Revision: old.Revision, Kind: EventSuperseded, Message: msg, Actor: actor})
	}
	if immediate {
		if old != nil {
			if err := deleteReleases(txn, rec.Name); err != nil {
				return err
			}
			if err := txn.Delete(tableRollouts, old); err != nil {
				return err
			}
		}
		if old == nil && ev == nil {
			return nil
		}
		ev = append(ev, RolloutEvent{Revision: rec.Revision, Kind: EventCompleted, Message: "released to every device at once (no rollout block)", Actor: actor})
		return f.rolloutEvents(txn, rec.Name, index, t, ev)
	}
	n := max(len(spec.Waves), 1)
	ro := &RolloutRecord{
		Intent: rec.Name, Revision: rec.Revision, Stable: stable,
		State: RolloutProgressing, Waves: make([]WaveState, n),
		Seq: 1, StartedAt: t, UpdatedAt: t, Actor: actor,
	}
	if old != nil {
		ro.Seq = old.Seq + 1
		ro.Released = maps.Clone(old.Released)
	}
	if err := txn.Insert(tableRollouts, ro); err != nil {
		return err
	}
	ev = append(ev, RolloutEvent{Revision: rec.Revision, Kind: EventStarted, Message: fmt.Sprintf("rollout of revision %d started in %d waves", rec.Revision, n), Actor: actor})
	return f.rolloutEvents(txn, rec.Name, index, t, ev)
}

// endRollout records the outcome of a rollout that ends in state.
func (f *FSM) endRollout(txn *memdb.Txn, ro *RolloutRecord, state, reason string, t int64) error {
	out := *ro
	out.State, out.Reason, out.EndedAt, out.UpdatedAt = state, reason, t, t
	out.Released = nil
	if err := txn.Insert(tableRolloutOutcomes, &out); err != nil {
		return err
	}
	// Keep the newest rolloutOutcomeLimit outcomes of the intent.
	it, err := txn.LowerBound(tableRolloutOutcomes, "id", ro.Intent, uint64(0))
	if err != nil {
		return err
	}
	var all []*RolloutRecord
	for raw := it.Next(); raw != nil; raw = it.Next() {
		o := raw.(*RolloutRecord)
		if o.Intent != ro.Intent {
			break
		}
		all = append(all, o)
	}
	for _, o := range all[:max(0, len(all)-rolloutOutcomeLimit)] {
		if err := txn.Delete(tableRolloutOutcomes, o); err != nil {
			return err
		}
	}
	return nil
}

// rolloutOutcomeLimit is how many ended rollouts are kept per intent.
const rolloutOutcomeLimit = 256

func rolloutOf(txn *memdb.Txn, name string) (*RolloutRecord, error) {
	raw, err := txn.First(tableRollouts, "id", name)
	if err != nil || raw == nil {
		return nil, err
	}
	return raw.(*RolloutRecord), nil
}

// deleteReleases drops every release of an intent.
func deleteReleases(txn *memdb.Txn, name string) error {
	_, err := txn.DeletePrefix(tableReleases, "id_prefix", name+"\x00")
	return err
}

// dropRollout removes an intent's rollout and releases when the intent is
// deleted; an unfinished rollout's outcome says so.
func (f *FSM) dropRollout(txn *memdb.Txn, index uint64, name string, rev uint64, t int64, actor Actor) error {
	ro, err := rolloutOf(txn, name)
	if err != nil || ro == nil {
		return err
	}
	if !RolloutEnded(ro.State) {
		msg := fmt.Sprintf("intent deleted at revision %d", rev)
		if err := f.endRollout(txn, ro, RolloutAborted, msg, t); err != nil {
			return err
		}
		if err := f.rolloutEvents(txn, name, index, t, []RolloutEvent{{Revision: ro.Revision, Kind: EventAborted, Message: msg, Actor: actor}}); err != nil {
			return err
		}
	}
	if err := deleteReleases(txn, name); err != nil {
		return err
	}
	return txn.Delete(tableRollouts, ro)
}

// rolloutEvents appends events to an intent's rollout timeline, keeping
// the newest rolloutEventLimit.
func (f *FSM) rolloutEvents(txn *memdb.Txn, name string, index uint64, t int64, evs []RolloutEvent) error {
	for i := range evs {
		e := evs[i]
		e.Intent, e.Index, e.N = name, index, i
		if e.Time == 0 {
			e.Time = t
		}
		if err := txn.Insert(tableRolloutEvents, &e); err != nil {
			return err
		}
		f.emitRollout(index, &e)
	}
	it, err := txn.LowerBound(tableRolloutEvents, "id", name, uint64(0), 0)
	if err != nil {
		return err
	}
	var all []*RolloutEvent
	for raw := it.Next(); raw != nil; raw = it.Next() {
		e := raw.(*RolloutEvent)
		if e.Intent != name {
			break
		}
		all = append(all, e)
	}
	for _, e := range all[:max(0, len(all)-rolloutEventLimit)] {
		if err := txn.Delete(tableRolloutEvents, e); err != nil {
			return err
		}
	}
	return nil
}

func (f *FSM) applyRolloutStep(txn *memdb.Txn, index uint64, body []byte) (ApplyResult, error) {
	var req RolloutStepRequest
	if err := json.Unmarshal(body, &req); err != nil {
		return ApplyResult{}, fmt.Errorf("decode: %w", err)
	}
	ro, err := rolloutOf(txn, req.Intent)
	if err != nil {
		return ApplyResult{}, err
	}
	switch {
	case ro == nil:
		return rejected(txn, fmt.Errorf("rollout of %q: %w", req.Intent, ErrNotFound))
	case ro.Revision != req.Revision || ro.Seq != req.Basis || RolloutEnded(ro.State):
		return rejected(txn, fmt.Errorf("rollout of %q revision %d at %d (now revision %d at %d, %s): %w",
			req.Intent, req.Revision, req.Basis, ro.Revision, ro.Seq, ro.State, ErrStaleStep))
	case len(req.Release) > MaxReleasesPerStep:
		return rejected(txn, fmt.Errorf("rollout of %q: %d releases in one step, at most %d", req.Intent, len(req.Release), MaxReleasesPerStep))
	case len(req.Waves) != len(ro.Waves) || req.Wave < 0 || req.Wave >= len(ro.Waves) || req.ReleaseWave < 0 || req.ReleaseWave >= len(ro.Waves):
		return rejected(txn, fmt.Errorf("rollout of %q: step names wave %d of %d", req.Intent, req.Wave, len(ro.Waves)))
	case req.State == "" || (RolloutEnded(req.State) && !req.Complete && !req.Revert):
		return rejected(txn, fmt.Errorf("rollout of %q: step to state %q", req.Intent, req.State))
	}
	next := *ro
	next.Released = maps.Clone(ro.Released)
	next.State, next.Reason, next.Wave, next.Waves = req.State, req.Reason, req.Wave, slices.Clone(req.Waves)
	next.Seq, next.UpdatedAt = ro.Seq+1, req.Time
	changed := false
	var released []string
	// Every change below bumps the revision once, to this.
	desiredRev := metaValue(txn, metaRevision) + 1
	for _, dev := range req.Release {
		raw, err := txn.First(tableReleases, "id", req.Intent, dev)
		if err != nil {
			return ApplyResult{}, err
		}
		if raw != nil {
			prev := raw.(*ReleaseRecord)
			if prev.Revision == req.Revision {
				continue // released already: never twice
			}
			unpin(next.Released, prev.Revision)
		}
		if next.Released == nil {
			next.Released = map[uint64]int{}
		}
		next.Released[req.Revision]++
		rel := &ReleaseRecord{Intent: req.Intent, Device: dev, Revision: req.Revision, Wave: req.ReleaseWave, Time: req.Time, Index: index, DesiredRevision: desiredRev}
		if err := txn.Insert(tableReleases, rel); err != nil {
			return ApplyResult{}, err
		}
		released = append(released, dev)
		changed = true
	}
	evs := slices.Clone(req.Events)
	if len(released) > 0 {
		evs = append([]RolloutEvent{{Revision: req.Revision, Kind: EventRelease, Wave: req.ReleaseWave + 1,
			Message: fmt.Sprintf("released to %d devices", len(released)), Devices: released}}, evs...)
	}
	if req.Complete || req.Revert {
		if err := deleteReleases(txn, req.Intent); err != nil {
			return ApplyResult{}, err
		}
		if req.Complete {
			next.Stable, next.State = req.Revision, RolloutCompleted
		} else {
			next.State = RolloutReverted
		}
		changed = changed || len(ro.Released) > 0 || req.Complete
		next.Released, next.EndedAt = nil, req.Time
		if err := f.endRollout(txn, &next, next.State, next.Reason, req.Time); err != nil {
			return ApplyResult{}, err
		}
	}
	if err := txn.Insert(tableRollouts, &next); err != nil {
		return ApplyResult{}, err
	}
	for i := range evs {
		if evs[i].Revision == 0 {
			evs[i].Revision = req.Revision
		}
	}
	if err := f.rolloutEvents(txn, req.Intent, index, req.Time, evs); err != nil {
		return ApplyResult{}, err
	}
	if !changed {
		return ApplyResult{Revision: metaValue(txn, metaRevision)}, nil
	}
	// Desired states changed: the revision wakes the sessions.
	rev, err := nextRevision(txn)
	return ApplyResult{Revision: rev}, err
}

func unpin(m map[uint64]int, rev uint64) {
	if m[rev]--; m[rev] <= 0 {
		delete(m, rev)
	}
}

func (f *FSM) applyRolloutControl(txn *memdb.Txn, index uint64, body []byte) (ApplyResult, error) {
	var req RolloutControlRequest
	if err := json.Unmarshal(body, &req); err != nil {
		return ApplyResult{}, fmt.Errorf("decode: %w", err)
	}
	ro, err := rolloutOf(txn, req.Intent)
	if err != nil {
		return ApplyResult{}, err
	}
	if ro == nil {
		return rejected(txn, fmt.Errorf("intent %q has no rollout (its revisions reach every device at once): %w", req.Intent, ErrNotFound))
	}
	if req.Revision != 0 && req.Revision != ro.Revision {
		return rejected(txn, fmt.Errorf("rollout of %q is of revision %d, not %d", req.Intent, ro.Revision, req.Revision))
	}
	next := *ro
	next.Waves = slices.Clone(ro.Waves)
	next.Seq, next.UpdatedAt = ro.Seq+1, req.Time
	by := req.Actor.String()
	ev := RolloutEvent{Revision: ro.Revision, Actor: req.Actor}
	desiredChanged := false
	ended := func(what string) (ApplyResult, error) {
		return rejected(txn, fmt.Errorf("rollout of %q revision %d is %s: nothing to %s", req.Intent, ro.Revision, ro.State, what))
	}
	switch req.Action {
	case RolloutApprove:
		if RolloutEnded(ro.State) {
			return ended("approve")
		}
		w := ro.Wave
		if req.Wave != 0 {
			w = req.Wave - 1
		}
		if w < 0 || w >= len(ro.Waves) {
			return rejected(txn, fmt.Errorf("rollout of %q has waves 1 to %d, not %d", req.Intent, len(ro.Waves), req.Wave))
		}
		if w < ro.Wave {
			return rejected(txn, fmt.Errorf("rollout of %q: wave %d has started already", req.Intent, w+1))
		}
		next.Waves[w].Approved, next.Waves[w].ApprovedBy, next.Waves[w].ApprovedAt = true, by, req.Time
		ev.Kind, ev.Wave, ev.Message = EventApproved, w+1, fmt.Sprintf("wave %d approved by %s", w+1, by)
		if req.Reason != "" {
			ev.Message += ": " + req.Reason
		}
	case RolloutPause:
		if RolloutEnded(ro.State) {
			return ended("pause")
		}
		next.State, next.Reason = RolloutPaused, "paused by "+by
		if req.Reason != "" {
			next.Reason += ": " + req.Reason
		}
		ev.Kind, ev.Message = EventPaused, next.Reason
	case RolloutResume:
		switch ro.State {
		case RolloutPaused, RolloutProgressing, RolloutWaitingApproval:
		case RolloutAborted, RolloutReverted:
			// Roll the revision out again from the first wave.
			next.Wave, next.Waves, next.EndedAt = 0, make([]WaveState, len(ro.Waves)), 0
		default:
			return ended("resume")
		}
		next.State, next.Reason = RolloutProgressing, "resumed by "+by
		if req.Reason != "" {
			next.Reason += ": " + req.Reason
		}
		ev.Kind, ev.Message = EventResumed, next.Reason
	case RolloutAbort:
		if RolloutEnded(ro.State) {
			return ended("abort")
		}
		next.State, next.Reason, next.EndedAt = RolloutAborted, "aborted by "+by, req.Time
		if req.Reason != "" {
			next.Reason += ": " + req.Reason
		}
		if err := deleteReleases(txn, req.Intent); err != nil {
			return ApplyResult{}, err
		}
		desiredChanged = len(ro.Released) > 0
		next.Released = nil
		if err := f.endRollout(txn, &next, next.State, next.Reason, req.Time); err != nil {
			return ApplyResult{}, err
		}
		ev.Kind, ev.Message = EventAborted, next.Reason+"; released devices go back to "+revisionName(ro.Stable)
	default:
		return rejected(txn, fmt.Errorf("rollout action %q: must be approve, pause, resume or abort", req.Action))
	}
	if err := txn.Insert(tableRollouts, &next); err != nil {
		return ApplyResult{}, err
	}
	if err := f.rolloutEvents(txn, req.Intent, index, req.Time, []RolloutEvent{ev}); err != nil {
		return ApplyResult{}, err
	}
	rev := metaValue(txn, metaRevision)
	if desiredChanged {
		if rev, err = nextRevision(txn); err != nil {
			return ApplyResult{}, err
		}
	}
	if err := f.audit(txn, index, req.Time, req.Actor, "rollout-"+req.Action, "intent/"+req.Intent, ev.Message); err != nil {
		return ApplyResult{}, err
	}
	return ApplyResult{Revision: rev}, nil
}

func revisionName(rev uint64) string {
	if rev == 0 {
		return "none (the intent is removed from them)"
	}
	return fmt.Sprintf("revision %d", rev)
}

// emitRollout publishes a rollout event on the event stream: releases,
// approvals and samples under kinds of their own, the other decisions as
// rollout events.
func (f *FSM) emitRollout(index uint64, e *RolloutEvent) {
	kind := KindRollout
	switch e.Kind {
	case EventRelease:
		kind = KindRelease
	case EventApproved:
		kind = KindApproval
	case EventSample:
		kind = KindProgress
	}
	f.emit(index, Event{
		Kind: kind, Action: e.Kind, Time: e.Time, Intent: e.Intent, Revision: e.Revision, Wave: e.Wave,
		Message: e.Message, Devices: len(e.Devices), Counts: e.Counts, Actor: e.Actor.String(),
	})
}

package cluster

import (
	"container/heap"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/go-memdb"

	"github.com/meteor-edge/meteor/fsm"
	"github.com/meteor-edge/meteor/scheduler"
	"github.com/meteor-edge/meteor/wire"
)

// statusOwner is the owner side of fleet status (docs/architecture.md,
// "Fleet status"): it turns the reports of the devices this server owns,
// and the silences of those that stopped talking, into status transitions,
// and commits the transitions through Raft in batches. A report is
// acknowledged only once its transition is committed; a report that
// changes nothing commits nothing. New traffic counts (protocol 1.3) are
// a change: a report that brings only them commits them.
//
// Goroutines: Run owns batchLoop, which commits queued transitions when
// BatchSize are queued or the oldest has waited BatchInterval, and
// evalLoop, which every EvalInterval re-classifies the owned devices whose
// judgement may have changed: those whose records changed, and those due,
// by the time their judgement itself named (scheduler.DeviceStatus.Recheck).
// That is how silence becomes "unreachable" and a lack of progress "stuck".
//
// It reads the local replica (stateReader), commits through a proposer,
// learns which devices it owns from an ownerView, and measures silences
// and batch ages on its clock's monotonic readings (Clock.Mono, which
// wall clock steps do not move) while it stamps with the wall clock.
type statusOwner struct {
	self    string // this server's node ID
	logger  hclog.Logger
	clock   Clock
	state   stateReader
	propose proposer
	owners  ownerView
	planner *scheduler.Planner
	cfg     *Config // selects by its selectionLabels

	batchSize                   int
	batchInterval, evalInterval time.Duration
	applyTimeout                time.Duration

	mu      sync.Mutex
	queue   []*queuedTransition     // guarded by mu
	devices map[string]*ownedDevice // guarded by mu; by device ID
	kick    chan struct{}
	// What the last sweep (an evaluation that judged every owned device)
	// judged by, guarded by mu: world fires when anything devices are
	// judged by changes beside their own records (fsm.Read.WatchJudgement),
	// worldOwners names the owner candidates then, and sinceSweep counts
	// the evaluations since.
	world       memdb.WatchSet
	worldOwners string
	sinceSweep  int
	sweepEvery  int // sweepEvery; 1 judges every device every time
	// records fires when any device record changes after the latest
	// evaluation that read them all (nil: the next one must); until it
	// does, an evaluation reads no record but those of the devices due.
	// Guarded by mu.
	records memdb.WatchSet
	// due orders the owned devices whose judgement time alone will move
	// by when it does (ownedDevice.due), guarded by mu.
	due dueQueue
	// intern shares the strings the owned devices' reports repeat
	// (fsm.Interner), guarded by mu.
	intern fsm.Interner

	entries, transitions atomic.Uint64
	// failed counts the batches whose commit failed or whose outcome is
	// unknown: their reports stay unacknowledged and are sent again.
	failed atomic.Uint64
	// judged and passed count the devices evaluations classified and
	// passed over (settled).
	judged, passed atomic.Uint64
	// gen counts the evaluations that read every record
	// (ownedDevice.gen), guarded by mu.
	gen uint64
}

// sweepEvery bounds how many evaluations may pass over settled devices
// before one judges every owned device again (5 minutes at the default
// StatusEvalInterval). Settling relies on the watches of
// fsm.Read.WatchJudgement and of the device records, on the owner
// candidates, and on each judgement's Recheck; the sweep is the backstop
// for a fact none of them covers, should one come to be.
const sweepEvery = 60

// ownedDevice is what the owner knows of a device beyond the committed
// record: the latest report merged in, and the progress mark.
type ownedDevice struct {
	rec    fsm.DeviceRecord // committed record with later reports merged in
	mark   scheduler.ProgressMark
	status string // last status queued or committed
	reason string // its reason
	// basis is the StatusIndex of the latest status of another owner this
	// owner has taken in (fsm.StatusTransition.Basis).
	basis uint64
	// committed is the Raft index of this owner's latest transition for
	// the device known to be committed, or the replica's StatusIndex when
	// the owner took the device on: a status of this owner at a higher
	// index that says something else is a batch whose outcome the owner
	// never learned, applied late (ownedLocked).
	committed uint64
	states    []queuedState // last per-resource statuses queued, by key
	// heard is when this owner last heard of the device, on its own
	// monotonic clock: when it took the device on, ingested a report, or
	// saw the replica's record of its sessions change (heardOf). A
	// device's last-seen time is stamped by whichever server held its
	// session, whose wall clock may differ from this one's by minutes, and
	// this server's own wall clock may be stepped; so silence is measured
	// here, as a duration, and a device is declared unreachable only after
	// this owner has itself gone the class's threshold without hearing of
	// it.
	heard   time.Time
	heardOf sessionFacts
	// reportQ is what the latest report (seq rec.ReportSeq) waits for: the
	// transition queued for it, or, when it changed nothing, the pending
	// transition it was judged against. A duplicate of the report waits
	// for the same.
	reportQ *queuedTransition
	// settled is the replica's record of the device that the latest
	// evaluation judged it by, when that judgement committed nothing; nil
	// otherwise. Until the replica's record or what devices are judged by
	// changes, or the device is due, evaluations pass over it: a fleet at
	// rest costs its owner nothing a device between sweeps.
	settled *fsm.DeviceRecord
	// gen is the owner's generation (statusOwner.gen) of the latest
	// evaluation that read every record and found the device this
	// owner's, and ownerBy the record it found so by. A device taken on
	// otherwise (a report ingested) has been found its owner's by no
	// evaluation yet.
	gen     uint64
	ownerBy *fsm.DeviceRecord
	// due is when, on the owner's monotonic clock, the device must be
	// judged again if nothing it is judged by changes: its judgement's
	// Recheck, or the next evaluation when a transition was queued for
	// it; zero when time alone cannot change it. Set by classifyLocked,
	// which enters it in statusOwner.due.
	due time.Time
	// pending is the latest transition queued for the device, by a report
	// or an evaluation, until its commit's outcome is known. What rec and
	// status hold includes it, so a report found to change nothing has
	// changed nothing only once pending is committed: acknowledged before,
	// the report would be lost if pending failed (the owner then forgets
	// the device and reloads the replica, and the agent, its report
	// acknowledged, sends only what changes after it).
	pending *queuedTransition
}

type queuedTransition struct {
	tr fsm.StatusTransition
	// at is when it was queued, on the local monotonic clock (not
	// Config.Now, which may be skewed): the batch interval is a duration.
	at time.Time
	// fin is closed once err holds the commit's outcome, for the report
	// waiting on it and any duplicate of that report.
	fin chan struct{}
	err error
}

// stateReader reads the local replica of the state machine (*fsm.FSM).
// Reads from it are stale reads.
type stateReader interface {
	Read() *fsm.Read
}

// ownerView says which alive servers may own devices, as this server's
// gossip view has it (Server.ownerCandidates).
type ownerView interface {
	ownerCandidates() []ownerCandidate
}

func newStatusOwner(cfg *Config, logger hclog.Logger, clock Clock, state stateReader, p proposer, owners ownerView, planner *scheduler.Planner) *statusOwner {
	return &statusOwner{
		self: cfg.NodeID, logger: logger, clock: clock,
		state: state, propose: p, owners: owners, planner: planner, cfg: cfg,
		batchSize: cfg.StatusBatchSize, batchInterval: cfg.StatusBatchInterval,
		evalInterval: cfg.StatusEvalInterval, applyTimeout: cfg.ApplyTimeout,
		devices: map[string]*ownedDevice{}, kick: make(chan struct{}, 1), sweepEvery: sweepEvery,
	}
}

// Run commits and evaluates until ctx ends; transitions still queued then
// fail, and the reports waiting on them stay unacknowledged.
func (o *statusOwner) Run(ctx context.Context) error {
	runAll(func() { o.batchLoop(ctx) }, func() { o.evalLoop(ctx) })
	return nil
}

// owned returns the device's state on this owner, loading the committed
// record the first time. Called with o.mu held.
func (o *statusOwner) ownedLocked(id string, read *fsm.Read) *ownedDevice {
	d, ok := o.devices[id]
	rec, err := read.Device(nil, id)
	if !ok {
		d = &ownedDevice{heard: o.clock.Mono()}
		if err == nil {
			d.rec = *rec
			d.heardOf = factsOf(rec)
			d.status, d.reason, d.basis, d.committed = rec.Status, rec.StatusReason, rec.StatusIndex, rec.StatusIndex
			d.mark = scheduler.ProgressMark{Revision: rec.AckedRevision}
			if at := max(rec.ProgressAt, rec.StatusSince); at > 0 {
				d.mark.At = time.Unix(0, at)
			}
		} else {
			d.rec = fsm.DeviceRecord{ID: id}
		}
		o.devices[id] = d
		return d
	}
	if err == nil {
		if f := factsOf(rec); f != d.heardOf {
			d.heardOf, d.heard = f, o.clock.Mono()
		}
		// Facts the session servers commit (connection, acks), and the
		// labels, come from the replica; reports merged here but not yet
		// committed stay.
		d.rec.Connected, d.rec.Server, d.rec.SessionID = rec.Connected, rec.Server, rec.SessionID
		d.rec.Labels, d.rec.LabelsControlled, d.rec.ReportedLabels = rec.Labels, rec.LabelsControlled, rec.ReportedLabels
		d.rec.Unlocks = rec.Unlocks // orders come from the API, outcomes are committed
		d.rec.AckedRevision = max(d.rec.AckedRevision, rec.AckedRevision)
		d.rec.LastSeen = max(d.rec.LastSeen, rec.LastSeen)
		if rec.ReportSeq >= d.rec.ReportSeq {
			// The replica holds the newest report this owner merged in,
			// committed: take the replica's copy of what it says (the
			// same, or newer from another owner) and let this owner's
			// own copy go, which was as large as the record.
			d.rec.ReportSeq, d.rec.Resources, d.rec.Traffic, d.rec.Locks, d.rec.Recovery = rec.ReportSeq, rec.Resources, rec.Traffic, rec.Locks, rec.Recovery
		}
		if rec.StatusOwner != "" && rec.StatusOwner != o.self && rec.StatusIndex > d.basis {
			// Another server committed a status while it took itself to be
			// the owner (ownership moving): judge from that status on, or
			// the state machine refuses this owner's transitions as stale.
			d.status, d.reason, d.basis = rec.Status, rec.StatusReason, rec.StatusIndex
		}
		if rec.StatusOwner == o.self && rec.StatusIndex > d.committed && rec.Status != d.status &&
			(d.pending == nil || d.pending.done()) {
			// A status of this owner's that it did not commit last: a batch
			// whose forward timed out ("may or may not have been applied")
			// was applied after a newer judgement, and set an older one
			// over it. Take what the replica says, so that the next
			// classification finds its judgement changed and commits it
			// again; otherwise this owner, believing its judgement
			// recorded, would never correct the record. A reason alone is
			// left as it is, as classifyLocked leaves it (the reasons of
			// some statuses change with the time elapsed).
			d.status, d.reason, d.committed = rec.Status, rec.StatusReason, rec.StatusIndex
		}
	}
	return d
}

// recordWait bounds how long an owner waits for a reporting device's
// session record to reach its replica.
const recordWait = 2 * time.Second

// waitRecorded waits until this replica knows the device. The state
// machine drops a status transition of a device it does not know, so a
// report committed before the device's session record would be
// acknowledged and lost. The record is normally a few milliseconds behind
// (committed by the session server, applied here); if it does not come
// (its commit failed during an election and is being retried), the report
// is refused, and the agent sends it again.
func (o *statusOwner) waitRecorded(ctx context.Context, device string) error {
	ctx, cancel := context.WithTimeout(ctx, recordWait)
	defer cancel()
	for {
		ws := memdb.NewWatchSet()
		_, err := o.state.Read().Device(ws, device)
		if !errors.Is(err, fsm.ErrNotFound) {
			return err
		}
		if err := ws.WatchCtx(ctx); err != nil {
			return fmt.Errorf("device %s has no committed session on %s yet", device, o.self)
		}
	}
}

// sessionFacts are the parts of a device record that change when the
// device is heard of: its sessions and its reports.
type sessionFacts struct {
	lastSeen, reportSeq int64
	connected           bool
	server, session     string
	conn                string
}

func factsOf(rec *fsm.DeviceRecord) sessionFacts {
	return sessionFacts{lastSeen: rec.LastSeen, reportSeq: int64(rec.ReportSeq), connected: rec.Connected,
		server: rec.Server, session: rec.SessionID, conn: rec.Conn}
}

// ingest classifies a report of a device this server owns and waits until
// the resulting transition, if any, is committed. The owner selects by the
// replica's labels (Config.selectionLabels), not by those the session
// server routed the report by, so a report cannot replace the labels the
// control plane gave the device.
//
// acked is the desired revision the device had acknowledged to the
// session server when it sent the report (0: not said). Once the cluster's
// active level is fsm.LevelAckWithStatus, the session server leaves an
// acknowledgement to the report that follows it: the owner judges the
// report by it and commits it with the report's transition, in one entry
// (a report that changes nothing else still commits then).
func (o *statusOwner) ingest(ctx context.Context, device string, acked uint64, rep *wire.Report) error {
	if err := o.waitRecorded(ctx, device); err != nil {
		return fmt.Errorf("report %d not recorded: %w", rep.Seq, err)
	}
	now := o.clock.Now()
	read := o.state.Read()
	o.mu.Lock()
	d := o.ownedLocked(device, read)
	if rep.Seq <= d.rec.ReportSeq {
		// A duplicate (resent, or arriving through another session): its
		// content is in, but it may still be waiting for its commit; it is
		// acknowledged only once that commit is.
		pq := d.reportQ
		o.mu.Unlock()
		if pq == nil {
			return nil
		}
		select {
		case <-pq.fin:
			return pq.err
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	res := make([]fsm.ResourceStatus, 0, len(rep.Resources))
	for _, r := range rep.Resources {
		res = append(res, fsm.ResourceStatus{
			Key: r.Key, AppliedDigest: hex.EncodeToString(r.AppliedDigest[:]), AppliedRevision: r.AppliedRevision,
			Effective: effectiveName(r.Effective), State: reportedState(rep, r), Detail: r.Detail, LastError: r.LastError,
			Attempts: r.Attempts, Corrections: r.Corrections, UpdatedAt: r.UpdatedAtUnixNano, Hold: holdOf(r.Hold),
		})
	}
	// Kept in the owned device's record until its next report.
	o.intern.Resources(res)
	d.rec.ReportSeq = rep.Seq
	merged := fsm.MergeResources(d.rec.Resources, res, rep.Full)
	contentChanged := !sameApplied(d.rec.Resources, merged)
	if acked > d.rec.AckedRevision && read.ActiveLevel() >= fsm.LevelAckWithStatus {
		contentChanged = true
		d.rec.AckedRevision = acked
	}
	traffic := reportedTraffic(rep.Traffic, now)
	if traffic != nil && !sameTraffic(d.rec.Traffic, traffic) {
		contentChanged = true
		d.rec.Traffic = traffic
	}
	d.rec.Resources = merged
	var locks []fsm.DeviceLock
	var unlocked []fsm.UnlockResult
	var recovery *fsm.DeviceRecovery
	if rep.Edge {
		locks, unlocked = reportedLocks(rep)
		if !slices.Equal(locks, d.rec.Locks) || pendingOutcomes(d.rec.Unlocks, unlocked) {
			contentChanged = true
		}
		d.rec.Locks = locks
		if recovery = reportedRecovery(rep.Recovery); recovery != nil && (d.rec.Recovery == nil || recovery.At > d.rec.Recovery.At) {
			contentChanged = true
			d.rec.Recovery = recovery
		}
	}
	d.settled = nil // judged from the report merged in below, not the replica's record
	d.rec.AgentStatus, d.rec.BlockedReason = rep.Status, rep.BlockedReason
	d.rec.LastSeen = now.UnixNano()
	d.rec.Connected = true
	d.heard = o.clock.Mono()
	q, err := o.classifyLocked(d, read, nil, o.cfg.effectiveClasses(read), now, contentChanged, func(tr *fsm.StatusTransition) {
		tr.Seq, tr.Full, tr.Resources = rep.Seq, rep.Full, res
		tr.AgentStatus, tr.BlockedReason = rep.Status, rep.BlockedReason
		tr.Traffic = traffic
		tr.Edge, tr.Locks, tr.Unlocked, tr.Recovery = rep.Edge, locks, unlocked, recovery
		tr.AckedRevision = d.rec.AckedRevision
	})
	if err != nil {
		o.mu.Unlock()
		return err
	}
	if q == nil && d.pending != nil && !d.pending.done() {
		q = d.pending
	}
	d.reportQ = q
	o.mu.Unlock()
	if q == nil {
		return nil
	}
	select {
	case <-q.fin:
		return q.err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// classifyLocked classifies d at now and queues a transition if its status
// or a resource's status changed, or if force is set (the report changed
// what is applied even though no status moved, as when a rollout's new
// version lands between two reports). classes are the replica's effective
// classes (Config.effectiveClasses of read). memo, if not nil, is read's
// (Planner.Memo): an evaluation judges many devices by one read, and the
// devices alike share their desired state. fill adds the report to it.
func (o *statusOwner) classifyLocked(d *ownedDevice, read *fsm.Read, memo *scheduler.DesiredMemo, classes scheduler.Classes, now time.Time, force bool, fill func(*fsm.StatusTransition)) (*queuedTransition, error) {
	var desired *scheduler.DesiredState
	var err error
	if memo != nil {
		desired, err = memo.Desired(d.rec.ID, o.cfg.recordSelection(&d.rec))
	} else {
		desired, err = o.planner.Desired(read, d.rec.ID, o.cfg.recordSelection(&d.rec))
	}
	if err != nil {
		return nil, err
	}
	view := scheduler.Compare(desired, &d.rec)
	classOf := scheduler.IntendedOf(desired)
	d.mark = scheduler.NextProgressMark(d.mark, view, &d.rec, now)
	judged := &d.rec
	if !d.rec.Connected && d.status != scheduler.StatusUnreachable && d.rec.LastSeen != 0 {
		// Silence is what this owner measured itself (see
		// ownedDevice.heard), told in the frame of its wall clock.
		cp := d.rec
		cp.LastSeen = now.Add(-o.clock.Mono().Sub(d.heard)).UnixNano()
		judged = &cp
	}
	st := scheduler.Classify(view, judged, classes, classOf, now, d.mark)
	due := time.Time{}
	if !st.Recheck.IsZero() {
		// Recheck is told in the frame of now; the owner waits for it on
		// its monotonic clock, which wall clock steps do not move.
		due = o.clock.Mono().Add(max(0, st.Recheck.Sub(now)))
	}
	states := make([]queuedState, len(st.Resources))
	for i, r := range st.Resources {
		states[i] = queuedState{key: r.Key, status: r.Status}
	}
	slices.SortFunc(states, func(a, b queuedState) int { return strings.Compare(a.key, b.key) })
	changedStates := changedResourceStates(d.states, states)
	if st.Status == d.status && len(changedStates) == 0 && !force {
		// Nothing changed (a report that is only a heartbeat, or an
		// evaluation that finds the same status): nothing to commit. The
		// reason alone does not count: unreachable and stuck reasons name
		// the time elapsed, which changes at every evaluation.
		o.scheduleLocked(d, due)
		return nil, nil
	}
	d.status, d.reason, d.states = st.Status, st.Reason, states
	tr := fsm.StatusTransition{
		Device: d.rec.ID, Time: now.UnixNano(), Revision: desired.Revision,
		Status: st.Status, Reason: st.Reason,
		LastSeen: d.rec.LastSeen, ResourceStates: changedStates, Basis: d.basis,
	}
	if !d.mark.At.IsZero() {
		tr.ProgressAt = d.mark.At.UnixNano()
	}
	if !st.NextRetry.IsZero() {
		tr.NextRetry = st.NextRetry.UnixNano()
	}
	if fill != nil {
		fill(&tr)
	}
	q := &queuedTransition{tr: tr, at: o.clock.Mono(), fin: make(chan struct{})}
	d.pending = q
	// Not settled: judged again at the next evaluation, by the record
	// its commit leaves (or, if it fails, from the replica afresh).
	o.scheduleLocked(d, o.clock.Mono())
	o.queue = append(o.queue, q)
	select {
	case o.kick <- struct{}{}:
	default:
	}
	return q, nil
}

func (o *statusOwner) batchLoop(ctx context.Context) {
	timer := o.clock.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		o.mu.Lock()
		var batch []*queuedTransition
		wait := time.Hour
		if n := len(o.queue); n > 0 {
			if age := o.clock.Mono().Sub(o.queue[0].at); n >= o.batchSize || age >= o.batchInterval {
				take := min(n, o.batchSize)
				batch = append(batch, o.queue[:take]...)
				o.queue = append(o.queue[:0:0], o.queue[take:]...)
			} else {
				wait = o.batchInterval - age
			}
		}
		o.mu.Unlock()
		if len(batch) > 0 {
			o.commit(ctx, batch)
			continue
		}
		timer.Reset(wait)
		select {
		case <-ctx.Done():
			o.failQueued(errors.New("server shutting down"))
			return
		case <-o.kick:
		case <-timer.C():
		}
	}
}

func (o *statusOwner) commit(ctx context.Context, batch []*queuedTransition) {
	req := &fsm.StatusBatchRequest{Owner: o.self, Transitions: make([]fsm.StatusTransition, len(batch))}
	for i, q := range batch {
		req.Transitions[i] = q.tr
	}
	ctx, cancel := context.WithTimeout(ctx, o.applyTimeout)
	res, index, err := o.propose.apply(ctx, fsm.StatusBatchType, req)
	cancel()
	if err == nil {
		err = res.Err
	}
	if err == nil && index > 0 {
		o.mu.Lock()
		for _, q := range batch {
			if d := o.devices[q.tr.Device]; d != nil && d.pending == q {
				d.committed = max(d.committed, index)
			}
		}
		o.mu.Unlock()
	}
	if err != nil {
		o.failed.Add(1)
		o.logger.Warn("status transitions not committed; their reports stay unacknowledged", "transitions", len(batch), "error", err)
		// Forget what was queued so the next report or evaluation
		// classifies against the committed state again.
		o.mu.Lock()
		for _, q := range batch {
			delete(o.devices, q.tr.Device)
		}
		o.records = nil // the next evaluation reads them all, and takes them on again
		o.mu.Unlock()
	} else {
		o.entries.Add(1)
		o.transitions.Add(uint64(len(batch)))
	}
	for _, q := range batch {
		// The device holds on to q (ownedDevice.pending, reportQ) until
		// its next transition, for its outcome only: let the transition's
		// report, resources and states go.
		q.tr = fsm.StatusTransition{}
		q.finish(err)
	}
}

// finish hands the commit's outcome to the report waiting on q and to any
// duplicate of it.
func (q *queuedTransition) finish(err error) {
	q.err = err
	close(q.fin)
}

// done reports whether q's commit outcome is known.
func (q *queuedTransition) done() bool {
	select {
	case <-q.fin:
		return true
	default:
		return false
	}
}

func (o *statusOwner) failQueued(err error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, q := range o.queue {
		q.finish(err)
	}
	o.queue = nil
}

// evalLoop re-classifies every device this server owns, so that silence
// and lack of progress become transitions without any report arriving.
func (o *statusOwner) evalLoop(ctx context.Context) {
	ticker := o.clock.NewTicker(o.evalInterval)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-ticker.C():
		}
		if err := o.evaluate(o.clock.Now()); err != nil {
			o.logger.Warn("evaluate owned devices", "error", err)
		}
	}
}

// evaluate classifies the devices this server owns at now. A device whose
// last judgement committed nothing (ownedDevice.settled) is passed over
// while its replica record and what devices are judged by stay the same,
// until it is due (ownedDevice.due); a sweep, at least every sweepEvery
// evaluations, judges them all. When no device record changed since the
// last evaluation that read them all, only the devices due are read.
func (o *statusOwner) evaluate(now time.Time) error {
	read := o.state.Read()
	owners := o.owners.ownerCandidates()
	o.mu.Lock()
	defer o.mu.Unlock()
	alive := map[string]bool{}
	var key strings.Builder
	for _, c := range owners {
		alive[c.ID] = true
		// Whether ownership follows sessions depends on every
		// candidate's peer API (deviceOwner): a change of it alone
		// moves devices as surely as a server joining.
		key.WriteString(c.ID + "\x00" + c.Region + "\x00" + strconv.Itoa(int(c.PeerAPI)) + "\x00")
	}
	sweep := o.world == nil || fired(o.world) || key.String() != o.worldOwners || o.sinceSweep+1 >= o.sweepEvery
	if sweep {
		// Watched before judging: a change from here on fires it.
		ws := memdb.NewWatchSet()
		if err := read.WatchJudgement(ws); err != nil {
			return err
		}
		o.world, o.worldOwners, o.sinceSweep = ws, key.String(), 0
	} else {
		o.sinceSweep++
	}
	classes := o.cfg.effectiveClasses(read)
	if !sweep && o.records != nil && !fired(o.records) {
		return o.evaluateDueLocked(read, classes, alive, now)
	}
	records := memdb.NewWatchSet()
	recs, err := read.Devices(records)
	if err != nil {
		return err
	}
	memo, err := o.planner.Memo(read)
	if err != nil {
		return err
	}
	// Set again once every device is judged: a failed classification
	// leaves it nil, so the next evaluation reads every record again.
	o.records = nil
	mono := o.clock.Mono()
	// Every device found this owner's is stamped with this evaluation's
	// generation; those left unstamped are let go below.
	o.gen++
	var judged, passed uint64
	for _, rec := range recs {
		d, ok := o.devices[rec.ID]
		// A device settled by this very record, which an evaluation
		// among the same owner candidates (else this is a sweep) found
		// this owner's, is still this owner's: deviceOwner reads
		// nothing else.
		settled := ok && !sweep && d.settled == rec && d.ownerBy == rec
		if !settled && deviceOwner(rec, owners) != o.self {
			continue
		}
		if settled && (d.due.IsZero() || d.due.After(mono)) {
			d.gen = o.gen
			passed++
			continue
		}
		if err := o.judgeLocked(rec, read, memo, classes, alive, now); err != nil {
			return err
		}
		d = o.devices[rec.ID]
		d.gen, d.ownerBy = o.gen, rec
		judged++
	}
	o.judged.Add(judged)
	o.passed.Add(passed)
	// Devices that moved to another owner: forget them, so their state is
	// reloaded from the replica if they come back.
	for id, d := range o.devices {
		if d.gen != o.gen {
			delete(o.devices, id)
		}
	}
	o.records = records
	o.due.compact(o.devices)
	return nil
}

// evaluateDueLocked judges the owned devices that are due at the owner's
// monotonic now, when no device record has changed since the last
// evaluation that read them all and nothing else they are judged by has:
// every other device's judgement stands.
func (o *statusOwner) evaluateDueLocked(read *fsm.Read, classes scheduler.Classes, alive map[string]bool, now time.Time) error {
	// Taken out first: a device judged here may be due again at once
	// (a transition queued), which is the next evaluation's to judge.
	mono := o.clock.Mono()
	var ids []string
	for len(o.due) > 0 && !o.due[0].at.After(mono) {
		e := heap.Pop(&o.due).(dueEntry)
		if d := o.devices[e.id]; d != nil && d.due.Equal(e.at) {
			d.due = time.Time{} // taken: classifyLocked sets the next
			ids = append(ids, e.id)
		} // else let go, or rescheduled since
	}
	var judged uint64
	var memo *scheduler.DesiredMemo
	for _, id := range ids {
		rec, err := read.Device(nil, id)
		if err == nil && memo == nil {
			memo, err = o.planner.Memo(read)
		}
		if err == nil {
			err = o.judgeLocked(rec, read, memo, classes, alive, now)
		}
		if err != nil {
			o.records = nil // read them all next time
			return err
		}
		judged++
	}
	o.judged.Add(judged)
	o.passed.Add(uint64(len(o.devices)) - min(judged, uint64(len(o.devices))))
	return nil
}

// judgeLocked classifies the owned device whose replica record is rec at
// now, and notes whether the judgement settled it. Called with o.mu held.
func (o *statusOwner) judgeLocked(rec *fsm.DeviceRecord, read *fsm.Read, memo *scheduler.DesiredMemo, classes scheduler.Classes, alive map[string]bool, now time.Time) error {
	d := o.ownedLocked(rec.ID, read)
	if d.rec.Connected && !alive[d.rec.Server] {
		// Its session server failed without recording the disconnect:
		// the device is not connected anywhere we know of.
		d.rec.Connected = false
	}
	q, err := o.classifyLocked(d, read, memo, classes, now, false, nil)
	if err != nil {
		return fmt.Errorf("classify %s: %w", d.rec.ID, err)
	}
	d.settled = nil
	if q == nil {
		d.settled = rec // judged by this very record, which a change replaces
	}
	return nil
}

// scheduleLocked sets when d is due (zero: never by time alone) and enters
// it in the queue. Called with o.mu held.
func (o *statusOwner) scheduleLocked(d *ownedDevice, due time.Time) {
	if due.Equal(d.due) {
		return // entered already
	}
	d.due = due
	if !due.IsZero() {
		heap.Push(&o.due, dueEntry{at: due, id: d.rec.ID})
	}
}

// dueEntry is a device due at a time on the owner's monotonic clock.
type dueEntry struct {
	at time.Time
	id string
}

// dueQueue is a min-heap of dueEntry by time (container/heap). An entry
// whose device has been rescheduled or let go since stays until it is
// popped or the queue is compacted.
type dueQueue []dueEntry

func (q dueQueue) Len() int           { return len(q) }
func (q dueQueue) Less(i, j int) bool { return q[i].at.Before(q[j].at) }
func (q dueQueue) Swap(i, j int)      { q[i], q[j] = q[j], q[i] }
func (q *dueQueue) Push(x any)        { *q = append(*q, x.(dueEntry)) }
func (q *dueQueue) Pop() any {
	old := *q
	e := old[len(old)-1]
	*q = old[:len(old)-1]
	return e
}

// compact drops the entries no longer current once they outnumber the
// current ones, so the queue stays within twice the devices due.
func (q *dueQueue) compact(devices map[string]*ownedDevice) {
	current := 0
	for _, d := range devices {
		if !d.due.IsZero() {
			current++
		}
	}
	if len(*q) <= 2*current+64 {
		return
	}
	kept := (*q)[:0]
	for _, e := range *q {
		if d := devices[e.id]; d != nil && d.due.Equal(e.at) {
			kept = append(kept, e)
			d.due = time.Time{} // one entry a device
		}
	}
	for i := range kept {
		devices[kept[i].id].due = kept[i].at
	}
	clear((*q)[len(kept):])
	*q = kept
	heap.Init(q)
}

// queuedState is a resource's status as its owner last queued it. An
// owner keeps them for every device it owns, in a slice sorted by key
// rather than a map: a tenth of the memory for a device of 50 resources,
// whose keys are the planner's, shared.
type queuedState struct{ key, status string }

// stateOf returns the status the owner last queued for a resource of d,
// or "" if none.
func (d *ownedDevice) stateOf(key string) string {
	if i, ok := slices.BinarySearchFunc(d.states, key, func(s queuedState, k string) int { return strings.Compare(s.key, k) }); ok {
		return d.states[i].status
	}
	return ""
}

// changedResourceStates returns the statuses of now (sorted by key) that
// differ from was (sorted by key), and "removed" for the resources of was
// that now lacks; nil if none.
func changedResourceStates(was, now []queuedState) map[string]string {
	var out map[string]string
	set := func(k, v string) {
		if out == nil {
			out = map[string]string{}
		}
		out[k] = v
	}
	i, j := 0, 0
	for i < len(was) || j < len(now) {
		switch {
		case j == len(now) || i < len(was) && was[i].key < now[j].key:
			set(was[i].key, "removed")
			i++
		case i == len(was) || now[j].key < was[i].key:
			set(now[j].key, now[j].status)
			j++
		default:
			if was[i].status != now[j].status {
				set(now[j].key, now[j].status)
			}
			i++
			j++
		}
	}
	return out
}

// fired reports whether a channel of ws has fired.
func fired(ws memdb.WatchSet) bool {
	for ch := range ws {
		select {
		case <-ch:
			return true
		default:
		}
	}
	return false
}

// sameApplied reports whether two resource lists say the same about what
// is applied and effective (timestamps, attempts and wording aside).
func sameApplied(a, b []fsm.ResourceStatus) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		x, y := a[i], b[i]
		if x.Key != y.Key || x.AppliedDigest != y.AppliedDigest || x.AppliedRevision != y.AppliedRevision ||
			x.Effective != y.Effective || x.LastError != y.LastError || x.Corrections != y.Corrections ||
			(x.Hold == nil) != (y.Hold == nil) || x.Hold != nil && *x.Hold != *y.Hold {
			return false
		}
	}
	return true
}

// reportedLocks are a 1.4 report's locks and unlock outcomes as the
// device record keeps them.
func reportedLocks(rep *wire.Report) ([]fsm.DeviceLock, []fsm.UnlockResult) {
	var locks []fsm.DeviceLock
	for _, l := range rep.Locks {
		locks = append(locks, fsm.DeviceLock{Name: l.Name, Holder: l.Holder, Since: l.Since, MaxHold: l.MaxHold, Source: l.Source.String()})
	}
	var unlocked []fsm.UnlockResult
	for _, u := range rep.Unlocked {
		unlocked = append(unlocked, fsm.UnlockResult{Index: u.Index, Lock: u.Lock, Outcome: u.Outcome.String(), At: u.At})
	}
	return locks, unlocked
}

// reportedRecovery is a report's recovery as the device record keeps it;
// nil for none.
func reportedRecovery(r *wire.Recovery) *fsm.DeviceRecovery {
	if r == nil {
		return nil
	}
	out := &fsm.DeviceRecovery{At: r.At, Unclean: r.Unclean, Total: int(r.Total), Applied: int(r.Applied)}
	for _, s := range r.Steps {
		ds := fsm.DeviceRecoveryStep{Key: s.Key, Outcome: s.Outcome.String()}
		if s.Child != wire.ChildNone {
			ds.Child = s.Child.String()
		}
		out.Steps = append(out.Steps, ds)
	}
	return out
}

// pendingOutcomes reports whether results answer an order of orders that
// has no outcome yet.
func pendingOutcomes(orders []fsm.UnlockRecord, results []fsm.UnlockResult) bool {
	for _, r := range results {
		for _, o := range orders {
			if o.Index == r.Index && o.Outcome == "" {
				return true
			}
		}
	}
	return false
}

// holdOf is a reported hold as the device record keeps it; nil for none.
func holdOf(h wire.Hold) *fsm.ResourceHold {
	if h.Kind == wire.HoldNone {
		return nil
	}
	return &fsm.ResourceHold{Kind: h.Kind.String(), Since: h.Since, Until: h.Until, Count: h.Count, Holder: h.Holder, Note: h.Note}
}

// reportedTraffic is a report's traffic as the device record keeps it,
// received at now; nil for none.
func reportedTraffic(t *wire.Traffic, now time.Time) *fsm.DeviceTraffic {
	if t == nil {
		return nil
	}
	out := &fsm.DeviceTraffic{AsOf: now.UnixNano(), Day: t.Day, Previous: fsm.TrafficCounts(t.Previous)}
	if len(t.Servers) > 0 {
		out.Servers = make([]fsm.ServerTraffic, len(t.Servers))
		for i, s := range t.Servers {
			out.Servers[i] = fsm.ServerTraffic{Server: s.Server, TrafficCounts: fsm.TrafficCounts(s.TrafficCounts)}
		}
	}
	return out
}

// sameTraffic reports whether two traffic records hold the same counts
// (when they were received aside).
func sameTraffic(a, b *fsm.DeviceTraffic) bool {
	if a == nil || b == nil {
		return a == b
	}
	return a.Day == b.Day && a.Previous == b.Previous && slices.Equal(a.Servers, b.Servers)
}

// StatusBatchesFailed counts the status batches this server, as owner,
// could not commit or whose outcome it could not learn
// (meteor_status_batches_failed_total).
func (s *Server) StatusBatchesFailed() uint64 { return s.status.failed.Load() }

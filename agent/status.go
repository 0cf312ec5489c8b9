package agent

import (
	"encoding/hex"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/meteor-edge/meteor/agent/journal"
	"github.com/meteor-edge/meteor/wire"
)

// Resource and device states, as the agent sees them. The device state is
// the most urgent of its resources' states, in this order: failed,
// blocked, progressing (pending included), drifted, overridden, converged.
const (
	// StateConverged: applied at the desired digest and the probe agrees.
	StateConverged = "converged"
	// StatePending: not applied at the desired digest yet, no step failed.
	StatePending = "pending"
	// StateProgressing: applied, but the probe does not (yet) confirm it.
	StateProgressing = "progressing"
	// StateFailed: the last step for the desired digest failed; retrying
	// with backoff unless the error is terminal.
	StateFailed = "failed"
	// StateBlocked: a step is needed but a requirement is not applied and
	// effective.
	StateBlocked = "blocked"
	// StateDrifted: the device moved away from the applied state; under
	// drift policy "report" the agent leaves it so, under "correct" it is
	// about to re-apply.
	StateDrifted = "drifted"
	// StateOverridden: the device moved away from the applied state and
	// drift policy "tolerate" records it as an expected local override.
	StateOverridden = "overridden"
)

var stateRank = map[string]int{
	StateFailed: 6, StateBlocked: 5, StateProgressing: 4, StatePending: 4,
	StateDrifted: 3, StateOverridden: 2, StateConverged: 1,
}

// Status is a snapshot of the agent, for tests and the CLI.
type Status struct {
	// DeviceID is the device's identity, from its certificate.
	DeviceID string
	// Connected says whether a session is established; Server is the
	// address of its server and ServerID the server's name.
	Connected bool
	Server    string
	ServerID  string
	// SessionID is the session's ID (hex); empty before the first Welcome.
	SessionID string
	// AckedRevision is the highest desired revision acknowledged;
	// DesiredRevision the revision of the journaled desired set.
	AckedRevision   uint64
	DesiredRevision uint64
	// State is the device-level state (StateConverged, ...).
	State string
	// BlockedReason says what blocks the device; empty if nothing does.
	BlockedReason string
	// Resources lists every resource the agent has, sorted by key.
	Resources []ResourceStatus
	// LastReportSeq is the sequence number of the last report queued,
	// AckedReportSeq the highest a server acknowledged, and
	// PendingReports how many queued reports await acknowledgement.
	LastReportSeq  uint64
	AckedReportSeq uint64
	PendingReports int
	// ServerRTTs are the last measured round-trip times per server
	// address (absent: not measured).
	ServerRTTs map[string]time.Duration
	// Switches counts moves to a nearer server; Connects counts sessions
	// established.
	Switches, Connects int
	// ProbeRounds counts the rounds of RTT probes to every server.
	ProbeRounds int
	// KeepAliveInterval is how often the agent's own keep-alives go
	// (protocol 1.3). NATBindingVerified is the longest silence a NAT
	// binding test showed the path survives, NATBindingFailed the
	// shortest it did not (zero: none), and NATBindingTests the tests
	// concluded; NATBindingSettled says no test is due until a failed
	// silence is tried again.
	KeepAliveInterval                    time.Duration
	NATBindingVerified, NATBindingFailed time.Duration
	NATBindingTests                      int
	NATBindingSettled                    bool
	// Interrupted counts the steps a crash or power loss left in flight,
	// resolved when this agent started (re-checked against the device, and
	// either counted as applied or applied again).
	Interrupted int
	// Recovery is how the agent recovered at its latest start after a
	// crash or power loss (or with steps in flight), as it reports it; nil
	// before one.
	Recovery *journal.Recovery
	// Traffic is what the agent counted of its own traffic, today and the
	// day before, per server address.
	Traffic Traffic
	// Locks are the workload locks held on the device.
	Locks []LockStatus
	// SettingsSeq is the Seq of the settings the control plane last sent
	// (protocol 1.4); 0 before any.
	SettingsSeq uint64
	// PullInterval and ReportInterval are the pull and full-report
	// intervals now: the shortest among the classes of the desired
	// resources. ProbeIntervals is each such class's probe cadence.
	PullInterval, ReportInterval time.Duration
	ProbeIntervals               map[string]time.Duration
	// ReportedTraffic is the traffic the last report written to a server
	// carried, and ReportedTrafficSeq that report's seq; nil before one
	// (and in sessions below protocol 1.3, which carry none).
	ReportedTraffic    *wire.Traffic
	ReportedTrafficSeq uint64
}

// LockStatus is a workload lock held on the device.
type LockStatus struct {
	Name, Holder string
	Since        time.Time
	MaxHold      time.Duration
	// File says a lock file holds it (else the control socket did).
	File bool
}

// ResourceStatus is the agent's view of one resource.
type ResourceStatus struct {
	Key string
	// State is one of the State constants.
	State string
	// DesiredDigest is empty when the resource is no longer desired (it
	// is forgotten on the next pass).
	DesiredDigest   string
	DesiredRevision uint64
	// AppliedDigest and AppliedRevision are those of the last successful
	// step; empty and 0 before one.
	AppliedDigest   string
	AppliedRevision uint64
	// Effective is the probe's verdict and Detail what the agent saw.
	Effective wire.Effective
	Detail    string
	// LastError is the error of the last step; empty after a success.
	LastError string
	// Attempts counts the steps begun for the desired digest.
	Attempts int
	// Corrections counts drift corrections since the agent started.
	Corrections int
	// Hold says what holds the resource back: a rotation window not open
	// yet, and so on (wire.Hold); zero for nothing.
	Hold wire.Hold
	// UpdatedAt is when an observable field last changed.
	UpdatedAt time.Time
}

// sameObservation reports whether two statuses would be reported alike.
func (r *ResourceStatus) sameObservation(o *ResourceStatus) bool {
	a, b := *r, *o
	a.UpdatedAt, b.UpdatedAt = time.Time{}, time.Time{}
	return a == b
}

// statusStore holds the agent's observable state. The reconciler writes
// resources, the session writes connection fields; Status and reports
// read it.
type statusStore struct {
	mu        sync.Mutex
	s         Status                    // guarded by mu
	resources map[string]ResourceStatus // guarded by mu
	sorted    []ResourceStatus          // resources in key order, built once a pass; guarded by mu
	locks     []wire.Lock               // the workload locks held; guarded by mu
	recovery  *wire.Recovery            // the latest recovery; guarded by mu
	unlocked  []wire.UnlockResult       // the outcomes of lock breaks; guarded by mu
	passedAny bool                      // a reconcile pass completed; guarded by mu
}

func newStatusStore(deviceID string) *statusStore {
	return &statusStore{s: Status{DeviceID: deviceID, State: StateConverged}, resources: map[string]ResourceStatus{}}
}

// setResources replaces the resource view after a reconcile pass, keeping
// UpdatedAt of entries that did not change.
func (st *statusStore) setResources(desiredRev uint64, list []ResourceStatus, now time.Time) {
	st.mu.Lock()
	defer st.mu.Unlock()
	next := make(map[string]ResourceStatus, len(list))
	for _, r := range list {
		if old, ok := st.resources[r.Key]; ok && old.sameObservation(&r) {
			r.UpdatedAt = old.UpdatedAt
		} else {
			r.UpdatedAt = now
		}
		next[r.Key] = r
	}
	st.resources = next
	st.sorted = st.sorted[:0] // snapshot and report copy out of it under mu
	for _, k := range slices.Sorted(maps.Keys(next)) {
		st.sorted = append(st.sorted, next[k])
	}
	st.passedAny = true
	st.s.DesiredRevision = desiredRev
	st.s.State, st.s.BlockedReason = StateConverged, ""
	for _, r := range st.sorted {
		if stateRank[r.State] > stateRank[st.s.State] {
			st.s.State = r.State
		}
		if r.State == StateBlocked && st.s.BlockedReason == "" {
			st.s.BlockedReason = r.Key + ": " + r.Detail
		}
	}
	if st.s.State == StatePending {
		st.s.State = StateProgressing
	}
}

// setLocks records the workload locks held and the outcomes of lock
// breaks, which reports carry.
func (st *statusStore) setLocks(locks []wire.Lock, unlocked []wire.UnlockResult) {
	st.mu.Lock()
	defer st.mu.Unlock()
	st.locks, st.unlocked = locks, unlocked
	st.s.Locks = make([]LockStatus, len(locks))
	for i, l := range locks {
		st.s.Locks[i] = LockStatus{Name: l.Name, Holder: l.Holder, Since: time.Unix(0, l.Since), MaxHold: l.MaxHold, File: l.Source == wire.LockFile}
	}
}

// setRecovery records the latest recovery, which reports carry.
func (st *statusStore) setRecovery(r *journal.Recovery) {
	w := &wire.Recovery{At: r.At.UnixNano(), Unclean: r.Unclean, Total: uint32(r.Total), Applied: uint32(min(r.Applied, r.Total))}
	outcomes := map[string]wire.StepOutcome{}
	for _, o := range []wire.StepOutcome{wire.StepAlreadyApplied, wire.StepAppliedAgain, wire.StepDropped} {
		outcomes[o.String()] = o
	}
	children := map[string]wire.ChildOutcome{wire.ChildWaited.String(): wire.ChildWaited, wire.ChildEnded.String(): wire.ChildEnded}
	for _, s := range r.Steps {
		if len(w.Steps) == wire.MaxLocks {
			break
		}
		o := outcomes[s.Outcome]
		if o == 0 {
			o = wire.StepAppliedAgain
		}
		w.Steps = append(w.Steps, wire.RecoveredStep{Key: truncate(s.Key, wire.MaxKeyLen), Digest: digestFromHex(s.Digest), Outcome: o, Child: children[s.Child]})
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	st.recovery = w
	cp := *r
	st.s.Recovery = &cp
}

// passed reports whether a reconcile pass has completed, so that the
// resource view is worth reporting.
func (st *statusStore) passed() bool {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.passedAny
}

// update changes the non-resource fields under the lock.
func (st *statusStore) update(fn func(s *Status)) {
	st.mu.Lock()
	defer st.mu.Unlock()
	fn(&st.s)
}

// snapshot returns a copy of the status.
func (st *statusStore) snapshot() Status {
	st.mu.Lock()
	defer st.mu.Unlock()
	s := st.s
	s.ServerRTTs = maps.Clone(st.s.ServerRTTs)
	s.Locks = slices.Clone(st.s.Locks)
	// Sampled often (the fleet simulator: every agent five times a
	// second); the key order was settled when the pass set them.
	s.Resources = append(make([]ResourceStatus, 0, len(st.sorted)), st.sorted...)
	return s
}

// wireState is the wire encoding of one of the State constants. Every
// constant has one (TestWireStates); anything else, which no pass
// produces, is reported as progressing rather than not at all.
func wireState(state string) wire.ResourceState {
	if s, ok := wire.ParseResourceState(state); ok {
		return s
	}
	return wire.StateProgressing
}

// report builds a full report (Seq left zero) of the current view, with
// typed resource states; a session at protocol 1.0 sends it as
// legacyReport makes it.
func (st *statusStore) report() *wire.Report {
	st.mu.Lock()
	defer st.mu.Unlock()
	rep := &wire.Report{
		DesiredRevision: st.s.DesiredRevision,
		Full:            true,
		Status:          st.s.State,
		BlockedReason:   truncate(st.s.BlockedReason, wire.MaxTextLen),
		States:          true,
		Corrections:     true,
		Edge:            true,
		Locks:           st.locks,
		Unlocked:        st.unlocked,
		Recovery:        st.recovery,
	}
	for _, r := range st.sorted {
		rep.Resources = append(rep.Resources, wire.ResourceReport{
			Key:               r.Key,
			AppliedDigest:     digestFromHex(r.AppliedDigest),
			AppliedRevision:   r.AppliedRevision,
			Effective:         r.Effective,
			State:             wireState(r.State),
			Detail:            truncate(r.Detail, wire.MaxTextLen),
			LastError:         truncate(r.LastError, wire.MaxTextLen),
			Attempts:          uint32(min(r.Attempts, 1<<32-1)),
			UpdatedAtUnixNano: r.UpdatedAt.UnixNano(),
			Corrections:       uint32(min(r.Corrections, 1<<32-1)),
			Hold:              fitHold(r.Hold),
		})
	}
	return rep
}

// fitHold cuts a hold's texts to what the wire takes.
func fitHold(h wire.Hold) wire.Hold {
	h.Holder, h.Note = truncate(h.Holder, wire.MaxNameLen), truncate(h.Note, wire.MaxTextLen)
	return h
}

// digestFromHex decodes a hex digest; anything else is the zero digest.
func digestFromHex(s string) wire.Digest {
	var d wire.Digest
	if b, err := hex.DecodeString(s); err == nil && len(b) == len(d) {
		copy(d[:], b)
	}
	return d
}

// truncate makes s valid UTF-8 (the wire rejects anything else; command
// output may not be) and cuts it to at most n bytes on a rune boundary.
func truncate(s string, n int) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

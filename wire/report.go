package wire

import (
	"fmt"
	"math"
)

// Effective is the outcome of probing a resource's live state.
type Effective uint8

// Effective states.
const (
	// EffectiveUnknown: not probed yet, or the probe could not tell.
	EffectiveUnknown Effective = 0
	// EffectiveOK: the live system matches what was applied.
	EffectiveOK Effective = 1
	// EffectiveMismatch: the live system differs from what was applied.
	EffectiveMismatch Effective = 2
)

// String returns the state's name.
func (e Effective) String() string {
	switch e {
	case EffectiveUnknown:
		return "unknown"
	case EffectiveOK:
		return "ok"
	case EffectiveMismatch:
		return "mismatch"
	}
	return fmt.Sprintf("Effective(%d)", uint8(e))
}

// ResourceState is the agent's state of one resource. It travels in a
// Report with the states flag (protocol 1.1); agents of 1.0 have no such
// field and start Detail with the state's name instead (see Report.States).
type ResourceState uint8

// Resource states. StateUnknown is never encoded: it is the state of a
// resource report without the states flag.
const (
	StateUnknown ResourceState = 0
	// StatePending: not applied at the desired digest yet, no step failed.
	StatePending ResourceState = 1
	// StateProgressing: applied, but the probe does not (yet) confirm it.
	StateProgressing ResourceState = 2
	// StateConverged: applied at the desired digest and the probe agrees.
	StateConverged ResourceState = 3
	// StateDrifted: the device moved away from the applied state and the
	// drift is reported (or about to be corrected).
	StateDrifted ResourceState = 4
	// StateOverridden: the device moved away from the applied state and
	// the drift policy tolerates it as a local override.
	StateOverridden ResourceState = 5
	// StateBlocked: a step is needed but a requirement holds it back.
	StateBlocked ResourceState = 6
	// StateFailed: the last step for the desired digest failed.
	StateFailed ResourceState = 7

	stateMax = StateFailed
)

var stateNames = [...]string{
	StateUnknown: "unknown", StatePending: "pending", StateProgressing: "progressing",
	StateConverged: "converged", StateDrifted: "drifted", StateOverridden: "overridden",
	StateBlocked: "blocked", StateFailed: "failed",
}

// String returns the state's name: pending, progressing, converged,
// drifted, overridden, blocked, failed, or unknown.
func (s ResourceState) String() string {
	if s <= stateMax {
		return stateNames[s]
	}
	return fmt.Sprintf("ResourceState(%d)", uint8(s))
}

// ParseResourceState returns the state named name; ok is false (and the
// state StateUnknown) for any other string, "unknown" included.
func ParseResourceState(name string) (s ResourceState, ok bool) {
	for i := StatePending; i <= stateMax; i++ {
		if stateNames[i] == name {
			return i, true
		}
	}
	return StateUnknown, false
}

// ResourceReport is the agent's view of one resource.
type ResourceReport struct {
	Key             string // "intent/resourceID"
	AppliedDigest   Digest // digest of the body applied; zero if none
	AppliedRevision uint64 // desired revision the applied body came from
	Effective       Effective
	// State is the agent's state of the resource; encoded only in a
	// Report with States set, where it must not be StateUnknown.
	State             ResourceState
	Detail            string // what the agent saw, for humans
	LastError         string // last apply error; empty after a success
	Attempts          uint32 // apply attempts for the current body
	UpdatedAtUnixNano int64  // when the agent last changed this entry
	// Corrections counts the times the agent corrected the resource's
	// drift since it started; encoded only in a Report with Corrections
	// set.
	Corrections uint32
	// Hold says what holds the resource back (an override, a fight, a
	// maintenance window, a lock, a precondition, a rotation window);
	// encoded only in a Report with Edge set.
	Hold Hold
}

const resourceReportMinLen = 1 + len(Digest{}) + 1 + 1 + 1 + 1 + 1 + 8

// Report carries applied and effective state. Seq numbers a session's
// reports from 1 upwards; the server applies a report only if its Seq is
// above the highest it applied in the session (at most once), and the
// agent resends unacknowledged reports after a reconnect. Each report
// carries the current state of every resource that changed since the last
// acknowledged report, so a skipped Seq loses nothing.
type Report struct {
	Seq             uint64
	DesiredRevision uint64 // the desired revision the agent is working towards
	// Full says Resources lists every resource the agent has; resources
	// the server knows and the report omits are then gone from the device.
	Full bool
	// Status is the agent's device-level status (e.g. "converged",
	// "progressing", "blocked").
	Status string
	// BlockedReason says what blocks the agent (a workload lock holder and
	// since when); empty if not blocked.
	BlockedReason string
	// States says every resource report carries its State (flag bit 1,
	// protocol 1.1). An agent sets it only in a session that runs at minor
	// 1 or above. Without it every State is StateUnknown: the report comes
	// from an agent of 1.0 (or through a 1.0 session), whose Detail
	// starts with the state's name and ": ".
	States bool
	// Corrections says every resource report carries its Corrections
	// (flag bit 2, protocol 1.2), set only in a session at minor 2 or
	// above.
	Corrections bool
	Resources   []ResourceReport
	// Traffic, when set, is the agent's count of its own traffic (flag
	// bit 3, protocol 1.3), set only in a session at minor 3 or above.
	Traffic *Traffic
	// Edge says the report carries each resource's Hold and the fields
	// below (flag bit 4, protocol 1.4), set only in a session at minor 4
	// or above.
	Edge bool
	// Locks are the workload locks held on the device, sorted by name.
	Locks []Lock
	// Recovery is how the agent recovered at its latest start; nil for
	// none to tell.
	Recovery *Recovery
	// Unlocked are the outcomes of the lock breaks the agent was sent
	// (Settings.Unlocks) and has not seen withdrawn, by increasing index.
	Unlocked []UnlockResult
}

const (
	reportFull        = 1 << 0
	reportStates      = 1 << 1
	reportCorrections = 1 << 2
	reportTraffic     = 1 << 3
	reportEdge        = 1 << 4
)

// WithoutCorrections returns the report as a peer below protocol 1.2
// takes it: without correction counts (and their flag). It returns m
// itself when m carries none.
func (m *Report) WithoutCorrections() *Report {
	if !m.Corrections {
		return m
	}
	old := *m
	old.Corrections = false
	old.Resources = make([]ResourceReport, len(m.Resources))
	for i, r := range m.Resources {
		r.Corrections = 0
		old.Resources[i] = r
	}
	return &old
}

// WithoutEdge returns the report as a peer below protocol 1.4 takes it:
// without holds, locks, recovery and unlock results (and their flag). It
// returns m itself when m carries none.
func (m *Report) WithoutEdge() *Report {
	if !m.Edge {
		return m
	}
	old := *m
	old.Edge, old.Locks, old.Recovery, old.Unlocked = false, nil, nil, nil
	old.Resources = make([]ResourceReport, len(m.Resources))
	for i, r := range m.Resources {
		r.Hold = Hold{}
		old.Resources[i] = r
	}
	return &old
}

// WithoutTraffic returns the report as a peer below protocol 1.3 takes
// it: without the traffic counters (and their flag). It returns m itself
// when m carries none.
func (m *Report) WithoutTraffic() *Report {
	if m.Traffic == nil {
		return m
	}
	old := *m
	old.Traffic = nil
	return &old
}

// Type implements Message.
func (*Report) Type() MessageType { return TypeReport }

// Append implements Message.
func (m *Report) Append(b []byte) []byte {
	b = appendUvarint(b, m.Seq)
	b = appendUvarint(b, m.DesiredRevision)
	var flags byte
	if m.Full {
		flags |= reportFull
	}
	if m.States {
		flags |= reportStates
	}
	if m.Corrections {
		flags |= reportCorrections
	}
	if m.Traffic != nil {
		flags |= reportTraffic
	}
	if m.Edge {
		flags |= reportEdge
	}
	b = append(b, flags)
	b = appendString(b, m.Status)
	b = appendString(b, m.BlockedReason)
	b = appendUvarint(b, uint64(len(m.Resources)))
	for i := range m.Resources {
		r := &m.Resources[i]
		b = appendString(b, r.Key)
		b = append(b, r.AppliedDigest[:]...)
		b = appendUvarint(b, r.AppliedRevision)
		b = append(b, byte(r.Effective))
		if m.States {
			b = append(b, byte(r.State))
		}
		b = appendString(b, r.Detail)
		b = appendString(b, r.LastError)
		b = appendUvarint(b, uint64(r.Attempts))
		b = appendI64(b, r.UpdatedAtUnixNano)
		if m.Corrections {
			b = appendUvarint(b, uint64(r.Corrections))
		}
		if m.Edge {
			b = appendHold(b, r.Hold)
		}
	}
	if m.Traffic != nil {
		b = appendTraffic(b, m.Traffic)
	}
	if m.Edge {
		b = appendEdge(b, m)
	}
	return b
}

// Len implements Message.
func (m *Report) Len() int {
	n := uvarintLen(m.Seq) + uvarintLen(m.DesiredRevision) + 1 + stringLen(m.Status) +
		stringLen(m.BlockedReason) + uvarintLen(uint64(len(m.Resources)))
	for i := range m.Resources {
		r := &m.Resources[i]
		n += stringLen(r.Key) + len(r.AppliedDigest) + uvarintLen(r.AppliedRevision) + 1 +
			stringLen(r.Detail) + stringLen(r.LastError) + uvarintLen(uint64(r.Attempts)) + 8
		if m.Corrections {
			n += uvarintLen(uint64(r.Corrections))
		}
		if m.Edge {
			n += holdLen(r.Hold)
		}
	}
	if m.States {
		n += len(m.Resources) // one state byte each
	}
	if m.Traffic != nil {
		n += trafficLen(m.Traffic)
	}
	if m.Edge {
		n += edgeLen(m)
	}
	return n
}

// Decode implements Message.
func (m *Report) Decode(payload []byte) error {
	d := decoder{b: payload}
	*m = Report{Seq: d.uvarint(), DesiredRevision: d.uvarint()}
	flags := d.flags(reportFull | reportStates | reportCorrections | reportTraffic | reportEdge)
	m.Full, m.States, m.Corrections = flags&reportFull != 0, flags&reportStates != 0, flags&reportCorrections != 0
	m.Edge = flags&reportEdge != 0
	m.Status = d.str(MaxNameLen, "status")
	m.BlockedReason = d.str(MaxTextLen, "blocked reason")
	minLen := resourceReportMinLen
	if m.States {
		minLen++
	}
	if m.Corrections {
		minLen++
	}
	if m.Edge {
		minLen++
	}
	if n := d.length(MaxResources, minLen, "resources"); n > 0 {
		m.Resources = make([]ResourceReport, n)
		for i := range m.Resources {
			r := &m.Resources[i]
			r.Key = d.str(MaxKeyLen, "resource key")
			d.fixed(r.AppliedDigest[:])
			r.AppliedRevision = d.uvarint()
			if r.Effective = Effective(d.u8()); r.Effective > EffectiveMismatch {
				d.malformed("undefined effective state %d", r.Effective)
			}
			if m.States {
				if r.State = ResourceState(d.u8()); r.State == StateUnknown || r.State > stateMax {
					d.malformed("undefined resource state %d", r.State)
				}
			}
			r.Detail = d.str(MaxTextLen, "detail")
			r.LastError = d.str(MaxTextLen, "last error")
			if a := d.uvarint(); a <= math.MaxUint32 {
				r.Attempts = uint32(a)
			} else {
				d.malformed("attempts %d overflows 32 bits", a)
			}
			r.UpdatedAtUnixNano = d.i64()
			if m.Corrections {
				if c := d.uvarint(); c <= math.MaxUint32 {
					r.Corrections = uint32(c)
				} else {
					d.malformed("corrections %d overflows 32 bits", c)
				}
			}
			if m.Edge {
				r.Hold = d.hold()
			}
		}
	}
	if flags&reportTraffic != 0 {
		m.Traffic = d.traffic()
	}
	if m.Edge {
		d.edge(m)
	}
	return d.finish("Report")
}

// ReportAck tells the agent that every report with Seq at or below Seq has
// been applied (or was a duplicate); the agent may forget them. The server
// sends it only once the reports are durable (committed by the owner).
type ReportAck struct {
	Seq uint64
}

// Type implements Message.
func (*ReportAck) Type() MessageType { return TypeReportAck }

// Append implements Message.
func (m *ReportAck) Append(b []byte) []byte { return appendUvarint(b, m.Seq) }

// Len implements Message.
func (m *ReportAck) Len() int { return uvarintLen(m.Seq) }

// Decode implements Message.
func (m *ReportAck) Decode(payload []byte) error {
	d := decoder{b: payload}
	*m = ReportAck{Seq: d.uvarint()}
	return d.finish("ReportAck")
}

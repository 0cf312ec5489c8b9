package wire

import (
	"fmt"
	"math"
	"time"
)

// What a Report with the edge flag (bit 4, protocol 1.4) carries beyond
// the states: why a resource is held back (a Hold per resource), the
// device's workload locks, how its latest restart was recovered, and the
// outcome of the lock breaks it was sent.

// HoldKind says what holds a resource back, or that nothing does.
type HoldKind uint8

// Hold kinds.
const (
	HoldNone HoldKind = 0
	// HoldOverride: a site operator pinned the resource's local state
	// (meteor agent override) until Until, for the reason in Note; Holder
	// is who, Since when.
	HoldOverride HoldKind = 1
	// HoldFighting: something on the device keeps undoing the resource;
	// the agent corrected it Count times since Since and backs off, the
	// next correction at Until.
	HoldFighting HoldKind = 2
	// HoldWindow: a disruptive step waits for the maintenance window
	// named Holder, which opens at Until (Note: the zone).
	HoldWindow HoldKind = 3
	// HoldLock: a step waits for the lock named Note, held by Holder since
	// Since, stale at Until (its maximum hold).
	HoldLock HoldKind = 4
	// HoldPrecondition: a step waits for a requirement on the device's
	// facts or labels; Note says which and what the device has.
	HoldPrecondition HoldKind = 5
	// HoldSchedule: the resource's rotation window opens at Until (its
	// notBefore); nothing is applied before.
	HoldSchedule HoldKind = 6

	holdMax = HoldSchedule
)

var holdNames = [...]string{
	HoldNone: "none", HoldOverride: "override", HoldFighting: "fighting", HoldWindow: "window",
	HoldLock: "lock", HoldPrecondition: "precondition", HoldSchedule: "schedule",
}

// String names the kind: none, override, fighting, window, lock,
// precondition, schedule.
func (k HoldKind) String() string {
	if k <= holdMax {
		return holdNames[k]
	}
	return fmt.Sprintf("HoldKind(%d)", uint8(k))
}

// Hold is what holds a resource back. Fields a kind does not use are
// zero.
type Hold struct {
	Kind HoldKind
	// Since and Until are Unix nanoseconds, 0 for none.
	Since, Until int64
	Count        uint32
	Holder       string // at most MaxNameLen bytes
	Note         string // at most MaxTextLen bytes
}

func appendHold(b []byte, h Hold) []byte {
	b = append(b, byte(h.Kind))
	if h.Kind == HoldNone {
		return b
	}
	b = appendI64(b, h.Since)
	b = appendI64(b, h.Until)
	b = appendUvarint(b, uint64(h.Count))
	b = appendString(b, h.Holder)
	return appendString(b, h.Note)
}

func holdLen(h Hold) int {
	if h.Kind == HoldNone {
		return 1
	}
	return 1 + 8 + 8 + uvarintLen(uint64(h.Count)) + stringLen(h.Holder) + stringLen(h.Note)
}

func (d *decoder) hold() Hold {
	h := Hold{Kind: HoldKind(d.u8())}
	if d.err != nil || h.Kind == HoldNone {
		return h
	}
	if h.Kind > holdMax {
		d.malformed("undefined hold %d", h.Kind)
		return h
	}
	h.Since, h.Until = d.i64(), d.i64()
	if c := d.uvarint(); c <= math.MaxUint32 {
		h.Count = uint32(c)
	} else {
		d.malformed("hold count %d overflows 32 bits", c)
	}
	h.Holder = d.str(MaxNameLen, "hold holder")
	h.Note = d.str(MaxTextLen, "hold note")
	return h
}

// LockSource says how a workload took a lock.
type LockSource uint8

// Lock sources.
const (
	// LockAgent: through the agent's local socket (meteor agent lock
	// acquire).
	LockAgent LockSource = 1
	// LockFile: a lock file in the agent's lock directory.
	LockFile LockSource = 2
)

// String names the source: agent or file.
func (s LockSource) String() string {
	switch s {
	case LockAgent:
		return "agent"
	case LockFile:
		return "file"
	}
	return fmt.Sprintf("LockSource(%d)", uint8(s))
}

// Lock is a workload lock held on the device.
type Lock struct {
	Name   string // not empty; at most MaxNameLen bytes
	Holder string
	// Since is when it was taken (Unix ns); MaxHold how long it may be
	// held before it is stale (0: no limit).
	Since   int64
	MaxHold time.Duration
	Source  LockSource
}

// MaxLocks bounds the locks of a Report.
const MaxLocks = 64

// StepOutcome says how the agent resolved a step a restart interrupted.
type StepOutcome uint8

// Step outcomes.
const (
	// StepAlreadyApplied: the device was found at the step's desired
	// state; the step counted as applied and did not run again.
	StepAlreadyApplied StepOutcome = 1
	// StepAppliedAgain: the device was not at the step's desired state;
	// the step ended as interrupted and was applied again.
	StepAppliedAgain StepOutcome = 2
	// StepDropped: the resource had left the desired state (or changed)
	// by then; the step ended without a re-check.
	StepDropped StepOutcome = 3
)

// String names the outcome.
func (o StepOutcome) String() string {
	switch o {
	case StepAlreadyApplied:
		return "already applied"
	case StepAppliedAgain:
		return "applied again"
	case StepDropped:
		return "no longer desired"
	}
	return fmt.Sprintf("StepOutcome(%d)", uint8(o))
}

// ChildOutcome says what the agent found of a process an interrupted step
// had started.
type ChildOutcome uint8

// Child outcomes.
const (
	ChildNone ChildOutcome = 0 // no process of the step survived
	// ChildWaited: a process of the step survived the restart; the agent
	// waited for it to exit before it re-checked.
	ChildWaited ChildOutcome = 1
	// ChildEnded: a process of the step survived past the step's timeout;
	// the agent ended its process group before it re-checked.
	ChildEnded ChildOutcome = 2
)

// String names the outcome.
func (o ChildOutcome) String() string {
	switch o {
	case ChildNone:
		return "none"
	case ChildWaited:
		return "waited for"
	case ChildEnded:
		return "ended"
	}
	return fmt.Sprintf("ChildOutcome(%d)", uint8(o))
}

// RecoveredStep is a step a restart interrupted and how it was resolved.
type RecoveredStep struct {
	Key     string
	Digest  Digest
	Outcome StepOutcome
	Child   ChildOutcome
}

// Recovery is how the agent recovered at its latest start.
type Recovery struct {
	// At is when it started (Unix ns).
	At int64
	// Unclean says the agent before it did not stop cleanly: a crash or
	// a power loss.
	Unclean bool
	// Total counts the resources desired then, and Applied those applied
	// at their desired digest when it stopped.
	Total, Applied uint32
	// Steps are the steps it found in flight, in the order they began.
	Steps []RecoveredStep
}

// UnlockOutcome says what became of an Unlock.
type UnlockOutcome uint8

// Unlock outcomes.
const (
	// UnlockBroken: the lock was held as the order said, and is broken.
	UnlockBroken UnlockOutcome = 1
	// UnlockNotHeld: no lock of that name was held.
	UnlockNotHeld UnlockOutcome = 2
	// UnlockRetaken: the lock was released and taken again since the
	// order was given; the new holder keeps it.
	UnlockRetaken UnlockOutcome = 3

	unlockOutcomeMax = UnlockRetaken
)

// String names the outcome.
func (o UnlockOutcome) String() string {
	switch o {
	case UnlockBroken:
		return "broken"
	case UnlockNotHeld:
		return "not held"
	case UnlockRetaken:
		return "taken again since"
	}
	return fmt.Sprintf("UnlockOutcome(%d)", uint8(o))
}

// UnlockResult is the outcome of the Unlock of Index, at At (Unix ns).
type UnlockResult struct {
	Index   uint64
	Lock    string
	Outcome UnlockOutcome
	At      int64
}

const (
	lockMinLen          = 1 + 1 + 8 + 1 + 1
	recoveredStepMinLen = 1 + len(Digest{}) + 2
	unlockResultMinLen  = 1 + 1 + 1 + 8
)

// appendEdge encodes the report-level part of the edge flag.
func appendEdge(b []byte, m *Report) []byte {
	b = appendUvarint(b, uint64(len(m.Locks)))
	for _, l := range m.Locks {
		b = appendString(b, l.Name)
		b = appendString(b, l.Holder)
		b = appendI64(b, l.Since)
		b = appendUvarint(b, durationMillis(l.MaxHold))
		b = append(b, byte(l.Source))
	}
	if m.Recovery == nil {
		b = append(b, 0)
	} else {
		r := m.Recovery
		b = append(b, 1)
		b = appendI64(b, r.At)
		b = appendBool(b, r.Unclean)
		b = appendUvarint(b, uint64(r.Total))
		b = appendUvarint(b, uint64(r.Applied))
		b = appendUvarint(b, uint64(len(r.Steps)))
		for _, s := range r.Steps {
			b = appendString(b, s.Key)
			b = append(b, s.Digest[:]...)
			b = append(b, byte(s.Outcome), byte(s.Child))
		}
	}
	b = appendUvarint(b, uint64(len(m.Unlocked)))
	for _, u := range m.Unlocked {
		b = appendUvarint(b, u.Index)
		b = appendString(b, u.Lock)
		b = append(b, byte(u.Outcome))
		b = appendI64(b, u.At)
	}
	return b
}

func edgeLen(m *Report) int {
	n := uvarintLen(uint64(len(m.Locks))) + 1 + uvarintLen(uint64(len(m.Unlocked)))
	for _, l := range m.Locks {
		n += stringLen(l.Name) + stringLen(l.Holder) + 8 + uvarintLen(durationMillis(l.MaxHold)) + 1
	}
	if r := m.Recovery; r != nil {
		n += 8 + 1 + uvarintLen(uint64(r.Total)) + uvarintLen(uint64(r.Applied)) + uvarintLen(uint64(len(r.Steps)))
		for _, s := range r.Steps {
			n += stringLen(s.Key) + len(s.Digest) + 2
		}
	}
	for _, u := range m.Unlocked {
		n += uvarintLen(u.Index) + stringLen(u.Lock) + 1 + 8
	}
	return n
}

// edge decodes the report-level part of the edge flag into m.
func (d *decoder) edge(m *Report) {
	if n := d.length(MaxLocks, lockMinLen, "locks"); n > 0 {
		m.Locks = make([]Lock, n)
		for i := range m.Locks {
			l := &m.Locks[i]
			l.Name = d.str(MaxNameLen, "lock name")
			l.Holder = d.str(MaxNameLen, "lock holder")
			l.Since = d.i64()
			l.MaxHold = d.duration()
			l.Source = LockSource(d.u8())
			switch {
			case d.err != nil:
			case l.Name == "":
				d.malformed("lock without a name")
			case i > 0 && l.Name <= m.Locks[i-1].Name:
				d.malformed("lock names not strictly increasing")
			case l.Source != LockAgent && l.Source != LockFile:
				d.malformed("undefined lock source %d", l.Source)
			}
		}
	}
	if d.boolean() {
		r := &Recovery{At: d.i64(), Unclean: d.boolean()}
		r.Total, r.Applied = d.u32("recovery total"), d.u32("recovery applied")
		if d.err == nil && r.Applied > r.Total {
			d.malformed("recovery: %d applied of %d", r.Applied, r.Total)
		}
		if n := d.length(MaxLocks, recoveredStepMinLen, "recovered steps"); n > 0 {
			r.Steps = make([]RecoveredStep, n)
			for i := range r.Steps {
				s := &r.Steps[i]
				s.Key = d.str(MaxKeyLen, "recovered step key")
				d.fixed(s.Digest[:])
				s.Outcome, s.Child = StepOutcome(d.u8()), ChildOutcome(d.u8())
				if d.err == nil && (s.Outcome == 0 || s.Outcome > StepDropped || s.Child > ChildEnded) {
					d.malformed("recovered step %q: undefined outcome %d/%d", s.Key, s.Outcome, s.Child)
				}
			}
		}
		m.Recovery = r
	}
	if n := d.length(MaxUnlocks, unlockResultMinLen, "unlock results"); n > 0 {
		m.Unlocked = make([]UnlockResult, n)
		for i := range m.Unlocked {
			u := &m.Unlocked[i]
			u.Index, u.Lock = d.uvarint(), d.str(MaxNameLen, "unlocked lock")
			u.Outcome, u.At = UnlockOutcome(d.u8()), d.i64()
			switch {
			case d.err != nil:
			case u.Outcome == 0 || u.Outcome > unlockOutcomeMax:
				d.malformed("undefined unlock outcome %d", u.Outcome)
			case i > 0 && u.Index <= m.Unlocked[i-1].Index:
				d.malformed("unlock results not strictly increasing")
			}
		}
	}
}

// u32 reads a uvarint that must fit 32 bits.
func (d *decoder) u32(what string) uint32 {
	v := d.uvarint()
	if v > math.MaxUint32 {
		d.malformed("%s %d overflows 32 bits", what, v)
		return 0
	}
	return uint32(v)
}

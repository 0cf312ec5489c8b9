package fsm

import (
	"fmt"
	"strconv"
	"strings"
	"sync"
)

// Events are what changed in the replicated state, in log order, derived
// by every replica from the commands it applies. An event's ID is the Raft
// index of the command that caused it and its position among that
// command's events, so every server gives the same event the same ID and a
// client can resume a stream on any server. Events are not part of the
// replicated state: each server keeps the newest in memory (EventLimit),
// and one that installed a snapshot or dropped old events says so with a
// gap (EventsAfter), after which a client must read the state again.

// Event kinds.
const (
	KindIntent   = "intent"   // a revision of an intent was written, or the intent deleted
	KindRelease  = "release"  // a rollout released a revision to devices
	KindRollout  = "rollout"  // a rollout decision: a gate, a pause, a completion, a revert
	KindApproval = "approval" // an operator approved a wave
	KindProgress = "progress" // a sample of a rollout's counts
	KindStatus   = "status"   // a device's status or a resource's state changed
	KindDrift    = "drift"    // a resource drifted, a local change is tolerated, or the agent corrected drift
	KindDevice   = "device"   // a device registered, was labelled, revoked or unrevoked
	KindSession  = "session"  // a device connected or disconnected
	KindConfig   = "config"   // a reconcile class or a maintenance window was written or deleted
)

// EventKinds lists every kind, for validation and documentation.
var EventKinds = []string{KindIntent, KindRelease, KindRollout, KindApproval, KindProgress, KindStatus, KindDrift, KindDevice, KindSession, KindConfig}

// DefaultEventLimit is how many events a server keeps by default.
const DefaultEventLimit = 16384

// EventID orders events: by Raft index, then by position in the command.
type EventID struct {
	Index uint64
	N     int
}

// String formats the ID as "index-n", or "index" for the last event of
// an index (ParseEventID reads both).
func (id EventID) String() string {
	if id.N == maxEventN {
		return strconv.FormatUint(id.Index, 10)
	}
	return strconv.FormatUint(id.Index, 10) + "-" + strconv.Itoa(id.N)
}

// Less reports whether id comes before o.
func (id EventID) Less(o EventID) bool {
	return id.Index < o.Index || id.Index == o.Index && id.N < o.N
}

// ParseEventID parses an ID as the stream gives it, "index-n". A bare
// index stands for the last event of that index, so resuming after it
// skips the whole entry.
func ParseEventID(s string) (EventID, error) {
	idx, n, found := strings.Cut(s, "-")
	i, err := strconv.ParseUint(idx, 10, 64)
	if err != nil {
		return EventID{}, fmt.Errorf("event ID %q: want INDEX-N, as the stream's id: lines give", s)
	}
	if !found {
		return EventID{Index: i, N: maxEventN}, nil
	}
	k, err := strconv.Atoi(n)
	if err != nil || k < 0 {
		return EventID{}, fmt.Errorf("event ID %q: want INDEX-N, as the stream's id: lines give", s)
	}
	return EventID{Index: i, N: k}, nil
}

// maxEventN stands for "every event of the index".
const maxEventN = 1<<31 - 1

// Event is one change to the state. Fields that do not apply are empty.
type Event struct {
	ID   EventID
	Kind string
	// Action says what happened within the kind: put or delete for an
	// intent, the rollout event's kind (started, gate, paused, …) for
	// rollout events, connected or disconnected for a session, registered,
	// labelled, revoked or unrevoked for a device.
	Action string
	// Time is the proposer's clock when the command was made (Unix ns).
	Time     int64
	Intent   string
	Revision uint64
	Device   string
	Status   string
	Reason   string
	Message  string
	Wave     int
	// Devices is how many devices a release released.
	Devices int
	// Resources are the resources whose state changed, by key.
	Resources map[string]string
	Counts    *RolloutCounts
	Actor     string
}

// eventLog is a server's window of recent events. A batch being applied
// stages events and publishes them once the batch's
// transaction has committed, so a reader woken by an event sees the state
// that caused it.
type eventLog struct {
	limit   int
	pending []Event // staged by the batch being applied (FSM.applyMu)

	mu   sync.Mutex
	buf  []Event // ring of at most limit events, oldest at head
	head int
	// horizon is the newest ID this log may lack events at or before: a
	// dropped event, or the index of an installed snapshot (the entries
	// it covered were never applied here).
	horizon EventID
	// last is the newest event published.
	last   EventID
	notify chan struct{} // closed and replaced on every publish
}

func newEventLog(limit int) *eventLog {
	return &eventLog{limit: limit, notify: make(chan struct{})}
}

// stage records an event of the command at index, numbering it after the
// command's earlier events.
func (l *eventLog) stage(index uint64, e Event) {
	n := 0
	if k := len(l.pending); k > 0 && l.pending[k-1].ID.Index == index {
		n = l.pending[k-1].ID.N + 1
	}
	e.ID = EventID{Index: index, N: n}
	l.pending = append(l.pending, e)
}

// publish makes the staged events visible and wakes waiting readers.
func (l *eventLog) publish() {
	if len(l.pending) == 0 {
		return
	}
	l.mu.Lock()
	for _, e := range l.pending {
		if len(l.buf) < l.limit {
			l.buf = append(l.buf, e)
		} else {
			l.horizon = maxID(l.horizon, l.buf[l.head].ID)
			l.buf[l.head] = e
			l.head = (l.head + 1) % l.limit
		}
		l.last = e.ID
	}
	close(l.notify)
	l.notify = make(chan struct{})
	l.mu.Unlock()
	clear(l.pending)
	l.pending = l.pending[:0]
}

// restored records that the state jumped to a snapshot at index: events
// up to it may be missing here.
func (l *eventLog) restored(index uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.horizon = maxID(l.horizon, EventID{Index: index, N: maxEventN})
	l.last = maxID(l.last, EventID{Index: index, N: maxEventN})
	close(l.notify)
	l.notify = make(chan struct{})
}

func maxID(a, b EventID) EventID {
	if a.Less(b) {
		return b
	}
	return a
}

// EventBatch is what EventsAfter found.
type EventBatch struct {
	// Events are the events after the ID asked for, oldest first.
	Events []Event
	// Gap is set when events after the ID asked for may be missing from
	// this server's window: the reader must read the state again, and
	// goes on after Horizon, the newest ID that may be missing.
	Gap     bool
	Horizon EventID
	// More is closed when events are published or the state restored.
	More <-chan struct{}
}

// EventsAfter returns up to max events after id.
func (f *FSM) EventsAfter(id EventID, max int) EventBatch {
	l := f.events
	l.mu.Lock()
	defer l.mu.Unlock()
	b := EventBatch{Gap: id.Less(l.horizon), Horizon: l.horizon, More: l.notify}
	n := len(l.buf)
	// The first event after id, by binary search of the ring.
	lo, hi := 0, n
	for lo < hi {
		m := (lo + hi) / 2
		if id.Less(l.buf[(l.head+m)%n].ID) {
			hi = m
		} else {
			lo = m + 1
		}
	}
	for i := lo; i < n && len(b.Events) < max; i++ {
		b.Events = append(b.Events, l.buf[(l.head+i)%n])
	}
	return b
}

// LastEventID returns the ID of the newest event this server knows of (a
// stream that starts now resumes after it).
func (f *FSM) LastEventID() EventID {
	f.events.mu.Lock()
	defer f.events.mu.Unlock()
	return f.events.last
}

package chaos

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"slices"
	"sync"
	"time"
)

// Fault kinds recorded in a [FaultLog].
const (
	// KindLoss is a packet dropped by independent random loss (LinkProfile.Loss).
	KindLoss = "loss"
	// KindBurstLoss is a packet dropped inside a loss burst (LinkProfile.BurstLoss).
	KindBurstLoss = "burst-loss"
	// KindOutage is a packet dropped during a periodic outage
	// (LinkProfile.OutageEvery/OutageFor).
	KindOutage = "outage"
	// KindBlackhole is a packet dropped while the link was blackholed
	// (PacketConn.Blackhole, PacketConn.SetBlackhole).
	KindBlackhole = "blackhole"
	// KindDelay is a packet or write held back before delivery.
	KindDelay = "delay"
	// KindDuplicate is a packet delivered twice.
	KindDuplicate = "duplicate"
	// KindReorder is a packet held back so that a later one overtakes it.
	KindReorder = "reorder"
	// KindCorrupt is a packet delivered with one byte flipped.
	KindCorrupt = "corrupt"
	// KindOverflow is a packet dropped because a chaos queue was full.
	KindOverflow = "overflow"
	// KindCut is traffic refused because a partition separates its ends:
	// a dropped datagram, a failed write or dial, a closed connection.
	KindCut = "cut"
	// KindDrop is a Raft or memberlist message dropped by a drop rate
	// (Network.SetDropRate).
	KindDrop = "drop"
	// KindPartition is a change of connectivity ordered by a test: a
	// partition, an isolation, a one-way cut, a delay or drop rate set, a
	// blackhole or proxy partition switched on or off, or a heal.
	KindPartition = "partition"
)

// Fault is one injected fault.
type Fault struct {
	// At is when the fault was injected.
	At time.Time `json:"at"`
	// Kind is one of the Kind constants.
	Kind string `json:"kind"`
	// From and To name the ends of the affected link: socket addresses for
	// packet faults, node IDs for partition faults. Either may be empty.
	From string `json:"from,omitempty"`
	To   string `json:"to,omitempty"`
	// Detail is a short human-readable description (sizes, delays, bytes).
	Detail string `json:"detail,omitempty"`
}

// FaultLog is an append-only record of injected faults. It is safe for
// concurrent use. The zero value is an empty, unbounded log ready to use; a
// nil *FaultLog discards everything, so components accept nil.
type FaultLog struct {
	mu     sync.Mutex
	limit  int            // guarded by mu; 0 means unbounded
	faults []Fault        // guarded by mu; ring buffer when limit > 0
	next   int            // guarded by mu; ring write position when full
	counts map[string]int // guarded by mu
	total  int            // guarded by mu
}

// NewFaultLog returns an empty, unbounded log.
func NewFaultLog() *FaultLog { return &FaultLog{} }

// NewBoundedFaultLog returns a log that keeps only the most recent limit
// faults (for long simulator runs). Counts stay exact. limit <= 0 means
// unbounded.
func NewBoundedFaultLog(limit int) *FaultLog {
	if limit < 0 {
		limit = 0
	}
	return &FaultLog{limit: limit}
}

// Add appends f. A zero At is set to the current time.
func (l *FaultLog) Add(f Fault) {
	if l == nil {
		return
	}
	if f.At.IsZero() {
		f.At = time.Now()
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.counts == nil {
		l.counts = make(map[string]int)
	}
	l.counts[f.Kind]++
	l.total++
	if l.limit > 0 && len(l.faults) == l.limit {
		l.faults[l.next] = f
		l.next = (l.next + 1) % l.limit
		return
	}
	l.faults = append(l.faults, f)
}

// Record appends a fault of the given kind stamped with the current time.
func (l *FaultLog) Record(kind, from, to, detail string) {
	l.Add(Fault{Kind: kind, From: from, To: to, Detail: detail})
}

// Faults returns a copy of the retained faults, oldest first.
func (l *FaultLog) Faults() []Fault {
	if l == nil {
		return nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make([]Fault, 0, len(l.faults))
	out = append(out, l.faults[l.next:]...)
	return append(out, l.faults[:l.next]...)
}

// Len returns how many faults were ever added, including any a bounded log
// no longer retains.
func (l *FaultLog) Len() int {
	if l == nil {
		return 0
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.total
}

// Count returns how many faults of kind were ever added.
func (l *FaultLog) Count(kind string) int {
	if l == nil {
		return 0
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.counts[kind]
}

// Counts returns the number of faults ever added, by kind.
func (l *FaultLog) Counts() map[string]int {
	if l == nil {
		return nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return maps.Clone(l.counts)
}

// String summarises the counts, kinds sorted, e.g. "delay=12 loss=3".
func (l *FaultLog) String() string {
	counts := l.Counts()
	var s string
	for _, k := range slices.Sorted(maps.Keys(counts)) {
		if s != "" {
			s += " "
		}
		s += fmt.Sprintf("%s=%d", k, counts[k])
	}
	return s
}

// WriteJSONL writes the retained faults to w as JSON lines, oldest first.
func (l *FaultLog) WriteJSONL(w io.Writer) error {
	bw := bufio.NewWriter(w)
	enc := json.NewEncoder(bw)
	for i, f := range l.Faults() {
		if err := enc.Encode(f); err != nil {
			return fmt.Errorf("chaos: encode fault %d: %w", i, err)
		}
	}
	if err := bw.Flush(); err != nil {
		return fmt.Errorf("chaos: write fault log: %w", err)
	}
	return nil
}

// ReadFaultLog parses JSON lines written by [FaultLog.WriteJSONL].
func ReadFaultLog(r io.Reader) ([]Fault, error) {
	dec := json.NewDecoder(r)
	var out []Fault
	for {
		var f Fault
		err := dec.Decode(&f)
		if err == io.EOF {
			return out, nil
		}
		if err != nil {
			return out, fmt.Errorf("chaos: read fault %d: %w", len(out), err)
		}
		out = append(out, f)
	}
}

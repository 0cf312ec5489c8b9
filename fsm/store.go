package fsm

import (
	"fmt"
	"slices"
	"sync"

	"github.com/hashicorp/go-memdb"
)

// Config configures an FSM.
type Config struct {
	// HistoryLimit is how many revisions of each intent are kept, the
	// current one included. Every server of a cluster must use the same
	// value: it changes what Apply stores. Zero means DefaultHistoryLimit.
	HistoryLimit int
	// TimelineLimit is how many status transitions are kept per device;
	// the same on every server. Zero means DefaultTimelineLimit.
	TimelineLimit int
	// AuditLimit is how many audit records are kept (the newest); the
	// same on every server. Zero means DefaultAuditLimit.
	AuditLimit int
	// EventLimit is how many recent events this server keeps for event
	// streams (events.go); servers may differ. Zero means
	// DefaultEventLimit.
	EventLimit int
	// FeatureLevel is the feature level this replica implements (see
	// FeatureLevel); zero means FeatureLevel. A lower level makes it
	// behave as a replica of an earlier release would: a command type of
	// a later level is unknown to it (Apply stops unless the command is
	// flagged ignorable), and it refuses snapshots of a later version.
	// Tests of mixed-version clusters set it.
	FeatureLevel uint16
}

// DefaultHistoryLimit is the default number of revisions kept per intent.
const DefaultHistoryLimit = 16

// DefaultTimelineLimit is the default number of transitions kept per device.
const DefaultTimelineLimit = 64

// DefaultAuditLimit is the default number of audit records kept.
const DefaultAuditLimit = 10000

// DefaultConfig returns the default FSM configuration.
func DefaultConfig() Config {
	return Config{HistoryLimit: DefaultHistoryLimit, TimelineLimit: DefaultTimelineLimit, AuditLimit: DefaultAuditLimit}
}

// Validate checks the configuration.
func (c Config) Validate() error {
	if c.HistoryLimit < 0 || c.HistoryLimit > 100000 {
		return fmt.Errorf("history limit %d: must be between 1 and 100000 (0 means the default, %d)", c.HistoryLimit, DefaultHistoryLimit)
	}
	if c.TimelineLimit < 0 || c.TimelineLimit > 100000 {
		return fmt.Errorf("timeline limit %d: must be between 1 and 100000 (0 means the default, %d)", c.TimelineLimit, DefaultTimelineLimit)
	}
	if c.AuditLimit < 0 || c.AuditLimit > 1000000 {
		return fmt.Errorf("audit limit %d: must be between 1 and 1000000 (0 means the default, %d)", c.AuditLimit, DefaultAuditLimit)
	}
	if c.EventLimit < 0 || c.EventLimit > 10000000 {
		return fmt.Errorf("event limit %d: must be between 1 and 10000000 (0 means the default, %d)", c.EventLimit, DefaultEventLimit)
	}
	return checkFeatureLevel(c.FeatureLevel)
}

// FSM is one replica of Meteor's replicated state. Apply, Snapshot and
// Restore are called by the Raft glue; readers call the query methods from
// any goroutine.
type FSM struct {
	historyLimit  int
	timelineLimit int
	auditLimit    int
	level         uint16 // Config.FeatureLevel
	// canon caches the canonical encoding of the intents this replica
	// stored (canonicalOf); used by the apply goroutine only.
	canon map[string]canonEntry

	mu sync.RWMutex // guards db and abandonCh, swapped by Restore
	db *memdb.MemDB
	// abandonCh is closed when Restore replaces db, waking blocking
	// queries whose watch channels belong to the old database.
	abandonCh chan struct{}
	// cps are the recent checkpoints (checkpoint.go).
	cps checkpoints
	// events are the recent events (events.go); applyMu serialises the
	// batches that stage them.
	events  *eventLog
	applyMu sync.Mutex
	// intern shares the strings device records repeat (intern.go);
	// guarded by applyMu.
	intern Interner
}

// New returns an empty FSM.
func New(cfg Config) (*FSM, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.HistoryLimit == 0 {
		cfg.HistoryLimit = DefaultHistoryLimit
	}
	if cfg.TimelineLimit == 0 {
		cfg.TimelineLimit = DefaultTimelineLimit
	}
	if cfg.AuditLimit == 0 {
		cfg.AuditLimit = DefaultAuditLimit
	}
	if cfg.EventLimit == 0 {
		cfg.EventLimit = DefaultEventLimit
	}
	if cfg.FeatureLevel == 0 {
		cfg.FeatureLevel = FeatureLevel
	}
	db, err := memdb.NewMemDB(schema())
	if err != nil {
		return nil, fmt.Errorf("create state store: %w", err)
	}
	return &FSM{historyLimit: cfg.HistoryLimit, timelineLimit: cfg.TimelineLimit, auditLimit: cfg.AuditLimit, level: cfg.FeatureLevel, db: db, abandonCh: make(chan struct{}), events: newEventLog(cfg.EventLimit), canon: map[string]canonEntry{}}, nil
}

func (f *FSM) current() (*memdb.MemDB, chan struct{}) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.db, f.abandonCh
}

// Read is a consistent, point-in-time view of the state. It is cheap to
// create and holds no locks; use one for every read that must see a single
// revision.
type Read struct {
	txn       *memdb.Txn
	abandonCh chan struct{}
}

// Read returns a read view of the current state.
func (f *FSM) Read() *Read {
	db, ab := f.current()
	return &Read{txn: db.Txn(false), abandonCh: ab}
}

// Replaced returns a channel closed once a snapshot restore replaces the
// state this view reads (Raft installing a snapshot, or an operator's
// restore).
func (r *Read) Replaced() <-chan struct{} { return r.abandonCh }

// StateID names the state a Read sees: two reads with equal StateIDs see
// the same state. The index alone does not say so: a snapshot restore can
// put another state at the index a replica had.
type StateID struct {
	index    uint64
	replaced <-chan struct{}
}

// StateID returns the ID of the state this view reads, for keeping what
// was computed from it (an answer served again while it is the same).
func (r *Read) StateID() StateID { return StateID{index: r.Index(), replaced: r.abandonCh} }

// Index is the Raft index of the state.
func (s StateID) Index() uint64 { return s.index }

// watch adds ch and the abandon channel to ws, if ws is non-nil.
func (r *Read) watch(ws memdb.WatchSet, ch <-chan struct{}) {
	if ws != nil {
		ws.Add(ch)
		ws.Add(r.abandonCh)
	}
}

// Revision returns the cluster revision: the number of successful
// mutations applied so far.
func (r *Read) Revision() uint64 { return metaValue(r.txn, metaRevision) }

// Index returns the Raft index of the last applied command.
func (r *Read) Index() uint64 { return metaValue(r.txn, metaIndex) }

// WatchRevision adds to ws a channel that fires when the revision changes.
func (r *Read) WatchRevision(ws memdb.WatchSet) uint64 { return r.watchMeta(ws, metaRevision) }

// WatchIndex adds to ws a channel that fires when a command is applied,
// and returns the index applied.
func (r *Read) WatchIndex(ws memdb.WatchSet) uint64 { return r.watchMeta(ws, metaIndex) }

// judgementTables are the tables WatchJudgement watches whole: all but
// tableDevices, tableAudit and tableMeta (of which it
// watches two keys). A new table is in this list unless it only records
// devices' own state (TestWatchJudgementCoversTheSchema).
var judgementTables = []string{tableIntents, tableHistory, tableTokens, tableRevoked, tableRollouts,
	tableReleases, tableRolloutEvents, tableRolloutOutcomes, tableClasses, tableWindows}

// WatchJudgement adds to ws channels that fire when anything a device's
// status is judged by may change, other than the device's own record:
// every table but the devices' records and what only records them (their
// timelines and the audit log), the feature level, and a restore.
// Conservative: some changes it reports change no judgement (an
// enrollment token issued, say).
//
// Not the cluster revision: a device's judgement does not depend on it
// (the revisions it compares are its resources', from the intents, their
// history and the rollouts' releases), and every command that moves it
// also writes a watched table (an intent, a rollout) or a device's own
// record (a device enrolled, or its labels changed), which judges that
// device again and no other. Watching it made every evaluation while a
// fleet connects judge every owned device again, each new device having
// moved the revision: work that grew with the fleet at every
// evaluation (docs/performance.md, "Connecting cost more a device the
// larger the fleet").
func (r *Read) WatchJudgement(ws memdb.WatchSet) error {
	for _, table := range judgementTables {
		it, err := r.txn.Get(table, "id")
		if err != nil {
			return fmt.Errorf("watch %s: %w", table, err)
		}
		r.watch(ws, it.WatchCh())
	}
	r.watchMeta(ws, metaActiveLevel)
	return nil
}

func (r *Read) watchMeta(ws memdb.WatchSet, key string) uint64 {
	ch, raw, err := r.txn.FirstWatch(tableMeta, "id", key)
	if err != nil {
		panic(fmt.Sprintf("fsm: read meta: %v", err))
	}
	r.watch(ws, ch)
	if raw == nil {
		return 0
	}
	return raw.(*metaRecord).Value
}

// Intent returns the current version of an intent, or ErrNotFound.
func (r *Read) Intent(ws memdb.WatchSet, name string) (*IntentRecord, error) {
	ch, raw, err := r.txn.FirstWatch(tableIntents, "id", name)
	if err != nil {
		return nil, fmt.Errorf("read intent %q: %w", name, err)
	}
	r.watch(ws, ch)
	if raw == nil {
		return nil, fmt.Errorf("intent %q: %w", name, ErrNotFound)
	}
	return raw.(*IntentRecord), nil
}

// Intents returns every current intent, ordered by name.
func (r *Read) Intents(ws memdb.WatchSet) ([]*IntentRecord, error) {
	return readAll[*IntentRecord](r, ws, tableIntents)
}

// readAll returns every record of table, in "id" order.
func readAll[T any](r *Read, ws memdb.WatchSet, table string) ([]T, error) {
	it, err := r.txn.Get(table, "id")
	if err != nil {
		return nil, fmt.Errorf("list %s: %w", table, err)
	}
	r.watch(ws, it.WatchCh())
	var out []T
	for raw := it.Next(); raw != nil; raw = it.Next() {
		out = append(out, raw.(T))
	}
	return out, nil
}

// IntentAt answers "what did intent name say at revision rev": the newest
// history record at or before rev. It returns ErrNotFound if the intent did
// not exist then (or was deleted), and ErrCompacted if that revision is
// older than the history kept.
func (r *Read) IntentAt(name string, rev uint64) (*HistoryRecord, error) {
	it, err := r.txn.ReverseLowerBound(tableHistory, "id", name, rev)
	if err != nil {
		return nil, fmt.Errorf("read intent %q at revision %d: %w", name, rev, err)
	}
	raw := it.Next()
	if raw == nil || raw.(*HistoryRecord).Name != name {
		oldest, ok := r.oldestHistory(name)
		if ok && oldest.Revision > rev && oldest.Truncated {
			return nil, fmt.Errorf("intent %q at revision %d: %w (oldest kept is %d)", name, rev, ErrCompacted, oldest.Revision)
		}
		return nil, fmt.Errorf("intent %q at revision %d: %w", name, rev, ErrNotFound)
	}
	h := raw.(*HistoryRecord)
	if n := r.historyAfter(h); n != nil && n.DroppedFrom != 0 && rev >= n.DroppedFrom {
		return nil, fmt.Errorf("intent %q at revision %d: %w (revisions %d to %d were dropped)", name, rev, ErrCompacted, n.DroppedFrom, n.Revision-1)
	}
	if h.Deleted {
		return nil, fmt.Errorf("intent %q at revision %d: %w (deleted at revision %d)", name, rev, ErrNotFound, h.Revision)
	}
	return h, nil
}

// History returns the retained revisions of an intent, oldest first.
func (r *Read) History(name string) ([]*HistoryRecord, error) {
	it, err := r.txn.LowerBound(tableHistory, "id", name, uint64(0))
	if err != nil {
		return nil, fmt.Errorf("read history of %q: %w", name, err)
	}
	var out []*HistoryRecord
	for raw := it.Next(); raw != nil; raw = it.Next() {
		h := raw.(*HistoryRecord)
		if h.Name != name {
			break
		}
		out = append(out, h)
	}
	return out, nil
}

// historyAfter returns the history record of h's intent after h, or nil.
func (r *Read) historyAfter(h *HistoryRecord) *HistoryRecord {
	it, err := r.txn.LowerBound(tableHistory, "id", h.Name, h.Revision+1)
	if err != nil {
		return nil
	}
	raw := it.Next()
	if raw == nil || raw.(*HistoryRecord).Name != h.Name {
		return nil
	}
	return raw.(*HistoryRecord)
}

func (r *Read) oldestHistory(name string) (*HistoryRecord, bool) {
	it, err := r.txn.LowerBound(tableHistory, "id", name, uint64(0))
	if err != nil {
		return nil, false
	}
	raw := it.Next()
	if raw == nil || raw.(*HistoryRecord).Name != name {
		return nil, false
	}
	return raw.(*HistoryRecord), true
}

// Device returns a device, or ErrNotFound.
func (r *Read) Device(ws memdb.WatchSet, id string) (*DeviceRecord, error) {
	ch, raw, err := r.txn.FirstWatch(tableDevices, "id", id)
	if err != nil {
		return nil, fmt.Errorf("read device %q: %w", id, err)
	}
	r.watch(ws, ch)
	if raw == nil {
		return nil, fmt.Errorf("device %q: %w", id, ErrNotFound)
	}
	return raw.(*DeviceRecord), nil
}

// Devices returns every device, ordered by ID.
func (r *Read) Devices(ws memdb.WatchSet) ([]*DeviceRecord, error) {
	return readAll[*DeviceRecord](r, ws, tableDevices)
}

// IntentsFor returns the current intents whose selector matches labels,
// ordered by name.
func (r *Read) IntentsFor(ws memdb.WatchSet, labels map[string]string) ([]*IntentRecord, error) {
	all, err := r.Intents(ws)
	if err != nil {
		return nil, err
	}
	var out []*IntentRecord
	for _, rec := range all {
		if rec.Intent.Matches(labels) {
			out = append(out, rec)
		}
	}
	return out, nil
}

// Timeline returns a device's retained status transitions, oldest first;
// none for an unknown device. The watch fires on any change of the
// device's record.
func (r *Read) Timeline(ws memdb.WatchSet, device string) ([]*TimelineEntry, error) {
	ch, raw, err := r.txn.FirstWatch(tableDevices, "id", device)
	if err != nil {
		return nil, fmt.Errorf("read timeline of %q: %w", device, err)
	}
	r.watch(ws, ch)
	if raw == nil {
		return nil, nil
	}
	return slices.Clone(raw.(*DeviceRecord).Timeline), nil
}

package fsm

import (
	"bufio"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"

	"github.com/hashicorp/go-memdb"
)

// Snapshot format. A snapshot is a stream of JSON values: a header, then one
// entry per record, tables in a fixed order and records in index order, so
// the same state always gives the same bytes.
const (
	snapshotFormat = "meteor-fsm"
	// SnapshotVersion is the newest version this code writes. Restore
	// reads every version up to it and refuses newer ones. Version 2 adds
	// the operator restore the state descends from (RestoreMark) to the
	// header; a state that descends from none is written as version 1,
	// which every release reads.
	SnapshotVersion = 2
)

// snapshotTables are the tables a snapshot holds, in order. A table added
// later goes last, so older snapshots remain a prefix of the format.
var snapshotTables = []string{tableIntents, tableHistory, tableDevices, tableTimeline, tableTokens, tableAudit, tableRevoked,
	tableRollouts, tableReleases, tableRolloutEvents, tableRolloutOutcomes, tableClasses, tableWindows}

type snapshotHeader struct {
	Format       string `json:"format"`
	Version      int    `json:"version"`
	Index        uint64 `json:"index"`
	Revision     uint64 `json:"revision"`
	HistoryLimit int    `json:"history_limit"`
	// Restore is the operator restore the state descends from (version
	// 2); nil: none.
	Restore *RestoreMark `json:"restore,omitempty"`
	// ActiveLevel is the state's active feature level (version 3, which
	// a state of active level 3 or more is written as); 0: 2.
	ActiveLevel uint16 `json:"active_level,omitempty"`
}

// withLevel records the state's active level in h, raising the version
// for a level that needs it: a replica that predates the level refuses
// the snapshot rather than drop what it does not know.
func (h snapshotHeader) withLevel(txn *memdb.Txn) snapshotHeader {
	if v := metaValue(txn, metaActiveLevel); v > 0 {
		h.ActiveLevel = uint16(v)
		if h.ActiveLevel >= LevelEdge {
			h.Version = max(h.Version, 3)
		}
	}
	return h
}

// RestoreMark names the operator restore a state descends from. An
// operator restores a backup through Raft's own restore, which installs
// the backup's state on the leader and sends it to every follower as a
// snapshot: older than what they applied, which Restore would otherwise
// refuse (see Restore). States are therefore ordered first by the restore
// they descend from, then by index.
type RestoreMark struct {
	// Seq counts the operator restores the state descends from: each
	// restore gives the state the next one.
	Seq uint64 `json:"seq"`
	// ID is chosen at random by the server that restored (16 hex
	// digits). Two restores of the same Seq exist only when a leader
	// restored and failed before any follower took the snapshot, and the
	// next leader restored too: a replica holding the first takes the
	// second from the new leader, since it differs by its ID.
	ID string `json:"id"`
}

func (m RestoreMark) String() string {
	if m.Seq == 0 {
		return "none"
	}
	return fmt.Sprintf("%d (%s)", m.Seq, m.ID)
}

// parseRestoreID reads a RestoreMark.ID.
func parseRestoreID(id string) (uint64, error) {
	if len(id) != 16 {
		return 0, fmt.Errorf("restore ID %q: want 16 hex digits", id)
	}
	v, err := strconv.ParseUint(id, 16, 64)
	if err != nil {
		return 0, fmt.Errorf("restore ID %q: want 16 hex digits", id)
	}
	return v, nil
}

func formatRestoreID(v uint64) string { return fmt.Sprintf("%016x", v) }

// NewRestoreMark returns the mark of a new operator restore over a state
// whose mark is cur, with a random ID.
func NewRestoreMark(cur RestoreMark, random uint64) RestoreMark {
	return RestoreMark{Seq: cur.Seq + 1, ID: formatRestoreID(random)}
}

// RestoreMark returns the operator restore the state descends from; its
// Seq is 0 if none.
func (r *Read) RestoreMark() RestoreMark {
	return restoreMarkOf(r.txn)
}

func restoreMarkOf(txn *memdb.Txn) RestoreMark {
	seq := metaValue(txn, metaRestoreSeq)
	if seq == 0 {
		return RestoreMark{}
	}
	return RestoreMark{Seq: seq, ID: formatRestoreID(metaValue(txn, metaRestoreID))}
}

// snapshotEntry is one record; exactly one field is set.
type snapshotEntry struct {
	Intent   *IntentRecord  `json:"intent,omitempty"`
	History  *HistoryRecord `json:"history,omitempty"`
	Device   *DeviceRecord  `json:"device,omitempty"`
	Timeline *TimelineEntry `json:"timeline,omitempty"`
	// Tokens, the audit log and revocations came after version 1's
	// first tables; a snapshot without them restores to none.
	Token   *TokenRecord   `json:"token,omitempty"`
	Audit   *AuditRecord   `json:"audit,omitempty"`
	Revoked *RevokedDevice `json:"revoked_device,omitempty"`
	// Rollouts came later still.
	Rollout        *RolloutRecord `json:"rollout,omitempty"`
	Release        *ReleaseRecord `json:"release,omitempty"`
	RolloutEvent   *RolloutEvent  `json:"rollout_event,omitempty"`
	RolloutOutcome *RolloutRecord `json:"rollout_outcome,omitempty"`
	// Reconcile classes came later still.
	Class  *ClassRecord  `json:"class,omitempty"`
	Window *WindowRecord `json:"maintenance_window,omitempty"`
}

// Snapshot is a point-in-time copy of the state, cheap to take (memdb is
// immutable underneath) and written out later, off the apply goroutine.
type Snapshot struct {
	txn          *memdb.Txn
	historyLimit int
}

// Snapshot captures the current state.
func (f *FSM) Snapshot() *Snapshot {
	db, _ := f.current()
	return &Snapshot{txn: db.Txn(false), historyLimit: f.historyLimit}
}

// WriteTo writes the snapshot to w.
func (s *Snapshot) WriteTo(w io.Writer) (int64, error) {
	hdr := snapshotHeader{
		Format: snapshotFormat, Version: 1,
		Index: metaValue(s.txn, metaIndex), Revision: metaValue(s.txn, metaRevision),
		HistoryLimit: s.historyLimit,
	}
	if m := restoreMarkOf(s.txn); m.Seq > 0 {
		hdr.Version, hdr.Restore = 2, &m
	}
	return s.write(w, hdr.withLevel(s.txn))
}

// Index and Revision return the Raft index and the revision of the state
// the snapshot holds.
func (s *Snapshot) Index() uint64    { return metaValue(s.txn, metaIndex) }
func (s *Snapshot) Revision() uint64 { return metaValue(s.txn, metaRevision) }

// OperatorRestore places a backup's state in the cluster it is restored
// into (WriteOperatorRestore).
type OperatorRestore struct {
	// Index is the Raft index the restored state counts as applied up
	// to: the leader's last index when it restores, or the backup's if
	// higher. It is at or above what any replica applied and above every
	// index the backup's records carry (the audit log is keyed by index),
	// and Raft gives the restore the next index, so every entry after the
	// restore applies.
	Index uint64
	// Revision is the restored state's revision, above both the backup's
	// and the revision of the state it replaces: a restore is a change
	// of desired state, and agents must never see the revision go back.
	Revision uint64
	// Mark is the new restore (NewRestoreMark of the replaced state's).
	Mark RestoreMark
}

// WriteOperatorRestore writes the snapshot as the state of an operator
// restore: the records as they are, the header as o says. Restore takes
// it on every replica whose state descends from an earlier restore,
// whatever the index it applied.
func (s *Snapshot) WriteOperatorRestore(w io.Writer, o OperatorRestore) (int64, error) {
	if o.Mark.Seq == 0 {
		return 0, errors.New("write operator restore: no restore mark")
	}
	if _, err := parseRestoreID(o.Mark.ID); err != nil {
		return 0, fmt.Errorf("write operator restore: %w", err)
	}
	mark := o.Mark
	return s.write(w, snapshotHeader{
		Format: snapshotFormat, Version: 2, Index: o.Index, Revision: o.Revision,
		HistoryLimit: s.historyLimit, Restore: &mark,
	}.withLevel(s.txn))
}

func (s *Snapshot) write(w io.Writer, hdr snapshotHeader) (int64, error) {
	cw := &countingWriter{w: bufio.NewWriterSize(w, 64<<10)}
	enc := json.NewEncoder(cw)
	if err := enc.Encode(hdr); err != nil {
		return cw.n, fmt.Errorf("write snapshot header: %w", err)
	}
	for _, table := range snapshotTables {
		if table == tableTimeline {
			if err := writeTimelines(s.txn, enc); err != nil {
				return cw.n, err
			}
			continue
		}
		it, err := s.txn.Get(table, "id")
		if err != nil {
			return cw.n, fmt.Errorf("snapshot %s: %w", table, err)
		}
		for raw := it.Next(); raw != nil; raw = it.Next() {
			var e snapshotEntry
			switch r := raw.(type) {
			case *IntentRecord:
				e.Intent = r
			case *HistoryRecord:
				e.History = r
			case *DeviceRecord:
				e.Device = r
			case *TokenRecord:
				e.Token = r
			case *AuditRecord:
				e.Audit = r
			case *RevokedDevice:
				e.Revoked = r
			case *RolloutRecord:
				if table == tableRollouts {
					e.Rollout = r
				} else {
					e.RolloutOutcome = r
				}
			case *ReleaseRecord:
				e.Release = r
			case *RolloutEvent:
				e.RolloutEvent = r
			case *ClassRecord:
				e.Class = r
			case *WindowRecord:
				e.Window = r
			default:
				// A table in snapshotTables without its entry field
				// would write empty entries that Restore refuses.
				return cw.n, fmt.Errorf("snapshot %s: no snapshot entry for %T", table, raw)
			}
			if err := enc.Encode(&e); err != nil {
				return cw.n, fmt.Errorf("write snapshot %s: %w", table, err)
			}
		}
	}
	if err := cw.w.(*bufio.Writer).Flush(); err != nil {
		return cw.n, fmt.Errorf("flush snapshot: %w", err)
	}
	return cw.n, nil
}

// Hash returns a SHA-256 over the snapshot encoding of the state: equal on
// two replicas exactly when their states are equal.
func (f *FSM) Hash() (string, error) {
	st, err := f.StateHash()
	return st.Hash, err
}

// StateHash is the hash of the whole state with the Raft index and
// revision it reflects, all taken from one snapshot.
type StateHash struct {
	Index    uint64 `json:"index"`
	Revision uint64 `json:"revision"`
	Hash     string `json:"hash"`
	// At is the checkpoint hashed (StateHashAt); 0 for the current state.
	At uint64 `json:"at,omitempty"`
}

// StateHash hashes one snapshot of the state (see Hash) and reports its
// index and revision.
func (f *FSM) StateHash() (StateHash, error) {
	return hashSnapshot(f.Snapshot())
}

// Restore replaces the whole state with the snapshot read from r. On error
// the current state is left as it was.
//
// The state never goes back: a snapshot older than the state is refused
// with ErrOlderSnapshot (see replaces), which the Raft glue reports to
// Raft as success, since the state kept is that snapshot plus committed
// entries. An operator's restore of a backup is newer by its RestoreMark.
func (f *FSM) Restore(r io.Reader) error {
	dec := json.NewDecoder(bufio.NewReaderSize(r, 64<<10))
	var hdr snapshotHeader
	if err := dec.Decode(&hdr); err != nil {
		return fmt.Errorf("read snapshot header: %w", err)
	}
	if hdr.Format != snapshotFormat {
		return fmt.Errorf("restore snapshot: format %q is not a Meteor state snapshot", hdr.Format)
	}
	if v := snapshotVersionFor(f.level); hdr.Version < 1 || hdr.Version > v {
		return fmt.Errorf("restore snapshot: version %d is not supported by this server (it reads 1 to %d); upgrade the server", hdr.Version, v)
	}
	var restoreID uint64
	if m := hdr.Restore; m != nil {
		var err error
		switch restoreID, err = parseRestoreID(m.ID); {
		case hdr.Version < 2:
			return errors.New("restore snapshot: a version 1 header carries no restore mark")
		case m.Seq == 0 || err != nil:
			return fmt.Errorf("restore snapshot: bad restore mark %d %q", m.Seq, m.ID)
		}
	}
	cur := f.Read()
	if err := hdr.replaces(cur.RestoreMark(), cur.Index()); err != nil {
		return err
	}
	db, err := memdb.NewMemDB(schema())
	if err != nil {
		return fmt.Errorf("restore snapshot: %w", err)
	}
	txn := db.Txn(true)
	defer txn.Abort()
	if err := setMeta(txn, metaIndex, hdr.Index); err != nil {
		return err
	}
	if err := setMeta(txn, metaRevision, hdr.Revision); err != nil {
		return err
	}
	if hdr.ActiveLevel > 0 {
		if hdr.ActiveLevel > f.level {
			return fmt.Errorf("restore snapshot: its active feature level %d is above this server's %d; upgrade the server", hdr.ActiveLevel, f.level)
		}
		if err := setMeta(txn, metaActiveLevel, uint64(hdr.ActiveLevel)); err != nil {
			return err
		}
	}
	if m := hdr.Restore; m != nil {
		if err := setMeta(txn, metaRestoreSeq, m.Seq); err != nil {
			return err
		}
		if err := setMeta(txn, metaRestoreID, restoreID); err != nil {
			return err
		}
	}
	var audits uint64
	// The records read share their repeated strings as applied ones do
	// (intern.go); the applies that follow take the table over.
	var intern Interner
	// The records restored, by ID, for the timeline entries that follow
	// them.
	devices := map[string]*DeviceRecord{}
	for n := 0; ; n++ {
		var e snapshotEntry
		err := dec.Decode(&e)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return fmt.Errorf("restore snapshot: entry %d: %w", n, err)
		}
		var table string
		var obj any
		switch {
		case e.Intent != nil:
			table, obj = tableIntents, e.Intent
		case e.History != nil:
			table, obj = tableHistory, e.History
		case e.Device != nil:
			intern.Resources(e.Device.Resources)
			e.Device.Status, e.Device.StatusReason = intern.String(e.Device.Status), intern.String(e.Device.StatusReason)
			e.Device.AgentStatus, e.Device.StatusOwner = intern.String(e.Device.AgentStatus), intern.String(e.Device.StatusOwner)
			devices[e.Device.ID] = e.Device
			table, obj = tableDevices, e.Device
		case e.Timeline != nil:
			e.Timeline.Resources = intern.Map(e.Timeline.Resources)
			e.Timeline.Status, e.Timeline.Reason = intern.String(e.Timeline.Status), intern.String(e.Timeline.Reason)
			e.Timeline.Owner = intern.String(e.Timeline.Owner)
			rec := devices[e.Timeline.Device]
			if rec == nil {
				return fmt.Errorf("restore snapshot: entry %d: timeline entry %d of device %q, which it holds no record of", n, e.Timeline.Seq, e.Timeline.Device)
			}
			// The record is the one inserted above, not yet seen by
			// anyone: its timeline is filled in place.
			rec.Timeline = append(rec.Timeline, e.Timeline)
			continue
		case e.Token != nil:
			table, obj = tableTokens, e.Token
		case e.Audit != nil:
			table, obj = tableAudit, e.Audit
			audits++
		case e.Revoked != nil:
			table, obj = tableRevoked, e.Revoked
		case e.Rollout != nil:
			table, obj = tableRollouts, e.Rollout
		case e.Release != nil:
			table, obj = tableReleases, e.Release
		case e.RolloutEvent != nil:
			table, obj = tableRolloutEvents, e.RolloutEvent
		case e.RolloutOutcome != nil:
			table, obj = tableRolloutOutcomes, e.RolloutOutcome
		case e.Class != nil:
			table, obj = tableClasses, e.Class
		case e.Window != nil:
			table, obj = tableWindows, e.Window
		default:
			return fmt.Errorf("restore snapshot: entry %d: empty or of an unknown kind", n)
		}
		if err := txn.Insert(table, obj); err != nil {
			return fmt.Errorf("restore snapshot: entry %d: %w", n, err)
		}
	}
	for _, rec := range devices {
		rec.Timeline = timelineBySeq(rec.Timeline)
	}
	if err := setMeta(txn, metaAuditCount, audits); err != nil {
		return err
	}
	txn.Commit()

	f.mu.Lock()
	old := f.abandonCh
	f.db, f.abandonCh = db, make(chan struct{})
	f.mu.Unlock()
	close(old)
	f.cps.reset()
	f.events.restored(hdr.Index)
	f.applyMu.Lock()
	f.intern = intern
	f.applyMu.Unlock()
	return nil
}

// replaces returns nil if a snapshot with header h may replace a state
// at index whose restore mark is cur, or an error wrapping
// ErrOlderSnapshot. States are ordered by the operator restore they
// descend from (RestoreMark.Seq), then by index:
//
//   - A leader may send a follower a snapshot older than what the
//     follower has applied (its view of the follower's log was stale).
//     Everything applied is committed, so the state here is that snapshot
//     plus later entries: keep it, rather than go back and serve older
//     state until the log is replayed. The entries Raft replays after the
//     snapshot are already in (applyLocked skips them).
//   - An operator restore (a greater Seq) replaces any state that does
//     not descend from it, whatever its index: that is what it is for.
//   - Of two restores with the same Seq and different IDs, the one a
//     leader sends wins (see RestoreMark.ID).
func (h *snapshotHeader) replaces(cur RestoreMark, index uint64) error {
	var snap RestoreMark
	if h.Restore != nil {
		snap = *h.Restore
	}
	switch {
	case snap.Seq > cur.Seq:
		return nil
	case snap.Seq < cur.Seq:
		return fmt.Errorf("%w: snapshot from before operator restore %d, which the state descends from", ErrOlderSnapshot, cur.Seq)
	case snap.ID != cur.ID:
		return nil
	case h.Index < index:
		return fmt.Errorf("%w: snapshot at index %d, state at %d", ErrOlderSnapshot, h.Index, index)
	}
	return nil
}

type countingWriter struct {
	w io.Writer
	n int64
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

// writeTimelines writes every device's timeline entries, an entry a line,
// by device and then by sequence number: as the rows of a timeline table
// keyed by both were written before timelines moved into the records, so
// that a state's snapshot, and its hash, is the same on every release.
func writeTimelines(txn *memdb.Txn, enc *json.Encoder) error {
	it, err := txn.Get(tableDevices, "id")
	if err != nil {
		return fmt.Errorf("snapshot %s: %w", tableTimeline, err)
	}
	for raw := it.Next(); raw != nil; raw = it.Next() {
		for _, e := range raw.(*DeviceRecord).Timeline {
			if err := enc.Encode(&snapshotEntry{Timeline: e}); err != nil {
				return fmt.Errorf("write snapshot %s: %w", tableTimeline, err)
			}
		}
	}
	return nil
}

// timelineBySeq returns a restored timeline in sequence order, one entry a
// number (the later line of a number), whatever order a snapshot gave.
func timelineBySeq(entries []*TimelineEntry) []*TimelineEntry {
	if len(entries) == 0 {
		return nil
	}
	slices.SortStableFunc(entries, func(a, b *TimelineEntry) int { return cmp.Compare(a.Seq, b.Seq) })
	kept := entries[:0]
	for _, e := range entries {
		if n := len(kept); n > 0 && kept[n-1].Seq == e.Seq {
			kept[n-1] = e
			continue
		}
		kept = append(kept, e)
	}
	return slices.Clip(kept)
}

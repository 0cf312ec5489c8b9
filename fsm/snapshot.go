package fsm

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"github.com/hashicorp/go-memdb"
)

// Snapshot format. A snapshot is a stream of JSON values: a header, then one
// entry per record, tables in a fixed order and records in index order, so
// the same state always gives the same bytes.
const (
	snapshotFormat = "meteor-fsm"
	// SnapshotVersion is the version this code writes. Restore reads every
	// version up to it and refuses newer ones.
	SnapshotVersion = 1
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
	cw := &countingWriter{w: bufio.NewWriterSize(w, 64<<10)}
	enc := json.NewEncoder(cw)
	hdr := snapshotHeader{
		Format: snapshotFormat, Version: SnapshotVersion,
		Index: metaValue(s.txn, metaIndex), Revision: metaValue(s.txn, metaRevision),
		HistoryLimit: s.historyLimit,
	}
	if err := enc.Encode(hdr); err != nil {
		return cw.n, fmt.Errorf("write snapshot header: %w", err)
	}
	for _, table := range snapshotTables {
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
			case *TimelineEntry:
				e.Timeline = r
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
func (f *FSM) Restore(r io.Reader) error {
	dec := json.NewDecoder(bufio.NewReaderSize(r, 64<<10))
	var hdr snapshotHeader
	if err := dec.Decode(&hdr); err != nil {
		return fmt.Errorf("read snapshot header: %w", err)
	}
	if hdr.Format != snapshotFormat {
		return fmt.Errorf("restore snapshot: format %q is not a Meteor state snapshot", hdr.Format)
	}
	if hdr.Version < 1 || hdr.Version > SnapshotVersion {
		return fmt.Errorf("restore snapshot: version %d is not supported by this server (it reads 1 to %d); upgrade the server", hdr.Version, SnapshotVersion)
	}
	if cur := f.Read().Index(); hdr.Index < cur {
		// A leader may send a follower a snapshot older than what the
		// follower has applied (its view of the follower's log was stale).
		// Everything applied is committed, so the state here is that
		// snapshot plus later entries: keep it, rather than go back and
		// serve older state until the log is replayed. The entries Raft
		// replays after the snapshot are already in (applyLocked skips
		// them).
		return fmt.Errorf("%w: snapshot at index %d, state at %d", ErrOlderSnapshot, hdr.Index, cur)
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
	var audits uint64
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
			table, obj = tableDevices, e.Device
		case e.Timeline != nil:
			table, obj = tableTimeline, e.Timeline
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

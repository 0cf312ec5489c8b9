package fsm

import (
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-memdb"
)

// Checkpoints let two replicas compare their states at the same Raft index
// although neither stands still: every replica keeps the state as of each
// multiple of CheckpointInterval among its recent indexes, and hashes one
// only when asked (StateHashAt). Keeping one costs no copy (memdb is
// immutable underneath; a checkpoint pins the records changed since).
//
// The state as of checkpoint c is the state once every entry of index <= c
// is applied. Raft hands the FSM commands only, so it is the state at the
// moment the first command of index > c arrives, provided the state's
// index is then <= c: that is when it is taken. Replicas that applied the
// same log hold the same state at every checkpoint they both keep; a
// replica restored from a snapshot newer than c has no checkpoint c.
//
// A checkpoint pins the version its state holds of every record changed
// since, until it is dropped: what checkpoints cost is the versions they
// pin, one per checkpoint for a record that changes all the time (a device
// whose status an owner commits at every change). So the window of 256
// indexes, enough for a follower a little behind, is kept as four
// checkpoints 64 apart rather than sixteen 16 apart: at 10,000 devices
// going through changes, 140 MB less heap after twelve changes
// (docs/performance.md, "What a device's record costs a server").
// Replicas of releases that took them 16 apart share every one of these.
const (
	CheckpointInterval = 64
	// checkpointsKept is how many recent checkpoints a replica keeps.
	checkpointsKept = 4
)

// ErrNoCheckpoint says a replica does not keep the checkpoint asked for.
var ErrNoCheckpoint = errors.New("no such checkpoint")

type checkpoint struct {
	at  uint64
	txn *memdb.Txn

	once sync.Once
	hash StateHash
	err  error
}

// checkpoints holds an FSM's recent checkpoints, oldest first.
type checkpoints struct {
	mu   sync.Mutex // guards list
	list []*checkpoint
	// hashCost is how long the last hash of a checkpoint took, in
	// nanoseconds (HashCost).
	hashCost atomic.Int64
}

// take records checkpoint c from txn if the entry of index next, about to
// be applied, is the first past c; settle first brings txn to the state
// the entries before next leave (FSM.settle). It runs on the apply
// goroutine.
func (cs *checkpoints) take(txn *memdb.Txn, next uint64, settle func(*memdb.Txn) error) {
	if next < 2 {
		return
	}
	c := (next - 1) / CheckpointInterval * CheckpointInterval
	if c == 0 {
		return
	}
	cs.mu.Lock()
	defer cs.mu.Unlock()
	if n := len(cs.list); n > 0 && cs.list[n-1].at >= c {
		return
	}
	if metaValue(txn, metaIndex) > c {
		// The state has passed c already (it was restored past it).
		return
	}
	// A batch defers some writes to its end (the audit log's trim, the
	// meta values): the snapshot must hold them.
	if err := settle(txn); err != nil {
		panic(fmt.Sprintf("fsm: checkpoint %d: %v", c, err))
	}
	cs.list = append(cs.list, &checkpoint{at: c, txn: txn.Snapshot()})
	if len(cs.list) > checkpointsKept {
		cs.list = slices.Delete(cs.list, 0, len(cs.list)-checkpointsKept)
	}
}

// reset forgets every checkpoint: Restore replaced the state.
func (cs *checkpoints) reset() {
	cs.mu.Lock()
	cs.list = nil
	cs.mu.Unlock()
}

// Checkpoints returns the indexes of the checkpoints this replica keeps,
// in ascending order.
func (f *FSM) Checkpoints() []uint64 {
	f.cps.mu.Lock()
	defer f.cps.mu.Unlock()
	out := make([]uint64, len(f.cps.list))
	for i, c := range f.cps.list {
		out[i] = c.at
	}
	return out
}

// StateHashAt returns the hash of the state as of checkpoint at (see
// Checkpoints), hashing it the first time it is asked for. Its Index is
// the index of the last command at or before at.
func (f *FSM) StateHashAt(at uint64) (StateHash, error) {
	f.cps.mu.Lock()
	i, found := slices.BinarySearchFunc(f.cps.list, at, func(c *checkpoint, at uint64) int { return cmp.Compare(c.at, at) })
	var c *checkpoint
	if found {
		c = f.cps.list[i]
	}
	f.cps.mu.Unlock()
	if c == nil {
		return StateHash{}, fmt.Errorf("%w at index %d: this replica keeps %v", ErrNoCheckpoint, at, f.Checkpoints())
	}
	c.once.Do(func() {
		start := time.Now()
		c.hash, c.err = hashSnapshot(&Snapshot{txn: c.txn, historyLimit: f.historyLimit})
		f.cps.hashCost.Store(int64(time.Since(start)))
	})
	if c.err != nil {
		return StateHash{}, c.err
	}
	h := c.hash
	h.At = at
	return h, nil
}

// HashCost is how long this replica's last hash of its state at a
// checkpoint took (StateHashAt), on the wall clock; 0 before the first.
// The hash encodes the whole state, so it grows with it: about 2 s for
// 10,000 intents with 16 revisions each on a busy 2-core host.
func (f *FSM) HashCost() time.Duration { return time.Duration(f.cps.hashCost.Load()) }

func hashSnapshot(snap *Snapshot) (StateHash, error) {
	h := sha256.New()
	if _, err := snap.WriteTo(h); err != nil {
		return StateHash{}, err
	}
	return StateHash{Index: metaValue(snap.txn, metaIndex), Revision: metaValue(snap.txn, metaRevision), Hash: hex.EncodeToString(h.Sum(nil))}, nil
}

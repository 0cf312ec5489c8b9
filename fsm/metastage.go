package fsm

import (
	"fmt"
	"slices"
	"sync"

	"github.com/hashicorp/go-memdb"
)

// The apply reads and writes the meta table several times a command: the
// index, the revision, the audit count. go-memdb resets a table index's
// set of nodes already copied in a write transaction whenever that index
// is read, so each of those writes, coming after a read, copied the meta
// table's path again, with a new cache of copied nodes: about a fifth of
// what applying an intent allocated (BenchmarkApplyPutIntent). So a batch
// of commands stages the meta values it reads and writes (metaStage) and
// writes the ones it changed to the table once, before its transaction
// commits or is snapshotted (a checkpoint).
//
// The stage is found from the transaction, since the meta values are read
// through it everywhere (metaValue, setMeta): stages maps the apply's
// write transaction to its stage while the batch applies. Other
// transactions, read-only or the restore's, read and write the table.

// metaStage is the meta values of one write transaction of the apply:
// those read once and those written since the last flush.
type metaStage struct {
	vals  map[string]uint64
	dirty []string
}

var stages sync.Map // *memdb.Txn → *metaStage

// stageMeta stages txn's meta values until the returned function runs;
// it must run before txn ends (flushMeta writes the staged values).
func stageMeta(txn *memdb.Txn) (unstage func()) {
	stages.Store(txn, &metaStage{vals: make(map[string]uint64, 8)})
	return func() { stages.Delete(txn) }
}

func stageOf(txn *memdb.Txn) *metaStage {
	if st, ok := stages.Load(txn); ok {
		return st.(*metaStage)
	}
	return nil
}

// flushMeta writes txn's staged meta values that changed to the table.
func flushMeta(txn *memdb.Txn) error {
	st := stageOf(txn)
	if st == nil {
		return nil
	}
	slices.Sort(st.dirty)
	for _, key := range slices.Compact(st.dirty) {
		if err := writeMeta(txn, key, st.vals[key]); err != nil {
			return err
		}
	}
	st.dirty = st.dirty[:0]
	return nil
}

func metaValue(txn *memdb.Txn, key string) uint64 {
	st := stageOf(txn)
	if st == nil {
		return readMeta(txn, key)
	}
	v, ok := st.vals[key]
	if !ok {
		v = readMeta(txn, key)
		st.vals[key] = v
	}
	return v
}

func setMeta(txn *memdb.Txn, key string, v uint64) error {
	if st := stageOf(txn); st != nil {
		st.vals[key] = v
		st.dirty = append(st.dirty, key)
		return nil
	}
	return writeMeta(txn, key, v)
}

func readMeta(txn *memdb.Txn, key string) uint64 {
	raw, err := txn.First(tableMeta, "id", key)
	if err != nil {
		panic(fmt.Sprintf("fsm: read meta %q: %v", key, err))
	}
	if raw == nil {
		return 0
	}
	return raw.(*metaRecord).Value
}

func writeMeta(txn *memdb.Txn, key string, v uint64) error {
	if err := txn.Insert(tableMeta, &metaRecord{Key: key, Value: v}); err != nil {
		return fmt.Errorf("write meta %q: %w", key, err)
	}
	return nil
}

package fsm

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"testing"
)

// logSpan is the last index of checkpointLog: six checkpoints and a bit.
const logSpan = 100 * CheckpointInterval / 16

// checkpointLog is a log of commands at indexes 1..logSpan with gaps where
// Raft had configuration entries and no-ops the FSM never sees, at every
// seventh index and at every checkpoint index but the second.
func checkpointLog(t *testing.T) (indexes []uint64, data [][]byte) {
	t.Helper()
	for i := uint64(1); i <= logSpan; i++ {
		if i%CheckpointInterval == 0 && i != 2*CheckpointInterval || i%7 == 0 {
			continue
		}
		indexes = append(indexes, i)
		data = append(data, mustEncode(t, PutIntentType, &PutIntentRequest{Intent: testIntent(fmt.Sprintf("i%d", i%5), fmt.Sprint(i)), Time: int64(i)}))
	}
	return indexes, data
}

// lastCheckpoints returns the checkpoints a replica that applied
// checkpointLog keeps, of those after index from: the newest
// checkpointsKept multiples of CheckpointInterval up to logSpan.
func lastCheckpoints(from uint64) []uint64 {
	var out []uint64
	for c := uint64(CheckpointInterval); c <= logSpan; c += CheckpointInterval {
		if c > from {
			out = append(out, c)
		}
	}
	return out[max(0, len(out)-checkpointsKept):]
}

// TestCheckpointsAgreeAcrossBatching: replicas that apply the same log,
// one entry at a time or in batches of any size, keep the same
// checkpoints with the same hashes, and each is the hash of the state of
// a replica that applied exactly the entries up to it. With small limits
// too, since a batch trims the audit log at its end (FSM.settle).
func TestCheckpointsAgreeAcrossBatching(t *testing.T) {
	for _, cfg := range []Config{{}, {HistoryLimit: 3, AuditLimit: 4}} {
		t.Run(fmt.Sprintf("history-%d-audit-%d", cfg.HistoryLimit, cfg.AuditLimit), func(t *testing.T) {
			checkpointsAgreeAcrossBatching(t, cfg)
		})
	}
}

func checkpointsAgreeAcrossBatching(t *testing.T, cfg Config) {
	newTestFSM := func(t *testing.T, _ int) *FSM { return newTestFSMWith(t, cfg) }
	indexes, data := checkpointLog(t)
	one := newTestFSM(t, 0)
	for i := range indexes {
		one.Apply(indexes[i], data[i])
	}
	batched := newTestFSM(t, 0)
	for lo := 0; lo < len(indexes); lo += 9 {
		hi := min(lo+9, len(indexes))
		batched.ApplyBatch(indexes[lo:hi], data[lo:hi])
	}
	want := lastCheckpoints(0)
	if len(want) < 2 {
		t.Fatalf("checkpoints %v: the log spans too few", want)
	}
	if got := one.Checkpoints(); !slices.Equal(got, want) {
		t.Fatalf("checkpoints %v, want %v", got, want)
	}
	if got := batched.Checkpoints(); !slices.Equal(got, want) {
		t.Fatalf("batched: checkpoints %v, want %v", got, want)
	}
	for _, at := range want {
		a, err := one.StateHashAt(at)
		if err != nil {
			t.Fatal(err)
		}
		b, err := batched.StateHashAt(at)
		if err != nil {
			t.Fatal(err)
		}
		upTo := newTestFSM(t, 0)
		for i := range indexes {
			if indexes[i] <= at {
				upTo.Apply(indexes[i], data[i])
			}
		}
		ref, err := upTo.StateHash()
		if err != nil {
			t.Fatal(err)
		}
		ref.At = at
		if a != ref || b != ref {
			t.Fatalf("checkpoint %d: one by one %+v, batched %+v, state up to it %+v", at, a, b, ref)
		}
	}
	if _, err := one.StateHashAt(40); !errors.Is(err, ErrNoCheckpoint) {
		t.Fatalf("hash at 40: %v, want ErrNoCheckpoint", err)
	}
}

// TestCheckpointsShowAnInjectedEntry: a replica that applied one command
// the others did not (taking the index of the next real entry, which it
// then skips) differs at every later checkpoint and at none before.
func TestCheckpointsShowAnInjectedEntry(t *testing.T) {
	indexes, data := checkpointLog(t)
	good, bad := newTestFSM(t, 0), newTestFSM(t, 0)
	kept := lastCheckpoints(0)
	// An index of the log between the oldest two checkpoints kept.
	i, _ := slices.BinarySearch(indexes, kept[0]+CheckpointInterval/2)
	evil := indexes[i]
	for i := range indexes {
		good.Apply(indexes[i], data[i])
		if indexes[i] == evil {
			bad.Apply(evil, mustEncode(t, PutIntentType, &PutIntentRequest{Intent: testIntent("evil", "/bin/sh"), Time: int64(evil)}))
		}
		bad.Apply(indexes[i], data[i])
	}
	if got := good.Checkpoints(); !slices.Equal(got, kept) {
		t.Fatalf("checkpoints %v, want %v", got, kept)
	}
	for _, at := range good.Checkpoints() {
		g, _ := good.StateHashAt(at)
		b, err := bad.StateHashAt(at)
		if err != nil {
			t.Fatal(err)
		}
		if (at < evil) != (g == b) {
			t.Fatalf("checkpoint %d: good %s, bad %s", at, g.Hash, b.Hash)
		}
	}
}

// TestCheckpointsAfterRestore: a replica restored from a snapshot keeps no
// checkpoint older than the snapshot, and agrees on the later ones; only
// the most recent checkpoints are kept.
func TestCheckpointsAfterRestore(t *testing.T) {
	indexes, data := checkpointLog(t)
	leader, follower := newTestFSM(t, 0), newTestFSM(t, 0)
	// The snapshot is taken between the third and fourth checkpoints.
	at := uint64(3*CheckpointInterval + 7*CheckpointInterval/16)
	var snap bytes.Buffer
	for i := range indexes {
		leader.Apply(indexes[i], data[i])
		if indexes[i] == at {
			if _, err := leader.Snapshot().WriteTo(&snap); err != nil {
				t.Fatal(err)
			}
		}
		if indexes[i] < CheckpointInterval+CheckpointInterval/4 {
			follower.Apply(indexes[i], data[i])
		}
	}
	if err := follower.Restore(&snap); err != nil {
		t.Fatal(err)
	}
	for i := range indexes {
		follower.Apply(indexes[i], data[i]) // the entries up to the snapshot's are skipped
	}
	if got, want := follower.Checkpoints(), lastCheckpoints(at); !slices.Equal(got, want) || len(want) == 0 {
		t.Fatalf("restored follower keeps %v, want %v", got, want)
	}
	for _, at := range follower.Checkpoints() {
		l, _ := leader.StateHashAt(at)
		f, _ := follower.StateHashAt(at)
		if l != f {
			t.Fatalf("checkpoint %d: leader %+v, follower %+v", at, l, f)
		}
	}

	long := newTestFSM(t, 0)
	for i := uint64(1); i <= CheckpointInterval*(checkpointsKept+5); i++ {
		long.Apply(i, data[0])
	}
	if got := long.Checkpoints(); len(got) != checkpointsKept || got[len(got)-1] != CheckpointInterval*(checkpointsKept+4) {
		t.Fatalf("after %d checkpoints: keeps %v", checkpointsKept+5, got)
	}
}

// HashCost is what the last hash of a checkpoint took, and a hash already
// made is not made again.
func TestHashCostIsMeasured(t *testing.T) {
	f := newTestFSM(t, 0)
	if got := f.HashCost(); got != 0 {
		t.Fatalf("HashCost before any hash: %v", got)
	}
	indexes, data := checkpointLog(t)
	f.ApplyBatch(indexes, data)
	at := lastCheckpoints(0)[0]
	if _, err := f.StateHashAt(at); err != nil {
		t.Fatal(err)
	}
	first := f.HashCost()
	if first <= 0 {
		t.Fatalf("HashCost after a hash: %v", first)
	}
	f.cps.hashCost.Store(-1)
	if _, err := f.StateHashAt(at); err != nil {
		t.Fatal(err)
	}
	if got := f.HashCost(); got != -1 {
		t.Fatalf("HashCost changed to %v when the checkpoint's hash was at hand", got)
	}
}

package cluster

import (
	"bytes"
	"sync/atomic"
	"testing"

	"github.com/hashicorp/raft"
)

// countingStore counts the reads that reach the store.
type countingStore struct {
	raft.LogStore
	reads atomic.Int64
}

func (s *countingStore) GetLog(idx uint64, l *raft.Log) error {
	s.reads.Add(1)
	return s.LogStore.GetLog(idx, l)
}

// TestLogCacheBoundsItsBytes: the cache keeps the newest entries whose
// commands fit its bytes, answers reads of them without the store, and
// reads every older entry from the store, intact.
func TestLogCacheBoundsItsBytes(t *testing.T) {
	store := &countingStore{LogStore: raft.NewInmemStore()}
	c, err := newLogCache(store, 8, 3000)
	if err != nil {
		t.Fatal(err)
	}
	entry := func(i uint64, size int) *raft.Log {
		return &raft.Log{Index: i, Term: 1, Data: bytes.Repeat([]byte{byte(i)}, size)}
	}
	// Ten entries of 1,000 bytes, in two batches: the newest three fit.
	var batch []*raft.Log
	for i := uint64(1); i <= 10; i++ {
		batch = append(batch, entry(i, 1000))
		if i == 4 || i == 10 {
			if err := c.StoreLogs(batch); err != nil {
				t.Fatal(err)
			}
			batch = nil
		}
	}
	read := func(i uint64) (fromStore bool) {
		t.Helper()
		before := store.reads.Load()
		var l raft.Log
		if err := c.GetLog(i, &l); err != nil {
			t.Fatalf("entry %d: %v", i, err)
		}
		if l.Index != i || len(l.Data) == 0 || l.Data[0] != byte(i) {
			t.Fatalf("entry %d read back as %d with %d bytes", i, l.Index, len(l.Data))
		}
		return store.reads.Load() > before
	}
	for i := uint64(1); i <= 10; i++ {
		if got, want := read(i), i <= 7; got != want {
			t.Errorf("entry %d from the store: %v, want %v", i, got, want)
		}
	}
	if c.bytes > 3000 {
		t.Errorf("%d bytes cached, bound 3000", c.bytes)
	}

	// An entry larger than the bound stays alone, the newest.
	if err := c.StoreLog(entry(11, 5000)); err != nil {
		t.Fatal(err)
	}
	if !read(10) {
		t.Error("entry 10 kept beside a newer entry larger than the bound")
	}
	if read(11) {
		t.Error("the newest entry, larger than the bound, was not kept")
	}
	if c.bytes != 5000 {
		t.Errorf("%d bytes cached, want the newest entry's 5000", c.bytes)
	}

	// The count bounds it too: small entries past the ring's size.
	for i := uint64(12); i <= 30; i++ {
		if err := c.StoreLog(entry(i, 10)); err != nil {
			t.Fatal(err)
		}
	}
	for i := uint64(23); i <= 30; i++ {
		if read(i) {
			t.Errorf("entry %d of the newest 8 read from the store", i)
		}
	}
	if !read(22) || c.bytes != 80 {
		t.Errorf("entry 22 beyond the 8 newest, or %d bytes cached (want 80)", c.bytes)
	}

	// Deleting empties it; later entries are cached again.
	if err := c.DeleteRange(25, 30); err != nil {
		t.Fatal(err)
	}
	if c.bytes != 0 {
		t.Errorf("%d bytes cached after a delete", c.bytes)
	}
	if err := c.StoreLogs([]*raft.Log{entry(25, 100), entry(26, 100)}); err != nil {
		t.Fatal(err)
	}
	if read(25) || read(26) || c.bytes != 200 {
		t.Errorf("entries stored after a delete: not cached, or %d bytes (want 200)", c.bytes)
	}
}

package cluster

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
	"go.etcd.io/bbolt"
)

// TestRaftStoreWithoutFreelistSync checks the Raft log store as servers
// open it (raftStoreOptions: bbolt does not write its freelist) against
// what a server's data dir may hold: a store written by a build that
// wrote the freelist, a crash image (the file as it stood between two
// commits, never closed), and a store opened again by a build that writes
// the freelist. Each time the log must hold exactly its entries, take
// more, and pass bbolt's consistency check.
func TestRaftStoreWithoutFreelistSync(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "raft.db")
	plain := func(p string) raftboltdb.Options { return raftboltdb.Options{Path: p} }
	var first, next uint64 = 1, 1
	entry := func(i uint64) []byte { return bytes.Repeat([]byte(fmt.Sprintf("entry %d;", i)), 100) }
	// write stores n entries in batches of 10, compacting as Raft does.
	write := func(s *raftboltdb.BoltStore, n int) {
		t.Helper()
		for range n / 10 {
			logs := make([]*raft.Log, 10)
			for i := range logs {
				logs[i] = &raft.Log{Index: next, Term: 1, Type: raft.LogCommand, Data: entry(next)}
				next++
			}
			if err := s.StoreLogs(logs); err != nil {
				t.Fatal(err)
			}
			if next-first > 3000 {
				if err := s.DeleteRange(first, next-1001); err != nil {
					t.Fatal(err)
				}
				first = next - 1000
			}
		}
	}
	// verify checks the store holds exactly [first, next).
	verify := func(s *raftboltdb.BoltStore, what string) {
		t.Helper()
		lo, err := s.FirstIndex()
		if err != nil {
			t.Fatal(err)
		}
		hi, err := s.LastIndex()
		if err != nil {
			t.Fatal(err)
		}
		if lo != first || hi != next-1 {
			t.Fatalf("%s: log holds %d..%d, want %d..%d", what, lo, hi, first, next-1)
		}
		for i := lo; i <= hi; i++ {
			var l raft.Log
			if err := s.GetLog(i, &l); err != nil {
				t.Fatalf("%s: entry %d: %v", what, i, err)
			}
			if !bytes.Equal(l.Data, entry(i)) {
				t.Fatalf("%s: entry %d holds %.20q…", what, i, l.Data)
			}
		}
	}
	open := func(p string, opts func(string) raftboltdb.Options) *raftboltdb.BoltStore {
		t.Helper()
		s, err := raftboltdb.New(opts(p))
		if err != nil {
			t.Fatalf("open %s: %v", p, err)
		}
		return s
	}
	// check runs bbolt's consistency check on file p.
	check := func(p string) {
		t.Helper()
		db, err := bbolt.Open(p, 0o600, &bbolt.Options{ReadOnly: true})
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		if err := db.View(func(tx *bbolt.Tx) error {
			for err := range tx.Check() {
				return err
			}
			return nil
		}); err != nil {
			t.Fatalf("bbolt check of %s: %v", p, err)
		}
	}

	// closeAndCheck closes s, the store of file p, and checks p.
	closeAndCheck := func(s *raftboltdb.BoltStore, p string) {
		t.Helper()
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		check(p)
	}

	// A store as a build that wrote the freelist left it.
	s := open(path, plain)
	write(s, 5000)
	closeAndCheck(s, path)

	// Opened by this build: what it holds, then more.
	s = open(path, raftStoreOptions)
	verify(s, "written with the freelist, opened without")
	write(s, 5000)
	verify(s, "more written without the freelist")

	// A crash image: the file copied while the store is open, between
	// two commits; the store is never closed on it.
	crash := filepath.Join(dir, "crash.db")
	copyFile(t, path, crash)
	closeAndCheck(s, path)
	check(crash)
	c := open(crash, raftStoreOptions)
	verify(c, "crash image")
	write(c, 2000)
	verify(c, "crash image, written after")
	closeAndCheck(c, crash)

	// Opened again by a build that writes the freelist.
	c = open(crash, plain)
	verify(c, "opened by a build that writes the freelist")
	write(c, 1000)
	verify(c, "written with the freelist again")
	closeAndCheck(c, crash)
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	in, err := os.Open(from)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	out, err := os.Create(to)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(out, in); err != nil {
		t.Fatal(err)
	}
	if err := out.Close(); err != nil {
		t.Fatal(err)
	}
}

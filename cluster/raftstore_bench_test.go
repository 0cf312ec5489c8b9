package cluster

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
)

// BenchmarkRaftStoreLogs measures raft-boltdb's StoreLogs as a server
// calls it: batches of 10 entries, with the log compacted as Raft does
// after each snapshot (everything but the newest TrailingLogs entries
// deleted every SnapshotThreshold entries, the servers' defaults), fsync
// on. Entries of 700 bytes are put-intents of a 512-byte document (the
// intents benchmark); 8 KiB ones are status and session batches of a
// fleet's change. "default" is bbolt as raft-boltdb opens it without
// options; "server" is raftStoreOptions. It reports the process's user
// and system CPU per entry beside the wall clock: fsync waits are most of
// the latter and cost no CPU.
func BenchmarkRaftStoreLogs(b *testing.B) {
	for _, size := range []int{700, 8 << 10} {
		b.Run(fmt.Sprintf("entry=%d/default", size), func(b *testing.B) {
			benchmarkStoreLogs(b, size, func(path string) raftboltdb.Options { return raftboltdb.Options{Path: path} })
		})
		b.Run(fmt.Sprintf("entry=%d/server", size), func(b *testing.B) { benchmarkStoreLogs(b, size, raftStoreOptions) })
	}
}

func benchmarkStoreLogs(b *testing.B, size int, opts func(string) raftboltdb.Options) {
	const batch = 10
	cfg := DefaultConfig()
	trailing, threshold := cfg.TrailingLogs, cfg.SnapshotThreshold
	store, err := raftboltdb.New(opts(filepath.Join(b.TempDir(), "raft.db")))
	if err != nil {
		b.Fatal(err)
	}
	defer store.Close()
	data := make([]byte, size)
	var next, first uint64 = 1, 1
	put := func() {
		logs := make([]*raft.Log, batch)
		for i := range logs {
			logs[i] = &raft.Log{Index: next, Term: 1, Type: raft.LogCommand, Data: data}
			next++
		}
		if err := store.StoreLogs(logs); err != nil {
			b.Fatal(err)
		}
		if next-first > trailing+threshold {
			if err := store.DeleteRange(first, next-trailing-1); err != nil {
				b.Fatal(err)
			}
			first = next - trailing
		}
	}
	// A log in its steady state: compacted at least once.
	for next < 2*(trailing+threshold) {
		put()
	}
	b.ReportAllocs()
	u0, s0 := processCPU(b)
	w0 := writtenBytes(b)
	b.ResetTimer()
	for range b.N {
		put()
	}
	b.StopTimer()
	entries := float64(b.N * batch)
	u1, s1 := processCPU(b)
	b.ReportMetric(float64(writtenBytes(b)-w0)/entries, "written-B/entry")
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/entries, "ns/entry")
	b.ReportMetric(float64((u1-u0).Nanoseconds())/entries, "user-ns/entry")
	b.ReportMetric(float64((s1-s0).Nanoseconds())/entries, "sys-ns/entry")
	b.ReportMetric(float64(store.Stats().FreePageN), "free-pages")
}

// writtenBytes is what this process has handed to write system calls
// (wchar in /proc/self/io): the pages bbolt writes at each commit.
func writtenBytes(b *testing.B) int64 {
	data, err := os.ReadFile("/proc/self/io")
	if err != nil {
		b.Skipf("no /proc/self/io: %v", err)
	}
	for line := range strings.Lines(string(data)) {
		if v, ok := strings.CutPrefix(line, "wchar: "); ok {
			n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			if err != nil {
				b.Fatal(err)
			}
			return n
		}
	}
	b.Fatalf("no wchar in /proc/self/io")
	return 0
}

// processCPU is the user and system CPU time this process has used.
func processCPU(b *testing.B) (user, sys time.Duration) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano()), time.Duration(ru.Stime.Nano())
}

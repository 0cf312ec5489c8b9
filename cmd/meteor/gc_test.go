package main

import (
	"context"
	"fmt"
	"math"
	"os"
	"os/exec"
	"runtime"
	"runtime/debug"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/hashicorp/go-hclog"
)

func TestParseSize(t *testing.T) {
	for in, want := range map[string]int64{"512MiB": 512 << 20, "2GiB": 2 << 30, "1000": 1000, "64KiB": 64 << 10, "3B": 3} {
		if got, err := parseSize(in); err != nil || got != want {
			t.Errorf("parseSize(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "0", "-1GiB", "2GB", "lots", "99999999999TiB"} {
		if _, err := parseSize(in); err == nil {
			t.Errorf("parseSize(%q): no error", in)
		}
	}
}

// TestGCFlags: the server's collector settings take effect unless GOGC
// and GOMEMLIMIT say otherwise, and auto gives a limit below the
// machine's memory.
func TestGCFlags(t *testing.T) {
	oldPercent, oldLimit := debug.SetGCPercent(100), debug.SetMemoryLimit(-1)
	t.Cleanup(func() { debug.SetGCPercent(oldPercent); debug.SetMemoryLimit(oldLimit) })
	t.Setenv("GOGC", "")
	t.Setenv("GOMEMLIMIT", "")

	g := gcFlags{percent: "400", limit: "auto"}
	p, l, tune, warn, err := g.apply()
	total, merr := memoryAvailable()
	if err != nil || warn != nil || merr != nil || p != 400 || tune || l <= 0 || uint64(l) >= total {
		t.Fatalf("auto: GOGC %d (tune %v), limit %d of %d (%v, %v, %v)", p, tune, l, total, err, warn, merr)
	}
	g = gcFlags{percent: "200", limit: "256MiB"}
	if p, l, _, _, err := g.apply(); err != nil || p != 200 || l != 256<<20 {
		t.Fatalf("256MiB: GOGC %d, limit %d, %v", p, l, err)
	}
	debug.SetMemoryLimit(math.MaxInt64)
	g = gcFlags{percent: "300", limit: "off"}
	if _, l, _, _, err := g.apply(); err != nil || l != math.MaxInt64 {
		t.Fatalf("off: limit %d, %v", l, err)
	}
	if p, _, tune, _, err := (&gcFlags{percent: "auto", limit: "off"}).apply(); err != nil || !tune || p < gcPercentMin || p > gcPercentMax {
		t.Fatalf("--gc-percent auto: GOGC %d, tune %v, %v", p, tune, err)
	}
	for _, bad := range []string{"lots", "-2", "4OO"} {
		if _, _, _, _, err := (&gcFlags{percent: bad, limit: "off"}).apply(); err == nil {
			t.Fatalf("--gc-percent %q was accepted", bad)
		}
	}
	debug.SetGCPercent(300)
	t.Setenv("GOGC", "50")
	if p, _, tune, _, _ := (&gcFlags{percent: "400", limit: "off"}).apply(); p != 300 || tune {
		// GOGC is read by the runtime at start; the flag must not
		// override the variable, so the setting before (300) stays.
		t.Fatalf("with GOGC set, the flag changed GOGC to %d (tune %v)", p, tune)
	}
	if _, _, _, _, err := (&gcFlags{percent: "400", limit: "lots"}).apply(); err == nil {
		t.Fatal("a bad --memory-limit was accepted")
	}
}

// TestGCPercentFor: under --gc-percent auto, GOGC allows gcHeadroom of
// garbage within [100, 400] % of the live heap, and a larger heap
// allocated slowly only the garbage that keeps collecting at gcBudget of
// a CPU, down to gcHeadroom or gcPercentMin.
func TestGCPercentFor(t *testing.T) {
	const ns = 1e-9 // a collection's cost: CPU seconds per live byte
	const none = math.MaxInt64
	for _, c := range []struct {
		live       uint64
		rate, cost float64
		limit      int64
		want       int
	}{
		{0, 0, 0, none, 400},
		{12 << 20, 0, 0, none, 400},                // gcHeadroom is 400 % of a small heap
		{24 << 20, 0, 0, none, 200},                // 48 MiB of 24
		{96 << 20, 0, 0, none, 50},                 // idle: down to gcHeadroom
		{620 << 20, 0, 0, none, 25},                // idle: down to the floor
		{620 << 20, 1 << 20, ns, none, 25},         // 1 MiB/s: 21 MiB of garbage keeps 5 %; the floor wins
		{620 << 20, 20 << 20, ns, none, 41},        // 20 MiB/s: 262 MiB of garbage keeps 5 %
		{620 << 20, 100 << 20, ns, none, 100},      // 100 MiB/s would want 209 %: no more than the live heap
		{24 << 20, 100 << 20, ns, none, 200},       // a small heap: gcHeadroom
		{620 << 20, 100 << 20, 0.1 * ns, none, 25}, // a cheaper collection needs less garbage
		{620 << 20, 100 << 20, ns, 0, 100},         // a limit of 0 is none
		// With a memory limit, up to a thirty-second of it while allocating fast.
		{620 << 20, 100 << 20, ns, 32 << 30, 165},  // 1 GiB of 620 MiB; 209 % wanted
		{620 << 20, 100 << 20, ns, 16 << 30, 100},  // a thirty-second is less than the live heap
		{170 << 20, 300 << 20, ns, 18 << 30, 338},  // a write load: 629 % wanted, 338 % allowed
		{170 << 20, 30 << 20, ns, 18 << 30, 62},    // a slower one needs less
		{100 << 20, 300 << 20, ns, 18 << 30, 400},  // 576 MiB of 100: 400 % at most
		{170 << 20, 0, 0, 18 << 30, 28},            // idle: gcHeadroom, as without a limit
		{4200 << 20, 300 << 20, ns, 18 << 30, 100}, // a heap above a thirty-second of the limit: the live heap
	} {
		if got := gcPercentFor(c.live, c.rate, c.cost, c.limit); got != c.want {
			t.Errorf("live %d MiB, %.0f MiB/s, %.1f ns a byte, limit %d MiB: GOGC %d, want %d", c.live>>20, c.rate/(1<<20), c.cost/ns, c.limit>>20, got, c.want)
		}
	}
}

// TestGCTunerFollowsTheAllocationRate: the tuner lowers GOGC to its floor
// while a server with a large heap is idle, and collects once if the
// runtime does not; it raises GOGC within one interval (to what it
// allowed before the allocation rate counted) when the server starts
// allocating fast, keeps it up through a short pause, and lowers it
// again once the rate has decayed. It measures the collection's cost
// from the runtime's figures.
func TestGCTunerFollowsTheAllocationRate(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var mu sync.Mutex
		cur := gcSample{live: 600 << 20}
		percent, sets, collects := 100, 0, 0
		markCost := 1e-9 // CPU seconds a collection takes per live byte
		tuner := &gcTuner{
			read: func() gcSample { mu.Lock(); defer mu.Unlock(); return cur },
			set: func(p int) int {
				mu.Lock()
				defer mu.Unlock()
				old := percent
				percent, sets = p, sets+1
				return old
			},
			// Like runtime.GC, a collection the tuner runs is one the
			// runtime counts.
			collect: func() {
				mu.Lock()
				defer mu.Unlock()
				collects++
				cur.cycles++
				cur.markCPU += markCost * float64(cur.live)
			},
			cur:    100,
			logger: hclog.NewNullLogger(),
		}
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		go tuner.run(ctx)
		synctest.Wait()
		// tick passes one interval in which the process allocated n
		// bytes and, if collect, finished one collection that cost
		// markCost a byte of its live heap.
		tick := func(n uint64, collect bool) (int, int) {
			mu.Lock()
			cur.allocs += n
			if collect {
				cur.cycles++
				cur.markCPU += markCost * float64(cur.live)
			}
			mu.Unlock()
			time.Sleep(gcTuneInterval)
			synctest.Wait()
			mu.Lock()
			defer mu.Unlock()
			return percent, sets
		}
		// second passes a second allocating at rate bytes a second.
		second := func(rate uint64, collect bool) (p, n int) {
			ticks := uint64(time.Second / gcTuneInterval)
			for i := range ticks {
				p, n = tick(rate/ticks, collect && i == 0)
			}
			return p, n
		}
		if p, _ := second(1<<20, true); p != gcPercentMin {
			t.Fatalf("idle: GOGC %d, want the floor %d", p, gcPercentMin)
		}
		// collected counts the collections the tuner ran.
		collected := func() int { mu.Lock(); defer mu.Unlock(); return collects }
		// The lower GOGC shrinks the heap from the next collection on:
		// with none from the runtime, the tuner runs one, once, about
		// gcCollectAfter after lowering it.
		for range 8 {
			second(1<<20, false)
		}
		if n := collected(); n != 0 {
			t.Fatalf("9 s after lowering GOGC: %d collections, want none yet", n)
		}
		for range 20 {
			second(1<<20, false)
		}
		if n := collected(); n != 1 {
			t.Fatalf("29 s after lowering GOGC: %d collections, want 1", n)
		}
		if p, _ := tick(200<<20/uint64(time.Second/gcTuneInterval), true); p != 100 {
			t.Fatalf("one interval at 200 MiB/s, 1 ns a byte: GOGC %d, want 100", p)
		}
		second(200<<20, false)
		// The rate it steers by falls by a fifth a second: 102 MiB/s
		// after three, which still wants more than 100.
		_, n := second(0, false)
		second(0, false)
		if p, n2 := second(0, false); p != 100 || n2 != n {
			t.Fatalf("three seconds into a pause: GOGC %d after %d more sets, want 100 kept", p, n2-n)
		}
		var p int
		for range 30 {
			p, _ = second(1<<20, false)
		}
		if p != gcPercentMin {
			t.Fatalf("idle for 30 s after the burst: GOGC %d, want %d", p, gcPercentMin)
		}
		if n := collected(); n != 2 {
			t.Fatalf("idle for 30 s after the burst: the tuner ran %d collections in all, want 2", n)
		}
		// Lowered while the runtime collects on its own: no collection
		// of the tuner's.
		second(200<<20, true)
		for range 30 {
			second(1<<20, true)
		}
		if n := collected(); n != 2 {
			t.Fatalf("lowered while the runtime collected: the tuner ran %d collections in all, want 2", n)
		}
		// A heap that breathes does not make GOGC flap: 45 MiB/s wants
		// 19 % more garbage than 38 MiB/s, 40 MiB/s only 5 %.
		for range 30 {
			p, _ = second(38<<20, false)
		}
		_, n = second(38<<20, false)
		if p2, n2 := second(40<<20, false); p2 != p || n2 != n {
			t.Fatalf("38 then 40 MiB/s: GOGC %d then %d after %d sets, want it left", p, p2, n2-n)
		}
		if p2, _ := second(45<<20, false); p2 <= p {
			t.Fatalf("38 then 45 MiB/s: GOGC %d then %d, want it raised", p, p2)
		}
		// Cheaper collections need less garbage: at a quarter of the
		// cost, 100 MiB/s wants 52 %.
		mu.Lock()
		markCost = 0.25e-9
		mu.Unlock()
		for range 20 {
			p, _ = second(100<<20, true)
		}
		if p < 47 || p > 57 {
			t.Fatalf("100 MiB/s at 0.25 ns a byte: GOGC %d, want about 52", p)
		}
	})
}

// TestGCSamplerReadsTheRuntime: every figure the tuner steers by is one
// this Go has (a misspelt name would read as 0 and leave GOGC at its
// floor or ceiling).
func TestGCSamplerReadsTheRuntime(t *testing.T) {
	read := gcSampler()
	before := read()
	sink := make([][]byte, 0, 64)
	for range 64 {
		sink = append(sink, make([]byte, 64<<10))
	}
	runtime.GC()
	after := read()
	runtime.KeepAlive(sink)
	if after.allocs < before.allocs+64*64<<10 {
		t.Errorf("allocated bytes went from %d to %d after allocating 4 MiB", before.allocs, after.allocs)
	}
	if after.cycles <= before.cycles {
		t.Errorf("collections went from %d to %d across runtime.GC", before.cycles, after.cycles)
	}
	if after.live < 4<<20 {
		t.Errorf("live heap %d with 4 MiB kept", after.live)
	}
	if after.markCPU <= 0 {
		t.Errorf("collector CPU %v after a collection", after.markCPU)
	}
}

// TestServerStartsWithoutProcMeminfo: under systemd's ProcSubset=pid
// (deploy/systemd/meteor-server.service) /proc has no meminfo; the
// default --memory-limit auto must not keep the server from starting. The
// test runs the memory lookup in such a /proc, in user and mount
// namespaces of its own, and skips where those are not allowed.
func TestServerStartsWithoutProcMeminfo(t *testing.T) {
	if os.Getenv("METEOR_TEST_SUBSET_PID") == "1" {
		if _, err := os.Stat("/proc/meminfo"); err == nil {
			fmt.Println("meminfo visible")
		}
		total, err := memoryAvailable()
		fmt.Printf("memory %d %v\n", total, err)
		return
	}
	if _, err := exec.LookPath("unshare"); err != nil {
		t.Skip("unshare (util-linux) is not installed: cannot mount a /proc with subset=pid")
	}
	script := `mount -t proc -o subset=pid proc /proc && exec "$0" -test.run '^TestServerStartsWithoutProcMeminfo$' -test.count=1`
	cmd := exec.Command("unshare", "--user", "--map-root-user", "--mount", "--pid", "--fork", "sh", "-c", script, os.Args[0])
	cmd.Env = append(os.Environ(), "METEOR_TEST_SUBSET_PID=1")
	out, err := cmd.CombinedOutput()
	if err != nil && strings.Contains(string(out), "unshare") {
		t.Skipf("user namespaces are not available here: %s", strings.TrimSpace(string(out)))
	}
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if strings.Contains(string(out), "meminfo visible") || !strings.Contains(string(out), "memory ") || !strings.Contains(string(out), "<nil>") {
		t.Fatalf("in a /proc with subset=pid: %s", out)
	}
	t.Logf("in a /proc with subset=pid: %s", strings.TrimSpace(string(out)))
}

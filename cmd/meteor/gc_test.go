package main

import (
	"context"
	"fmt"
	"math"
	"os"
	"os/exec"
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

// TestGCPercentFollowsTheLiveHeap: under --gc-percent auto, GOGC allows
// gcHeadroom of garbage within [100, 400] % of the live heap, and the
// tuner follows the heap as it grows and shrinks, without flapping on
// small changes.
func TestGCPercentFollowsTheLiveHeap(t *testing.T) {
	for live, want := range map[uint64]int{0: 400, 4 << 20: 400, 12 << 20: 400, 24 << 20: 200, 48 << 20: 100, 620 << 20: 100} {
		if got := gcPercentFor(live); got != want {
			t.Errorf("live heap %d MiB: GOGC %d, want %d", live>>20, got, want)
		}
	}
	synctest.Test(t, func(t *testing.T) {
		var mu sync.Mutex
		live, percent, sets := uint64(12<<20), 400, 0
		tuner := &gcTuner{
			live: func() uint64 { mu.Lock(); defer mu.Unlock(); return live },
			set: func(p int) int {
				mu.Lock()
				defer mu.Unlock()
				old := percent
				percent = p
				sets++
				return old
			},
			cur:    400,
			logger: hclog.NewNullLogger(),
		}
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		go tuner.run(ctx)
		synctest.Wait()
		step := func(heap uint64) (int, int) {
			mu.Lock()
			live = heap
			mu.Unlock()
			time.Sleep(gcTuneInterval)
			synctest.Wait()
			mu.Lock()
			defer mu.Unlock()
			return percent, sets
		}
		_, base := step(12 << 20)
		if p, n := step(600 << 20); p != 100 || n != base+1 {
			t.Fatalf("a 600 MiB heap: GOGC %d after %d sets, want 100 after 1", p, n-base)
		}
		if p, n := step(46 << 20); p != 100 || n != base+1 {
			t.Fatalf("46 MiB (104 %%, within a tenth of 100): GOGC %d after %d sets, want it left at 100", p, n-base)
		}
		if p, _ := step(16 << 20); p != 300 {
			t.Fatalf("a 16 MiB heap: GOGC %d, want 300", p)
		}
	})
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

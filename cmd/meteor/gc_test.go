package main

import (
	"fmt"
	"math"
	"os"
	"os/exec"
	"runtime/debug"
	"strings"
	"testing"
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

	g := gcFlags{percent: 400, limit: "auto"}
	p, l, warn, err := g.apply()
	total, merr := memoryAvailable()
	if err != nil || warn != nil || merr != nil || p != 400 || l <= 0 || uint64(l) >= total {
		t.Fatalf("auto: GOGC %d, limit %d of %d (%v, %v, %v)", p, l, total, err, warn, merr)
	}
	g = gcFlags{percent: 200, limit: "256MiB"}
	if p, l, _, err := g.apply(); err != nil || p != 200 || l != 256<<20 {
		t.Fatalf("256MiB: GOGC %d, limit %d, %v", p, l, err)
	}
	debug.SetMemoryLimit(math.MaxInt64)
	g = gcFlags{percent: 300, limit: "off"}
	if _, l, _, err := g.apply(); err != nil || l != math.MaxInt64 {
		t.Fatalf("off: limit %d, %v", l, err)
	}
	t.Setenv("GOGC", "50")
	if p, _, _, _ := (&gcFlags{percent: 400, limit: "off"}).apply(); p != 300 {
		// GOGC is read by the runtime at start; the flag must not
		// override the variable, so the setting before (300) stays.
		t.Fatalf("with GOGC set, the flag changed GOGC to %d", p)
	}
	if _, _, _, err := (&gcFlags{percent: 400, limit: "lots"}).apply(); err == nil {
		t.Fatal("a bad --memory-limit was accepted")
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

package main

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"path"
	"runtime/debug"
	"runtime/metrics"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/spf13/pflag"
)

// gcFlags set the garbage collector of a server process. A server's live
// heap is often small next to the memory it may use (about 12 MiB with
// 10,000 intents), so with Go's default GOGC of 100 the collector runs
// after every 12 MiB allocated: under a write load it took 138 µs of the
// 640 µs of CPU a write cost the three servers, and GOGC 400 cut the CPU
// per write by a fifth. But a server holding many agent sessions has a
// live heap of hundreds of MiB (about 63 KiB a session), and GOGC 400
// would let it take five times that from the machine: 218 KiB of RSS a
// session at 10,000 sessions against 134 KiB with GOGC 100 (make
// bench-sessions). So by default (--gc-percent auto) GOGC follows the
// live heap: gcHeadroom of garbage between collections, as a percentage
// of the live heap, within [100, 400] (gcTuner). The memory limit keeps
// any setting safe, since the collector then runs as often as it must to
// stay under it, whatever GOGC says.
type gcFlags struct {
	percent string
	limit   string
}

// memoryShare is the share of the machine's (or the cgroup's) memory
// --memory-limit auto gives the process.
const memoryShare = 0.75

// Bounds of GOGC under --gc-percent auto, and the garbage it aims to
// allow between collections.
const (
	gcPercentMin = 100
	gcPercentMax = 400
	gcHeadroom   = 48 << 20
)

func (g *gcFlags) register(f *pflag.FlagSet) {
	f.StringVar(&g.percent, "gc-percent", "auto", `the garbage collector's GOGC (percent of the live heap allocated between collections; -1 turns it off below the memory limit), or "auto": 48 MiB of garbage between collections, within 100 to 400 % of the live heap, followed as the heap grows; the GOGC variable, if set, wins`)
	f.StringVar(&g.limit, "memory-limit", "auto", `soft memory limit of the process (as GOMEMLIMIT: 2GiB, 512MiB...), "auto" for 75 % of the memory of its cgroup or, without a limit there, of the machine, or "off"; the GOMEMLIMIT variable, if set, wins`)
}

// apply sets the collector and returns the settings in effect, for the
// log: GOGC and the memory limit in bytes (math.MaxInt64: none), and, for
// auto, why no limit could be set (the process then runs without one:
// a sandbox may hide what auto reads, and that must not stop a server).
// tune is true when GOGC is to follow the live heap (runGCTuner).
func (g *gcFlags) apply() (percent int, limit int64, tune bool, warning error, err error) {
	if os.Getenv("GOGC") == "" {
		switch g.percent {
		case "auto", "":
			tune = true
			debug.SetGCPercent(gcPercentFor(liveHeap()))
		default:
			n, err := strconv.Atoi(g.percent)
			if err != nil || n < -1 {
				return 0, 0, false, nil, fmt.Errorf("--gc-percent %q: want auto, -1 or a percentage such as 200", g.percent)
			}
			debug.SetGCPercent(n)
		}
	}
	if os.Getenv("GOMEMLIMIT") == "" {
		switch g.limit {
		case "off", "":
		case "auto":
			if total, err := memoryAvailable(); err != nil {
				warning = fmt.Errorf("--memory-limit auto: %w; running without a memory limit (give --memory-limit a size)", err)
			} else {
				debug.SetMemoryLimit(int64(float64(total) * memoryShare))
			}
		default:
			n, err := parseSize(g.limit)
			if err != nil {
				return 0, 0, false, nil, fmt.Errorf("--memory-limit %q: %w", g.limit, err)
			}
			debug.SetMemoryLimit(n)
		}
	}
	percent = debug.SetGCPercent(-1)
	debug.SetGCPercent(percent)
	return percent, debug.SetMemoryLimit(-1), tune, warning, nil
}

// gcPercentFor is GOGC under --gc-percent auto for a live heap of live
// bytes: gcHeadroom of garbage between collections, within
// [gcPercentMin, gcPercentMax].
func gcPercentFor(live uint64) int {
	if live == 0 {
		return gcPercentMax
	}
	return int(min(max(uint64(gcHeadroom)*100/live, gcPercentMin), gcPercentMax))
}

// liveHeap is the live heap the last collection marked.
func liveHeap() uint64 {
	s := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindUint64 {
		return 0
	}
	return s[0].Value.Uint64()
}

// gcTuneInterval is how often gcTuner looks at the live heap.
const gcTuneInterval = 5 * time.Second

// gcTuner keeps GOGC at gcPercentFor of the live heap. live and set are
// liveHeap and debug.SetGCPercent outside tests; cur is GOGC as apply
// left it.
type gcTuner struct {
	live   func() uint64
	set    func(int) int
	cur    int
	logger hclog.Logger
}

// run follows the live heap every gcTuneInterval until ctx ends. GOGC
// moves only when it would change by more than a tenth, so that a heap
// that breathes does not make it flap.
func (t *gcTuner) run(ctx context.Context) {
	cur := t.cur
	tick := time.NewTicker(gcTuneInterval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		want := gcPercentFor(t.live())
		if diff := want - cur; diff*10 > cur || -diff*10 > cur {
			t.set(want)
			t.logger.Debug("garbage collector follows the live heap", "gc_percent", want, "was", cur)
			cur = want
		}
	}
}

// parseSize reads a size as GOMEMLIMIT writes it: a number of bytes with
// an optional B, KiB, MiB, GiB or TiB suffix.
func parseSize(s string) (int64, error) {
	units := []struct {
		suffix string
		mult   int64
	}{{"TiB", 1 << 40}, {"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}, {"B", 1}}
	mult := int64(1)
	for _, u := range units {
		if n, ok := strings.CutSuffix(s, u.suffix); ok {
			s, mult = n, u.mult
			break
		}
	}
	n, err := strconv.ParseInt(strings.TrimSpace(s), 10, 64)
	if err != nil || n <= 0 {
		return 0, fmt.Errorf("want a positive size such as 2GiB or 512MiB")
	}
	if n > (1<<62)/mult {
		return 0, fmt.Errorf("too large")
	}
	return n * mult, nil
}

// memoryAvailable is the smallest memory limit of the process's cgroup
// and its ancestors (v2, or v1's memory controller), or the machine's
// memory (sysinfo) where none is set.
func memoryAvailable() (uint64, error) {
	machine, err := machineMemory()
	if err != nil {
		return 0, err
	}
	best := machine
	for _, p := range cgroupLimitFiles() {
		b, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		if n, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64); err == nil && n > 0 && n < best {
			best = n // "max" (no limit) does not parse
		}
	}
	return best, nil
}

// cgroupLimitFiles lists the memory limit files of the process's cgroup
// and of every cgroup above it, from /proc/self/cgroup (which a /proc
// mounted with subset=pid, as systemd's ProcSubset=pid does, still has).
func cgroupLimitFiles() []string {
	f, err := os.Open("/proc/self/cgroup")
	if err != nil {
		return nil
	}
	defer f.Close()
	var files []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// hierarchy-ID:controllers:path
		parts := strings.SplitN(sc.Text(), ":", 3)
		if len(parts) != 3 {
			continue
		}
		var base, name string
		switch {
		case parts[0] == "0" && parts[1] == "":
			base, name = "/sys/fs/cgroup", "memory.max"
		case slices.Contains(strings.Split(parts[1], ","), "memory"):
			base, name = "/sys/fs/cgroup/memory", "memory.limit_in_bytes"
		default:
			continue
		}
		for dir := path.Clean(parts[2]); ; dir = path.Dir(dir) {
			files = append(files, path.Join(base, dir, name))
			if dir == "/" || dir == "." {
				break
			}
		}
	}
	return files
}

// machineMemory is the machine's memory, from sysinfo(2), which needs no
// file (a sandbox may hide /proc/meminfo).
func machineMemory() (uint64, error) {
	var si syscall.Sysinfo_t
	if err := syscall.Sysinfo(&si); err != nil {
		return 0, fmt.Errorf("the machine's memory is unknown: sysinfo: %w", err)
	}
	if si.Totalram == 0 {
		return 0, fmt.Errorf("the machine's memory is unknown: sysinfo gives none")
	}
	return uint64(si.Totalram) * uint64(si.Unit), nil
}

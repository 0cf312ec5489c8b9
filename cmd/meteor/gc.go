package main

import (
	"bufio"
	"context"
	"fmt"
	"math"
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
// live heap of hundreds of MiB (about 70 KiB a session), and most of the
// time it allocates little: the garbage GOGC 100 lets it keep is as large
// as the live heap, memory the machine gives for no CPU saved. So by
// default (--gc-percent auto) GOGC follows both the live heap and the
// rate the process allocates at (gcTuner, gcPercentFor): gcHeadroom of
// garbage between collections within [100, 400] % of the live heap, more
// on a machine with memory to spare (up to gcLimitShare of the memory
// limit) while the server allocates fast, and less for a large heap
// allocated slowly: only the garbage that holds collecting to gcBudget
// of a CPU, down to gcPercentMin. The memory limit keeps any setting
// safe, since the collector then runs as often as it must to stay under
// it, whatever GOGC says.
type gcFlags struct {
	percent string
	limit   string
}

// memoryShare is the share of the machine's (or the cgroup's) memory
// --memory-limit auto gives the process.
const memoryShare = 0.75

// Bounds of GOGC under --gc-percent auto, the least garbage it allows
// between collections, and the share of one CPU collecting may take.
const (
	gcPercentMin = 25
	gcPercentMax = 400
	gcHeadroom   = 48 << 20
	gcBudget     = 0.05
	// gcLimitShare is the share of the memory limit that garbage
	// between collections may take while the server allocates fast.
	// Under a write load a server holding 10,000 intents with their
	// history (a live heap of about 170 MiB) allocates over 100 MiB a
	// second; at GOGC 100 collecting took a quarter of the three
	// servers' CPU (docs/performance.md, "The writes row measured
	// no-ops"). A sixteenth let a server holding 10,000 idle sessions
	// (600 MiB live) keep 30 KiB more of RSS a session after a burst
	// (make bench-sessions); a thirty-second gives that heap no more
	// than before on a machine of 24 GiB.
	gcLimitShare = 1.0 / 32
)

func (g *gcFlags) register(f *pflag.FlagSet) {
	f.StringVar(&g.percent, "gc-percent", "auto", `the garbage collector's GOGC (percent of the live heap allocated between collections; -1 turns it off below the memory limit), or "auto": as much garbage between collections as keeps collecting under 5 % of a CPU, within 25 to 400 % of the live heap: at most 48 MiB, the live heap or a thirty-second of the memory limit, whichever is most, and at least 48 MiB or 25 % of the live heap; the GOGC variable, if set, wins`)
	f.StringVar(&g.limit, "memory-limit", "auto", `soft memory limit of the process (as GOMEMLIMIT: 2GiB, 512MiB...), "auto" for 75 % of the memory of its cgroup or, without a limit there, of the machine, or "off"; the GOMEMLIMIT variable, if set, wins`)
}

// apply sets the collector and returns the settings in effect, for the
// log: GOGC and the memory limit in bytes (math.MaxInt64: none), and, for
// auto, why no limit could be set (the process then runs without one:
// a sandbox may hide what auto reads, and that must not stop a server).
// tune is true when GOGC is to follow the heap (gcTuner).
func (g *gcFlags) apply() (percent int, limit int64, tune bool, warning error, err error) {
	// The memory limit first: GOGC under auto depends on it.
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
	if os.Getenv("GOGC") == "" {
		switch g.percent {
		case "auto", "":
			tune = true
			debug.SetGCPercent(gcPercentFor(gcSampler()().live, 0, 0, debug.SetMemoryLimit(-1)))
		default:
			n, err := strconv.Atoi(g.percent)
			if err != nil || n < -1 {
				return 0, 0, false, nil, fmt.Errorf("--gc-percent %q: want auto, -1 or a percentage such as 200", g.percent)
			}
			debug.SetGCPercent(n)
		}
	}
	percent = debug.SetGCPercent(-1)
	debug.SetGCPercent(percent)
	return percent, debug.SetMemoryLimit(-1), tune, warning, nil
}

// gcPercentFor is GOGC under --gc-percent auto for a live heap of live
// bytes, allocating rate bytes a second, where a collection costs cost
// CPU seconds per byte of live heap, under a memory limit of limit bytes
// (math.MaxInt64 or less than 1: none).
//
// A collection comes every headroom bytes allocated and costs cost*live,
// so collecting takes rate*cost*live/headroom of a CPU: the headroom
// that keeps that at gcBudget is what it wants. It allows at most
// gcHeadroom, the live heap, or gcLimitShare of the memory limit,
// whichever is most, within gcPercentMax of the live heap; and at least
// gcHeadroom or gcPercentMin of the live heap, whichever is more. Without
// figures (rate or cost 0) it allows that least headroom.
func gcPercentFor(live uint64, rate, cost float64, limit int64) int {
	if live == 0 {
		return gcPercentMax
	}
	least := float64(gcHeadroom) * 100 / float64(live)
	most := max(least, 100)
	if limit > 0 && limit < math.MaxInt64 {
		most = max(most, float64(limit)*gcLimitShare*100/float64(live))
	}
	want := rate * cost / gcBudget * 100
	return int(min(max(min(want, most), least, gcPercentMin), gcPercentMax))
}

// gcSample is what gcTuner reads of the runtime.
type gcSample struct {
	live   uint64 // the live heap the last collection marked
	allocs uint64 // bytes allocated since the process started
	cycles uint64 // collections completed
	// markCPU is the CPU seconds collecting took, less what its workers
	// did on processors that had nothing else to run.
	markCPU float64
}

var gcMetrics = []string{
	"/gc/heap/live:bytes",
	"/gc/heap/allocs:bytes",
	"/gc/cycles/total:gc-cycles",
	"/cpu/classes/gc/total:cpu-seconds",
	"/cpu/classes/gc/mark/idle:cpu-seconds",
}

// gcSampler returns a reader of the runtime's figures, which reuses its
// buffer (the tuner reads four times a second); a figure this Go does
// not have reads as 0.
func gcSampler() func() gcSample {
	s := make([]metrics.Sample, len(gcMetrics))
	for i, name := range gcMetrics {
		s[i].Name = name
	}
	return func() gcSample { return readGCSample(s) }
}

func readGCSample(s []metrics.Sample) gcSample {
	metrics.Read(s)
	u := func(i int) uint64 {
		if s[i].Value.Kind() != metrics.KindUint64 {
			return 0
		}
		return s[i].Value.Uint64()
	}
	f := func(i int) float64 {
		if s[i].Value.Kind() != metrics.KindFloat64 {
			return 0
		}
		return s[i].Value.Float64()
	}
	return gcSample{live: u(0), allocs: u(1), cycles: u(2), markCPU: max(f(3)-f(4), 0)}
}

// gcTuneInterval is how often gcTuner reads the runtime: short, since a
// server that starts pushing a change allocates far faster than it did
// while idle, and until GOGC follows it collects as often as an idle
// server would (a quarter of a second at 200 MiB/s is 50 MiB, less than
// the least headroom of a 600 MiB heap). Reading the figures costs
// microseconds.
const gcTuneInterval = 250 * time.Millisecond

// gcRateDecay is how much of the allocation rate gcTuner remembers after
// a second: the rate it steers by rises at once and falls by a fifth a
// second, so a change pushed in bursts keeps its headroom between them.
const gcRateDecay = 0.8

// gcTuner keeps GOGC at gcPercentFor of the live heap, the allocation
// rate and the cost of a collection, all measured. read, set and collect
// are gcSampler's reader, debug.SetGCPercent and debug.FreeOSMemory outside
// tests; cur is GOGC as apply left it, limit the memory limit (see
// gcPercentFor).
type gcTuner struct {
	read    func() gcSample
	set     func(int) int
	collect func()
	cur     int
	limit   int64
	logger  hclog.Logger

	last gcSample
	rate float64 // bytes allocated a second, decaying (gcRateDecay)
	cost float64 // CPU seconds a collection took per byte of live heap
	// pending is set when GOGC was lowered and no collection came since,
	// pendingFor ago; see step.
	pending    bool
	pendingFor time.Duration
}

// gcCollectAfter is how long gcTuner waits, after lowering GOGC, for the
// runtime to collect before it collects itself.
const gcCollectAfter = 10 * time.Second

// run steers GOGC every gcTuneInterval until ctx ends.
func (t *gcTuner) run(ctx context.Context) {
	var last time.Time
	tick := time.NewTicker(gcTuneInterval)
	defer tick.Stop()
	t.last, last = t.read(), time.Now()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		// The interval as it passed: a collection the tuner ran, or a
		// busy host, can make it longer than gcTuneInterval.
		now := time.Now()
		t.step(t.read(), now.Sub(last))
		last = now
	}
}

// step takes a new sample, dt after the last one, and sets GOGC if the
// one wanted differs from the current by more than a tenth, so that a
// heap that breathes does not make it flap.
func (t *gcTuner) step(s gcSample, dt time.Duration) {
	if s.allocs >= t.last.allocs && dt > 0 {
		t.rate = max(float64(s.allocs-t.last.allocs)/dt.Seconds(), t.rate*math.Pow(gcRateDecay, dt.Seconds()))
	}
	if s.cycles > t.last.cycles {
		t.pending = false // the goal now follows GOGC
		if s.live > 0 && s.markCPU >= t.last.markCPU {
			c := (s.markCPU - t.last.markCPU) / float64(s.cycles-t.last.cycles) / float64(s.live)
			if t.cost == 0 {
				t.cost = c
			} else {
				t.cost = 0.7*t.cost + 0.3*c
			}
		}
	}
	t.last = s
	want := gcPercentFor(s.live, t.rate, t.cost, t.limit)
	if diff := want - t.cur; diff*10 > t.cur || -diff*10 > t.cur {
		t.set(want)
		t.logger.Debug("garbage collector follows the heap", "gc_percent", want, "was", t.cur,
			"live_heap", s.live, "alloc_rate", int64(t.rate), "mark_ns_per_mib", int64(t.cost*1e9*(1<<20)))
		if want < t.cur && !t.pending {
			t.pending, t.pendingFor = true, 0
		}
		t.cur = want
	}
	// A lower GOGC shrinks the heap only from the next collection on,
	// and the runtime returns memory to the system only down to what
	// the last collection's goal allowed. A server that fell idle after
	// a busy spell allocates so little that the next collection may be
	// the runtime's forced one, two minutes on, keeping the busy
	// spell's memory until then: so once GOGC is lowered and no
	// collection came within gcCollectAfter, the tuner collects once,
	// and returns the free memory to the system at once
	// (debug.FreeOSMemory): the runtime's background scavenger returns
	// it at about 1 % of a CPU, and had not returned half a gigabyte of
	// a busy spell 30 s after it (make bench-sessions).
	switch {
	case !t.pending:
	case t.pendingFor >= gcCollectAfter:
		t.pending = false
		t.logger.Debug("collecting after lowering GOGC", "gc_percent", t.cur)
		t.collect()
	default:
		t.pendingFor += dt
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

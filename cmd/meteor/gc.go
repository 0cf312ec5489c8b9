package main

import (
	"bufio"
	"fmt"
	"os"
	"runtime/debug"
	"strconv"
	"strings"

	"github.com/spf13/pflag"
)

// gcFlags set the garbage collector of a server process. A server's live
// heap is small next to the memory it may use (about 12 MiB with 10,000
// intents), so with Go's default GOGC of 100 the collector runs after
// every 12 MiB allocated: under a write load it took 138 µs of the 640 µs
// of CPU a write cost the three servers. A higher GOGC trades memory the
// machine has for CPU; the memory limit keeps that trade safe when the
// live heap grows (a large fleet), since the collector then runs as often
// as it must to stay under it, whatever GOGC says.
type gcFlags struct {
	percent int
	limit   string
}

// defaultGCPercent is the server's GOGC unless the GOGC variable or
// --gc-percent says otherwise; memoryShare is the share of the machine's
// (or the cgroup's) memory --memory-limit auto gives the process.
const (
	defaultGCPercent = 400
	memoryShare      = 0.75
)

func (g *gcFlags) register(f *pflag.FlagSet) {
	f.IntVar(&g.percent, "gc-percent", defaultGCPercent, "the garbage collector's GOGC (percent of the live heap allocated between collections; -1 turns it off below the memory limit); the GOGC variable, if set, wins")
	f.StringVar(&g.limit, "memory-limit", "auto", `soft memory limit of the process (as GOMEMLIMIT: 2GiB, 512MiB...), "auto" for 75 % of the memory of its cgroup or, without a limit there, of the machine, or "off"; the GOMEMLIMIT variable, if set, wins`)
}

// apply sets the collector and returns the settings in effect, for the
// log: GOGC and the memory limit in bytes (math.MaxInt64: none).
func (g *gcFlags) apply() (percent int, limit int64, err error) {
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(g.percent)
	}
	if os.Getenv("GOMEMLIMIT") == "" {
		switch g.limit {
		case "off", "":
		case "auto":
			total, err := memoryAvailable()
			if err != nil {
				return 0, 0, fmt.Errorf("--memory-limit auto: %w (give a size or off)", err)
			}
			debug.SetMemoryLimit(int64(float64(total) * memoryShare))
		default:
			n, err := parseSize(g.limit)
			if err != nil {
				return 0, 0, fmt.Errorf("--memory-limit %q: %w", g.limit, err)
			}
			debug.SetMemoryLimit(n)
		}
	}
	percent = debug.SetGCPercent(-1)
	debug.SetGCPercent(percent)
	return percent, debug.SetMemoryLimit(-1), nil
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

// memoryAvailable is the memory limit of the process's cgroup (v2 or v1),
// or the machine's memory when the cgroup sets none.
func memoryAvailable() (uint64, error) {
	machine, err := memTotal()
	if err != nil {
		return 0, err
	}
	for _, p := range []string{"/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"} {
		b, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		v := strings.TrimSpace(string(b))
		if n, err := strconv.ParseUint(v, 10, 64); err == nil && n > 0 && n < machine {
			return n, nil
		}
	}
	return machine, nil
}

func memTotal() (uint64, error) {
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		return 0, fmt.Errorf("the machine's memory is unknown: %w", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "MemTotal:"); ok {
			kb, err := strconv.ParseUint(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
			if err != nil {
				return 0, fmt.Errorf("/proc/meminfo: %w", err)
			}
			return kb << 10, nil
		}
	}
	return 0, fmt.Errorf("/proc/meminfo has no MemTotal")
}

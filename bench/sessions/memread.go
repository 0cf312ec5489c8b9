package main

import (
	"errors"
	"os"
	"strconv"
	"time"

	"github.com/meteor-edge/meteor/bench/internal/benchkit"
)

// memory is a reading of a process's /proc/PID/status.
type memory struct {
	RSSKiB     int64 `json:"vm_rss_kib"`
	HWMKiB     int64 `json:"vm_hwm_kib"`
	AnonKiB    int64 `json:"rss_anon_kib"`
	Threads    int64 `json:"threads"`
	HeapLiveMB int   `json:"go_heap_live_mb"`
	StacksMB   int   `json:"go_stacks_mb"`
	// GCAgeSec is how long before the reading the GC cycle that measured
	// HeapLiveMB ended; -1 if none had run.
	GCAgeSec float64 `json:"gc_age_s"`
}

// readMemory reads the process's resident memory and, from its log
// (GODEBUG=gctrace=1), the live heap of its last GC cycle.
func readMemory(p *benchkit.Proc) (memory, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(p.PID()) + "/status")
	if err != nil {
		return memory{}, err
	}
	var m memory
	var errs []error
	for name, dst := range map[string]*int64{"VmRSS": &m.RSSKiB, "VmHWM": &m.HWMKiB, "RssAnon": &m.AnonKiB} {
		var err error
		*dst, err = procStatusKB(b, name)
		errs = append(errs, err)
	}
	if t, err := procStatusKB(b, "Threads"); err == nil {
		m.Threads = t
	}
	m.GCAgeSec = -1
	if log, err := os.ReadFile(p.LogPath); err == nil {
		if g, ok := lastGCTrace(log); ok {
			m.HeapLiveMB, m.StacksMB = g.HeapLiveMB, g.StacksMB
			m.GCAgeSec = (time.Since(p.Started) - g.At).Seconds()
		}
	}
	return m, errors.Join(errs...)
}

package benchkit

import (
	"bufio"
	"fmt"
	"os"
	"runtime"
	"strings"
)

// Machine describes the machine a run shares with everything else on it.
type Machine struct {
	NProc        int    `json:"nproc"`
	CPUModel     string `json:"cpu_model"`
	GoVersion    string `json:"go_version"`
	Kernel       string `json:"kernel"`
	LoadAvgStart string `json:"loadavg_start"`
	LoadAvgEnd   string `json:"loadavg_end"`
}

// ReadMachine reads the machine's facts; LoadAvgStart is the load average
// now, LoadAvgEnd is left for the caller to fill in at the end.
func ReadMachine() Machine {
	m := Machine{NProc: runtime.NumCPU(), GoVersion: runtime.Version(), LoadAvgStart: LoadAvg()}
	if f, err := os.Open("/proc/cpuinfo"); err == nil {
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if k, v, ok := strings.Cut(sc.Text(), ":"); ok && strings.TrimSpace(k) == "model name" {
				m.CPUModel = strings.TrimSpace(v)
				break
			}
		}
		f.Close()
	}
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m.Kernel = strings.TrimSpace(string(b))
	}
	return m
}

// Measured is the sentence a results file opens with: when and on what
// the run was measured.
func (m Machine) Measured(date string) string {
	return fmt.Sprintf("Measured %s on %d CPUs (%s), %s, kernel %s. Load average at start %s, at end %s.",
		date, m.NProc, m.CPUModel, m.GoVersion, m.Kernel, m.LoadAvgStart, m.LoadAvgEnd)
}

// LoadAvg returns the three load averages of /proc/loadavg, or "unknown".
func LoadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}

// Load1 returns the 1-minute load average, or -1 if it cannot be read.
func Load1() float64 {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return -1
	}
	var v float64
	if _, err := fmt.Sscan(string(b), &v); err != nil {
		return -1
	}
	return v
}

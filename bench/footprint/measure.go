package main

import (
	"bufio"
	"bytes"
	"debug/elf"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// ipUDPHeader is the bytes an IPv4 and a UDP header add to each datagram's
// payload (20 + 8): what a metered link bills beyond the payload.
const ipUDPHeader = 28

// day is what the idle window's bytes are scaled to.
const day = 24 * time.Hour

// perDay extrapolates n, counted over window, to a day.
func perDay(n uint64, window time.Duration) float64 {
	if window <= 0 {
		return 0
	}
	return float64(n) * float64(day) / float64(window)
}

// traffic is what crossed one path (or all of them) in the idle window,
// in each direction: up is what the agent sent, down what reached it.
type traffic struct {
	UpPackets   uint64 `json:"up_packets"`
	UpBytes     uint64 `json:"up_payload_bytes"`
	DownPackets uint64 `json:"down_packets"`
	DownBytes   uint64 `json:"down_payload_bytes"`
}

// add returns t plus u.
func (t traffic) add(u traffic) traffic {
	return traffic{t.UpPackets + u.UpPackets, t.UpBytes + u.UpBytes, t.DownPackets + u.DownPackets, t.DownBytes + u.DownBytes}
}

// sub returns t minus an earlier reading u.
func (t traffic) sub(u traffic) traffic {
	return traffic{t.UpPackets - u.UpPackets, t.UpBytes - u.UpBytes, t.DownPackets - u.DownPackets, t.DownBytes - u.DownBytes}
}

// ipBytes returns the bytes both ways with the IPv4 and UDP headers.
func (t traffic) ipBytes() uint64 {
	return t.UpBytes + t.DownBytes + ipUDPHeader*(t.UpPackets+t.DownPackets)
}

// memory is a process's resident set: now (VmRSS) and its peak (VmHWM).
type memory struct {
	RSS, HWM uint64 // bytes
}

// readMemory reads /proc/PID/status.
func readMemory(pid int) (memory, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return memory{}, err
	}
	return parseStatus(b)
}

// parseStatus reads VmRSS and VmHWM (in kB) from the text of
// /proc/PID/status.
func parseStatus(b []byte) (memory, error) {
	var m memory
	var seen int
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if !ok || (k != "VmRSS" && k != "VmHWM") {
			continue
		}
		f := strings.Fields(v)
		if len(f) != 2 || f[1] != "kB" {
			return memory{}, fmt.Errorf("parse %s: %q", k, v)
		}
		n, err := strconv.ParseUint(f[0], 10, 64)
		if err != nil {
			return memory{}, fmt.Errorf("parse %s: %w", k, err)
		}
		if k == "VmRSS" {
			m.RSS = n << 10
		} else {
			m.HWM = n << 10
		}
		seen++
	}
	if seen != 2 {
		return memory{}, fmt.Errorf("no VmRSS and VmHWM in /proc/PID/status")
	}
	return m, nil
}

// cpuPercent is cpu used over wall time, as a percentage of one core.
func cpuPercent(cpu, wall time.Duration) float64 {
	if wall <= 0 {
		return 0
	}
	return 100 * float64(cpu) / float64(wall)
}

// binaryInfo describes the agent's binary.
type binaryInfo struct {
	Path  string `json:"path"`
	Bytes int64  `json:"bytes"`
	// Static says the binary names no program interpreter (PT_INTERP):
	// it runs without a dynamic loader or shared libraries.
	Static      bool   `json:"static"`
	Interpreter string `json:"interpreter,omitempty"`
}

// inspectBinary reads path's size and whether it is statically linked.
func inspectBinary(path string) (binaryInfo, error) {
	st, err := os.Stat(path)
	if err != nil {
		return binaryInfo{}, err
	}
	interp, err := elfInterpreter(path)
	if err != nil {
		return binaryInfo{}, err
	}
	return binaryInfo{Path: path, Bytes: st.Size(), Static: interp == "", Interpreter: interp}, nil
}

// elfInterpreter returns the program interpreter an ELF file names in its
// PT_INTERP header, or "" if it has none (a static binary).
func elfInterpreter(path string) (string, error) {
	f, err := elf.Open(path)
	if err != nil {
		return "", fmt.Errorf("read %s as ELF: %w", path, err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type != elf.PT_INTERP {
			continue
		}
		b := make([]byte, p.Filesz)
		if _, err := p.ReadAt(b, 0); err != nil {
			return "", fmt.Errorf("read the PT_INTERP of %s: %w", path, err)
		}
		if s := strings.TrimRight(string(b), "\x00"); s != "" {
			return s, nil
		}
		return "(unnamed)", nil
	}
	return "", nil
}

// secs converts seconds to a duration.
func secs(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }

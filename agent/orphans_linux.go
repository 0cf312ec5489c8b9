//go:build linux

package agent

import (
	"bytes"
	"os"
	"strconv"
	"strings"
	"syscall"

	"github.com/meteor-edge/meteor/agent/driver"
	"github.com/meteor-edge/meteor/agent/journal"
)

// survivors returns the live processes of a step: those whose environment
// carries its marker, and those of its recorded process group while the
// group's leader is the process recorded (same start time).
func survivors(p *journal.StepProcess) []int {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	marker := []byte(driver.StepEnv + "=" + p.Marker + "\x00")
	leader := p.PGID != 0 && p.Start != 0 && procStart(p.PGID) == p.Start
	var out []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		state, pgid, _, ok := procStat(pid)
		if !ok || state == 'Z' || state == 'X' {
			continue // gone, or a zombie: done
		}
		if leader && pgid == p.PGID {
			out = append(out, pid)
			continue
		}
		if env, err := os.ReadFile("/proc/" + e.Name() + "/environ"); err == nil && p.Marker != "" && bytes.Contains(append([]byte{0}, env...), append([]byte{0}, marker...)) {
			out = append(out, pid)
		}
	}
	return out
}

// procStart returns the start time of pid (clock ticks after boot); 0 if
// it cannot be read.
func procStart(pid int) uint64 {
	_, _, start, _ := procStat(pid)
	return start
}

// procStat reads the state, process group and start time of pid from
// /proc/PID/stat.
func procStat(pid int) (state byte, pgid int, start uint64, ok bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, 0, 0, false
	}
	// The command name, field 2, is in parentheses and may hold spaces.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, 0, 0, false
	}
	f := strings.Fields(string(b[i+1:]))
	// Fields from 3 on: state(3) ppid(4) pgrp(5) ... starttime(22).
	if len(f) < 20 {
		return 0, 0, 0, false
	}
	pgid, err1 := strconv.Atoi(f[2])
	start, err2 := strconv.ParseUint(f[19], 10, 64)
	if err1 != nil || err2 != nil || len(f[0]) != 1 {
		return 0, 0, 0, false
	}
	return f[0][0], pgid, start, true
}

// signalGroups ends the process groups of pids (and pids themselves):
// SIGTERM, or SIGKILL with kill.
func signalGroups(pids []int, kill bool) {
	sig := syscall.SIGTERM
	if kill {
		sig = syscall.SIGKILL
	}
	for _, pid := range pids {
		if _, pgid, _, ok := procStat(pid); ok && pgid > 1 {
			syscall.Kill(-pgid, sig)
		}
		syscall.Kill(pid, sig)
	}
}

package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/meteor-edge/meteor/agent/sim"
	"github.com/meteor-edge/meteor/bench/internal/benchkit"
)

// serverCount is the size of the cluster every part runs.
const serverCount = 3

// cluster is the 3-server cluster of one fleet run.
type cluster struct {
	*benchkit.MeteorCluster
}

// startCluster starts three `meteor server` processes in dir, server i in
// region sim.Regions()[i] as the simulator assumes, with their
// certificates issued in pkiDir (a directory made by
// benchkit.InitMeteorCA), and waits until every one is healthy and knows
// the leader.
func startCluster(ctx context.Context, g *benchkit.Group, bin, pkiDir, dir string, raftMultiplier int) (*cluster, error) {
	mc, err := benchkit.StartMeteor(ctx, g, benchkit.MeteorOptions{
		Bin: bin, Dir: dir, IDs: benchkit.MeteorIDs("server", serverCount), Regions: sim.Regions(),
		Agents: true, PKI: pkiDir,
		ExtraArgs: func(int) []string {
			return []string{"--raft-multiplier", strconv.Itoa(raftMultiplier), "--log-level", "warn"}
		},
		Env:          []string{"QUIC_GO_DISABLE_RECEIVE_BUFFER_WARNING=true"},
		StartTimeout: 90 * time.Second,
	})
	if err != nil {
		return nil, err
	}
	return &cluster{mc}, nil
}

// put writes an intent document through the first server and returns the
// revision it was committed at.
func (c *cluster) put(ctx context.Context, name string, doc []byte) (uint64, error) {
	res, err := c.Servers[0].API.PutIntent(ctx, name, doc, nil)
	if err != nil {
		return 0, fmt.Errorf("put intent %q: %w", name, err)
	}
	return res.Revision, nil
}

// procStatus is a reading of a process's /proc/PID/status and stat.
type procStatus struct {
	RSSKiB  int64   `json:"vm_rss_kib"`
	HWMKiB  int64   `json:"vm_hwm_kib"`
	AnonKiB int64   `json:"rss_anon_kib"`
	Threads int64   `json:"threads"`
	CPUSec  float64 `json:"cpu_s"`
}

// readProc reads p's memory and CPU time.
func readProc(p *benchkit.Proc) (procStatus, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(p.PID()) + "/status")
	if err != nil {
		return procStatus{}, err
	}
	var m procStatus
	var errs []error
	for name, dst := range map[string]*int64{"VmRSS": &m.RSSKiB, "VmHWM": &m.HWMKiB, "RssAnon": &m.AnonKiB, "Threads": &m.Threads} {
		v, err := statusField(b, name)
		*dst = v
		errs = append(errs, err)
	}
	cpu, err := p.CPUTime()
	m.CPUSec = cpu.Seconds()
	errs = append(errs, err)
	return m, errors.Join(errs...)
}

// statusField returns the number of a "Name:   123 kB" line.
func statusField(b []byte, name string) (int64, error) {
	for line := range bytes.SplitSeq(b, []byte("\n")) {
		k, v, ok := bytes.Cut(line, []byte(":"))
		if !ok || string(k) != name {
			continue
		}
		f := strings.Fields(string(v))
		if len(f) == 0 {
			break
		}
		return strconv.ParseInt(f[0], 10, 64)
	}
	return 0, fmt.Errorf("no %s in /proc/PID/status", name)
}

// memAvailableKiB returns MemAvailable from /proc/meminfo, or -1.
func memAvailableKiB() int64 {
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return -1
	}
	v, err := statusField(b, "MemAvailable")
	if err != nil {
		return -1
	}
	return v
}

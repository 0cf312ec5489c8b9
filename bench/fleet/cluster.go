package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/meteor-edge/meteor/agent/sim"
	"github.com/meteor-edge/meteor/bench/internal/benchkit"
	"github.com/meteor-edge/meteor/cluster/api"
)

// serverCount is the size of the cluster every part runs.
const serverCount = 3

// makePKI runs the meteor CLI to create the cluster CA, the cluster secret
// and a certificate per server in dir.
func makePKI(ctx context.Context, bin, dir string) error {
	cmds := [][]string{{"ca", "init", "--dir", dir}}
	for i := range serverCount {
		cmds = append(cmds, []string{"ca", "issue-server", "--dir", dir, "--id", serverID(i), "--hosts", "127.0.0.1"})
	}
	for _, args := range cmds {
		if out, err := benchkit.RunCmd(ctx, bin, args...); err != nil {
			return fmt.Errorf("meteor %s: %w\n%s", strings.Join(args, " "), err, out)
		}
	}
	return nil
}

func serverID(i int) string { return fmt.Sprintf("server-%d", i+1) }

// server is one `meteor server` process of the cluster.
type server struct {
	id        string
	proc      *benchkit.Proc
	api       *api.Client
	agentAddr string
}

// cluster is the 3-server cluster of one fleet run.
type cluster struct {
	servers []*server
}

// startCluster starts three `meteor server` processes in dir, server i in
// region sim.Regions()[i] as the simulator assumes, and waits until every
// one is healthy and knows the leader.
func startCluster(ctx context.Context, g *benchkit.Group, bin, pkiDir, dir string, raftMultiplier int) (*cluster, error) {
	ports, err := benchkit.FreePorts(4*serverCount, true)
	if err != nil {
		return nil, err
	}
	c := &cluster{}
	gossip := func(i int) string { return benchkit.Loopback(ports[4*i+2]) }
	for i := range serverCount {
		id := serverID(i)
		sdir := filepath.Join(dir, id)
		if err := os.MkdirAll(sdir, 0o700); err != nil {
			return nil, err
		}
		var join []string
		for j := range serverCount {
			if j != i {
				join = append(join, gossip(j))
			}
		}
		args := []string{
			"server", "--node-id", id, "--region", sim.Regions()[i%len(sim.Regions())],
			"--data-dir", filepath.Join(sdir, "data"),
			"--http-addr", benchkit.Loopback(ports[4*i]), "--raft-addr", benchkit.Loopback(ports[4*i+1]),
			"--gossip-addr", gossip(i), "--join", strings.Join(join, ","),
			"--bootstrap-expect", strconv.Itoa(serverCount), "--raft-multiplier", strconv.Itoa(raftMultiplier),
			"--agent-addr", benchkit.Loopback(ports[4*i+3]),
			"--ca-file", filepath.Join(pkiDir, sim.CACertFile),
			"--cert-file", filepath.Join(pkiDir, "server-"+id+".pem"), "--key-file", filepath.Join(pkiDir, "server-"+id+"-key.pem"),
			"--cluster-secret-file", filepath.Join(pkiDir, "cluster.secret"),
			"--log-level", "warn",
		}
		p, err := g.Start(id, bin, args, []string{"QUIC_GO_DISABLE_RECEIVE_BUFFER_WARNING=true"}, sdir, filepath.Join(sdir, "server.log"))
		if err != nil {
			return nil, err
		}
		hc := &http.Client{Timeout: 2 * time.Minute, Transport: &http.Transport{MaxIdleConnsPerHost: 4}}
		c.servers = append(c.servers, &server{id: id, proc: p, api: api.NewClient(benchkit.Loopback(ports[4*i]), hc), agentAddr: benchkit.Loopback(ports[4*i+3])})
	}
	for _, s := range c.servers {
		if err := benchkit.WaitFor(ctx, 90*time.Second, 100*time.Millisecond, s.proc, func(ctx context.Context) error {
			h, err := s.api.Health(ctx)
			if err != nil {
				return err
			}
			if !h.Healthy || h.Leader == "" {
				return fmt.Errorf("not healthy: %s", h.Message)
			}
			return nil
		}); err != nil {
			return nil, fmt.Errorf("%s: %w", s.id, err)
		}
	}
	return c, nil
}

// agentAddrs returns the servers' agent endpoints, in server order.
func (c *cluster) agentAddrs() []string {
	var out []string
	for _, s := range c.servers {
		out = append(out, s.agentAddr)
	}
	return out
}

// raftTerm returns the servers' highest Raft term: the elections held in
// a period are its growth (benchkit.Elections).
func (c *cluster) raftTerm(ctx context.Context) (uint64, error) {
	addrs := make([]string, len(c.servers))
	for i, s := range c.servers {
		addrs[i] = s.api.Addr()
	}
	return benchkit.RaftTerm(ctx, addrs)
}

// electionsSince returns the elections held since the highest Raft term
// was start.
func (c *cluster) electionsSince(ctx context.Context, start uint64) (int, error) {
	end, err := c.raftTerm(ctx)
	if err != nil {
		return 0, err
	}
	return benchkit.Elections(start, end), nil
}

// exited returns an error naming the first server process that exited.
func (c *cluster) exited() error {
	for _, s := range c.servers {
		if s.proc.Exited() {
			return fmt.Errorf("%s exited (%v); last log lines:\n%s", s.id, s.proc.Err(), s.proc.LogTail(20))
		}
	}
	return nil
}

// put writes an intent document through the first server and returns the
// revision it was committed at.
func (c *cluster) put(ctx context.Context, name string, doc []byte) (uint64, error) {
	res, err := c.servers[0].api.PutIntent(ctx, name, doc, nil)
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

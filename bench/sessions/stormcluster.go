package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/meteor-edge/meteor/bench/internal/benchkit"
	"github.com/meteor-edge/meteor/cluster/api"
)

// stormServers is the size of the storm's cluster.
const stormServers = 3

// stormServerID names server i (0-based) of the storm's cluster.
func stormServerID(i int) string { return fmt.Sprintf("storm-%d", i+1) }

// stormCluster is three `meteor server` processes forming one cluster,
// each serving agents.
type stormCluster struct {
	servers []*serverProcess
	ids     []string
}

// issueStormCerts issues the storm servers' certificates into p's dir.
func issueStormCerts(ctx context.Context, bin string, p *pki) error {
	for i := range stormServers {
		if err := p.issueServer(ctx, bin, stormServerID(i)); err != nil {
			return err
		}
	}
	return nil
}

// startStormCluster starts three `meteor server` processes that form a
// cluster through --bootstrap-expect 3, each with its own certificate and
// the shared cluster secret (so that session tickets and resume tokens of
// one are good on the others), and waits until each reports a leader.
func startStormCluster(ctx context.Context, g *benchkit.Group, bin string, p *pki, dir string) (*stormCluster, error) {
	// One call, so the ports are distinct: HTTP, Raft, gossip and agents
	// per server; gossip and agents need UDP.
	ports, err := benchkit.FreePorts(4*stormServers, true)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	gossip := make([]string, stormServers)
	for i := range gossip {
		gossip[i] = benchkit.Loopback(ports[4*i+2])
	}
	c := &stormCluster{}
	hc := &http.Client{Timeout: 2 * time.Minute, Transport: &http.Transport{MaxIdleConnsPerHost: 4}}
	for i := range stormServers {
		id := stormServerID(i)
		var join []string
		for j := range gossip {
			if j != i {
				join = append(join, gossip[j])
			}
		}
		httpAddr, agentAddr := benchkit.Loopback(ports[4*i]), benchkit.Loopback(ports[4*i+3])
		args := []string{
			"server", "--node-id", id, "--region", "bench",
			"--data-dir", filepath.Join(dir, id),
			"--http-addr", httpAddr, "--raft-addr", benchkit.Loopback(ports[4*i+1]), "--gossip-addr", gossip[i],
			"--join", strings.Join(join, ","), "--bootstrap-expect", fmt.Sprint(stormServers),
			"--agent-addr", agentAddr,
			"--ca-file", p.caFile(), "--cert-file", p.serverCertFile(id), "--key-file", p.serverKeyFile(id),
			"--cluster-secret-file", p.secretFile(),
			// Profiling endpoints, idle unless asked (-keep a run and
			// fetch /debug/pprof/profile from a survivor during the storm).
			"--enable-debug",
		}
		pr, err := g.Start(id, bin, args, nil, dir, filepath.Join(dir, id+".log"))
		if err != nil {
			return nil, err
		}
		c.servers = append(c.servers, &serverProcess{p: pr, api: api.NewClient(httpAddr, hc), agentAddr: agentAddr})
		c.ids = append(c.ids, id)
	}
	for i, sp := range c.servers {
		if err := waitHealthy(ctx, sp.api, sp.p); err != nil {
			return nil, fmt.Errorf("meteor server %s: %w", c.ids[i], err)
		}
	}
	return c, nil
}

// leader returns the index of the server every live server names as
// leader.
func (c *stormCluster) leader(ctx context.Context) (int, error) {
	var leader string
	for i, sp := range c.servers {
		if sp.p.Exited() {
			continue
		}
		h, err := sp.api.Health(ctx)
		if err != nil {
			return -1, fmt.Errorf("health of %s: %w", c.ids[i], err)
		}
		if h.Leader == "" || (leader != "" && h.Leader != leader) {
			return -1, fmt.Errorf("no agreed leader (%s says %q, others %q)", c.ids[i], h.Leader, leader)
		}
		leader = h.Leader
	}
	for i, id := range c.ids {
		if id == leader {
			return i, nil
		}
	}
	return -1, fmt.Errorf("leader %q is not one of %v", leader, c.ids)
}

// waitLeader waits up to a minute until the live servers agree on a
// leader and returns its index.
func (c *stormCluster) waitLeader(ctx context.Context) (int, error) {
	idx := -1
	err := benchkit.WaitFor(ctx, time.Minute, 100*time.Millisecond, nil, func(ctx context.Context) error {
		var err error
		idx, err = c.leader(ctx)
		return err
	})
	return idx, err
}

// cpuTime sums the CPU time of the servers whose indices are given.
func (c *stormCluster) cpuTime(idx []int) (time.Duration, error) {
	var sum time.Duration
	var errs []error
	for _, i := range idx {
		d, err := c.servers[i].p.CPUTime()
		if err != nil {
			errs = append(errs, fmt.Errorf("CPU time of %s: %w", c.ids[i], err))
		}
		sum += d
	}
	return sum, errors.Join(errs...)
}

// raftTerm returns the highest Raft term of the servers that answer (a
// killed one does not): the elections held in a period are its growth
// (benchkit.Elections).
func (c *stormCluster) raftTerm(ctx context.Context) (uint64, error) {
	addrs := make([]string, len(c.servers))
	for i, sp := range c.servers {
		addrs[i] = sp.api.Addr()
	}
	return benchkit.RaftTerm(ctx, addrs)
}

// settle waits until the live servers agree on a leader, each has applied
// its whole Raft log, and the highest last index has not moved for quiet,
// at most limit. Errors while there is no leader (an election during the
// storm) are retried. It returns the highest last index.
func (c *stormCluster) settle(ctx context.Context, quiet, limit time.Duration) (uint64, error) {
	const poll = 250 * time.Millisecond
	deadline := time.Now().Add(limit)
	var last uint64
	stable := 0
	var lastErr error
	for time.Duration(stable)*poll < quiet {
		if time.Now().After(deadline) {
			return 0, fmt.Errorf("Raft log not settled after %s: %v", limit, lastErr)
		}
		top, err := c.indexIfSteady(ctx)
		switch {
		case err != nil:
			stable, lastErr = 0, err
		case top == last:
			stable++
		default:
			stable, last, lastErr = 0, top, fmt.Errorf("last index still moving (%d)", top)
		}
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(poll):
		}
	}
	return last, nil
}

// indexIfSteady returns the highest last index of the live servers if they
// agree on a leader and have applied their whole logs.
func (c *stormCluster) indexIfSteady(ctx context.Context) (uint64, error) {
	var top uint64
	leader := ""
	for i, sp := range c.servers {
		if sp.p.Exited() {
			continue
		}
		h, err := sp.api.Health(ctx)
		if err != nil {
			return 0, fmt.Errorf("health of %s: %w", c.ids[i], err)
		}
		if h.Leader == "" || (leader != "" && h.Leader != leader) {
			return 0, fmt.Errorf("no agreed leader (%s says %q)", c.ids[i], h.Leader)
		}
		if h.AppliedIndex != h.LastIndex {
			return 0, fmt.Errorf("%s applied %d of %d", c.ids[i], h.AppliedIndex, h.LastIndex)
		}
		leader, top = h.Leader, max(top, h.LastIndex)
	}
	return top, nil
}

// agentPorts returns the UDP ports the servers idx serve agents on.
func (c *stormCluster) agentPorts(idx []int) []int {
	var ports []int
	for _, i := range idx {
		if _, p, err := net.SplitHostPort(c.servers[i].agentAddr); err == nil {
			if n, err := strconv.Atoi(p); err == nil {
				ports = append(ports, n)
			}
		}
	}
	return ports
}

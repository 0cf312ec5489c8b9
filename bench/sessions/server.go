package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/meteor-edge/meteor/cluster"
	"github.com/meteor-edge/meteor/cluster/api"
)

// startInProcess starts a single dev server in this process, serving
// agents on a loopback port, and waits until it leads.
func startInProcess(ctx context.Context, p *pki, dir string) (*cluster.Server, func() error, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, nil, err
	}
	logFile, err := os.Create(filepath.Join(dir, "server.log"))
	if err != nil {
		return nil, nil, err
	}
	cfg := cluster.DefaultConfig()
	cfg.NodeID, cfg.Region, cfg.Dev = serverID, "bench", true
	cfg.DataDir = filepath.Join(dir, "data")
	cfg.HTTPAddr, cfg.RaftAddr, cfg.GossipAddr = "127.0.0.1:0", "127.0.0.1:0", "127.0.0.1:0"
	cfg.AgentAddr = "127.0.0.1:0"
	cfg.AgentTLS = &cluster.AgentTLS{ClientCAs: p.pool, Certificate: p.serverCert}
	cfg.ClusterSecret = p.secret
	cfg.Logger = hclog.New(&hclog.LoggerOptions{Name: "meteor", Level: hclog.Info, Output: logFile})
	srv, err := cluster.New(cfg)
	if err != nil {
		logFile.Close()
		return nil, nil, err
	}
	stop := func() error {
		err := srv.Shutdown()
		logFile.Close()
		return err
	}
	cl := api.NewClient(srv.HTTPAddr(), nil)
	if err := waitHealthy(ctx, cl, 60*time.Second, nil); err != nil {
		stop()
		return nil, nil, fmt.Errorf("in-process server: %w", err)
	}
	return srv, stop, nil
}

// waitHealthy waits until the server reports a leader and a healthy
// state; exited, if not nil, reports a server process that died.
func waitHealthy(ctx context.Context, cl *api.Client, timeout time.Duration, p *proc) error {
	deadline := time.Now().Add(timeout)
	for {
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		h, err := cl.Health(cctx)
		cancel()
		if err == nil && h.Healthy && h.Leader != "" {
			return nil
		}
		if err == nil {
			err = fmt.Errorf("not healthy: %s", h.Message)
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if p != nil && p.exited() {
			return fmt.Errorf("exited (%v); last log lines from %s:\n%s", p.err, p.logPath, p.logTail(20))
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not ready after %s: %w", timeout, err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// putIntent writes the fleet intent at its current versions.
func putIntent(ctx context.Context, cl *api.Client, f *fleetIntent) (uint64, error) {
	doc, err := f.document()
	if err != nil {
		return 0, err
	}
	res, err := cl.PutIntent(ctx, intentName, doc, nil)
	if err != nil {
		return 0, fmt.Errorf("put intent %q: %w", intentName, err)
	}
	return res.Revision, nil
}

// freePorts returns n distinct loopback ports free for TCP and UDP (gossip
// uses both; agents use UDP). They are released before returning, so
// another process could take one first: the server then fails to start
// with "address in use".
func freePorts(n int) ([]int, error) {
	var closers []io.Closer
	defer func() {
		for _, c := range closers {
			c.Close()
		}
	}()
	var ports []int
	for tries := 0; len(ports) < n; tries++ {
		if tries > 100*n {
			return nil, errors.New("cannot find free loopback ports")
		}
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("find a free port: %w", err)
		}
		closers = append(closers, ln)
		port := ln.Addr().(*net.TCPAddr).Port
		pc, err := net.ListenPacket("udp", loopback(port))
		if err != nil {
			continue
		}
		closers = append(closers, pc)
		ports = append(ports, port)
	}
	return ports, nil
}

func loopback(port int) string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(port)) }

// serverProcess is `meteor server --dev` in its own process.
type serverProcess struct {
	p         *proc
	api       *api.Client
	agentAddr string
}

// startServerProcess starts `meteor server --dev` serving agents, with
// GODEBUG=gctrace=1 so its log shows the live heap, and waits until it
// leads.
func startServerProcess(ctx context.Context, g *procGroup, bin string, p *pki, dir string) (*serverProcess, error) {
	ports, err := freePorts(4)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	args := []string{
		"server", "--dev", "--node-id", serverID, "--region", "bench",
		"--data-dir", filepath.Join(dir, "data"),
		"--http-addr", loopback(ports[0]), "--raft-addr", loopback(ports[1]), "--gossip-addr", loopback(ports[2]),
		"--agent-addr", loopback(ports[3]),
		"--ca-file", p.caFile(), "--cert-file", p.certFile(), "--key-file", p.keyFile(),
		"--cluster-secret-file", p.secretFile(),
	}
	pr, err := g.start("meteor", bin, args, []string{"GODEBUG=gctrace=1"}, dir, filepath.Join(dir, "server.log"))
	if err != nil {
		return nil, err
	}
	hc := &http.Client{Timeout: 2 * time.Minute, Transport: &http.Transport{MaxIdleConnsPerHost: 4}}
	sp := &serverProcess{p: pr, api: api.NewClient(loopback(ports[0]), hc), agentAddr: loopback(ports[3])}
	if err := waitHealthy(ctx, sp.api, 60*time.Second, pr); err != nil {
		return nil, fmt.Errorf("meteor server: %w", err)
	}
	return sp, nil
}

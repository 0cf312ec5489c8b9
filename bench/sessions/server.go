package main

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/meteor-edge/meteor/bench/internal/benchkit"
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
	if err := waitHealthy(ctx, cl, nil); err != nil {
		stop()
		return nil, nil, fmt.Errorf("in-process server: %w", err)
	}
	return srv, stop, nil
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

// serverProcess is `meteor server --dev` in its own process.
type serverProcess struct {
	p         *benchkit.Proc
	api       *api.Client
	agentAddr string
}

// startServerProcess starts `meteor server --dev` serving agents, with
// GODEBUG=gctrace=1 so its log shows the live heap, and waits until it
// leads.
func startServerProcess(ctx context.Context, g *benchkit.Group, bin string, p *pki, dir string) (*serverProcess, error) {
	ports, err := benchkit.FreePorts(4, true)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	args := []string{
		"server", "--dev", "--node-id", serverID, "--region", "bench",
		"--data-dir", filepath.Join(dir, "data"),
		"--http-addr", benchkit.Loopback(ports[0]), "--raft-addr", benchkit.Loopback(ports[1]), "--gossip-addr", benchkit.Loopback(ports[2]),
		"--agent-addr", benchkit.Loopback(ports[3]),
		"--ca-file", p.caFile(), "--cert-file", p.certFile(), "--key-file", p.keyFile(),
		"--cluster-secret-file", p.secretFile(),
	}
	pr, err := g.Start("meteor", bin, args, []string{"GODEBUG=gctrace=1"}, dir, filepath.Join(dir, "server.log"))
	if err != nil {
		return nil, err
	}
	hc := &http.Client{Timeout: 2 * time.Minute, Transport: &http.Transport{MaxIdleConnsPerHost: 4}}
	sp := &serverProcess{p: pr, api: api.NewClient(benchkit.Loopback(ports[0]), hc), agentAddr: benchkit.Loopback(ports[3])}
	if err := waitHealthy(ctx, sp.api, pr); err != nil {
		return nil, fmt.Errorf("meteor server: %w", err)
	}
	return sp, nil
}

// waitHealthy waits up to a minute until the server reports a leader and
// a healthy state; p, if not nil, is the server's process, whose exit ends
// the wait.
func waitHealthy(ctx context.Context, cl *api.Client, p *benchkit.Proc) error {
	return benchkit.WaitFor(ctx, 60*time.Second, 100*time.Millisecond, p, func(ctx context.Context) error {
		h, err := cl.Health(ctx)
		if err != nil {
			return err
		}
		if !h.Healthy || h.Leader == "" {
			return fmt.Errorf("not healthy: %s", h.Message)
		}
		return nil
	})
}

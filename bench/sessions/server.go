package main

import (
	"context"
	"fmt"
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
	if err := waitHealthy(ctx, cl); err != nil {
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

// waitHealthy waits up to a minute until the in-process server reports a
// leader and a healthy state.
func waitHealthy(ctx context.Context, cl *api.Client) error {
	return benchkit.WaitFor(ctx, 60*time.Second, 100*time.Millisecond, nil, func(ctx context.Context) error {
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

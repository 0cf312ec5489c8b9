package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"path/filepath"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/meteor-edge/meteor/agent/sim"
	"github.com/meteor-edge/meteor/cluster/api"
	"github.com/meteor-edge/meteor/fsm/intent"
)

// runDevFleet runs a simulated fleet against the dev cluster, applies the
// intents in o.changes one after another (each once the previous one has
// converged on 99 % of the devices it targets, or after a bound), and
// redraws the fleet status every second until Ctrl-C.
func runDevFleet(ctx context.Context, out io.Writer, c *api.Client, o devOptions, servers []string, pkiDir string, logger hclog.Logger) error {
	opts := sim.DefaultOptions()
	opts.Servers, opts.PKIDir, opts.Profile, opts.Devices = servers, pkiDir, o.fleet, o.fleetDevices
	opts.BaseDir = filepath.Join(o.dataDir, "fleet")
	opts.Seed = 1
	opts.Logger = logger.Named("fleet")
	opts.Summary = io.Discard
	fleet, err := sim.New(opts)
	if err != nil {
		return err
	}
	fctx, stopFleet := context.WithCancel(ctx)
	defer stopFleet()
	var wg sync.WaitGroup
	var fleetErr error
	wg.Add(1)
	go func() {
		defer wg.Done()
		fleetErr = fleet.Run(fctx)
	}()
	defer func() {
		stopFleet()
		wg.Wait()
		if fleetErr != nil {
			fmt.Fprintln(out, "fleet:", fleetErr)
		}
	}()

	var changes []string
	if o.changes != "" {
		docs, err := readIntents(o.changes)
		if err != nil {
			return err
		}
		for _, in := range docs {
			changes = append(changes, in.Name)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			applyChanges(fctx, c, docs, logger)
		}()
	}

	ticker := time.NewTicker(time.Second)
	defer ticker.Stop()
	start := time.Now()
	for {
		st, err := c.Status(ctx, api.ReadOptions{Stale: true})
		var buf bytes.Buffer
		fmt.Fprintf(&buf, "\033[H\033[2JMeteor dev: %d-device %s fleet on a 3-server cluster, %s  (Ctrl-C stops everything)\n", fleet.Len(), o.fleet, time.Since(start).Round(time.Second))
		fmt.Fprintf(&buf, "HTTP API: %s    agents: %v\n", c.Addr(), servers)
		fmt.Fprintf(&buf, "Devices as the agents see them: %s\n\n", fleet.Summary())
		if err != nil {
			fmt.Fprintf(&buf, "cannot read status: %v\n", err)
		} else {
			printStatus(&buf, st)
		}
		if len(changes) > 0 {
			fmt.Fprintf(&buf, "\nChanges applied in order, each once the previous converged: %v\n", changes)
		}
		out.Write(buf.Bytes())
		select {
		case <-ctx.Done():
			return nil
		case <-ticker.C:
		}
	}
}

// applyChanges applies intents one after another, waiting for each to
// converge on 99 % of its targets (at most 3 minutes).
func applyChanges(ctx context.Context, c *api.Client, docs []*intent.Intent, logger hclog.Logger) {
	for _, in := range docs {
		body, err := json.Marshal(in)
		if err != nil {
			logger.Error("encode change", "intent", in.Name, "error", err)
			return
		}
		// Let the fleet connect before the first change.
		select {
		case <-ctx.Done():
			return
		case <-time.After(5 * time.Second):
		}
		if _, err := c.PutIntent(ctx, in.Name, body, nil); err != nil {
			logger.Error("apply change", "intent", in.Name, "error", err)
			return
		}
		deadline := time.Now().Add(3 * time.Minute)
		for time.Now().Before(deadline) {
			p, err := c.IntentProgress(ctx, in.Name, api.ReadOptions{Stale: true})
			if err == nil && p.Targeted > 0 && p.Converged*100 >= p.Targeted*99 {
				break
			}
			select {
			case <-ctx.Done():
				return
			case <-time.After(time.Second):
			}
		}
	}
}

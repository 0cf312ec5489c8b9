package scenario

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/meteor-edge/meteor/agent/sim"
	"github.com/meteor-edge/meteor/cluster/api"
	"github.com/meteor-edge/meteor/scheduler"
)

// TestSimulatedFleetOf200 runs 200 simulated devices on cellular links
// with 5 % loss each way (and outages scaled to seconds) against a
// 3-server in-process cluster, applies one change, and checks that every
// device converges within a generous bound and that the simulator's
// report counts what every server's GET /v1/status counts.
func TestSimulatedFleetOf200(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a cluster and 200 agents")
	}
	const n = 200
	ctx := context.Background()
	startCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	h, err := NewHarness(startCtx, HarnessConfig{Servers: 3, Dir: filepath.Join(t.TempDir(), "data"), Seed: 200, Agents: true, Log: newTestWriter(t)})
	cancel()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })

	opts := sim.DefaultOptions()
	opts.Servers, opts.CA, opts.BaseDir = h.AgentAddrs(), h.CA(), filepath.Join(t.TempDir(), "devices")
	opts.Devices, opts.Profile, opts.Seed, opts.Loss, opts.TimeScale = n, sim.LinkCellular, 200, 0.05, 0.01
	opts.RampBatch, opts.RampEvery = 50, 100*time.Millisecond
	opts.SampleEvery = 100 * time.Millisecond
	opts.Logger = hclog.NewNullLogger()
	opts.Agent = fastAgent
	fleet, err := sim.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- fleet.Run(runCtx) }()
	t.Cleanup(func() {
		stop()
		if err := <-done; err != nil {
			t.Errorf("fleet: %v", err)
		}
	})

	// Under -race on two cores an election may interrupt the write: write
	// again until one is acknowledged (the same document; the revision
	// marked is the one acknowledged). Each try itself retries no_leader
	// answers for 10 s; the bound is that of 20 such tries.
	cl := api.NewClient(h.HTTPAddr(0), nil)
	var rev uint64
	if err := waitFor(ctx, 3*time.Minute, 500*time.Millisecond, func(ctx context.Context) error {
		res, err := cl.PutIntent(ctx, fleetIntent, fleetDocument(1, 50*time.Millisecond), nil)
		if err == nil {
			rev = res.Revision
		}
		return err
	}); err != nil {
		t.Fatalf("fleet intent not acknowledged: %v", err)
	}
	fleet.Mark(rev)
	start := time.Now()
	var rep *sim.Report
	// Generous: 200 agents under -race on two cores.
	if err := waitFor(ctx, 3*time.Minute, 100*time.Millisecond, func(context.Context) error {
		rep = fleet.Report()
		converged := 0
		for _, d := range rep.DeviceReports {
			if d.ConvergedAfter != nil {
				converged++
			}
		}
		if converged < n {
			return fmt.Errorf("%d of %d devices converged", converged, n)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	t.Logf("200 devices converged in %v; %s", time.Since(start).Round(time.Millisecond), fleet.Summary())

	// Every server counts what the simulator counts, once the owners'
	// transitions are committed: 30 s for all of them.
	waitUntil := time.Now().Add(30 * time.Second)
	for i := range h.Size() {
		status := api.NewClient(h.HTTPAddr(i), nil)
		if err := waitFor(ctx, time.Until(waitUntil), 100*time.Millisecond, func(ctx context.Context) error {
			st, err := status.Status(ctx, api.ReadOptions{Stale: true})
			if err != nil {
				return err
			}
			if st.Devices != rep.Devices || st.ByStatus[scheduler.StatusConverged] != n {
				b, _ := json.Marshal(st)
				return fmt.Errorf("status %s", b)
			}
			return nil
		}); err != nil {
			t.Errorf("server %s: %v; want %d devices converged as the simulator reports", h.ID(i), err, n)
			logUnconverged(t, status)
			t.FailNow()
		}
	}
	var conv int
	for _, l := range rep.Links {
		conv += l.Devices
	}
	if conv != n {
		t.Fatalf("report lists %d devices, want %d", conv, n)
	}
}

// logUnconverged logs the devices a server does not count converged, with
// their timelines.
func logUnconverged(t *testing.T, cl *api.Client) {
	t.Helper()
	ctx := context.Background()
	list, err := cl.ListDevices(ctx, api.ReadOptions{Stale: true})
	if err != nil {
		t.Logf("list devices: %v", err)
		return
	}
	for _, d := range list.Devices {
		if d.Status == scheduler.StatusConverged {
			continue
		}
		full, _ := cl.GetDevice(ctx, d.ID, api.ReadOptions{Stale: true})
		b, _ := json.Marshal(full)
		t.Logf("%s: %s", d.ID, b)
		if tl, err := cl.Timeline(ctx, d.ID, api.ReadOptions{Stale: true}); err == nil {
			b, _ := json.Marshal(tl.Entries)
			t.Logf("%s timeline: %s", d.ID, b)
		}
	}
}

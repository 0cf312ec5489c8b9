package scenario

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"testing"
	"time"

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

	// The devices run in a child process at a lower priority, as they
	// would on machines of their own: in the servers' process they took
	// the CPU the servers' Raft heartbeats needed (fleetNice).
	dir := t.TempDir()
	fleet, err := startFleetProcess(h.CA(), fleetProcessSpec{
		Servers: h.AgentAddrs(), BaseDir: filepath.Join(dir, "devices"),
		Devices: n, Profile: sim.LinkCellular, Seed: 200, Loss: 0.05, TimeScale: 0.01,
		RampBatch: 50, RampEvery: 100 * time.Millisecond, SampleEvery: 100 * time.Millisecond,
		FastAgent: true,
	}, dir, newTestWriter(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := fleet.stop(); err != nil {
			t.Errorf("fleet process: %v", err)
		}
	})
	term0 := h.MaxTerm(ctx)

	// ApplyIntent retries through elections without writing twice.
	cl := h.Client(0)
	wctx, wcancel := context.WithTimeout(ctx, 3*time.Minute)
	res, err := cl.ApplyIntent(wctx, fleetIntent, fleetDocument(1, 50*time.Millisecond), nil)
	wcancel()
	if err != nil {
		t.Fatalf("fleet intent not acknowledged: %v", err)
	}
	if err := fleet.Mark(res.Revision); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	var rep *sim.Report
	// Generous: 200 agents under -race on two cores.
	if err := waitFor(ctx, 3*time.Minute, 100*time.Millisecond, func(context.Context) error {
		var err error
		if rep, err = fleet.Report(); err != nil {
			return err
		}
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
	t.Logf("200 devices converged in %v; %s; %d elections", time.Since(start).Round(time.Millisecond), fleet.Summary(), h.MaxTerm(ctx)-term0)

	// Every server agrees with the simulator, once the owners'
	// transitions are committed: a device the simulator sees connected
	// and converged is converged on every server; one whose cellular link
	// is down at that moment may be unreachable there (silence past its
	// class's bound), never anything else. The fleet summary counts the
	// same as the device list. The simulator's view is read afresh each
	// time: links drop and come back while the servers are checked.
	waitUntil := time.Now().Add(30 * time.Second)
	for i := range h.Size() {
		status := h.Client(i)
		if err := waitFor(ctx, time.Until(waitUntil), 100*time.Millisecond, func(ctx context.Context) error {
			now, err := fleet.Report()
			if err != nil {
				return err
			}
			list, err := status.ListDevices(ctx, api.ReadOptions{Stale: true})
			if err != nil {
				return err
			}
			st, err := status.Status(ctx, api.ReadOptions{Stale: true})
			if err != nil {
				return err
			}
			byID := map[string]string{}
			converged := 0
			for _, d := range list.Devices {
				byID[d.ID] = d.Status
				if d.Status == scheduler.StatusConverged {
					converged++
				}
			}
			if st.Devices != n || len(byID) != n || st.ByStatus[scheduler.StatusConverged] != converged {
				b, _ := json.Marshal(st)
				return fmt.Errorf("status %s against %d devices listed, %d converged", b, len(byID), converged)
			}
			for _, d := range now.DeviceReports {
				got := byID[d.ID]
				if got == scheduler.StatusConverged || (!(d.Connected && d.Converged) && got == scheduler.StatusUnreachable) {
					continue
				}
				return fmt.Errorf("device %s is %q, while the simulator sees it connected %v, converged %v", d.ID, got, d.Connected, d.Converged)
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

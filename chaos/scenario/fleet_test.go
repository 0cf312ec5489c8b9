package scenario

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
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
	// transitions are committed: a device the simulator sees connected,
	// converged and receiving from its server (the server's keep-alives
	// reach a live session every second) is converged on every server;
	// any other device may be unreachable there (silence past its class's
	// bound), never anything else. The simulated devices run at a lower
	// priority (fleetNice), and on a busy host an agent can go seconds
	// without running: its session has ended on the server while it still
	// believes itself connected, which is why a belief alone is not
	// enough. Links drop and sessions move while the servers are checked,
	// and some device of 200 is always between two such states, so each
	// device must be seen agreeing at some sample, not all 200 at one.
	// The fleet summary counts the same as the device list whenever the
	// two answers describe the same replica state (the same index).
	heard := map[string]time.Time{} // device → when the bytes it received last grew
	received := map[string]uint64{}
	for i := range h.Size() {
		status := h.Client(i)
		pending := map[string]string{} // device → why it did not agree yet
		for _, d := range rep.DeviceReports {
			pending[d.ID] = "not sampled"
		}
		compared := 0 // samples of status and list at one index
		var mismatch error
		agreed := func(ctx context.Context) error {
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
			if len(byID) != n {
				return fmt.Errorf("%d devices listed, want %d", len(byID), n)
			}
			if st.Index == list.Index {
				compared++
				if st.Devices != n || st.ByStatus[scheduler.StatusConverged] != converged {
					b, _ := json.Marshal(st)
					mismatch = fmt.Errorf("at index %d: status %s against %d devices listed, %d converged", st.Index, b, len(byID), converged)
					return nil // fails below: no retry repairs it
				}
			}
			for _, d := range now.DeviceReports {
				if d.ReceivedBytes != received[d.ID] {
					received[d.ID], heard[d.ID] = d.ReceivedBytes, time.Now()
				}
				live := d.Connected && d.Converged && time.Since(heard[d.ID]) < 2500*time.Millisecond
				got := byID[d.ID]
				if got == scheduler.StatusConverged || (!live && got == scheduler.StatusUnreachable) {
					delete(pending, d.ID)
				} else if _, ok := pending[d.ID]; ok {
					pending[d.ID] = fmt.Sprintf("%q, while the simulator sees it connected %v, converged %v, received from its server in the last 2.5 s %v", got, d.Connected, d.Converged, time.Since(heard[d.ID]) < 2500*time.Millisecond)
				}
			}
			if len(pending) > 0 {
				return fmt.Errorf("%d devices never agreed with the simulator (e.g. %s)", len(pending), firstPending(pending))
			}
			return nil
		}
		// Each server has agreeTime of a stable leader to agree: a
		// leader election (the term growing) starts it again, as no
		// status commits while the cluster elects, and so does any moment
		// in which a running server follows no leader: the highest term
		// is read over the API, which busy servers may not answer in
		// time, and pre-vote rounds that fail leave terms alone, so a
		// loaded host once kept the cluster leaderless for 30 s without
		// the term seen to grow. A status batch that an owner could not
		// commit, or a report a session server could not have recorded
		// (a leader or an owner too busy to answer in time), starts it
		// again too: the devices' reports wait for their resend. Elections are
		// counted and logged; this test is about agreement.
		const agreeTime = 30 * time.Second
		stableSince, term, failed := time.Now(), h.MaxTerm(ctx), recordingFailures(h)
		var late error
		err := waitFor(ctx, 3*agreeTime, 100*time.Millisecond, func(ctx context.Context) error {
			if now := h.MaxTerm(ctx); now > term {
				t.Logf("server %s: the cluster elected (term %d to %d) while the devices were compared; %v more to agree", h.ID(i), term, now, agreeTime)
				stableSince, term = time.Now(), now
			}
			if lost := withoutLeader(h); lost != "" {
				if time.Since(stableSince) > time.Second {
					t.Logf("server %s: %s while the devices were compared; %v more to agree once it has one", h.ID(i), lost, agreeTime)
				}
				stableSince = time.Now()
			}
			if n := recordingFailures(h); n > failed {
				if time.Since(stableSince) > time.Second {
					t.Logf("server %s: %d status batches or reports not recorded while the devices were compared; %v more to agree once they are", h.ID(i), n-failed, agreeTime)
				}
				stableSince, failed = time.Now(), n
			} else if n < failed {
				failed = n // a server restarted, its count from zero
			}
			err := agreed(ctx)
			if err != nil && time.Since(stableSince) > agreeTime {
				late = fmt.Errorf("after %v of a stable leader: %w", agreeTime, err)
				return nil // fails below
			}
			return err
		})
		if err == nil {
			err = late
		}
		if mismatch != nil {
			t.Fatalf("server %s: %v: the fleet summary and the device list disagree", h.ID(i), mismatch)
		}
		if err != nil {
			t.Errorf("server %s: %v; want %d devices converged as the simulator reports", h.ID(i), err, n)
			logUnconverged(t, status)
			t.FailNow()
		}
		t.Logf("server %s: every device agreed with the simulator; status and device list compared at %d samples with one index", h.ID(i), compared)
	}
	var conv int
	for _, l := range rep.Links {
		conv += l.Devices
	}
	if conv != n {
		t.Fatalf("report lists %d devices, want %d", conv, n)
	}
}

// firstPending names the first device (in ID order) of pending, with why.
func firstPending(pending map[string]string) string {
	ids := slices.Sorted(maps.Keys(pending))
	if len(ids) == 0 {
		return "none"
	}
	return ids[0] + " " + pending[ids[0]]
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

// withoutLeader names a running server of h that follows no leader, or
// another than the rest: "" when every running server follows the same one.
func withoutLeader(h *Harness) string {
	leader := ""
	for _, s := range h.Servers() {
		if s == nil {
			continue
		}
		_, id := s.Raft().LeaderWithID()
		switch {
		case id == "":
			return s.ID() + " follows no leader"
		case leader == "":
			leader = string(id)
		case string(id) != leader:
			return fmt.Sprintf("%s follows %s, another server %s", s.ID(), id, leader)
		}
	}
	return ""
}

// recordingFailures sums what the running servers of h could not record:
// the status batches their owners could not commit
// (meteor_status_batches_failed_total) and the tries to record a report
// that failed (meteor_agent_report_failures_total).
func recordingFailures(h *Harness) uint64 {
	var n uint64
	for _, s := range h.Servers() {
		if s != nil {
			n += s.StatusBatchesFailed() + s.AgentStats().ReportFailures
		}
	}
	return n
}

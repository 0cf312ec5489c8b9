package cluster

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/meteor-edge/meteor/agent"
	"github.com/meteor-edge/meteor/chaos"
	"github.com/meteor-edge/meteor/cluster/api"
)

// TestLockBrokenByAnOperator: a workload on a device takes a lock (through
// the agent's control socket) that one resource requires; that resource is
// blocked, with the holder, while the other applies; the servers show the
// lock, stale past its maximum hold; an operator's order through the API
// breaks it on the device, the step goes through, and the order, its
// outcome and the step are in the device's record and timeline.
func TestLockBrokenByAnOperator(t *testing.T) {
	pki := newTestPKI(t)
	c := newTestCluster(t, 1, pki.withAgents(t))
	s := c.Server(0)
	in := filesIntent("store-config", 2, "v1")
	in.Resources[1].Requires = []string{"lock:pos-sync"}
	var dataDir string
	ra := startAgent(t, pki, "till-1", agentAddrs(c), map[string]string{"region": "eu"}, chaos.LinkProfile{}, func(cfg *agent.Config) { dataDir = cfg.DataDir })
	waitFor(t, 20*time.Second, func() error {
		if !ra.Status().Connected {
			return fmt.Errorf("not connected")
		}
		return nil
	})
	if _, err := agent.Control(context.Background(), filepath.Join(dataDir, agent.DefaultControlSocket),
		agent.ControlRequest{Op: agent.OpLockAcquire, Lock: "pos-sync", Holder: "end-of-day sync", MaxHold: "1s"}); err != nil {
		t.Fatal(err)
	}
	c.propose(in)
	dev := func() (*api.Device, error) {
		return client(s).GetDevice(context.Background(), "till-1", api.ReadOptions{Stale: true})
	}
	waitFor(t, 20*time.Second, func() error {
		d, err := dev()
		if err != nil {
			return err
		}
		if len(d.States) != 2 || d.States[0].AgentState != "converged" || d.States[1].AgentState != "blocked" || d.States[1].Hold == nil || d.States[1].Hold.Kind != "lock" {
			return fmt.Errorf("states %+v", d.States)
		}
		if d.Status != "blocked" || !strings.Contains(d.StatusReason, "waits for lock pos-sync held by end-of-day sync since") {
			return fmt.Errorf("status %s (%s)", d.Status, d.StatusReason)
		}
		if len(d.Locks) != 1 || d.Locks[0].Name != "pos-sync" || !d.Locks[0].Stale || d.Locks[0].Source != "agent" {
			return fmt.Errorf("locks %+v", d.Locks)
		}
		return nil
	})
	if _, err := client(s).UnlockDevice(context.Background(), "till-1", "nope", "x"); err == nil || !strings.Contains(err.Error(), `reports no lock "nope" held`) {
		t.Errorf("unlock of a lock not held: %v", err)
	}
	order, err := client(s).UnlockDevice(context.Background(), "till-1", "pos-sync", "sync hung")
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, 20*time.Second, func() error {
		d, err := dev()
		if err != nil {
			return err
		}
		if !d.Converged || len(d.Locks) != 0 || len(d.Unlocks) != 1 || d.Unlocks[0].Outcome != "broken" || d.Unlocks[0].Index != order.Index {
			return fmt.Errorf("converged %v, locks %+v, unlocks %+v", d.Converged, d.Locks, d.Unlocks)
		}
		return nil
	})
	tl, err := client(s).Timeline(context.Background(), "till-1", api.ReadOptions{Stale: true})
	if err != nil {
		t.Fatal(err)
	}
	var reasons []string
	for _, e := range tl.Entries {
		reasons = append(reasons, e.Reason)
	}
	joined := strings.Join(reasons, "\n")
	if !strings.Contains(joined, "operator ordered: break lock pos-sync held since") || !strings.Contains(joined, "the device reports lock pos-sync broken") {
		t.Errorf("timeline:\n%s", joined)
	}
}

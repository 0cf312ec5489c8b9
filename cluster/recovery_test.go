package cluster

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/meteor-edge/meteor/agent"
	"github.com/meteor-edge/meteor/agent/driver"
	"github.com/meteor-edge/meteor/chaos"
	"github.com/meteor-edge/meteor/cluster/api"
	"github.com/meteor-edge/meteor/fsm/intent"
)

// gatedSim is the sim driver, whose Apply of one resource waits until the
// test lets it through (or the agent stops).
type gatedSim struct {
	driver.Driver
	id      string
	reached chan struct{} // closed when the gated Apply began
}

func (d *gatedSim) Apply(ctx context.Context, r intent.Resource) error {
	if r.ID == d.id && d.reached != nil {
		close(d.reached)
		<-ctx.Done()
		return ctx.Err()
	}
	return d.Driver.Apply(ctx, r)
}

// TestPowerLossStoryThroughTheAPI: a device loses power while applying
// the third of five changes; its agent, started again on the same
// journal, resolves the interrupted step and resumes the rest, and the
// servers tell the story: the device's recovery (2 of 5 applied, which
// step was interrupted and how it was resolved) in GET /v1/devices/{id}
// and in its timeline.
func TestPowerLossStoryThroughTheAPI(t *testing.T) {
	pki := newTestPKI(t)
	c := newTestCluster(t, 1, pki.withAgents(t))
	s := c.Server(0)
	in := &intent.Intent{Name: "kiosk", Selector: map[string]string{"region": "eu"}}
	for i := 1; i <= 5; i++ {
		// f1 < f2 < ...: each requires the one before, so they go in order.
		r := intent.Resource{ID: fmt.Sprintf("f%d", i), Type: "sim", Spec: map[string]any{"value": fmt.Sprintf("v%d", i)}}
		if i > 1 {
			r.Requires = []string{fmt.Sprintf("f%d", i-1)}
		}
		in.Resources = append(in.Resources, r)
	}
	dev := driver.NewSimDevice(1)
	registry := func(gate *gatedSim) *driver.Registry {
		reg, err := driver.NewRegistry(driver.Config{Sim: dev})
		if err != nil {
			t.Fatal(err)
		}
		sim, _ := reg.Lookup("sim")
		gate.Driver = sim
		reg.Register("sim", gate)
		return reg
	}
	dataDir := t.TempDir()
	gate := &gatedSim{id: "f3", reached: make(chan struct{})}
	first := startAgent(t, pki, "kiosk-1", agentAddrs(c), map[string]string{"region": "eu"}, chaos.LinkProfile{}, func(cfg *agent.Config) {
		cfg.DataDir, cfg.Drivers = dataDir, registry(gate)
	})
	c.propose(in)
	select {
	case <-gate.reached:
	case <-time.After(30 * time.Second):
		t.Fatal("the agent never began the third step")
	}
	first.PowerCut() // the power goes in the middle of the third step
	first.stop()

	startAgent(t, pki, "kiosk-1", agentAddrs(c), map[string]string{"region": "eu"}, chaos.LinkProfile{}, func(cfg *agent.Config) {
		cfg.DataDir, cfg.Drivers = dataDir, registry(&gatedSim{})
	})
	var d *api.Device
	waitFor(t, 30*time.Second, func() error {
		var err error
		if d, err = client(s).GetDevice(context.Background(), "kiosk-1", api.ReadOptions{Stale: true}); err != nil {
			return err
		}
		if !d.Converged || d.Recovery == nil {
			return fmt.Errorf("converged %v, recovery %+v", d.Converged, d.Recovery)
		}
		return nil
	})
	r := d.Recovery
	if !r.Unclean || r.Desired != 5 || r.AppliedBefore != 2 || len(r.Interrupted) != 1 ||
		r.Interrupted[0] != (api.RecoveredStep{Resource: "kiosk/f3", Outcome: "applied again"}) {
		t.Fatalf("recovery %+v", r)
	}
	want := "the agent restarted after a crash or power loss: 2 of 5 resources were applied; kiosk/f3 was interrupted mid-step, re-checked: applied again; the other 2 resumed"
	if r.Story != want {
		t.Errorf("story %q\nwant  %q", r.Story, want)
	}
	tl, err := client(s).Timeline(context.Background(), "kiosk-1", api.ReadOptions{Stale: true})
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, e := range tl.Entries {
		found = found || strings.Contains(e.Reason, want)
	}
	if !found {
		t.Errorf("the timeline does not tell the story: %+v", tl.Entries)
	}
}

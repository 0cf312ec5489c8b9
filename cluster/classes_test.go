package cluster

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/meteor-edge/meteor/chaos"
	"github.com/meteor-edge/meteor/cluster/api"
	"github.com/meteor-edge/meteor/fsm/intent"
)

// TestClassChangeReachesAgents: a class written through the API reaches a
// connected agent in its session's settings within seconds, and the agent
// reconciles on it (its status says the new cadences); deleting it brings
// the server's own class back.
func TestClassChangeReachesAgents(t *testing.T) {
	pki := newTestPKI(t)
	c := newTestCluster(t, 1, pki.withAgents(t))
	s := c.Server(0)
	c.propose(filesIntent("store-config", 1, "v1"))
	ra := startAgent(t, pki, "dev-1", agentAddrs(c), map[string]string{"region": "eu"}, chaos.LinkProfile{}, nil)
	waitCadence := func(probe, pull time.Duration) {
		t.Helper()
		waitFor(t, 20*time.Second, func() error {
			st := ra.Status()
			if got := st.ProbeIntervals[intent.DefaultClass]; got != probe || st.PullInterval != pull {
				return fmt.Errorf("agent probes every %v and pulls every %v (settings %d), want %v and %v", got, st.PullInterval, st.SettingsSeq, probe, pull)
			}
			return nil
		})
	}
	waitCadence(time.Second, 2*time.Second) // the test cluster's classes

	def := api.ClassOf(intent.BuiltinClasses()[intent.DefaultClass])
	def.ProbeInterval, def.PullInterval = "7s", "3s"
	if _, err := client(s).PutClass(context.Background(), def); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	waitCadence(7*time.Second, 3*time.Second)
	t.Logf("class change reached the agent in %v", time.Since(start).Round(time.Millisecond))

	if err := client(s).DeleteClass(context.Background(), intent.DefaultClass); err != nil {
		t.Fatal(err)
	}
	waitCadence(time.Second, 2*time.Second)
}

// TestMaintenanceWindowHoldsADisruptiveStep: a maintenance window written
// through the API reaches the agent of a device it selects with the
// device's time zone (its reported timezone label); a disruptive resource
// is blocked until the window opens, which the device's status and the
// API say, while the rest applies; a window rewritten to be open now lets
// the step through within seconds.
func TestMaintenanceWindowHoldsADisruptiveStep(t *testing.T) {
	pki := newTestPKI(t)
	c := newTestCluster(t, 1, pki.withAgents(t))
	s := c.Server(0)
	tokyo, err := time.LoadLocation("Asia/Tokyo")
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now().In(tokyo)
	span := func(from, to time.Time) api.WindowSpan {
		return api.WindowSpan{Days: "daily", From: from.Format("15:04"), To: to.Format("15:04")}
	}
	win := api.MaintenanceWindow{Name: "store-nights", Selector: map[string]string{"region": "eu"},
		Schedule: []api.WindowSpan{span(now.Add(3*time.Hour), now.Add(4*time.Hour))}}
	if _, err := client(s).PutMaintenanceWindow(context.Background(), win); err != nil {
		t.Fatal(err)
	}
	in := filesIntent("store-config", 2, "v1")
	in.Resources[1].Disruptive = true
	c.propose(in)
	ra := startAgent(t, pki, "dev-1", agentAddrs(c), map[string]string{"region": "eu", "timezone": "Asia.Tokyo"}, chaos.LinkProfile{}, nil)
	held := func() (*api.ResourceState, error) {
		d, err := client(s).GetDevice(context.Background(), "dev-1", api.ReadOptions{Stale: true})
		if err != nil {
			return nil, err
		}
		for i := range d.States {
			if d.States[i].Key == "store-config/f01" {
				return &d.States[i], nil
			}
		}
		return nil, fmt.Errorf("no store-config/f01 in %+v", d.States)
	}
	waitFor(t, 20*time.Second, func() error {
		st, err := held()
		if err != nil {
			return err
		}
		if st.AgentState != "blocked" || st.Hold == nil || st.Hold.Kind != "window" || st.Hold.Holder != "store-nights" || st.Hold.Note != "Asia/Tokyo" || st.Hold.Until == nil {
			return fmt.Errorf("store-config/f01: %s, hold %+v", st.AgentState, st.Hold)
		}
		if opens := now.Add(3 * time.Hour).Truncate(time.Minute); st.Hold.Until.Sub(opens).Abs() > time.Minute {
			return fmt.Errorf("held until %v, want %v", st.Hold.Until, opens)
		}
		return nil
	})
	if st := ra.Status(); st.Resources[0].State != "converged" {
		t.Fatalf("the resource that is not disruptive: %+v", st.Resources[0])
	}
	// Open now: the step goes through.
	win.Schedule = []api.WindowSpan{span(now.Add(-time.Hour), now.Add(time.Hour))}
	if _, err := client(s).PutMaintenanceWindow(context.Background(), win); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 20*time.Second, func() error {
		st, err := held()
		if err != nil {
			return err
		}
		if st.AgentState != "converged" || st.Hold != nil {
			return fmt.Errorf("store-config/f01 with its window open: %s, hold %+v", st.AgentState, st.Hold)
		}
		return nil
	})
}

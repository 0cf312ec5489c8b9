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

package cluster

import (
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/meteor-edge/meteor/chaos"
	"github.com/meteor-edge/meteor/fsm"
	"github.com/meteor-edge/meteor/scheduler"
)

// TestLostDisconnectIsRecorded: a device's disconnect whose commit fails,
// as in an election, is recorded once commits succeed again, and the
// device becomes unreachable; it does not stay connected on the record of
// a server that is alive.
func TestLostDisconnectIsRecorded(t *testing.T) {
	pki := newTestPKI(t)
	c := newTestCluster(t, 1, withFastStatus(pki.withAgents(t)))
	s := c.waitLeader()
	c.propose(filesIntent("store-config", 1, "v1"))
	ag := startAgent(t, pki, "dev-1", agentAddrs(c), map[string]string{"region": "eu"}, chaos.LinkProfile{}, nil)
	waitStatus(t, c, "dev-1", "converged")

	// The next three commits carrying a disconnect fail with no leader.
	var failed atomic.Int32
	hook := func(reqs []fsm.DeviceSessionRequest) error {
		for _, r := range reqs {
			if !r.Connected && failed.Load() < 3 {
				failed.Add(1)
				return errors.New("injected: no cluster leader")
			}
		}
		return nil
	}
	s.agents.sync.beforeCommit.Store(&hook)
	t.Cleanup(func() { s.agents.sync.beforeCommit.Store(nil) })

	ag.stop()
	stopped := time.Now()
	waitFor(t, 30*time.Second, func() error {
		rec, err := s.State().Read().Device(nil, "dev-1")
		if err != nil {
			return err
		}
		if rec.Connected {
			return fmt.Errorf("still recorded as connected (%d disconnect commits failed so far)", failed.Load())
		}
		return nil
	})
	if n := failed.Load(); n != 3 {
		t.Errorf("%d disconnect commits failed, want 3 (retried until one succeeded)", n)
	}
	waitStatus(t, c, "dev-1", "unreachable")
	t.Logf("unreachable %v after the agent stopped (idle timeout %v, unreachable after %v of silence)",
		time.Since(stopped).Round(time.Millisecond), s.config.AgentIdleTimeout, s.config.Classes[scheduler.DefaultClass].UnreachableAfter)
}

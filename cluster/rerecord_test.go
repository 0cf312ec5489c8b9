package cluster

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/meteor-edge/meteor/chaos"
	"github.com/meteor-edge/meteor/fsm"
)

// TestLostSessionRecordIsRecordedAgain: when the replica stops showing a
// live session as connected here (a late connect of an earlier
// connection committed over it, as after a reconnect storm), the server
// records the session again within a few check intervals.
func TestLostSessionRecordIsRecordedAgain(t *testing.T) {
	pki := newTestPKI(t)
	c := newTestCluster(t, 1, withFastStatus(func(cfg *Config) {
		pki.withAgents(t)(cfg)
		cfg.SessionCheckInterval = 200 * time.Millisecond
	}))
	s := c.waitLeader()
	c.propose(filesIntent("store-config", 1, "v1"))
	startAgent(t, pki, "dev-1", agentAddrs(c), map[string]string{"region": "eu"}, chaos.LinkProfile{}, nil)
	waitStatus(t, c, "dev-1", "converged") // no Ack in flight that would record it anyway
	var live fsm.DeviceRecord
	waitFor(t, 20*time.Second, func() error {
		rec, err := s.State().Read().Device(nil, "dev-1")
		if err != nil {
			return err
		}
		if !rec.Connected || rec.Server != s.ID() || rec.Conn == "" {
			return fmt.Errorf("record %+v", rec)
		}
		live = *rec
		return nil
	})
	// An earlier connection's connect, committed late, names another
	// server and connection.
	res, _, err := s.apply(context.Background(), fsm.DeviceSessionType, &fsm.DeviceSessionRequest{
		ID: "dev-1", SessionID: live.SessionID, Server: "gone", Conn: "stale", Connected: true, Time: time.Now().UnixNano(),
	})
	if err == nil {
		err = res.Err
	}
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, func() error {
		rec, err := s.State().Read().Device(nil, "dev-1")
		if err != nil {
			return err
		}
		if !rec.Connected || rec.Server != s.ID() || rec.Conn != live.Conn {
			return fmt.Errorf("record %+v, want connected to %s on connection %s", rec, s.ID(), live.Conn)
		}
		return nil
	})
	if n := s.AgentStats().Rerecords; n == 0 {
		t.Error("no session recorded again")
	}
}

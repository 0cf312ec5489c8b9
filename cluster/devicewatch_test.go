package cluster

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/meteor-edge/meteor/cluster/api"
	"github.com/meteor-edge/meteor/fsm/intent"
	"github.com/meteor-edge/meteor/wire"
)

// TestDeviceWatchesShareGoroutines opens twenty sessions on one server:
// their devices are followed by three goroutines (groups of
// deviceWatchGroupSize), not twenty. Revoking one device closes its
// session alone, in a group it shares; a label the control plane gives
// another reaches that session as settings; and once every session ended,
// no group is left.
func TestDeviceWatchesShareGoroutines(t *testing.T) {
	pki := newTestPKI(t)
	c := newTestCluster(t, 1, pki.withAgents(t))
	s := c.waitLeader()
	const n = 20
	eu := map[string]string{"region": "eu"}
	agents := make([]*wireAgent, n)
	for i := range agents {
		a := dialAgent(t, s.AgentAddr(), pki.deviceTLS(t, fmt.Sprintf("dev-%02d", i)))
		a.send(hello(eu))
		expect[*wire.Welcome](a)
		agents[i] = a
	}
	wantGroups := (n + deviceWatchGroupSize - 1) / deviceWatchGroupSize
	waitFor(t, 10*time.Second, func() error {
		if g, m := s.agents.watches.watching(); g != wantGroups || m != n {
			return fmt.Errorf("%d watch groups for %d sessions, want %d for %d", g, m, wantGroups, n)
		}
		return nil
	})

	// The sessions are assigned in order: dev-03 shares its group.
	if _, err := client(s).RevokeDevice(context.Background(), "dev-03", "stolen"); err != nil {
		t.Fatal(err)
	}
	select {
	case <-agents[3].conn.Context().Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the revoked device's session is still open")
	}
	if err := wire.FromQUICError(context.Cause(agents[3].conn.Context())); !errors.Is(err, wire.ErrUnauthorized) {
		t.Fatalf("the revoked device's connection closed with %v", err)
	}
	waitFor(t, 10*time.Second, func() error {
		if _, m := s.agents.watches.watching(); m != n-1 {
			return fmt.Errorf("%d sessions watched, want %d", m, n-1)
		}
		return nil
	})
	for i, a := range agents {
		if i != 3 && a.conn.Context().Err() != nil {
			t.Fatalf("dev-%02d's session closed with the revoked one's: %v", i, context.Cause(a.conn.Context()))
		}
	}

	// A zone label set by the control plane changes dev-05's settings,
	// and only the watch sees it: no intent changed.
	if _, err := client(s).SetDeviceLabels(context.Background(), "dev-05", api.SetDeviceLabelsRequest{Labels: map[string]string{intent.ZoneLabel: intent.ZoneLabelValue("Europe/Paris")}}); err != nil {
		t.Fatal(err)
	}
	for {
		m := agents[5].recv()
		if st, ok := m.(*wire.Settings); ok && st.Zone == "Europe/Paris" {
			break
		}
	}

	for i, a := range agents {
		if i != 3 {
			a.close()
		}
	}
	waitFor(t, 10*time.Second, func() error {
		if g, m := s.agents.watches.watching(); g != 0 || m != 0 {
			return fmt.Errorf("%d watch groups for %d sessions left after every session ended", g, m)
		}
		return nil
	})
}

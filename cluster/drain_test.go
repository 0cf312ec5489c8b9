package cluster

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/meteor-edge/meteor/wire"
)

// TestDrainMovesSessions: a leader with agent sessions drains, as
// SIGTERM has `meteor server` do: it hands leadership over, and every
// agent gets a GoAway (shutting down) whose first redirect is the device's
// owner among the other servers; an agent arriving meanwhile is refused
// the same way; once the server stopped, every agent resumes its own
// session at that redirect, and the cluster records it there.
func TestDrainMovesSessions(t *testing.T) {
	pki := newTestPKI(t)
	c := newTestCluster(t, 3, pki.withAgents(t))
	c.propose(fileIntentN("store", 2, "v0"))
	c.waitConverged()
	leader := c.waitLeader()
	labels := map[string]string{"region": "eu"}
	const n = 24
	type dev struct {
		id      string
		a       *wireAgent
		welcome *wire.Welcome
		acked   uint64
		goAway  *wire.GoAway
	}
	devs := make([]*dev, n)
	for i := range devs {
		d := &dev{id: fmt.Sprintf("dev-%02d", i)}
		d.a = dialAgent(t, leader.AgentAddr(), pki.deviceTLS(t, d.id))
		d.a.send(hello(labels))
		d.welcome = expect[*wire.Welcome](d.a)
		d.a.send(&wire.Pull{Inventory: true})
		d.acked = expect[*wire.Delta](d.a).TargetRevision
		d.a.send(&wire.Ack{Revision: d.acked})
		devs[i] = d
	}
	waitFor(t, 10*time.Second, func() error {
		if got := leader.AgentStats().Connected; got != n {
			return fmt.Errorf("%d sessions registered of %d", got, n)
		}
		return nil
	})

	drained := make(chan struct{})
	go func() { leader.Drain(10 * time.Second); close(drained) }()
	agentAddr := map[string]string{} // agent address -> server ID
	var others []ownerCandidate
	for _, s := range c.alive() {
		agentAddr[s.AgentAddr()] = s.ID()
		if s != leader {
			others = append(others, ownerCandidate{ID: s.ID(), Region: "eu"})
		}
	}
	for _, d := range devs {
		d.goAway = expect[*wire.GoAway](d.a)
		g := d.goAway
		if g.Code != wire.CodeShuttingDown || g.RetryAfter <= 0 || len(g.Redirect) != 2 || slices.Contains(g.Redirect, leader.AgentAddr()) {
			t.Fatalf("%s: GoAway %+v", d.id, g)
		}
		// The owner among the other servers.
		if owner := ownerOf(d.id, "eu", others); agentAddr[g.Redirect[0]] != owner {
			t.Fatalf("%s: first redirect %s (%s), but the owner among %v is %s", d.id, g.Redirect[0], agentAddr[g.Redirect[0]], others, owner)
		}
		d.a.conn.CloseWithError(wire.CloseNormal, "moving")
	}
	select {
	case <-drained:
	case <-time.After(30 * time.Second):
		t.Fatal("the drain did not end once every agent had left")
	}
	if leader.IsLeader() {
		t.Fatal("the draining leader still leads")
	}
	// Gossip tells the others: they no longer count it among the owners,
	// and own what it owned as its redirects said.
	waitFor(t, 10*time.Second, func() error {
		for _, s := range c.alive() {
			if s == leader {
				continue
			}
			for _, d := range devs {
				if owner := s.OwnerOf(d.id, labels); agentAddr[d.goAway.Redirect[0]] != owner {
					return fmt.Errorf("%s: %s says the owner is %s, the redirect named %s", d.id, s.ID(), owner, agentAddr[d.goAway.Redirect[0]])
				}
			}
		}
		return nil
	})
	late := dialAgent(t, leader.AgentAddr(), pki.deviceTLS(t, "dev-late"))
	late.send(hello(labels))
	if rej := expect[*wire.Reject](late); rej.Code != wire.CodeShuttingDown || len(rej.Redirect) != 2 || slices.Contains(rej.Redirect, leader.AgentAddr()) {
		t.Fatalf("an agent arriving at a draining server: %+v", rej)
	}
	c.kill(c.index(leader))

	moved := map[string]int{}
	for _, d := range devs {
		b := dialAgent(t, d.goAway.Redirect[0], pki.deviceTLS(t, d.id))
		b.send(&wire.Hello{Major: wire.ProtocolMajor, Minor: wire.ProtocolMinor, SessionID: d.welcome.SessionID, ResumeToken: d.welcome.ResumeToken, AckedRevision: d.acked, Labels: labels})
		if w := expect[*wire.Welcome](b); w.SessionID != d.welcome.SessionID {
			t.Fatalf("%s: a new session at %s, not its own", d.id, d.goAway.Redirect[0])
		}
		moved[agentAddr[d.goAway.Redirect[0]]]++
	}
	if len(moved) != 2 {
		t.Logf("sessions moved: %v (the owners of %d devices)", moved, n)
	}
	waitFor(t, 20*time.Second, func() error {
		read := c.waitLeader().State().Read()
		for _, d := range devs {
			rec, err := read.Device(nil, d.id)
			if err != nil || !rec.Connected || agentAddr[d.goAway.Redirect[0]] != rec.Server {
				return fmt.Errorf("%s recorded %+v, want connected to %s", d.id, rec, agentAddr[d.goAway.Redirect[0]])
			}
		}
		return nil
	})
}

// TestDrainEndsBesideAStalledAgent: an agent that stopped reading its
// control stream leaves the server's write of its Delta blocked on a full
// flow-control window. The drain still tells the other agents to go and
// ends by its deadline (the blocked write used to hold the stream's lock,
// and the GoAway waited for it for good); Shutdown then closes the
// stalled session.
func TestDrainEndsBesideAStalledAgent(t *testing.T) {
	pki := newTestPKI(t)
	c := newTestCluster(t, 1, pki.withAgents(t))
	big := strings.Repeat("x", 16<<10)
	c.propose(fileIntentN("store", 8, big))
	c.waitConverged()
	s := c.waitLeader()
	labels := map[string]string{"region": "eu"}

	qconf := wire.ClientQUICConfig()
	qconf.InitialStreamReceiveWindow, qconf.MaxStreamReceiveWindow = 4<<10, 4<<10
	stalled := dialAgentQUIC(t, s.AgentAddr(), pki.deviceTLS(t, "dev-stalled"), qconf)
	stalled.send(hello(labels))
	expect[*wire.Welcome](stalled)
	stalled.send(&wire.Pull{Inventory: true}) // and never read the Delta

	healthy := dialAgent(t, s.AgentAddr(), pki.deviceTLS(t, "dev-healthy"))
	healthy.send(hello(labels))
	expect[*wire.Welcome](healthy)
	waitFor(t, 10*time.Second, func() error {
		if got := s.AgentStats().Connected; got != 2 {
			return fmt.Errorf("%d sessions registered of 2", got)
		}
		return nil
	})

	drained := make(chan struct{})
	go func() { s.Drain(2 * time.Second); close(drained) }()
	if g := expect[*wire.GoAway](healthy); g.Code != wire.CodeShuttingDown {
		t.Fatalf("the healthy agent got %+v", g)
	}
	select {
	case <-drained:
	case <-time.After(time.Minute):
		t.Fatal("the drain did not end: a stalled agent holds it")
	}
	c.kill(0)
	// Shutdown closed the stalled session: its connection ends.
	select {
	case <-stalled.conn.Context().Done():
	case <-time.After(30 * time.Second):
		t.Fatal("the stalled agent's connection outlived the server")
	}
}

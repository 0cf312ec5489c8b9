package cluster

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/quic-go/quic-go"

	"github.com/meteor-edge/meteor/wire"
)

// TestAgentLivenessFromPings: an agent of 1.3 is held to the silence its
// Pings announce. Pings keep its session; a NAT binding test gets its Pong
// after the silence asked for; once the agent falls silent past the bound,
// the server ends the session, and the device is recorded disconnected,
// though its QUIC connection was still alive.
func TestAgentLivenessFromPings(t *testing.T) {
	const interval, slack = 2 * time.Second, time.Second
	pki := newTestPKI(t)
	withAgents := pki.withAgents(t)
	c := newTestCluster(t, 3, func(cfg *Config) {
		withAgents(cfg)
		cfg.AgentLivenessSlack = slack
	})
	c.propose(fileIntentN("store", 1, "v0"))
	f := c.follower()
	c.waitConverged()

	a := dialAgent(t, f.AgentAddr(), pki.deviceTLS(t, "dev-1"))
	a.send(hello(map[string]string{"region": "eu"}))
	expect[*wire.Welcome](a)
	a.send(&wire.Ping{Seq: 1, Interval: interval, EchoAfter: 300 * time.Millisecond})
	sent := time.Now()
	if p := expect[*wire.Pong](a); p.Seq != 1 {
		t.Fatalf("pong %d, want 1", p.Seq)
	}
	if waited := time.Since(sent); waited < 300*time.Millisecond {
		t.Fatalf("pong after %v, before the 300ms asked for", waited)
	}
	connected := func(want bool) func() error {
		return func() error {
			dev, err := client(f).GetDevice(context.Background(), "dev-1", apiStale)
			if err != nil {
				return err
			}
			if dev.Connected != want {
				return fmt.Errorf("dev-1 connected %v, want %v", dev.Connected, want)
			}
			return nil
		}
	}
	waitFor(t, 10*time.Second, connected(true))

	// Pings inside the interval keep the session past several bounds.
	bound := wire.LivenessBoundWith(interval, slack)
	var lastPing time.Time
	for seq := uint64(2); time.Since(sent) < 2*bound; seq++ {
		a.send(&wire.Ping{Seq: seq, Interval: interval})
		lastPing = time.Now()
		time.Sleep(interval / 4)
	}
	if err := a.conn.Context().Err(); err != nil {
		t.Fatalf("session ended while the agent kept alive: %v", context.Cause(a.conn.Context()))
	}

	// Silence: QUIC has nothing to say either way (its own keep-alives
	// are minutes apart), but the server ends the session.
	silent := time.Now()
	select {
	case <-a.conn.Context().Done():
	case <-time.After(30 * time.Second):
		t.Fatalf("session still open %v into a silence the bound puts at %v", time.Since(silent), bound)
	}
	var ae *quic.ApplicationError
	if err := context.Cause(a.conn.Context()); !errors.As(err, &ae) || ae.ErrorCode != wire.CloseNormal || !ae.Remote {
		t.Fatalf("connection ended by %v, want the server's normal close", err)
	}
	// The server read the last Ping after it was sent, so its bound runs
	// from later than lastPing.
	if d := time.Since(lastPing); d < bound {
		t.Fatalf("session ended %v after the last Ping, before the bound %v", d, bound)
	}
	t.Logf("ended after %v of silence: %s", time.Since(silent).Round(time.Millisecond), ae.ErrorMessage)
	waitFor(t, 10*time.Second, connected(false))
}

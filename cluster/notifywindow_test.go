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

// TestNotifyWindowPacesAChange: with a window of 2, a change to 5
// sessions is pushed to 2 of them; each Pull lets the next session's
// Notify go, until every session was told, once. Sessions that wait their
// turn while a newer change commits are told the newest revision, and
// those that pulled it are not told again.
func TestNotifyWindowPacesAChange(t *testing.T) {
	pki := newTestPKI(t)
	c := newTestCluster(t, 1, func(cfg *Config) {
		pki.withAgents(t)(cfg)
		cfg.PullInterval = time.Hour
		cfg.NotifyWindow = 2
		// Pulls, not the wait's bound, move the window here.
		cfg.NotifyPullWait = time.Hour
	})
	s := c.Server(0)
	eu := map[string]string{"region": "eu"}
	c.propose(filesIntent("store-config", 2, "v1"))

	const n = 5
	agents := make([]*wireAgent, n)
	for i := range agents {
		a := dialAgent(t, s.AgentAddr(), pki.deviceTLS(t, fmt.Sprintf("dev-%d", i)))
		a.send(hello(eu))
		expect[*wire.Welcome](a)
		a.send(&wire.Pull{Inventory: true})
		expect[*wire.Delta](a)
		agents[i] = a
	}
	waitFor(t, 10*time.Second, func() error {
		if got := s.AgentStats().Connected; got != n {
			return fmt.Errorf("%d sessions registered, want %d", got, n)
		}
		return nil
	})

	// Each agent's pushes, read as they come.
	type push struct {
		agent int
		rev   uint64
	}
	pushes := make(chan push, 4*n)
	for i, a := range agents {
		go func() {
			for {
				a.stream.SetReadDeadline(time.Time{})
				m, err := a.r.Read()
				if err != nil {
					return // the test ended
				}
				switch m := m.(type) {
				case *wire.Notify:
					pushes <- push{i, m.Revision}
				case *wire.Delta:
					pushes <- push{i, 0} // the answer to a Pull
				}
			}
		}()
	}
	// Pushes read while waiting for Deltas, for tell.
	var stash []push
	next := func() push {
		t.Helper()
		if len(stash) > 0 {
			p := stash[0]
			stash = stash[1:]
			return p
		}
		select {
		case p := <-pushes:
			return p
		case <-time.After(30 * time.Second):
			t.Fatal("no push came")
			return push{}
		}
	}
	base := s.agents.stats.notifies.Load()
	// window waits until the server sent that many pushes since the
	// change and that many sessions wait for their turn.
	window := func(sent uint64, queued int) {
		t.Helper()
		waitFor(t, 10*time.Second, func() error {
			got, q := s.agents.stats.notifies.Load()-base, s.agents.notifies.queued()
			if got != sent || q != queued {
				return fmt.Errorf("%d pushes sent and %d sessions queued, want %d and %d", got, q, sent, queued)
			}
			return nil
		})
	}
	// tell expects k Notifies of revision rev, to agents not told yet,
	// and returns who got them.
	told := map[int]bool{}
	tell := func(k int, rev uint64) []int {
		t.Helper()
		var got []int
		for range k {
			p := next()
			if p.rev != rev || told[p.agent] {
				t.Fatalf("agent %d got a push of revision %d (told before: %v), want a first Notify of %d", p.agent, p.rev, told[p.agent], rev)
			}
			told[p.agent] = true
			got = append(got, p.agent)
		}
		return got
	}
	// pull has the agents pull and read their Deltas; the Notifies their
	// Pulls let go may come first.
	pull := func(who []int) {
		t.Helper()
		for _, i := range who {
			agents[i].send(&wire.Pull{KnownRevision: 1})
		}
		for deltas := 0; deltas < len(who); {
			select {
			case p := <-pushes:
				if p.rev != 0 {
					stash = append(stash, p)
					continue
				}
				deltas++
			case <-time.After(30 * time.Second):
				t.Fatal("no Delta came")
			}
		}
	}

	c.propose(filesIntent("store-config", 2, "v2"))
	rev2 := s.State().Read().Revision()
	window(2, n-2)
	first := tell(2, rev2)

	// A newer change while three wait and two have not pulled yet.
	c.propose(filesIntent("store-config", 2, "v3"))
	rev3 := s.State().Read().Revision()
	// notifyLoop evaluates the change after its commit, on its own: wait
	// until every session is due rev3, or a worker freed by the Pulls
	// below could tell a waiting session rev2 (a busy host, in CI).
	waitFor(t, 10*time.Second, func() error {
		s.agents.mu.Lock()
		defer s.agents.mu.Unlock()
		for sess := range s.agents.sessions {
			sess.mu.Lock()
			due := sess.notifyRev
			sess.mu.Unlock()
			if due != rev3 {
				return fmt.Errorf("%s is due revision %d, want %d", sess.deviceID, due, rev3)
			}
		}
		return nil
	})
	pull(first) // they pull rev3: nothing more is due to them
	window(4, 1)
	second := tell(2, rev3)
	pull(second)
	window(5, 0)
	tell(1, rev3)
	if s.agents.stats.notifies.Load()-base != 5 {
		t.Fatalf("%d pushes, want 5: one per session", s.agents.stats.notifies.Load()-base)
	}
}

// TestFailedNotifyEndsTheSession: a Notify the server could not write
// (its agent took nothing for the write timeout) ends the session, so the
// agent reconnects and is served. Left open, the session would believe
// its agent told, and push it nothing more of that change.
func TestFailedNotifyEndsTheSession(t *testing.T) {
	pki := newTestPKI(t)
	c := newTestCluster(t, 1, func(cfg *Config) {
		pki.withAgents(t)(cfg)
		cfg.PullInterval = time.Hour
	})
	s := c.Server(0)
	c.propose(filesIntent("store-config", 1, "v1"))
	a := dialAgent(t, s.AgentAddr(), pki.deviceTLS(t, "dev-1"))
	a.send(hello(map[string]string{"region": "eu"}))
	expect[*wire.Welcome](a)
	a.send(&wire.Pull{Inventory: true})
	expect[*wire.Delta](a)
	waitFor(t, 10*time.Second, func() error {
		if got := s.AgentStats().Connected; got != 1 {
			return fmt.Errorf("%d sessions registered, want 1", got)
		}
		return nil
	})
	// Every write of the session from now on fails at once (its send
	// side reset), as one whose agent stopped taking them does after
	// sessionWriteTimeout.
	s.agents.mu.Lock()
	for sess := range s.agents.sessions {
		sess.stream.CancelWrite(quic.StreamErrorCode(wire.CloseInternalError))
	}
	s.agents.mu.Unlock()

	c.propose(filesIntent("store-config", 1, "v2"))
	select {
	case <-a.conn.Context().Done():
	case <-time.After(30 * time.Second): // a bound: the push goes at once
		t.Fatal("the session stayed open after its Notify could not be written")
	}
	var appErr *quic.ApplicationError
	if err := context.Cause(a.conn.Context()); !errors.As(err, &appErr) || appErr.ErrorCode != wire.CloseInternalError {
		t.Fatalf("connection ended with %v, want the server's close (internal error)", err)
	}
}

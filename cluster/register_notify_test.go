package cluster

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/meteor-edge/meteor/wire"
)

// TestNotifyReachesSessionRegisteredLate makes the race between a session's
// registration and notifyLoop deterministic: a session is welcomed (and,
// in one case, its Pull answered), an intent change is committed and pushed
// to every registered session (a witness session proves that pass took its
// list of sessions), and only then does the late session register. The
// change must reach it as a Notify when it registers: nothing else would
// tell it before its next periodic pull.
func TestNotifyReachesSessionRegisteredLate(t *testing.T) {
	pki := newTestPKI(t)
	c := newTestCluster(t, 1, func(cfg *Config) {
		pki.withAgents(t)(cfg)
		cfg.PullInterval = time.Hour
	})
	s := c.Server(0)
	eu := map[string]string{"region": "eu"}
	c.propose(filesIntent("store-config", 2, "v1"))

	// A witness session, registered before anything else happens.
	witness := dialAgent(t, s.AgentAddr(), pki.deviceTLS(t, "witness-1"))
	witness.send(hello(eu))
	expect[*wire.Welcome](witness)
	waitFor(t, 10*time.Second, func() error {
		if n := s.AgentStats().Connected; n != 1 {
			return fmt.Errorf("%d sessions registered, want the witness", n)
		}
		return nil
	})

	// holdRegistration holds the registration of device's next session
	// until release is called; reached is closed when it is held.
	holdRegistration := func(t *testing.T, device string) (reached <-chan struct{}, release func()) {
		r, rel := make(chan struct{}), make(chan struct{})
		release = sync.OnceFunc(func() { close(rel) })
		t.Cleanup(release) // before the cluster shuts down
		hook := func(id string) {
			if id == device {
				close(r)
				<-rel
			}
		}
		s.agents.beforeRegister.Store(&hook)
		t.Cleanup(func() { s.agents.beforeRegister.Store(nil) })
		return r, release
	}
	version := 1
	// change commits a new version of the intent once the late session is
	// held, and waits until notifyLoop pushed it to the witness.
	change := func(t *testing.T, reached <-chan struct{}) uint64 {
		t.Helper()
		select {
		case <-reached:
		case <-time.After(30 * time.Second):
			t.Fatal("the late session never reached registration")
		}
		version++
		c.propose(filesIntent("store-config", 2, fmt.Sprintf("v%d", version)))
		rev := s.State().Read().Revision()
		if n := expect[*wire.Notify](witness); n.Revision < rev {
			t.Fatalf("witness notified of %d, want at least %d", n.Revision, rev)
		}
		return rev
	}
	// notified expects a Notify of at least rev within a bound; without
	// one the agent would wait for its next pull, an hour away here.
	notified := func(t *testing.T, a *wireAgent, rev uint64) {
		t.Helper()
		a.stream.SetReadDeadline(time.Now().Add(10 * time.Second))
		m, err := a.r.Read()
		if _, ok := m.(*wire.Settings); ok && err == nil {
			m, err = a.r.Read() // the settings follow the Welcome
		}
		if err != nil {
			t.Fatalf("no Notify after registering: %v", wire.FromQUICError(err))
		}
		if n, ok := m.(*wire.Notify); !ok || n.Revision < rev {
			t.Fatalf("got %s %+v, want Notify of at least %d", m.Type(), m, rev)
		}
	}

	t.Run("PulledBeforeRegistering", func(t *testing.T) {
		reached, release := holdRegistration(t, "late-1")
		a := dialAgent(t, s.AgentAddr(), pki.deviceTLS(t, "late-1"))
		a.send(hello(eu))
		w := expect[*wire.Welcome](a)
		// A Pull is a read: it is answered before the session registers.
		a.send(&wire.Pull{Inventory: true})
		if d := expect[*wire.Delta](a); d.TargetRevision < w.DesiredRevision || len(d.Upserts) != 2 {
			t.Fatalf("first delta to %d with %d upserts", d.TargetRevision, len(d.Upserts))
		}
		rev := change(t, reached)
		release()
		notified(t, a, rev)
	})

	t.Run("UpToDateAtWelcome", func(t *testing.T) {
		// An agent that holds the Welcome's revision does not pull.
		reached, release := holdRegistration(t, "late-2")
		a := dialAgent(t, s.AgentAddr(), pki.deviceTLS(t, "late-2"))
		h := hello(eu)
		h.AckedRevision = s.State().Read().Revision()
		a.send(h)
		expect[*wire.Welcome](a)
		rev := change(t, reached)
		release()
		notified(t, a, rev)
	})
}

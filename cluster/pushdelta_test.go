package cluster

import (
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/meteor-edge/meteor/wire"
)

// heldSet is the desired set a test agent holds: key to digest.
type heldSet map[string]wire.Digest

func (h heldSet) fingerprint() wire.Digest {
	f := wire.NewSetFingerprint()
	for _, k := range slices.Sorted(maps.Keys(h)) {
		f.Add(k, h[k])
	}
	return f.Sum()
}

// apply patches h with d, as an agent applies a Delta without inventory.
func (h heldSet) apply(t *testing.T, d *wire.Delta) {
	t.Helper()
	if err := d.Verify(); err != nil {
		t.Fatal(err)
	}
	for _, k := range d.Deletes {
		delete(h, k)
	}
	for _, u := range d.Upserts {
		h[u.Key] = u.Digest
	}
}

// TestNotifyCarriesTheDelta: at protocol 1.5 a change's Notify carries the
// patch from the desired set the server last sent the agent, named by that
// set's fingerprint, and the agent's Ack of it frees its place in the
// notify window without a Pull. A 1.4 session is told the revision only.
// An agent that does not take a push (it holds another set) pulls, and the
// next push patches what that Pull's Delta sent.
func TestNotifyCarriesTheDelta(t *testing.T) {
	pki := newTestPKI(t)
	c := newTestCluster(t, 1, func(cfg *Config) {
		pki.withAgents(t)(cfg)
		cfg.PullInterval = time.Hour
		// Only a Pull or an Ack frees a session's place in the window:
		// a push waiting for neither would hold back the next change's.
		cfg.NotifyPullWait = time.Hour
	})
	s := c.Server(0)
	eu := map[string]string{"region": "eu"}
	c.propose(filesIntent("store-config", 3, "v1"))

	a := dialAgent(t, s.AgentAddr(), pki.deviceTLS(t, "dev-a"))
	a.send(hello(eu))
	expect[*wire.Welcome](a)
	a.send(&wire.Pull{Inventory: true})
	held := heldSet{}
	held.apply(t, expect[*wire.Delta](a))

	old := hello(eu)
	old.Minor = wire.MinorPushDelta - 1
	b := dialAgent(t, s.AgentAddr(), pki.deviceTLS(t, "dev-b"))
	b.send(old)
	expect[*wire.Welcome](b)
	b.send(&wire.Pull{Inventory: true})
	expect[*wire.Delta](b)
	waitFor(t, 10*time.Second, func() error {
		if got := s.AgentStats().Connected; got != 2 {
			return fmt.Errorf("%d sessions registered, want 2", got)
		}
		return nil
	})
	acked := func(dev string, rev uint64) {
		t.Helper()
		waitFor(t, 10*time.Second, func() error {
			rec, err := s.State().Read().Device(nil, dev)
			if err != nil {
				return err
			}
			if rec.AckedRevision != rev {
				return fmt.Errorf("%s acknowledged revision %d, want %d", dev, rec.AckedRevision, rev)
			}
			return nil
		})
	}

	// The change comes with the Notify, patching what the agent holds.
	c.propose(filesIntent("store-config", 2, "v2")) // f02 goes, f00 and f01 change
	rev2 := s.State().Read().Revision()
	n := expect[*wire.Notify](a)
	if n.Revision != rev2 || n.Delta == nil {
		t.Fatalf("Notify of revision %d with Delta %v, want revision %d with its Delta", n.Revision, n.Delta, rev2)
	}
	if n.Base != held.fingerprint() {
		t.Fatal("the Notify's Delta patches another set than the one the agent holds")
	}
	if len(n.Delta.Upserts) != 2 || len(n.Delta.Deletes) != 1 {
		t.Fatalf("Delta of %d upserts and %d deletes, want 2 and 1", len(n.Delta.Upserts), len(n.Delta.Deletes))
	}
	held.apply(t, n.Delta)
	a.send(&wire.Ack{Revision: rev2})
	acked("dev-a", rev2)

	// The 1.4 session is told the revision and pulls it.
	if n := expect[*wire.Notify](b); n.Revision != rev2 || n.Delta != nil {
		t.Fatalf("1.4 session told revision %d with Delta %v, want %d and none", n.Revision, n.Delta, rev2)
	}
	b.send(&wire.Pull{KnownRevision: 1})
	if d := expect[*wire.Delta](b); d.TargetRevision != rev2 {
		t.Fatalf("1.4 session pulled revision %d, want %d", d.TargetRevision, rev2)
	}
	if got := s.AgentStats().PushedDeltas; got != 1 {
		t.Fatalf("%d Notifies carried a Delta, want 1", got)
	}

	// A push the agent does not take (as if it held another set): it
	// pulls, without an inventory, and holds what the Pull's Delta sends.
	c.propose(filesIntent("store-config", 2, "v3"))
	rev3 := s.State().Read().Revision()
	if n := expect[*wire.Notify](a); n.Revision != rev3 || n.Delta == nil || n.Base != held.fingerprint() {
		t.Fatalf("Notify of revision %d (Delta %v), want %d with a Delta on the held set", n.Revision, n.Delta != nil, rev3)
	}
	a.send(&wire.Pull{KnownRevision: rev2})
	d := expect[*wire.Delta](a)
	if d.TargetRevision != rev3 {
		t.Fatalf("pulled revision %d, want %d", d.TargetRevision, rev3)
	}
	// The Pull's Delta is diffed against the connection's inventory
	// (empty): it names every desired resource.
	held = heldSet{}
	held.apply(t, d)
	a.send(&wire.Ack{Revision: rev3})
	acked("dev-a", rev3)

	c.propose(filesIntent("store-config", 2, "v4"))
	rev4 := s.State().Read().Revision()
	n = expect[*wire.Notify](a)
	if n.Revision != rev4 || n.Delta == nil || n.Base != held.fingerprint() {
		t.Fatalf("Notify of revision %d (Delta %v), want %d with a Delta on the set the Pull sent", n.Revision, n.Delta != nil, rev4)
	}
	held.apply(t, n.Delta)
	if len(held) != 2 {
		t.Fatalf("the agent holds %d resources after the pushes, want 2", len(held))
	}
}

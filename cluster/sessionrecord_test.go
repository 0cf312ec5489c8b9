package cluster

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/meteor-edge/meteor/fsm"
)

// TestSessionEventsAreGroupCommitted: events queued while an entry is
// being committed share the next one, every event is applied, and each
// device's events keep their order. Events go through a follower, which
// forwards each entry to the leader.
func TestSessionEventsAreGroupCommitted(t *testing.T) {
	c := newTestCluster(t, 3, func(cfg *Config) { cfg.ClusterSecret = []byte("a cluster secret of 32 bytes....") })
	c.waitLeader()
	f := c.follower()
	const devices = 100
	var wg sync.WaitGroup
	errs := make(chan error, devices)
	for i := range devices {
		wg.Add(1)
		go func() {
			defer wg.Done()
			id := fmt.Sprintf("dev-%03d", i)
			// Connect, acknowledge, disconnect: in this order, through one
			// server, whatever else is queued.
			for _, ev := range []fsm.DeviceSessionRequest{
				{ID: id, Labels: map[string]string{"region": "eu"}, SessionID: "s", Server: f.ID(), Conn: "c", Connected: true, Time: 1},
				{ID: id, SessionID: "s", Server: f.ID(), Conn: "c", Connected: true, AckedRevision: 7, Time: 2},
				{ID: id, SessionID: "s", Server: f.ID(), Conn: "c", Connected: false, Time: 3},
			} {
				if err := f.sessionRec.record(context.Background(), &ev); err != nil {
					errs <- fmt.Errorf("%s: %w", id, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	c.waitConverged()
	for _, s := range c.alive() {
		recs, err := s.State().Read().Devices(nil)
		if err != nil {
			t.Fatal(err)
		}
		if len(recs) != devices {
			t.Fatalf("%s: %d devices", s.ID(), len(recs))
		}
		for _, r := range recs {
			if r.Connected || r.AckedRevision != 7 || r.LastSeen != 3 {
				t.Fatalf("%s: %+v", s.ID(), r)
			}
		}
	}
	entries, events := f.sessionRec.entries.Load(), f.sessionRec.events.Load()
	t.Logf("%d events in %d entries", events, entries)
	if events != 3*devices || entries >= events {
		t.Errorf("%d events in %d entries: want %d events, sharing entries", events, entries, 3*devices)
	}
}

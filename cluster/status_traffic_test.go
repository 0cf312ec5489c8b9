package cluster

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/meteor-edge/meteor/fsm"
	"github.com/meteor-edge/meteor/wire"
)

// TestStatusOwnerCommitsTraffic: a report that changes nothing but the
// agent's traffic counts still commits them, stamped with when the owner
// received it; a report that changes nothing at all (no counts) commits
// nothing, and the record keeps the last counts.
func TestStatusOwnerCommitsTraffic(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p, o, stop := runUnitStatusOwner(t, "dev-a")
		defer stop()
		ingest := func(rep *wire.Report) {
			t.Helper()
			if err := o.ingest(context.Background(), "dev-a", 0, rep); err != nil {
				t.Fatal(err)
			}
		}
		withTraffic := func(seq, sent uint64) *wire.Report {
			rep := convergedReport(seq)
			rep.Traffic = &wire.Traffic{Day: 20789, Servers: []wire.ServerTraffic{
				{Server: "s2:7443", TrafficCounts: wire.TrafficCounts{SentBytes: sent, RecvBytes: sent / 2, SentPackets: 3, RecvPackets: 2}},
			}, Previous: wire.TrafficCounts{SentBytes: 1 << 20}}
			return rep
		}
		ingest(withTraffic(2, 3000))
		time.Sleep(time.Minute)
		synctest.Wait()
		entries := p.committed(fsm.StatusBatchType)
		received := time.Now()
		ingest(withTraffic(3, 4500))
		if n := p.committed(fsm.StatusBatchType); n != entries+1 {
			t.Fatalf("a report with only new traffic committed %d entries, want 1", n-entries)
		}
		rec, err := p.state.Read().Device(nil, "dev-a")
		if err != nil {
			t.Fatal(err)
		}
		want := &fsm.DeviceTraffic{AsOf: received.UnixNano(), Day: 20789, Servers: []fsm.ServerTraffic{
			{Server: "s2:7443", TrafficCounts: fsm.TrafficCounts{SentBytes: 4500, RecvBytes: 2250, SentPackets: 3, RecvPackets: 2}},
		}, Previous: fsm.TrafficCounts{SentBytes: 1 << 20}}
		if diff := cmp.Diff(want, rec.Traffic); diff != "" {
			t.Fatalf("committed traffic (-want +got):\n%s", diff)
		}

		ingest(convergedReport(4)) // an agent that no longer counts (a 1.2 session)
		if n := p.committed(fsm.StatusBatchType); n != entries+1 {
			t.Fatalf("a report that changed nothing committed %d entries", n-entries-1)
		}
		if rec, _ := p.state.Read().Device(nil, "dev-a"); !cmp.Equal(want, rec.Traffic) {
			t.Fatalf("traffic after a report without: %+v", rec.Traffic)
		}
	})
}

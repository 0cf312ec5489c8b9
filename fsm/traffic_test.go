package fsm

import (
	"bytes"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestStatusTransitionTraffic: a report's traffic replaces the record's
// when the report applies (a duplicate's does not; a report without any
// keeps what was there); a transition that brings only new counts adds
// no timeline entry and no event; snapshots keep the counts.
func TestStatusTransitionTraffic(t *testing.T) {
	f := newTestFSM(t, 0)
	apply := mustApplier(t, f)
	report := func(seq uint64, tr *DeviceTraffic) {
		t.Helper()
		apply(StatusBatchType, &StatusBatchRequest{Owner: "s1", Transitions: []StatusTransition{
			{Device: "d1", Seq: seq, Time: int64(seq), Status: "converged", Full: true, Traffic: tr},
		}})
	}
	traffic := func() *DeviceTraffic {
		t.Helper()
		d, err := f.Read().Device(nil, "d1")
		if err != nil {
			t.Fatal(err)
		}
		return d.Traffic
	}
	apply(DeviceSessionType, &DeviceSessionRequest{ID: "d1", SessionID: "s", Server: "s1", Connected: true, Time: 1})
	first := &DeviceTraffic{AsOf: 2, Day: 20789, Servers: []ServerTraffic{
		{Server: "s1:7443", TrafficCounts: TrafficCounts{SentBytes: 4000, RecvBytes: 3000, SentPackets: 20, RecvPackets: 18}},
		{Server: "s2:7443", TrafficCounts: TrafficCounts{SentBytes: 1200, SentPackets: 1}},
	}, Previous: TrafficCounts{SentBytes: 90_000, RecvBytes: 80_000, SentPackets: 700, RecvPackets: 650}}
	report(2, first)
	if diff := cmp.Diff(first, traffic()); diff != "" {
		t.Fatalf("after the first report (-want +got):\n%s", diff)
	}
	if got := first.Total(); got != (TrafficCounts{5200, 3000, 21, 18}) {
		t.Errorf("Total = %+v", got)
	}
	timeline, _ := f.Read().Timeline(nil, "d1")
	events := len(f.EventsAfter(EventID{}, 1000).Events)

	report(2, &DeviceTraffic{AsOf: 3, Day: 20789}) // a duplicate
	report(3, nil)                                 // from a session below protocol 1.3
	if diff := cmp.Diff(first, traffic()); diff != "" {
		t.Fatalf("after a duplicate and a report without traffic (-want +got):\n%s", diff)
	}
	later := &DeviceTraffic{AsOf: 4, Day: 20790, Servers: []ServerTraffic{{Server: "s1:7443", TrafficCounts: TrafficCounts{SentBytes: 100, SentPackets: 1}}},
		Previous: first.Total()}
	report(4, later)
	if diff := cmp.Diff(later, traffic()); diff != "" {
		t.Fatalf("after a later report (-want +got):\n%s", diff)
	}
	if tl, _ := f.Read().Timeline(nil, "d1"); len(tl) != len(timeline) {
		t.Errorf("reports that changed only the traffic added %d timeline entries", len(tl)-len(timeline))
	}
	if n := len(f.EventsAfter(EventID{}, 1000).Events); n != events {
		t.Errorf("reports that changed only the traffic published %d events", n-events)
	}

	snap := snapshotBytes(t, f)
	g := newTestFSM(t, 0)
	if err := g.Restore(bytes.NewReader(snap)); err != nil {
		t.Fatal(err)
	}
	d, err := g.Read().Device(nil, "d1")
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(later, d.Traffic); diff != "" {
		t.Fatalf("restored from a snapshot (-want +got):\n%s", diff)
	}
	if !bytes.Contains(snap, []byte(`"traffic":{"as_of":4,"day":20790,"servers":[{"server":"s1:7443","sent_bytes":100,"sent_packets":1}]`)) {
		t.Errorf("snapshot without the traffic record:\n%s", snap)
	}
}

package fsm

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func allEvents(f *FSM) []Event {
	return f.EventsAfter(EventID{}, 1<<30).Events
}

// TestEventsAreTheSameOnEveryReplica applies one log one command at a
// time and in batches: both replicas must give the same events, with the
// same IDs, in strictly increasing order — what lets a client resume a
// stream on another server.
func TestEventsAreTheSameOnEveryReplica(t *testing.T) {
	log := randomLog(t, 7, 400)
	a, b := newTestFSM(t, 4), newTestFSM(t, 4)
	for i, cmd := range log {
		a.Apply(uint64(i+1), cmd)
	}
	applyInBatches(b, log, 5)
	ea, eb := allEvents(a), allEvents(b)
	if d := cmp.Diff(ea, eb); d != "" {
		t.Fatalf("replicas' events differ (-one at a time +batched):\n%s", d)
	}
	kinds := map[string]int{}
	for i, e := range ea {
		kinds[e.Kind]++
		if i > 0 && !ea[i-1].ID.Less(e.ID) {
			t.Fatalf("event %d (%s) does not come after %s", i, e.ID, ea[i-1].ID)
		}
	}
	for _, k := range []string{KindIntent, KindStatus, KindDevice, KindRollout} {
		if kinds[k] == 0 {
			t.Errorf("no %s event in the random log's %d events (%v)", k, len(ea), kinds)
		}
	}
	if last := a.LastEventID(); last != ea[len(ea)-1].ID {
		t.Errorf("LastEventID = %s, want the newest event's %s", last, ea[len(ea)-1].ID)
	}
}

// TestEventKinds checks what each change says on the stream.
func TestEventKinds(t *testing.T) {
	f := newTestFSM(t, 0)
	f.Apply(1, mustEncode(t, PutIntentType, &PutIntentRequest{Intent: testIntent("motd", "one"), Time: 10}))
	f.Apply(2, mustEncode(t, PutIntentType, &PutIntentRequest{Intent: testIntent("motd", "one"), Time: 11})) // unchanged: no event
	f.Apply(3, mustEncode(t, DeviceSessionType, &DeviceSessionRequest{ID: "dev-1", SessionID: "s", Server: "s1", Conn: "c1", Connected: true, Time: 12}))
	f.Apply(4, mustEncode(t, DeviceSessionType, &DeviceSessionRequest{ID: "dev-1", SessionID: "s", Server: "s1", Conn: "c1", Connected: true, AckedRevision: 1, Time: 13})) // same connection: no event
	f.Apply(5, mustEncode(t, StatusBatchType, &StatusBatchRequest{Owner: "s1", Transitions: []StatusTransition{{
		Device: "dev-1", Seq: 1, Time: 14, Revision: 1, Status: "drifted", Reason: "the probe sees something else", Full: true,
		Resources:      []ResourceStatus{{Key: "motd/motd", State: "drifted", Detail: "content changed by hand"}},
		ResourceStates: map[string]string{"motd/motd": "drifted"},
	}}}))
	f.Apply(6, mustEncode(t, DeviceSessionType, &DeviceSessionRequest{ID: "dev-1", SessionID: "s", Server: "s1", Conn: "c1", Connected: false, Time: 15}))
	f.Apply(7, mustEncode(t, DeleteIntentType, &DeleteIntentRequest{Name: "motd", Time: 16}))

	var got []string
	for _, e := range allEvents(f) {
		got = append(got, fmt.Sprintf("%s %s/%s intent=%s rev=%d device=%s status=%s msg=%q", e.ID, e.Kind, e.Action, e.Intent, e.Revision, e.Device, e.Status, e.Message))
	}
	want := []string{
		`1-0 intent/put intent=motd rev=1 device= status= msg="created at revision 1"`,
		`3-0 device/registered intent= rev=0 device=dev-1 status= msg="first session, on s1"`,
		`3-1 session/connected intent= rev=0 device=dev-1 status= msg="to s1"`,
		`5-0 status/ intent= rev=1 device=dev-1 status=drifted msg="judged by s1"`,
		`5-1 drift/drifted intent= rev=1 device=dev-1 status=drifted msg="content changed by hand"`,
		`6-0 session/disconnected intent= rev=0 device=dev-1 status= msg="from s1"`,
		`7-0 intent/delete intent=motd rev=3 device= status= msg="deleted at revision 3 (was revision 1)"`,
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Fatalf("events (-want +got):\n%s", d)
	}
}

// TestEventWindow: a server keeps the newest EventLimit events; a reader
// behind them, or behind a snapshot the server installed, is told of the
// gap and where to go on from.
func TestEventWindow(t *testing.T) {
	f, err := New(Config{EventLimit: 10})
	if err != nil {
		t.Fatal(err)
	}
	for i := 1; i <= 30; i++ {
		f.Apply(uint64(i), mustEncode(t, PutIntentType, &PutIntentRequest{Intent: testIntent("motd", fmt.Sprint(i)), Time: int64(i)}))
	}
	b := f.EventsAfter(EventID{}, 100)
	if !b.Gap || b.Horizon != (EventID{Index: 20}) || len(b.Events) != 10 || b.Events[0].ID != (EventID{Index: 21}) {
		t.Fatalf("from the start: gap %v horizon %s, %d events from %v; want a gap up to 20-0 and the 10 events from 21-0", b.Gap, b.Horizon, len(b.Events), b.Events)
	}
	b = f.EventsAfter(EventID{Index: 25}, 100)
	if b.Gap || len(b.Events) != 5 || b.Events[0].ID.Index != 26 {
		t.Fatalf("after 25-0: gap %v, %d events; want no gap and the 5 events from 26-0", b.Gap, len(b.Events))
	}
	if b := f.EventsAfter(EventID{Index: 25}, 2); len(b.Events) != 2 || b.Events[1].ID.Index != 27 {
		t.Fatalf("after 25-0, at most 2: %v", b.Events)
	}
	if b := f.EventsAfter(EventID{Index: 30}, 100); b.Gap || len(b.Events) != 0 {
		t.Fatalf("after the newest: gap %v, %d events", b.Gap, len(b.Events))
	}

	// More is closed by the next publish.
	more := f.EventsAfter(EventID{Index: 30}, 100).More
	select {
	case <-more:
		t.Fatal("More closed before anything was published")
	default:
	}
	f.Apply(31, mustEncode(t, PutIntentType, &PutIntentRequest{Intent: testIntent("motd", "31"), Time: 31}))
	select {
	case <-more:
	default:
		t.Fatal("More still open after an event was published")
	}

	// A replica that installs a snapshot at 31 never saw what led there.
	g := newTestFSM(t, 0)
	g.Apply(1, mustEncode(t, PutIntentType, &PutIntentRequest{Intent: testIntent("other", "x"), Time: 1}))
	if err := g.Restore(bytes.NewReader(snapshotBytes(t, f))); err != nil {
		t.Fatal(err)
	}
	b = g.EventsAfter(EventID{}, 100)
	if !b.Gap || b.Horizon.String() != "31" || len(b.Events) != 1 || b.Events[0].ID.Index != 1 {
		t.Fatalf("after a restore: gap %v horizon %s, events %v; want a gap up to 31 (only the event before it kept)", b.Gap, b.Horizon, b.Events)
	}
	g.Apply(32, mustEncode(t, PutIntentType, &PutIntentRequest{Intent: testIntent("motd", "32"), Time: 32}))
	if b := g.EventsAfter(b.Horizon, 100); b.Gap || len(b.Events) != 1 || b.Events[0].ID != (EventID{Index: 32}) {
		t.Fatalf("after the horizon: gap %v, events %v; want 32-0", b.Gap, b.Events)
	}
}

func TestParseEventID(t *testing.T) {
	for _, s := range []string{"0-0", "17-3", "42"} {
		id, err := ParseEventID(s)
		if err != nil || id.String() != s {
			t.Errorf("ParseEventID(%q) = %v, %v; want it back", s, id, err)
		}
	}
	if id, _ := ParseEventID("42"); !(EventID{Index: 42, N: 5}).Less(id) || !id.Less(EventID{Index: 43}) {
		t.Errorf("a bare index is not the last event of that index: %+v", id)
	}
	for _, s := range []string{"", "x", "1-", "1-x", "-1", "1--2", "1-2-3"} {
		if _, err := ParseEventID(s); err == nil {
			t.Errorf("ParseEventID(%q): no error", s)
		}
	}
}

// TestDriftCorrectionsShow: a report whose correction count grew puts the
// resource in the device's timeline as corrected and on the event stream,
// even when the status stayed converged; the same count again, or a
// lower one (the agent restarted), does not.
func TestDriftCorrectionsShow(t *testing.T) {
	f := newTestFSM(t, 0)
	f.Apply(1, mustEncode(t, DeviceSessionType, &DeviceSessionRequest{ID: "dev-1", SessionID: "s", Server: "s1", Conn: "c", Connected: true, Time: 1}))
	report := func(index, seq uint64, corrections uint32) {
		f.Apply(index, mustEncode(t, StatusBatchType, &StatusBatchRequest{Owner: "s1", Transitions: []StatusTransition{{
			Device: "dev-1", Seq: seq, Time: int64(index), Revision: 1, Status: "converged", Full: true,
			Resources: []ResourceStatus{{Key: "motd/motd", State: "converged", Effective: "ok", Corrections: corrections}},
		}}}))
	}
	report(2, 1, 0)
	report(3, 2, 2) // two corrections since the last report
	report(4, 3, 2) // nothing new
	report(5, 4, 1) // the agent restarted and corrected once
	tl, err := f.Read().Timeline(nil, "dev-1")
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range tl {
		got = append(got, fmt.Sprintf("%d %s %v", e.Index, e.Status, e.Resources))
	}
	want := []string{"2 converged map[]", "3 converged map[motd/motd:corrected]"}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("timeline (-want +got):\n%s", d)
	}
	var drift []string
	for _, e := range allEvents(f) {
		if e.Kind == KindDrift {
			drift = append(drift, fmt.Sprintf("%s %s %s", e.ID, e.Action, e.Message))
		}
	}
	if d := cmp.Diff([]string{"3-1 corrected drift corrected by the agent (2 times since it started)"}, drift); d != "" {
		t.Errorf("drift events (-want +got):\n%s", d)
	}
}

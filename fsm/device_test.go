package fsm

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/hashicorp/go-memdb"
)

func TestDeviceSessionAndReports(t *testing.T) {
	f := newTestFSM(t, 0)
	idx := uint64(0)
	apply := func(typ MessageType, req any) ApplyResult {
		idx++
		return f.Apply(idx, mustEncode(t, typ, req))
	}
	if res := apply(DeviceSessionType, &DeviceSessionRequest{ID: "d1", SessionID: "x", Server: "a"}); !errors.Is(res.Err, ErrNotFound) {
		t.Fatalf("disconnect of an unknown device: %+v", res)
	}
	res := apply(DeviceSessionType, &DeviceSessionRequest{ID: "d1", Labels: map[string]string{"region": "eu"}, SessionID: "s-a", Server: "srv1", Connected: true, AckedRevision: 0, Time: 5})
	if res.Err != nil || res.Revision != 1 {
		t.Fatalf("first session: %+v (a new device takes a revision: it changes desired state)", res)
	}
	// The same labels again take no revision.
	if res := apply(DeviceSessionType, &DeviceSessionRequest{ID: "d1", Labels: map[string]string{"region": "eu"}, SessionID: "s-a", Server: "srv2", Connected: true, AckedRevision: 7, Time: 6}); res.Revision != 1 {
		t.Fatalf("reconnect: %+v", res)
	}
	// Acked revisions never go backwards.
	apply(DeviceSessionType, &DeviceSessionRequest{ID: "d1", SessionID: "s-a", Server: "srv2", Connected: true, AckedRevision: 3, Time: 7})
	// A disconnect from the old server does not mark the device offline.
	apply(DeviceSessionType, &DeviceSessionRequest{ID: "d1", SessionID: "s-a", Server: "srv1", Connected: false, Time: 8})
	d, err := f.Read().Device(nil, "d1")
	if err != nil {
		t.Fatal(err)
	}
	if !d.Connected || d.Server != "srv2" || d.AckedRevision != 7 || d.LastSeen != 7 {
		t.Fatalf("device %+v", d)
	}

	report := func(tr StatusTransition) {
		tr.Device, tr.Status = "d1", "converged"
		apply(StatusBatchType, &StatusBatchRequest{Owner: "srv2", Transitions: []StatusTransition{tr}})
	}
	rep := StatusTransition{Seq: 2, Revision: 7, Full: true, Resources: []ResourceStatus{
		{Key: "net/b", AppliedDigest: "bb", Effective: "ok"},
		{Key: "net/a", AppliedDigest: "aa", Effective: "mismatch", Detail: "old cert served"},
	}, Time: 9}
	report(rep)
	// A resent duplicate (same seq, other content) is ignored: at most once.
	dup := rep
	dup.Resources = nil
	report(dup)
	// A partial report updates only the resources it names.
	report(StatusTransition{Seq: 3, Revision: 7, Resources: []ResourceStatus{{Key: "net/a", AppliedDigest: "aa", Effective: "ok"}}, Time: 10})
	d, _ = f.Read().Device(nil, "d1")
	want := []ResourceStatus{{Key: "net/a", AppliedDigest: "aa", Effective: "ok"}, {Key: "net/b", AppliedDigest: "bb", Effective: "ok"}}
	if diff := cmp.Diff(want, d.Resources); diff != "" || d.ReportSeq != 3 {
		t.Fatalf("resources (-want +got):\n%s\nseq %d", diff, d.ReportSeq)
	}
	// A full report drops resources it does not list.
	report(StatusTransition{Seq: 5, Full: true, Resources: []ResourceStatus{{Key: "net/b", AppliedDigest: "bb", Effective: "ok"}}, Time: 11})
	apply(DeviceSessionType, &DeviceSessionRequest{ID: "d1", SessionID: "s-a", Server: "srv2", Connected: false, Time: 12})
	d, _ = f.Read().Device(nil, "d1")
	if len(d.Resources) != 1 || d.Connected || d.ReportSeq != 5 {
		t.Fatalf("device %+v", d)
	}
}

// TestResourceStatusState checks that a reported resource state is
// committed with the record, and that a status committed before the field
// existed (by a server of protocol 1.0) still reads, with no state.
func TestResourceStatusState(t *testing.T) {
	f := newTestFSM(t, 0)
	f.Apply(1, mustEncode(t, DeviceSessionType, &DeviceSessionRequest{ID: "d1", SessionID: "s", Server: "a", Connected: true, Time: 1}))
	// The transition of a 1.0 agent's report, as a 1.0 server encoded it.
	old := []byte(`{"owner":"a","transitions":[{"device":"d1","seq":1,"time":2,"revision":1,"status":"blocked","full":true,` +
		`"resources":[{"key":"app/web","effective":"unknown","detail":"blocked: requires app/db"}]}]}`)
	f.Apply(2, append([]byte{byte(StatusBatchType)}, old...))
	d, err := f.Read().Device(nil, "d1")
	if err != nil {
		t.Fatal(err)
	}
	want := []ResourceStatus{{Key: "app/web", Effective: "unknown", Detail: "blocked: requires app/db"}}
	if diff := cmp.Diff(want, d.Resources); diff != "" {
		t.Fatalf("1.0 record (-want +got):\n%s", diff)
	}

	typed := []ResourceStatus{{Key: "app/web", Effective: "unknown", State: "blocked", Detail: "requires app/db"}}
	f.Apply(3, mustEncode(t, StatusBatchType, &StatusBatchRequest{Owner: "a", Transitions: []StatusTransition{
		{Device: "d1", Seq: 2, Time: 3, Revision: 1, Status: "blocked", Full: true, Resources: typed},
	}}))
	d, _ = f.Read().Device(nil, "d1")
	if diff := cmp.Diff(typed, d.Resources); diff != "" {
		t.Fatalf("typed record (-want +got):\n%s", diff)
	}
	b, err := json.Marshal(typed[0])
	if err != nil {
		t.Fatal(err)
	}
	if got, want := string(b), `{"key":"app/web","effective":"unknown","state":"blocked","detail":"requires app/db"}`; got != want {
		t.Errorf("JSON = %s, want %s", got, want)
	}
}

func TestStatusBatchTimeline(t *testing.T) {
	f, err := New(Config{TimelineLimit: 3})
	if err != nil {
		t.Fatal(err)
	}
	f.Apply(1, mustEncode(t, DeviceSessionType, &DeviceSessionRequest{ID: "d1", SessionID: "s", Server: "a", Connected: true, Time: 1}))
	statuses := []string{"pending", "progressing", "failed", "progressing", "converged"}
	for i, st := range statuses {
		f.Apply(uint64(2+i), mustEncode(t, StatusBatchType, &StatusBatchRequest{Owner: "a", Transitions: []StatusTransition{
			{Device: "d1", Seq: uint64(i + 1), Time: int64(10 + i), Revision: 1, Status: st, Full: true,
				Resources: []ResourceStatus{{Key: "k", AppliedDigest: fmt.Sprint(i), Effective: "ok"}}},
			{Device: "unknown", Time: 5, Status: "failed"},
		}}))
	}
	// The same status again adds no timeline entry.
	f.Apply(10, mustEncode(t, StatusBatchType, &StatusBatchRequest{Owner: "a", Transitions: []StatusTransition{{Device: "d1", Time: 20, Revision: 1, Status: "converged"}}}))
	r := f.Read()
	tl, err := r.Timeline(nil, "d1")
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range tl {
		got = append(got, fmt.Sprintf("%d:%s", e.Seq, e.Status))
	}
	if diff := cmp.Diff([]string{"3:failed", "4:progressing", "5:converged"}, got); diff != "" {
		t.Fatalf("timeline (-want +got):\n%s", diff)
	}
	d, _ := r.Device(nil, "d1")
	if d.Status != "converged" || d.StatusSince != 14 || d.ReportSeq != 5 || d.Resources[0].AppliedDigest != "4" {
		t.Fatalf("device %+v", d)
	}
	if _, err := r.Device(nil, "unknown"); err == nil {
		t.Fatal("a transition registered an unknown device")
	}
}

// TestDisconnectCountsForItsConnectionOnly: a resumed session keeps its ID
// and may come back on the same server; the late disconnect of its earlier
// connection must not mark the live one offline.
func TestDisconnectCountsForItsConnectionOnly(t *testing.T) {
	f := newTestFSM(t, 0)
	idx := uint64(0)
	apply := func(req *DeviceSessionRequest) {
		t.Helper()
		idx++
		if res := f.Apply(idx, mustEncode(t, DeviceSessionType, req)); res.Err != nil {
			t.Fatal(res.Err)
		}
	}
	apply(&DeviceSessionRequest{ID: "d1", SessionID: "s", Server: "srv1", Conn: "c1", Connected: true, Time: 1})
	apply(&DeviceSessionRequest{ID: "d1", SessionID: "s", Server: "srv1", Conn: "c2", Connected: true, Time: 2})
	apply(&DeviceSessionRequest{ID: "d1", SessionID: "s", Server: "srv1", Conn: "c1", Connected: false, Time: 3})
	d, err := f.Read().Device(nil, "d1")
	if err != nil {
		t.Fatal(err)
	}
	if !d.Connected || d.Conn != "c2" {
		t.Fatalf("after the old connection's disconnect: %+v", d)
	}
	apply(&DeviceSessionRequest{ID: "d1", SessionID: "s", Server: "srv1", Conn: "c2", Connected: false, Time: 4})
	if d, _ = f.Read().Device(nil, "d1"); d.Connected {
		t.Fatalf("after the live connection's disconnect: %+v", d)
	}
}

// TestDeviceSessionBatch: a batch applies its events in order, as single
// commands would, skipping those a single command would reject.
func TestDeviceSessionBatch(t *testing.T) {
	single, batched := newTestFSM(t, 0), newTestFSM(t, 0)
	events := []DeviceSessionRequest{
		{ID: "ghost", SessionID: "g", Server: "srv1", Conn: "x", Connected: false, Time: 1}, // rejected: unknown device
		{ID: "d1", Labels: map[string]string{"region": "eu"}, SessionID: "s", Server: "srv1", Conn: "c1", Connected: true, Time: 2},
		{ID: "d2", Labels: map[string]string{"region": "us"}, SessionID: "t", Server: "srv1", Conn: "c2", Connected: true, AckedRevision: 4, Time: 3},
		{ID: "d1", SessionID: "s", Server: "srv1", Conn: "c1", Connected: true, AckedRevision: 2, Time: 4},
		{ID: "d2", SessionID: "t", Server: "srv1", Conn: "c2", Connected: false, Time: 5},
	}
	for i := range events {
		single.Apply(uint64(i+1), mustEncode(t, DeviceSessionType, &events[i]))
	}
	res := batched.Apply(uint64(len(events)), mustEncode(t, DeviceSessionBatchType, &DeviceSessionBatchRequest{Sessions: events}))
	if res.Err != nil {
		t.Fatal(res.Err)
	}
	for _, id := range []string{"d1", "d2"} {
		a, err := single.Read().Device(nil, id)
		if err != nil {
			t.Fatal(err)
		}
		b, err := batched.Read().Device(nil, id)
		if err != nil {
			t.Fatal(err)
		}
		// Indexes differ (one entry against five); the rest must not.
		a.CreateIndex, a.ModifyIndex, b.CreateIndex, b.ModifyIndex = 0, 0, 0, 0
		if diff := cmp.Diff(a, b); diff != "" {
			t.Errorf("%s (-single +batched):\n%s", id, diff)
		}
	}
	if _, err := batched.Read().Device(nil, "ghost"); !errors.Is(err, ErrNotFound) {
		t.Errorf("the rejected event created a device: %v", err)
	}
	if single.Read().Revision() != batched.Read().Revision() {
		t.Errorf("revision %d single, %d batched", single.Read().Revision(), batched.Read().Revision())
	}
}

// TestStaleOwnerTransitionIsRefused: while ownership moves, a server that
// judged a device on a status another owner has since replaced (its
// replica behind, or its view of the ring out of date) must not write its
// stale status over the newer one; it may once it has taken that status
// in. A report's contents still count, by sequence number.
func TestStaleOwnerTransitionIsRefused(t *testing.T) {
	f, err := New(Config{TimelineLimit: 10})
	if err != nil {
		t.Fatal(err)
	}
	f.Apply(1, mustEncode(t, DeviceSessionType, &DeviceSessionRequest{ID: "d1", SessionID: "s", Server: "a", Connected: true, Time: 1}))
	status := func(index uint64, owner string, basis, seq uint64, st string) {
		t.Helper()
		f.Apply(index, mustEncode(t, StatusBatchType, &StatusBatchRequest{Owner: owner, Transitions: []StatusTransition{
			{Device: "d1", Seq: seq, Time: int64(index), Revision: 1, Status: st, Basis: basis, Full: seq > 0,
				Resources: []ResourceStatus{{Key: "k", AppliedDigest: fmt.Sprint(seq), Effective: "ok"}}},
		}}))
	}
	want := func(st, owner string, index, seq uint64) {
		t.Helper()
		d, err := f.Read().Device(nil, "d1")
		if err != nil {
			t.Fatal(err)
		}
		if d.Status != st || d.StatusOwner != owner || d.StatusIndex != index || d.ReportSeq != seq {
			t.Fatalf("status %s by %s at %d, report seq %d; want %s by %s at %d, seq %d", d.Status, d.StatusOwner, d.StatusIndex, d.ReportSeq, st, owner, index, seq)
		}
	}
	status(2, "s3", 0, 1, "converged")
	want("converged", "s3", 2, 1)
	status(3, "s3", 0, 0, "converged") // its own line: applies
	want("converged", "s3", 3, 1)
	status(4, "s1", 2, 2, "pending") // judged on index 2, replaced at 3
	want("converged", "s3", 3, 2)    // status kept, report merged
	status(5, "s1", 3, 0, "progressing")
	want("progressing", "s1", 5, 2)
	status(6, "s3", 3, 0, "converged") // s3 has not seen s1's status
	want("progressing", "s1", 5, 2)
	tl, err := f.Read().Timeline(nil, "d1")
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range tl {
		got = append(got, e.Owner+":"+e.Status)
	}
	if diff := cmp.Diff([]string{"s3:converged", "s1:progressing"}, got); diff != "" {
		t.Fatalf("timeline (-want +got):\n%s", diff)
	}
}

// TestTimelineInTheRecord: a device's timeline is kept in its record and
// written to a snapshot an entry a line, in the order a row an entry gave,
// so snapshots and their hashes stay the same across releases; a restore
// gathers the lines into their records however they come, and refuses one
// of a device it has no record of; after a lowered limit the entries go
// as a row an entry did; and a reader's watch does not fire on another
// device's entries.
func TestTimelineInTheRecord(t *testing.T) {
	f := newTestFSMWith(t, Config{TimelineLimit: 3})
	apply := mustApplier(t, f)
	for _, id := range []string{"d2", "d1", "d3"} {
		apply(DeviceSessionType, &DeviceSessionRequest{ID: id, SessionID: "s", Server: "a", Connected: true, Time: 1})
	}
	status := func(id string, seq int) {
		apply(StatusBatchType, &StatusBatchRequest{Owner: "a", Transitions: []StatusTransition{{Device: id, Seq: uint64(seq), Time: int64(10 + seq), Revision: 1,
			Status: []string{"pending", "progressing", "converged"}[seq%3], ResourceStates: map[string]string{"k": fmt.Sprint(seq)}}}})
	}
	for seq := 1; seq <= 5; seq++ {
		status("d1", seq)
		status("d2", seq)
	}
	ws := memdb.NewWatchSet()
	if _, err := f.Read().Timeline(ws, "d1"); err != nil {
		t.Fatal(err)
	}
	status("d2", 6)
	if !ws.Watch(closedChan()) {
		t.Fatal("another device's timeline entry fired the watch of d1's")
	}
	status("d1", 6)
	if ws.Watch(time.After(10 * time.Second)) {
		t.Fatal("d1's timeline entry did not fire the watch of its timeline")
	}

	// The snapshot's timeline lines: every kept entry, by device, then by
	// sequence, as a row an entry was read from memdb's index.
	var want []string
	for _, id := range []string{"d1", "d2"} {
		tl, err := f.Read().Timeline(nil, id)
		if err != nil {
			t.Fatal(err)
		}
		if len(tl) != 3 || tl[0].Seq != 4 || tl[2].Seq != 6 {
			t.Fatalf("timeline of %s: %d entries from %d, want 3 from 4", id, len(tl), tl[0].Seq)
		}
		for _, e := range tl {
			b, err := json.Marshal(&snapshotEntry{Timeline: e})
			if err != nil {
				t.Fatal(err)
			}
			want = append(want, string(b))
		}
	}
	snap := snapshotBytes(t, f)
	var got []string
	for line := range strings.Lines(string(snap)) {
		if strings.HasPrefix(line, `{"timeline":`) {
			got = append(got, strings.TrimSuffix(line, "\n"))
		}
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("timeline lines of the snapshot (-want +got):\n%s", diff)
	}
	if tl, _ := f.Read().Timeline(nil, "d3"); len(tl) != 0 {
		t.Fatalf("d3 has %d timeline entries, want none", len(tl))
	}

	// Lines that come apart, out of order, or twice are gathered into
	// their device's record in sequence order, the later line of a
	// sequence number kept.
	lines := strings.SplitAfter(strings.TrimSuffix(string(snap), "\n"), "\n")
	var tlLines, other []string
	for _, l := range lines {
		if strings.HasPrefix(l, `{"timeline":`) {
			tlLines = append(tlLines, l)
		} else {
			other = append(other, l)
		}
	}
	again := strings.Replace(tlLines[1], `"owner":"a"`, `"owner":"b"`, 1)
	if again == tlLines[1] {
		t.Fatalf("no owner in the line %s", tlLines[1])
	}
	shuffled := append(append([]string{}, other...), tlLines[2], tlLines[3], tlLines[1], tlLines[5], tlLines[0], tlLines[4], again)
	g := newTestFSMWith(t, Config{TimelineLimit: 3})
	if err := g.Restore(strings.NewReader(strings.Join(shuffled, ""))); err != nil {
		t.Fatal(err)
	}
	tl, err := g.Read().Timeline(nil, "d1")
	if err != nil {
		t.Fatal(err)
	}
	var seqs []string
	for _, e := range tl {
		seqs = append(seqs, fmt.Sprintf("%d:%s", e.Seq, e.Owner))
	}
	if diff := cmp.Diff([]string{"4:a", "5:b", "6:a"}, seqs); diff != "" {
		t.Fatalf("restored timeline of d1 (-want +got):\n%s", diff)
	}

	orphan := strings.Replace(tlLines[0], `"device":"d1"`, `"device":"d9"`, 1)
	err = newTestFSM(t, 0).Restore(strings.NewReader(strings.Join(append(append([]string{}, other...), orphan), "")))
	if err == nil || !strings.Contains(err.Error(), `timeline entry 4 of device "d9", which it holds no record of`) {
		t.Fatalf("restore of a timeline entry without its device: %v", err)
	}

	// A replica restarted with a lower limit drops the entry that limit
	// leaves behind at each new one, as a row an entry did; older ones
	// stay.
	h := newTestFSMWith(t, Config{TimelineLimit: 2})
	if err := h.Restore(bytes.NewReader(snap)); err != nil {
		t.Fatal(err)
	}
	if res := h.Apply(100, mustEncode(t, StatusBatchType, &StatusBatchRequest{Owner: "a", Transitions: []StatusTransition{{Device: "d2", Seq: 7, Time: 17, Revision: 1, Status: "failed"}}})); res.Err != nil {
		t.Fatal(res.Err)
	}
	seqs = nil
	tl, _ = h.Read().Timeline(nil, "d2")
	for _, e := range tl {
		seqs = append(seqs, fmt.Sprint(e.Seq))
	}
	if diff := cmp.Diff([]string{"4", "6", "7"}, seqs); diff != "" {
		t.Fatalf("timeline of d2 after an entry under a limit of 2 (-want +got):\n%s", diff)
	}
}

// TestTimelineAsARowAnEntry: through random logs, label upserts that
// replace a record whole (and so number its entries from 1 again)
// included, every device's timeline is what the rules of a row an entry
// give: the new entry replaces any of its number, and the entry the
// limit leaves behind at that number goes.
func TestTimelineAsARowAnEntry(t *testing.T) {
	for _, limit := range []int{1, 3} {
		for seed := uint64(1); seed <= 4; seed++ {
			f := newTestFSMWith(t, Config{TimelineLimit: limit})
			model := map[string]map[uint64]*TimelineEntry{}
			seqs := map[string]uint64{}
			for i, cmd := range randomLog(t, seed, 800) {
				f.Apply(uint64(i+1), cmd)
				for n := range 20 {
					id := fmt.Sprintf("dev-%d", n)
					rec, err := f.Read().Device(nil, id)
					if err != nil {
						continue
					}
					tl, err := f.Read().Timeline(nil, id)
					if err != nil {
						t.Fatal(err)
					}
					if rec.TimelineSeq > seqs[id] {
						// One entry an apply here: the newest.
						e := tl[slices.IndexFunc(tl, func(e *TimelineEntry) bool { return e.Seq == rec.TimelineSeq })]
						if model[id] == nil {
							model[id] = map[uint64]*TimelineEntry{}
						}
						model[id][e.Seq] = e
						if e.Seq > uint64(limit) {
							delete(model[id], e.Seq-uint64(limit))
						}
					}
					seqs[id] = rec.TimelineSeq
					want := slices.Sorted(maps.Keys(model[id]))
					var got []uint64
					for _, e := range tl {
						got = append(got, e.Seq)
						if model[id][e.Seq] != e {
							t.Fatalf("limit %d, seed %d, entry %d: %s's entry %d is not the one added last", limit, seed, i, id, e.Seq)
						}
					}
					if !slices.Equal(want, got) {
						t.Fatalf("limit %d, seed %d, entry %d: %s's timeline %v, want %v", limit, seed, i, id, got, want)
					}
				}
			}
			if got := snapshotBytes(t, restored(t, f)); !bytes.Equal(got, snapshotBytes(t, f)) {
				t.Fatalf("limit %d, seed %d: the restored state's snapshot differs", limit, seed)
			}
		}
	}
}

func closedChan() chan time.Time {
	ch := make(chan time.Time)
	close(ch)
	return ch
}

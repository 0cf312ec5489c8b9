package agent

import (
	"slices"
	"testing"
	"time"

	"github.com/meteor-edge/meteor/agent/journal"
	"github.com/meteor-edge/meteor/wire"
)

// TestPartialReports: the first report is full; later ones carry only the
// resources changed since the report the server acknowledged last, so
// each supersedes the unacknowledged ones before it; nothing goes while
// nothing changes; a resource gone, and the interval, bring a full one.
func TestPartialReports(t *testing.T) {
	clock := newFakeClock()
	j, err := journal.Open(t.TempDir(), journal.Options{Now: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	st := newStatusStore("dev-1")
	rp := newReporter(j, st, clock, func() time.Duration { return time.Hour }, testLogger(t))

	set := func(rev uint64, res ...ResourceStatus) {
		t.Helper()
		st.setResources(rev, res, clock.Now())
	}
	// pending returns the one queued report: its seq, whether it is full,
	// and the keys it carries.
	pending := func() (uint64, bool, []string) {
		t.Helper()
		ps, err := j.PendingReports()
		if err != nil || len(ps) != 1 {
			t.Fatalf("pending reports: %d, %v; want 1", len(ps), err)
		}
		rep, err := decodeReport(ps[0])
		if err != nil {
			t.Fatal(err)
		}
		var keys []string
		for _, r := range rep.Resources {
			keys = append(keys, r.Key)
		}
		return rep.Seq, rep.Full, keys
	}
	queue := func() {
		t.Helper()
		if _, err := rp.maybeQueue(); err != nil {
			t.Fatal(err)
		}
	}
	ack := func(seq uint64) {
		t.Helper()
		if err := j.AckReports(seq); err != nil {
			t.Fatal(err)
		}
		rp.acked(seq)
	}
	a := ResourceStatus{Key: "app/a", State: StateConverged, Effective: wire.EffectiveOK, AppliedRevision: 1}
	b := ResourceStatus{Key: "app/b", State: StateConverged, Effective: wire.EffectiveOK, AppliedRevision: 1}

	set(1, a, b)
	queue()
	seq1, full, keys := pending()
	if !full || !slices.Equal(keys, []string{"app/a", "app/b"}) {
		t.Fatalf("first report: full %v, %v; want a full one of a and b", full, keys)
	}
	ack(seq1)
	queue()
	if ps, _ := j.PendingReports(); len(ps) != 0 {
		t.Fatalf("%d reports queued while nothing changed", len(ps))
	}

	a2 := a
	a2.AppliedRevision, a2.State = 2, StateProgressing
	set(2, a2, b)
	queue()
	seq2, full, keys := pending()
	if full || !slices.Equal(keys, []string{"app/a"}) {
		t.Fatalf("after a changed: full %v, %v; want a partial one of a", full, keys)
	}

	// Not acknowledged yet; b changes too: the next carries both.
	b2 := b
	b2.State, b2.Detail = StateDrifted, "content differs"
	set(2, a2, b2)
	queue()
	seq3, full, keys := pending()
	if seq3 <= seq2 || full || !slices.Equal(keys, []string{"app/a", "app/b"}) {
		t.Fatalf("second change unacknowledged: seq %d (after %d), full %v, %v; want a partial one of a and b", seq3, seq2, full, keys)
	}
	ack(seq3)

	a3 := a2
	a3.State = StateConverged
	set(2, a3, b2)
	queue()
	_, full, keys = pending()
	if full || !slices.Equal(keys, []string{"app/a"}) {
		t.Fatalf("after the ack: full %v, %v; want a partial one of a", full, keys)
	}

	set(3, a3) // b is gone
	queue()
	seq5, full, keys := pending()
	if !full || !slices.Equal(keys, []string{"app/a"}) {
		t.Fatalf("after b went: full %v, %v; want a full one of a", full, keys)
	}
	ack(seq5)

	clock.Advance(time.Hour)
	queue()
	if _, full, _ := pending(); !full {
		t.Fatal("no full report after the interval")
	}
}

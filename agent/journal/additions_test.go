package journal

import (
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"
)

var errTest = errors.New("test failure")

func TestAppliedBody(t *testing.T) {
	j := openT(t, t.TempDir())
	defer closeT(t, j)
	must(t, j.RecordDesired(1, []DesiredResource{{Key: "a", Digest: "d1", Revision: 1, Body: []byte("one")}}))
	if _, ok, err := j.AppliedBody("a"); ok || err != nil {
		t.Fatalf("AppliedBody before any step = %v, %v", ok, err)
	}
	must(t, j.BeginStep("a", "d1", 1))
	must(t, j.EndStep("a", "d1", 1, nil))
	// A newer body is desired and fails: the applied body stays the old one.
	must(t, j.RecordDesired(2, []DesiredResource{{Key: "a", Digest: "d2", Revision: 2, Body: []byte("two")}}))
	must(t, j.BeginStep("a", "d2", 2))
	must(t, j.EndStep("a", "d2", 2, errTest))
	b, ok, err := j.AppliedBody("a")
	must(t, err)
	if diff := cmp.Diff(AppliedBody{Digest: "d1", Revision: 1, Body: []byte("one")}, b); !ok || diff != "" {
		t.Errorf("AppliedBody after a failed newer step (-want +got):\n%s", diff)
	}
	if rev, err := j.DesiredRevision(); rev != 2 || err != nil {
		t.Errorf("DesiredRevision = %d, %v", rev, err)
	}
	must(t, j.ForgetApplied("a"))
	if _, ok, _ := j.AppliedBody("a"); ok {
		t.Error("AppliedBody after ForgetApplied")
	}
}

func TestReplaceReports(t *testing.T) {
	j := openT(t, t.TempDir())
	defer closeT(t, j)
	for range 3 {
		if _, err := j.QueueReport([]byte("old")); err != nil {
			t.Fatal(err)
		}
	}
	seq, err := j.ReplaceReports(0, []byte("new"))
	if err != nil || seq != 4 {
		t.Fatalf("ReplaceReports = %d, %v; want 4", seq, err)
	}
	// A server that applied up to 10 (a journal restored from a backup):
	// the next report is numbered above it.
	if seq, err = j.ReplaceReports(10, []byte("newer")); err != nil || seq != 11 {
		t.Fatalf("ReplaceReports after 10 = %d, %v; want 11", seq, err)
	}
	got, err := j.PendingReports()
	must(t, err)
	if diff := cmp.Diff([]Report{{11, []byte("newer")}}, got); diff != "" {
		t.Errorf("pending (-want +got):\n%s", diff)
	}
	must(t, j.AckReports(4)) // a late ack of a superseded report
	must(t, j.AckReports(11))
	if got, _ := j.PendingReports(); len(got) != 0 {
		t.Errorf("pending after ack = %v", got)
	}
}

// TestSummaryFollowsWrites: the summary, read from a cache between
// writes, shows every write's effect on the session and the pending
// reports, and is what a fresh read of the file says.
func TestSummaryFollowsWrites(t *testing.T) {
	j := openT(t, t.TempDir())
	defer closeT(t, j)
	check := func(step string) {
		t.Helper()
		got, err := j.Summary()
		must(t, err)
		again, err := j.Summary() // from the cache
		must(t, err)
		sess, err := j.Session()
		must(t, err)
		pending, err := j.PendingReports()
		must(t, err)
		want := Summary{Session: sess, PendingReports: len(pending)}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("%s: summary (-file +summary):\n%s", step, diff)
		}
		if diff := cmp.Diff(got, again); diff != "" {
			t.Errorf("%s: a second summary differs (-first +second):\n%s", step, diff)
		}
	}
	check("empty")
	must(t, j.SetSession("s-1", []byte("token")))
	check("session set")
	for range 3 {
		_, err := j.QueueReport([]byte("r"))
		must(t, err)
		check("report queued")
	}
	must(t, j.AckReports(2))
	check("two acknowledged")
	_, err := j.ReplaceReports(0, []byte("full"))
	must(t, err)
	check("replaced")
	if got, _ := j.Summary(); got.PendingReports != 1 || got.Session.ID != "s-1" || got.Session.LastReportSeq != 4 {
		t.Fatalf("summary %+v, want session s-1, 1 pending report, last seq 4", got)
	}
}

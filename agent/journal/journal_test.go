package journal

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/hashicorp/go-hclog"
	bolt "go.etcd.io/bbolt"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// testClock returns a Now function that advances one second per call.
func testClock() func() time.Time {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	return func() time.Time {
		now = now.Add(time.Second)
		return now
	}
}

func openT(t *testing.T, dir string) *Journal {
	t.Helper()
	j, err := Open(dir, Options{
		Now:    testClock(),
		Logger: hclog.New(&hclog.LoggerOptions{Output: testWriter{t}, Level: hclog.Debug}),
	})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	return j
}

func closeT(t *testing.T, j *Journal) {
	t.Helper()
	if err := j.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func res(key, digest string, rev uint64) DesiredResource {
	return DesiredResource{Key: key, Digest: digest, Revision: rev, Body: []byte(`{"id":"` + key + `"}`)}
}

// snapshot is everything a journal holds, for comparisons.
type snapshot struct {
	Session  Session
	Reports  []Report
	Desired  DesiredSet
	Applied  []Applied
	InFlight []Step
	Progress Progress
}

func snap(t *testing.T, j *Journal) snapshot {
	t.Helper()
	var s snapshot
	var err error
	if s.Session, err = j.Session(); err != nil {
		t.Fatal(err)
	}
	if s.Reports, err = j.PendingReports(); err != nil {
		t.Fatal(err)
	}
	if s.Desired, err = j.Desired(); err != nil {
		t.Fatal(err)
	}
	if s.Applied, err = j.AppliedAll(); err != nil {
		t.Fatal(err)
	}
	if s.InFlight, err = j.InFlight(); err != nil {
		t.Fatal(err)
	}
	if s.Progress, err = j.Progress(); err != nil {
		t.Fatal(err)
	}
	return s
}

func TestReopenKeepsEverything(t *testing.T) {
	dir := t.TempDir()
	j := openT(t, dir)
	must(t, j.SetSession("sess-1", []byte("token")))
	must(t, j.RecordDesired(7, []DesiredResource{res("a", "da", 3), res("b", "db", 7), res("c", "dc", 7)}))
	must(t, j.AckRevision(7))
	for _, body := range []string{"r1", "r2", "r3"} {
		if _, err := j.QueueReport([]byte(body)); err != nil {
			t.Fatal(err)
		}
	}
	must(t, j.AckReports(1))
	must(t, j.BeginStep("a", "da", 3))
	must(t, j.EndStep("a", "da", 3, nil))
	must(t, j.BeginStep("b", "db", 7))
	must(t, j.EndStep("b", "db", 7, errors.New("disk full")))
	must(t, j.BeginStep("c", "dc", 7))
	before := snap(t, j)
	closeT(t, j)

	j = openT(t, dir)
	defer closeT(t, j)
	after := snap(t, j)
	if diff := cmp.Diff(before, after); diff != "" {
		t.Errorf("journal changed across reopen (-before +after):\n%s", diff)
	}
	want := snapshot{
		Session: Session{ID: "sess-1", ResumeToken: []byte("token"), AckedRevision: 7, LastReportSeq: 3, AckedReportSeq: 1},
		Reports: []Report{{Seq: 2, Body: []byte("r2")}, {Seq: 3, Body: []byte("r3")}},
		Desired: DesiredSet{Revision: 7, Resources: []DesiredResource{res("a", "da", 3), res("b", "db", 7), res("c", "dc", 7)}},
		Applied: []Applied{
			{Key: "a", Digest: "da", Revision: 3, At: before.Applied[0].At, LastStepDigest: "da", Attempts: 1},
			{Key: "b", LastError: "disk full", LastStepDigest: "db", Attempts: 1},
			{Key: "c", LastStepDigest: "dc", Attempts: 1},
		},
		InFlight: []Step{{Key: "c", Digest: "dc", Revision: 7, BegunAt: before.InFlight[0].BegunAt, Seq: 3}},
	}
	want.Progress = Progress{Revision: 7, Applied: []string{"a"}, InFlight: want.InFlight, Failed: []string{"b"}}
	if diff := cmp.Diff(want, after); diff != "" {
		t.Errorf("journal content (-want +got):\n%s", diff)
	}
	if after.Applied[0].At.IsZero() {
		t.Error("applied record has no time")
	}
}

// TestCrashBetweenBeginAndEnd copies the journal file while a step is in
// flight, as a power loss would leave it, and opens the copy.
func TestCrashBetweenBeginAndEnd(t *testing.T) {
	dir := t.TempDir()
	j := openT(t, dir)
	defer closeT(t, j)
	must(t, j.RecordDesired(1, []DesiredResource{res("a", "da", 1), res("b", "db", 1)}))
	must(t, j.BeginStep("a", "da", 1))
	must(t, j.EndStep("a", "da", 1, nil))
	must(t, j.BeginStep("b", "db", 1))

	crashed := t.TempDir()
	copyFile(t, j.Path(), filepath.Join(crashed, FileName))
	j2 := openT(t, crashed)
	defer closeT(t, j2)
	steps, err := j2.InFlight()
	if err != nil {
		t.Fatal(err)
	}
	if len(steps) != 1 || steps[0].Key != "b" || steps[0].Digest != "db" || steps[0].Revision != 1 {
		t.Fatalf("InFlight after crash = %+v, want step b", steps)
	}
	p, err := j2.Progress()
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"a"}, p.Applied); diff != "" || len(p.Pending) != 0 || len(p.Failed) != 0 {
		t.Errorf("Progress after crash = %+v", p)
	}
	// The agent re-checks and finds the step did complete.
	must(t, j2.EndStep("b", "db", 1, nil))
	if steps, _ := j2.InFlight(); len(steps) != 0 {
		t.Errorf("InFlight after resolving = %+v", steps)
	}
	if p, _ := j2.Progress(); !cmp.Equal(p.Applied, []string{"a", "b"}) {
		t.Errorf("Applied after resolving = %v", p.Applied)
	}
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	in, err := os.Open(from)
	must(t, err)
	defer in.Close()
	out, err := os.Create(to)
	must(t, err)
	defer out.Close()
	_, err = io.Copy(out, in)
	must(t, err)
}

func TestRevisionRegressionIsRefused(t *testing.T) {
	j := openT(t, t.TempDir())
	defer closeT(t, j)
	must(t, j.RecordDesired(5, []DesiredResource{res("a", "d5", 5)}))
	must(t, j.AckRevision(5))

	err := j.RecordDesired(4, []DesiredResource{res("a", "d4", 4)})
	var re *RevisionError
	if !errors.Is(err, ErrRevisionRegression) || !errors.As(err, &re) || re.Got != 4 || re.Have != 5 {
		t.Fatalf("RecordDesired(4) after ack 5 = %v, want RevisionError{4, 5}", err)
	}
	if err := j.PatchDesired(3, nil, []string{"a"}); !errors.Is(err, ErrRevisionRegression) {
		t.Errorf("PatchDesired(3) = %v, want ErrRevisionRegression", err)
	}
	if err := j.AckRevision(4); !errors.Is(err, ErrRevisionRegression) {
		t.Errorf("AckRevision(4) after 5 = %v, want ErrRevisionRegression", err)
	}
	if set, _ := j.Desired(); set.Revision != 5 || set.Resources[0].Digest != "d5" {
		t.Errorf("desired set changed by a refused write: %+v", set)
	}
	must(t, j.RecordDesired(5, []DesiredResource{res("a", "d5", 5)})) // same revision again
	must(t, j.AckRevision(5))
	if err := j.AckRevision(6); err == nil || errors.Is(err, ErrRevisionRegression) {
		t.Errorf("AckRevision(6) before recording 6 = %v, want a plain error", err)
	}

	// Not acknowledged but recorded: still no going back.
	must(t, j.RecordDesired(8, []DesiredResource{res("a", "d8", 8)}))
	if err := j.RecordDesired(6, nil); !errors.Is(err, ErrRevisionRegression) {
		t.Errorf("RecordDesired(6) after recording 8 = %v, want ErrRevisionRegression", err)
	}

	// Per resource: never begin a step older than what was applied.
	must(t, j.BeginStep("a", "d8", 8))
	must(t, j.EndStep("a", "d8", 8, nil))
	if err := j.BeginStep("a", "d5", 5); !errors.Is(err, ErrRevisionRegression) {
		t.Errorf("BeginStep at revision 5 after applying 8 = %v, want ErrRevisionRegression", err)
	}
}

func TestDesiredValidationAndPatch(t *testing.T) {
	j := openT(t, t.TempDir())
	defer closeT(t, j)
	for name, rs := range map[string][]DesiredResource{
		"empty key":      {res("", "d", 1)},
		"duplicate key":  {res("a", "d", 1), res("a", "d", 1)},
		"no digest":      {res("a", "", 1)},
		"newer than set": {res("a", "d", 3)},
	} {
		if err := j.RecordDesired(2, rs); err == nil {
			t.Errorf("%s: RecordDesired succeeded", name)
		}
	}
	must(t, j.RecordDesired(2, []DesiredResource{res("a", "da", 1), res("b", "db", 2)}))
	must(t, j.PatchDesired(3, []DesiredResource{res("c", "dc", 3), res("a", "da3", 3)}, []string{"b"}))
	set, err := j.Desired()
	must(t, err)
	want := DesiredSet{Revision: 3, Resources: []DesiredResource{res("a", "da3", 3), res("c", "dc", 3)}}
	if diff := cmp.Diff(want, set); diff != "" {
		t.Errorf("desired after patch (-want +got):\n%s", diff)
	}
	must(t, j.RecordDesired(4, nil))
	if set, _ := j.Desired(); set.Revision != 4 || len(set.Resources) != 0 {
		t.Errorf("desired after empty record = %+v", set)
	}
}

func TestSteps(t *testing.T) {
	j := openT(t, t.TempDir())
	defer closeT(t, j)
	if err := j.EndStep("a", "d", 1, nil); !errors.Is(err, ErrNoStep) {
		t.Errorf("EndStep without BeginStep = %v, want ErrNoStep", err)
	}
	must(t, j.BeginStep("a", "d1", 1))
	if err := j.EndStep("a", "d2", 1, nil); !errors.Is(err, ErrNoStep) {
		t.Errorf("EndStep with another digest = %v, want ErrNoStep", err)
	}
	must(t, j.EndStep("a", "d1", 1, errors.New("boom")))
	must(t, j.BeginStep("a", "d1", 1))
	must(t, j.EndStep("a", "d1", 1, nil))
	a, ok, err := j.Applied("a")
	if err != nil || !ok || a.Digest != "d1" || a.LastError != "" || a.Attempts != 2 {
		t.Errorf("Applied(a) = %+v, %v, %v; want d1 after 2 attempts", a, ok, err)
	}
	must(t, j.BeginStep("a", "d2", 2))
	if a, _, _ := j.Applied("a"); a.Attempts != 1 || a.Digest != "d1" {
		t.Errorf("Applied(a) while d2 in flight = %+v; want attempts restarted, digest still d1", a)
	}
	must(t, j.BeginStep("b", "db", 1))
	steps, err := j.InFlight()
	must(t, err)
	if len(steps) != 2 || steps[0].Key != "a" || steps[1].Key != "b" || steps[0].Seq >= steps[1].Seq {
		t.Errorf("InFlight = %+v, want a then b", steps)
	}
	must(t, j.ForgetApplied("a"))
	if _, ok, _ := j.Applied("a"); ok {
		t.Error("Applied(a) after ForgetApplied: still there")
	}
	if steps, _ := j.InFlight(); len(steps) != 1 {
		t.Errorf("InFlight after ForgetApplied(a) = %+v", steps)
	}
	if err := j.BeginStep("", "d", 1); err == nil {
		t.Error("BeginStep with empty key succeeded")
	}
}

func TestReports(t *testing.T) {
	dir := t.TempDir()
	j := openT(t, dir)
	for i := range 4 {
		seq, err := j.QueueReport([]byte{byte('a' + i)})
		if err != nil || seq != uint64(i+1) {
			t.Fatalf("QueueReport = %d, %v; want %d", seq, err, i+1)
		}
	}
	must(t, j.AckReports(2))
	must(t, j.AckReports(1)) // late duplicate: no-op
	if err := j.AckReports(9); err == nil {
		t.Error("AckReports beyond the last queued succeeded")
	}
	closeT(t, j)
	j = openT(t, dir)
	defer closeT(t, j)
	got, err := j.PendingReports()
	must(t, err)
	if diff := cmp.Diff([]Report{{3, []byte("c")}, {4, []byte("d")}}, got); diff != "" {
		t.Errorf("pending reports (-want +got):\n%s", diff)
	}
	// A new session keeps sequence numbers and acknowledgements.
	must(t, j.SetSession("sess-2", nil))
	if seq, _ := j.QueueReport([]byte("e")); seq != 5 {
		t.Errorf("seq after new session = %d, want 5", seq)
	}
	must(t, j.AckReports(5))
	if got, _ := j.PendingReports(); len(got) != 0 {
		t.Errorf("pending after acking all = %+v", got)
	}
	if s, _ := j.Session(); s.ID != "sess-2" || s.AckedReportSeq != 5 || s.LastReportSeq != 5 {
		t.Errorf("session = %+v", s)
	}
}

func TestOpenErrors(t *testing.T) {
	dir := t.TempDir()
	j := openT(t, dir)
	if _, err := Open(dir, Options{LockTimeout: 20 * time.Millisecond}); err == nil {
		t.Error("second Open of a held journal succeeded")
	}
	// A journal from a future agent.
	must(t, j.db.Update(func(tx *bolt.Tx) error { return tx.Bucket(bucketMeta).Put(keyVersion, encodeU64(schemaVersion+1)) }))
	closeT(t, j)
	if _, err := Open(dir, Options{}); !errors.Is(err, ErrUnsupportedVersion) {
		t.Errorf("Open of a newer journal = %v, want ErrUnsupportedVersion", err)
	}
	if fi, err := os.Stat(filepath.Join(dir, FileName)); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("journal file mode = %v, %v; want 0600", fi.Mode().Perm(), err)
	}
}

// TestPowerCutKeepsWhatWasCommitted: after PowerCut nothing more is
// written; reopened, the journal holds what was committed before, with the
// step begun still in flight.
func TestPowerCutKeepsWhatWasCommitted(t *testing.T) {
	dir := t.TempDir()
	j, err := Open(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := j.BeginStep("app/a", "d1", 1); err != nil {
		t.Fatal(err)
	}
	j.PowerCut()
	if err := j.EndStep("app/a", "d1", 1, nil); !errors.Is(err, ErrPowerCut) {
		t.Fatalf("EndStep after the cut: %v, want ErrPowerCut", err)
	}
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}
	j, err = Open(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	steps, err := j.InFlight()
	if err != nil {
		t.Fatal(err)
	}
	if len(steps) != 1 || steps[0].Key != "app/a" {
		t.Fatalf("in flight after the cut: %+v, want app/a", steps)
	}
	if a, _, _ := j.Applied("app/a"); a.Digest == "d1" {
		t.Fatalf("the step the cut interrupted counts as applied: %+v", a)
	}
}

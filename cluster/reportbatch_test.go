package cluster

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/meteor-edge/meteor/cluster/api"
	"github.com/meteor-edge/meteor/fsm"
	"github.com/meteor-edge/meteor/wire"
)

// TestReportsGoToTheirOwnersInBatches: reports handed at once to the
// owners of their devices from a server that is not their owner reach the
// owners in fewer requests than reports, and each is committed in its
// device's record before its caller hears so. The devices' records say
// they are in session on their home owners, as when a device's session
// has moved to s and its record has not yet: their owners are those.
func TestReportsGoToTheirOwnersInBatches(t *testing.T) {
	c := newTestCluster(t, 3, func(cfg *Config) { cfg.ClusterSecret = []byte("0123456789abcdef0123456789abcdef") })
	leader := c.waitLeader()
	s := c.follower()
	eu := map[string]string{"region": "eu"}
	waitFor(t, 10*time.Second, func() error {
		for _, o := range c.alive() {
			if o == s {
				continue
			}
			if m, ok := s.gossip.memberByID(o.config.NodeID); !ok || m.PeerAPI < peerAPIReportBatch {
				return fmt.Errorf("%s does not know %s takes report batches: %+v", s.config.NodeID, o.config.NodeID, m)
			}
		}
		return nil
	})

	// Devices owned by the other servers, recorded in session there.
	const n = 300
	var devices []string
	var sessions []fsm.DeviceSessionRequest
	for i := 0; len(devices) < n; i++ {
		id := fmt.Sprintf("kiosk-%d", i)
		home := s.OwnerOf(id, eu)
		if home == s.config.NodeID {
			continue
		}
		devices = append(devices, id)
		sessions = append(sessions, fsm.DeviceSessionRequest{ID: id, Labels: eu, SessionID: "s-" + id, Server: home, Conn: "c", Connected: true, Time: 1})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if res, _, err := applied(ctx, leader, fsm.DeviceSessionBatchType, &fsm.DeviceSessionBatchRequest{Sessions: sessions}); err != nil || res.Err != nil {
		t.Fatalf("record the sessions: %v %v", err, res.Err)
	}
	c.waitCaughtUp()

	start := make(chan struct{})
	errs := make(chan error, n)
	var wg sync.WaitGroup
	for _, id := range devices {
		wg.Go(func() {
			<-start
			rep := &wire.Report{Seq: 1, Full: true, Status: "converged", States: true, Resources: []wire.ResourceReport{
				{Key: "app/cfg", AppliedDigest: [32]byte{1}, AppliedRevision: 1, Effective: wire.EffectiveOK, State: wire.StateConverged},
			}}
			if err := s.deliverReport(ctx, id, eu, 0, rep); err != nil {
				errs <- fmt.Errorf("%s: %w", id, err)
				return
			}
			// Answered only once committed: the leader, whose answer
			// the owner waited for, has applied it.
			if rec := deviceRecord(t, leader, id); rec.ReportSeq != 1 || len(rec.Resources) != 1 {
				errs <- fmt.Errorf("%s: answered before its owner %s committed it (report seq %d, %d resources)", id, s.OwnerOf(id, eu), rec.ReportSeq, len(rec.Resources))
			}
		})
	}
	close(start)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	batches, reports := s.reportFwd.batches.Load(), s.reportFwd.reports.Load()
	t.Logf("%d reports forwarded in %d batches", reports, batches)
	if reports != n {
		t.Errorf("%d reports forwarded in batches, want %d", reports, n)
	}
	if batches >= reports {
		t.Errorf("%d batches for %d reports: none was batched", batches, reports)
	}
}

// TestReportBatchFraming: a report batch decodes to what was encoded, and
// every truncation of it, a count larger than its bytes could hold and an
// empty device or report are refused.
func TestReportBatchFraming(t *testing.T) {
	calls := []*reportCall{
		{fr: &forwardedReport{Device: "kiosk-1", Report: (&wire.Report{Seq: 3}).Append(nil), Acked: 12}, timeout: 1500 * time.Millisecond},
		{fr: &forwardedReport{Device: strings.Repeat("d", 300), Report: (&wire.Report{Seq: 1 << 40, Full: true}).Append(nil)}, timeout: time.Minute},
	}
	buf := encodeReportBatch(calls)
	got, err := decodeReportBatch(buf)
	if err != nil {
		t.Fatal(err)
	}
	var want []batchedReport
	for _, c := range calls {
		want = append(want, batchedReport{timeout: c.timeout, device: c.fr.Device, acked: c.fr.Acked, report: c.fr.Report})
	}
	if diff := cmp.Diff(want, got, cmp.AllowUnexported(batchedReport{})); diff != "" {
		t.Fatalf("decoded (-want +got):\n%s", diff)
	}
	for i := range len(buf) {
		if _, err := decodeReportBatch(buf[:i]); err == nil {
			t.Errorf("truncated to %d of %d bytes: decoded", i, len(buf))
		}
	}
	if _, err := decodeReportBatch(append(buf, 0)); err == nil {
		t.Error("a byte after the last report: decoded")
	}
	if _, err := decodeReportBatch([]byte{0xff, 0x01, 1, 1, 'd', 0, 1}); err == nil {
		t.Error("a count of 255 in 6 bytes: decoded")
	}
	for _, c := range []*reportCall{
		{fr: &forwardedReport{Device: "", Report: []byte{1, 2}}, timeout: time.Second},
		{fr: &forwardedReport{Device: "d", Report: nil}, timeout: time.Second},
	} {
		if _, err := decodeReportBatch(encodeReportBatch([]*reportCall{c})); err == nil {
			t.Errorf("device %q, report %v: decoded", c.fr.Device, c.fr.Report)
		}
	}
}

// TestReportBatchAnswers: each caller gets its own report's answer as the
// owner streams them, in any order: a report recorded, one the owner
// could not record; the reports an answer stream ended before fail; and
// an owner that does not serve /v1/internal/report-batch (an earlier
// release) is sent the batch's reports one request each.
func TestReportBatchAnswers(t *testing.T) {
	var mu sync.Mutex
	singles := 0
	var answers []reportAnswer // what the batch endpoint streams; nil: 404
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/v1/internal/report":
			mu.Lock()
			singles++
			mu.Unlock()
			writeJSON(w, http.StatusOK, map[string]uint64{"seq": 1})
		case "/v1/internal/report-batch":
			mu.Lock()
			a := answers
			mu.Unlock()
			if a == nil {
				http.NotFound(w, r)
				return
			}
			w.Header().Set("Content-Type", "application/x-ndjson")
			enc := json.NewEncoder(w)
			for _, x := range a {
				enc.Encode(x)
			}
		default:
			http.NotFound(w, r)
		}
	}))
	defer srv.Close()
	u, _ := url.Parse(srv.URL)
	p := testPeerClient(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	// deliver sends n reports in one batch and returns each one's error;
	// counted says how many the batcher counted as sent in batches.
	var counted uint64
	deliver := func(n int) []error {
		b := newReportBatcher(ctx, p)
		defer func() {
			b.wait()
			counted = b.reports.Load()
		}()
		calls := make([]*reportCall, n)
		for i := range calls {
			calls[i] = &reportCall{ctx: ctx, owner: "s2", fr: &forwardedReport{Device: fmt.Sprintf("d%d", i), Report: (&wire.Report{Seq: 1}).Append(nil)}, done: make(chan struct{})}
		}
		b.send(u.Host, calls)
		errs := make([]error, n)
		for i, c := range calls {
			<-c.done
			errs[i] = c.err
		}
		return errs
	}

	mu.Lock()
	answers = []reportAnswer{
		{I: 2},
		{I: 0, Error: &api.Error{StatusCode: http.StatusServiceUnavailable, Code: api.CodeTimeout, Message: "owner s2 could not record the report of d0"}},
	}
	mu.Unlock()
	errs := deliver(4)
	if errs[0] == nil || !strings.Contains(errs[0].Error(), "could not record the report of d0") {
		t.Errorf("report refused by its owner: %v", errs[0])
	}
	if errs[2] != nil {
		t.Errorf("report recorded: %v", errs[2])
	}
	for _, i := range []int{1, 3} {
		if errs[i] == nil || !strings.Contains(errs[i].Error(), "read the owner's answers") {
			t.Errorf("report %d, which the stream ended before: %v", i, errs[i])
		}
	}

	mu.Lock()
	answers = []reportAnswer{{I: 1}, {I: 1}}
	mu.Unlock()
	errs = deliver(2)
	if errs[1] != nil || errs[0] == nil || !strings.Contains(errs[0].Error(), "twice") {
		t.Errorf("an answer named twice: %v", errs)
	}

	mu.Lock()
	answers = nil
	mu.Unlock()
	for i, err := range deliver(5) {
		if err != nil {
			t.Errorf("report %d to an owner of an earlier release: %v", i, err)
		}
	}
	if singles != 5 || counted != 0 {
		t.Errorf("%d single requests to an owner of an earlier release, want 5; %d counted as batched, want 0", singles, counted)
	}
}

// TestReportBatchFreesItsPlaceOnceTaken: a batch holds its place among
// the batches in flight to an owner only until the owner has taken it, so
// reports queued behind batches whose commits are slow still go at once,
// and each caller hears its own answer when it comes.
func TestReportBatchFreesItsPlaceOnceTaken(t *testing.T) {
	release := make(chan struct{})
	var mu sync.Mutex
	taken := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		reports, err := decodeReportBatch(mustReadAll(t, r))
		if err != nil {
			t.Error(err)
			return
		}
		w.Header().Set("Content-Type", "application/x-ndjson")
		w.WriteHeader(http.StatusOK)
		w.(http.Flusher).Flush()
		mu.Lock()
		taken++
		mu.Unlock()
		<-release // the owner's commits are slow
		enc := json.NewEncoder(w)
		for i := range reports {
			enc.Encode(reportAnswer{I: i})
		}
	}))
	defer srv.Close()
	u, _ := url.Parse(srv.URL)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	b := newReportBatcher(ctx, testPeerClient(t, nil))
	defer b.wait()
	var once sync.Once
	free := func() { once.Do(func() { close(release) }) }
	defer free() // before waiting, should the test fail first

	const n = reportBatchesInFlight + 1
	errs := make(chan error, n)
	for i := range n {
		go func() {
			errs <- b.report(ctx, "s2", u.Host, &forwardedReport{Device: fmt.Sprintf("d%d", i), Report: (&wire.Report{Seq: 1}).Append(nil)})
		}()
		// Each report goes alone: the next is queued once this one's
		// batch is taken.
		waitFor(t, 10*time.Second, func() error {
			mu.Lock()
			defer mu.Unlock()
			if taken <= i {
				return fmt.Errorf("%d batches taken, want %d: report %d waits for a place", taken, i+1, i)
			}
			return nil
		})
	}
	free()
	for range n {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
}

func mustReadAll(t *testing.T, r *http.Request) []byte {
	t.Helper()
	b, err := io.ReadAll(r.Body)
	if err != nil {
		t.Error(err)
	}
	return b
}

// TestReportBatchEndsWithTheServer: a batch whose owner has not answered
// yet ends when the server stops, instead of holding its shutdown for as
// long as the owner takes; its reports fail (their agents send them
// again, to another server).
func TestReportBatchEndsWithTheServer(t *testing.T) {
	release := make(chan struct{})
	defer close(release)
	taken := make(chan struct{}, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/x-ndjson")
		w.WriteHeader(http.StatusOK)
		w.(http.Flusher).Flush()
		taken <- struct{}{}
		select { // an owner that cannot commit
		case <-release:
		case <-r.Context().Done():
		}
	}))
	defer srv.Close()
	u, _ := url.Parse(srv.URL)
	serverCtx, stop := context.WithCancel(context.Background())
	defer stop()
	b := newReportBatcher(serverCtx, testPeerClient(t, nil))
	errs := make(chan error, 1)
	go func() {
		errs <- b.report(context.Background(), "s2", u.Host, &forwardedReport{Device: "d1", Report: (&wire.Report{Seq: 1}).Append(nil)})
	}()
	<-taken
	stop()
	waited := make(chan struct{})
	go func() {
		b.wait()
		close(waited)
	}()
	select {
	case <-waited:
	case <-time.After(20 * time.Second):
		t.Fatal("the batcher still waits for its owner 20 s after the server stopped")
	}
	if err := <-errs; err == nil {
		t.Fatal("a report whose batch ended with the server succeeded")
	}
}

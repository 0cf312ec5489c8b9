package cluster

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/meteor-edge/meteor/cluster/api"
	"github.com/meteor-edge/meteor/wire"
)

// peerAPIReportBatch is the level of the server-to-server API from which
// a server takes forwarded reports in batches (/v1/internal/report-batch).
// An owner of an earlier release is sent one /v1/internal/report request a
// report, as it expects.
const peerAPIReportBatch = 2

// Limits of a batch of forwarded reports: at most maxReportBatch reports
// and maxReportBatchBytes of them (one larger report goes alone), and at
// most reportBatchesInFlight batches an owner that it has not yet taken.
const (
	maxReportBatch        = 256
	maxReportBatchBytes   = 1 << 20
	reportBatchesInFlight = 2
)

// reportForwardTimeout bounds how long an owner waits for a forwarded
// report's commit before it answers that it could not record it; the
// session server then tries again itself (agentSession.retryReports). It
// is a bound for an owner that cannot commit, not a wait anyone sees: a
// report is answered as soon as its commit is.
const reportForwardTimeout = 2 * time.Minute

// reportBatcher hands the reports of the devices whose sessions this
// server holds to their owners. One HTTP request a report cost both
// servers a request's parsing, signature, stream and answer for every
// report: after a change, most of the servers' HTTP work (a fifth of
// their CPU, docs/performance.md, "Per device"). The batcher sends the
// reports queued for an owner meanwhile in one signed request; the owner
// ingests them all at once and streams each report's answer as it is
// committed.
//
// It is group commit (groupSender), with one difference from the
// forwarded writes: a batch holds its place only until the owner has
// taken it (its answer's headers), not until its last report is
// committed. A report waits for its owner's next status commit, which a
// report that needs a record first (statusOwner.waitRecorded) can hold
// for seconds, and the reports queued behind a batch must not wait for
// its slowest one.
type reportBatcher struct {
	p   *peerClient
	ctx context.Context // the server's: batches in flight end with it
	q   *groupSender[*reportCall]

	readers sync.WaitGroup // the goroutines reading batches' answers

	// batches and reports count what went to owners as batches
	// (meteor_report_batches_total, meteor_report_forwarded_total).
	batches, reports atomic.Uint64
}

// reportCall is one forwarded report, its caller's context, and, once
// done is closed, its outcome.
type reportCall struct {
	ctx     context.Context
	owner   string
	fr      *forwardedReport
	timeout time.Duration // set when the batch goes
	done    chan struct{}
	err     error
}

func newReportBatcher(ctx context.Context, p *peerClient) *reportBatcher {
	b := &reportBatcher{p: p, ctx: ctx}
	b.q = newGroupSender(reportBatchesInFlight, maxReportBatch, maxReportBatchBytes,
		func(c *reportCall) int { return len(c.fr.Report) + len(c.fr.Device) }, b.send)
	return b
}

// report hands fr to its owner at addr, batched with the other reports
// forwarded to it meanwhile, and returns once the owner has made it
// durable, as peerClient.report does.
func (b *reportBatcher) report(ctx context.Context, owner, addr string, fr *forwardedReport) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("forward report of %s to its owner %s: %w", fr.Device, owner, err)
	}
	c := &reportCall{ctx: ctx, owner: owner, fr: fr, done: make(chan struct{})}
	if !b.q.queue(addr, c) {
		return fmt.Errorf("forward report of %s to its owner %s: the server is shutting down", fr.Device, owner)
	}
	select {
	case <-c.done:
		return c.err
	case <-ctx.Done():
		return fmt.Errorf("forward report of %s to its owner %s: %w", fr.Device, owner, ctx.Err())
	}
}

// send forwards one batch and returns once the owner has taken it; a
// goroutine then hands each report its answer as the owner streams it.
// Reports whose callers stopped waiting before it went are left out.
func (b *reportBatcher) send(addr string, batch []*reportCall) {
	var live []*reportCall
	longest := time.Duration(0)
	for _, c := range batch {
		if err := c.ctx.Err(); err != nil {
			c.finish(err)
			continue
		}
		c.timeout = timeLeft(c.ctx, reportForwardTimeout)
		longest = max(longest, c.timeout)
		live = append(live, c)
	}
	if len(live) == 0 {
		return
	}
	// A batch ends with the server: its sessions end too, and their
	// agents send what was not acknowledged again, to another server. It
	// must not hold Shutdown (wait) for as long as an owner that cannot
	// commit takes to say so.
	ctx, cancel := context.WithTimeout(b.ctx, longest+2*time.Second)
	resp, err := b.p.post(ctx, addr, "/v1/internal/report-batch", encodeReportBatch(live))
	if err != nil || resp.StatusCode != http.StatusNotFound && resp.StatusCode != http.StatusMethodNotAllowed {
		b.batches.Add(1)
		b.reports.Add(uint64(len(live)))
	}
	switch {
	case err != nil:
		cancel()
		for _, c := range live {
			c.finish(fmt.Errorf("forward report of %s to its owner %s: %w", c.fr.Device, c.owner, err))
		}
		return
	case resp.StatusCode == http.StatusNotFound || resp.StatusCode == http.StatusMethodNotAllowed:
		// The owner runs an earlier release (its gossip said otherwise
		// until it restarted): one request a report.
		resp.Body.Close()
		cancel()
		var wg sync.WaitGroup
		for _, c := range live {
			wg.Go(func() {
				// Bounded as a batch is, and ended with the server.
				ctx, cancel := context.WithTimeout(c.ctx, c.timeout)
				defer cancel()
				defer context.AfterFunc(b.ctx, cancel)()
				c.finish(b.p.report(ctx, c.owner, addr, c.fr))
			})
		}
		wg.Wait()
		return
	case resp.StatusCode != http.StatusOK:
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		resp.Body.Close()
		cancel()
		for _, c := range live {
			c.finish(fmt.Errorf("owner %s refused the report of %s: %s: %s", c.owner, c.fr.Device, resp.Status, msg))
		}
		return
	}
	b.readers.Go(func() {
		defer cancel()
		defer resp.Body.Close()
		readReportAnswers(resp.Body, live)
	})
}

// readReportAnswers hands each report of live its answer from the owner's
// stream. Those the stream ended before are failed.
func readReportAnswers(body io.Reader, live []*reportCall) {
	done := make([]bool, len(live))
	err := readAnswers(body, len(live), func(a *reportAnswer) int { return a.I }, func(i int, a *reportAnswer) {
		done[i] = true
		c := live[i]
		if a.Error != nil {
			c.finish(fmt.Errorf("owner %s refused the report of %s: %s", c.owner, c.fr.Device, a.Error.Message))
			return
		}
		c.finish(nil)
	})
	for i, c := range live {
		if !done[i] {
			c.finish(fmt.Errorf("forward report of %s to its owner %s: read the owner's answers: %w", c.fr.Device, c.owner, err))
		}
	}
}

func (c *reportCall) finish(err error) {
	c.err = err
	close(c.done)
}

// wait refuses what is forwarded from now on and waits for the batches
// in flight and their answers, which end with the server's context.
func (b *reportBatcher) wait() {
	b.q.wait()
	b.readers.Wait()
}

// reportAnswer is one report's answer in /v1/internal/report-batch's
// response: the report's index in the request and, if the owner could not
// record it, the error /v1/internal/report would have answered with.
type reportAnswer struct {
	I     int        `json:"i"`
	Error *api.Error `json:"failed,omitempty"`
}

// batchedReport is one report of a batch as the owner reads it.
type batchedReport struct {
	timeout time.Duration
	device  string
	acked   uint64
	report  []byte // the wire encoding, fitted to the owner (reportFor)
}

// encodeReportBatch frames reports for /v1/internal/report-batch: their
// count, then for each the milliseconds it has to commit, the device ID's
// length and bytes, the acknowledged revision, and the report's length
// and wire bytes, all counts as unsigned varints.
func encodeReportBatch(calls []*reportCall) []byte {
	size := binary.MaxVarintLen64
	for _, c := range calls {
		size += 4*binary.MaxVarintLen64 + len(c.fr.Device) + len(c.fr.Report)
	}
	buf := make([]byte, 0, size)
	buf = binary.AppendUvarint(buf, uint64(len(calls)))
	for _, c := range calls {
		buf = appendTimeout(buf, c.timeout)
		buf = appendBytes(buf, c.fr.Device)
		buf = binary.AppendUvarint(buf, c.fr.Acked)
		buf = appendBytes(buf, c.fr.Report)
	}
	return buf
}

// decodeReportBatch reads what encodeReportBatch wrote; the reports'
// bytes are not copied.
func decodeReportBatch(buf []byte) ([]batchedReport, error) {
	// Each report takes at least five bytes.
	r, n, err := newBatchReader(buf, "report batch", "report", 5)
	if err != nil {
		return nil, err
	}
	out := make([]batchedReport, 0, n)
	for i := range n {
		r.next(i)
		var br batchedReport
		if br.timeout, err = r.timeout(); err == nil && br.timeout == 0 {
			err = r.fail("timeout")
		}
		var device []byte
		if err == nil {
			device, err = r.bytes("device")
		}
		if err == nil {
			br.acked, err = r.uvarint("acknowledged revision")
		}
		if err == nil {
			br.report, err = r.bytes("report")
		}
		if err != nil {
			return nil, err
		}
		br.device = string(device)
		out = append(out, br)
	}
	if err := r.end(); err != nil {
		return nil, err
	}
	return out, nil
}

// handleInternalReportBatch ingests the reports of a batch forwarded by
// their devices' session server (reportBatcher), all at once, and streams
// each report's answer (one JSON object a line, with its index) as soon
// as it is committed or failed. It takes the batch (the answer's headers)
// before ingesting any. Each report is ingested as /v1/internal/report
// ingests it; one that fails does not fail the others.
func (h *httpAPI) handleInternalReportBatch(w http.ResponseWriter, r *http.Request) {
	body, ok := h.readForwardedReports(w, r)
	if !ok {
		return
	}
	reports, err := decodeReportBatch(body)
	if err != nil {
		writeError(w, badRequest("%v", err))
		return
	}
	w.Header().Set("Content-Type", "application/x-ndjson")
	w.WriteHeader(http.StatusOK)
	if f, ok := w.(http.Flusher); ok {
		f.Flush() // the batch is taken: its place is free
	}
	outs := make(chan reportAnswer, len(reports))
	for i, br := range reports {
		var rep wire.Report
		if err := rep.Decode(br.report); err != nil {
			outs <- reportAnswer{I: i, Error: badRequest("decode report of %s: %v", br.device, err)}
			continue
		}
		go func() {
			ctx, cancel := context.WithTimeout(r.Context(), br.timeout)
			defer cancel()
			a := reportAnswer{I: i}
			if err := h.reports.ingest(ctx, br.device, br.acked, &rep); err != nil {
				a.Error = h.reportNotRecorded(br.device, err)
			}
			outs <- a
		}()
	}
	streamAnswers(w, len(reports), outs, func(a reportAnswer) any { return a })
}

package agent

import (
	"bytes"
	"fmt"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/meteor-edge/meteor/agent/journal"
	"github.com/meteor-edge/meteor/wire"
)

// reporter turns the status view into reports queued in the journal.
// A report carries every resource whose entry changed since the last
// report the server acknowledged (its baseline), so a new one supersedes
// all earlier unacknowledged ones: the journal keeps only the newest
// (journal.ReplaceReports), with a sequence number above every earlier
// one. A report is full (every resource, Report.Full) when there is no
// baseline (the agent started, or a new session began), when a resource
// is gone since the baseline (only a full report says so), and every
// interval, as a check of what the server holds; otherwise it is
// partial, and an idle device sends none at all. The session sends it and
// drops it on ReportAck, telling the reporter (acked).
type reporter struct {
	j        *journal.Journal
	st       *statusStore
	clock    Clock
	interval func() time.Duration // between full reports (settingsBook.reportInterval)
	log      hclog.Logger
	// ready tells the session that a report was queued; capacity 1.
	ready chan struct{}

	mu       sync.Mutex
	last     []byte    // body of the last full view queued; guarded by mu
	lastFull time.Time // when the last full report was queued; guarded by mu
	// baseline is the view of the newest report the server acknowledged,
	// by resource key; nil: none known. queued are the views of the
	// reports queued since, oldest first. Guarded by mu.
	baseline map[string]wire.ResourceReport
	queued   []queuedView
}

// maxQueuedViews bounds reporter.queued.
const maxQueuedViews = 16

// queuedView is the full view a queued report was made from.
type queuedView struct {
	seq       uint64
	resources map[string]wire.ResourceReport
}

func newReporter(j *journal.Journal, st *statusStore, clock Clock, interval func() time.Duration, log hclog.Logger) *reporter {
	return &reporter{j: j, st: st, clock: clock, interval: interval, log: log, ready: make(chan struct{}, 1)}
}

// maybeQueue queues a report when the view changed since the last one or
// the full-report interval elapsed, and returns when the next full report
// is due.
func (rp *reporter) maybeQueue() (due time.Time, err error) {
	rp.mu.Lock()
	defer rp.mu.Unlock()
	rep, body, err := rp.view()
	now := rp.clock.Now()
	interval := rp.interval()
	if err != nil {
		return now.Add(interval), err
	}
	full := !now.Before(rp.lastFull.Add(interval))
	if rp.last == nil || full || !bytes.Equal(body, rp.last) {
		if err := rp.queueLocked(rep, body, full, 0, now); err != nil {
			return now, err
		}
	}
	return rp.lastFull.Add(interval), nil
}

// queue queues a full report of the current view whatever changed,
// numbered above after (the server's accepted seq): a new session starts
// with one.
func (rp *reporter) queue(after uint64) error {
	rp.mu.Lock()
	defer rp.mu.Unlock()
	rep, body, err := rp.view()
	if err != nil {
		return err
	}
	return rp.queueLocked(rep, body, true, after, rp.clock.Now())
}

// acked tells the reporter that the server applied the reports up to
// seq: the newest view queued at or below it is the new baseline.
func (rp *reporter) acked(seq uint64) {
	rp.mu.Lock()
	defer rp.mu.Unlock()
	i := 0
	for ; i < len(rp.queued) && rp.queued[i].seq <= seq; i++ {
		rp.baseline = rp.queued[i].resources
	}
	rp.queued = rp.queued[i:]
}

// view returns a full report of the current view (Seq left zero) and its
// encoding.
func (rp *reporter) view() (*wire.Report, []byte, error) {
	rep := rp.st.report()
	if !fitReport(rep) {
		return nil, nil, fmt.Errorf("report of %d resources does not fit a %d-byte frame", len(rep.Resources), wire.DefaultMaxFrameSize)
	}
	return rep, rep.Append(nil), nil
}

// queueLocked queues rep, a full view encoded as body: whole if full is
// set or it must be, otherwise only the resources changed since the
// baseline.
func (rp *reporter) queueLocked(rep *wire.Report, body []byte, full bool, after uint64, now time.Time) error {
	resources := make(map[string]wire.ResourceReport, len(rep.Resources))
	for _, r := range rep.Resources {
		resources[r.Key] = r
	}
	full = full || rp.baseline == nil || goneSince(rp.baseline, resources)
	out := body
	if !full {
		part := *rep
		part.Full, part.Resources = false, nil
		for _, r := range rep.Resources {
			if b, ok := rp.baseline[r.Key]; !ok || b != r {
				part.Resources = append(part.Resources, r)
			}
		}
		out = part.Append(nil)
	}
	seq, err := rp.j.ReplaceReports(after, out)
	if err != nil {
		return err
	}
	rp.last = body
	if full {
		rp.lastFull = now
	}
	rp.queued = append(rp.queued, queuedView{seq: seq, resources: resources})
	if len(rp.queued) > maxQueuedViews {
		// Unacknowledged for long (no server reachable): forgetting the
		// oldest only keeps the baseline older than the server's state,
		// so later partial reports carry more than they must, never less.
		rp.queued = rp.queued[len(rp.queued)-maxQueuedViews:]
	}
	rp.log.Debug("report queued", "seq", seq, "full", full)
	select {
	case rp.ready <- struct{}{}:
	default:
	}
	return nil
}

// goneSince reports whether a resource of baseline is missing from now:
// only a full report tells the server so.
func goneSince(baseline, now map[string]wire.ResourceReport) bool {
	for k := range baseline {
		if _, ok := now[k]; !ok {
			return true
		}
	}
	return false
}

// fitReport shortens the texts of a report until it fits one frame: a
// report the server cannot receive would end every session. It reports
// whether the report fits.
func fitReport(rep *wire.Report) bool {
	for _, limit := range []int{wire.MaxTextLen, 1024, 128, 0} {
		for i := range rep.Resources {
			r := &rep.Resources[i]
			r.Detail, r.LastError = truncate(r.Detail, limit), truncate(r.LastError, limit)
			r.Hold.Note = truncate(r.Hold.Note, limit)
		}
		rep.BlockedReason = truncate(rep.BlockedReason, max(limit, 128))
		if wire.FrameLen(rep) <= wire.DefaultMaxFrameSize {
			return true
		}
	}
	return false
}

// legacyReport rewrites rep for a session that runs at protocol 1.0, whose
// Reports have no resource state: each resource's state goes to the start
// of its Detail ("blocked: requires app/db"), where a 1.0 server reads it.
// A report queued by an agent of 1.0 already has that form.
func legacyReport(rep *wire.Report) *wire.Report {
	if !rep.States {
		return rep
	}
	old := *rep
	old.States = false
	old.Resources = make([]wire.ResourceReport, len(rep.Resources))
	for i, r := range rep.Resources {
		detail := r.State.String()
		if r.Detail != "" {
			detail += ": " + r.Detail
		}
		r.State, r.Detail = wire.StateUnknown, truncate(detail, wire.MaxTextLen)
		old.Resources[i] = r
	}
	fitReport(&old) // the prefixes may take a full report past the frame limit
	return &old
}

// decodeReport rebuilds a queued report for sending.
func decodeReport(r journal.Report) (*wire.Report, error) {
	var m wire.Report
	if err := m.Decode(r.Body); err != nil {
		return nil, fmt.Errorf("decode queued report %d: %w", r.Seq, err)
	}
	m.Seq = r.Seq
	return &m, nil
}

// resendBackoff is the wait before a report the server has not
// acknowledged is sent again: min, doubling up to max, each wait jittered
// in [d/2, d] so that devices cut off by the same election do not resend
// in step.
type resendBackoff struct {
	min, max time.Duration
	next     time.Duration // un-jittered next wait; 0 means min
}

// wait returns the jittered wait before the next resend and doubles the
// one after. int64n(n) draws the jitter in [0, n).
func (b *resendBackoff) wait(int64n func(int64) int64) time.Duration {
	d := b.next
	if d == 0 {
		d = b.min
	}
	d = min(d, b.max)
	b.next = min(2*d, b.max)
	return d/2 + time.Duration(int64n(int64(d/2)+1))
}

// reset starts the backoff over at min.
func (b *resendBackoff) reset() { b.next = 0 }

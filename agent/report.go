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

// reporter turns the status view into full reports queued in the journal.
// Every report is full (it lists every resource the agent has), so a new
// one supersedes all earlier unacknowledged ones: the journal keeps only
// the newest (journal.ReplaceReports), with a sequence number above every
// earlier one. The session sends it and drops it on ReportAck.
type reporter struct {
	j        *journal.Journal
	st       *statusStore
	clock    Clock
	interval time.Duration
	log      hclog.Logger
	// ready tells the session that a report was queued; capacity 1.
	ready chan struct{}

	mu     sync.Mutex
	last   []byte    // body of the last report queued; guarded by mu
	lastAt time.Time // when it was queued; guarded by mu
}

func newReporter(j *journal.Journal, st *statusStore, clock Clock, interval time.Duration, log hclog.Logger) *reporter {
	return &reporter{j: j, st: st, clock: clock, interval: interval, log: log, ready: make(chan struct{}, 1)}
}

// maybeQueue queues a report when the view changed since the last one or
// the report interval elapsed, and returns when the next periodic report
// is due.
func (rp *reporter) maybeQueue() (due time.Time, err error) {
	rp.mu.Lock()
	defer rp.mu.Unlock()
	body, err := rp.body()
	now := rp.clock.Now()
	if err != nil {
		return now.Add(rp.interval), err
	}
	if rp.last == nil || !bytes.Equal(body, rp.last) || !now.Before(rp.lastAt.Add(rp.interval)) {
		if err := rp.queueLocked(body, 0, now); err != nil {
			return now, err
		}
	}
	return rp.lastAt.Add(rp.interval), nil
}

// queue queues a report of the current view whatever changed, numbered
// above after (the server's accepted seq).
func (rp *reporter) queue(after uint64) error {
	rp.mu.Lock()
	defer rp.mu.Unlock()
	body, err := rp.body()
	if err != nil {
		return err
	}
	return rp.queueLocked(body, after, rp.clock.Now())
}

// body encodes a report of the current view (Seq left zero).
func (rp *reporter) body() ([]byte, error) {
	rep := rp.st.report()
	if !fitReport(rep) {
		return nil, fmt.Errorf("report of %d resources does not fit a %d-byte frame", len(rep.Resources), wire.DefaultMaxFrameSize)
	}
	return rep.Append(nil), nil
}

func (rp *reporter) queueLocked(body []byte, after uint64, now time.Time) error {
	seq, err := rp.j.ReplaceReports(after, body)
	if err != nil {
		return err
	}
	rp.last, rp.lastAt = body, now
	rp.log.Debug("report queued", "seq", seq)
	select {
	case rp.ready <- struct{}{}:
	default:
	}
	return nil
}

// fitReport shortens the texts of a report until it fits one frame: a
// report the server cannot receive would end every session. It reports
// whether the report fits.
func fitReport(rep *wire.Report) bool {
	for _, limit := range []int{wire.MaxTextLen, 1024, 128, 0} {
		for i := range rep.Resources {
			r := &rep.Resources[i]
			r.Detail, r.LastError = truncate(r.Detail, limit), truncate(r.LastError, limit)
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

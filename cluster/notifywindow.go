package cluster

import (
	"context"
	"sync"
	"time"

	"github.com/meteor-edge/meteor/wire"
)

// DefaultNotifyWindow is how many sessions a server pushes a change to at
// once unless Config.NotifyWindow says otherwise.
const DefaultNotifyWindow = 256

// DefaultNotifyPullWait is how long a push holds its place in the window
// waiting for the device's Pull, unless Config.NotifyPullWait says
// otherwise. A device that does not pull by then (a lossy or
// busy link) frees the place; its agent pulls once the Notify arrives or
// on its own cadence.
const DefaultNotifyPullWait = 2 * time.Second

// notifyWindow paces the pushes of a change. One change makes every
// session on the server due a Notify at the same moment, and each Notify
// sets off the session's whole exchange: the Pull, the Delta, the Ack and
// the report, with their QUIC packets and Raft commits. Started all at
// once, that work (tens of thousands of goroutines on a large fleet) sat in
// the Go scheduler's run queues ahead of everything else the server does,
// and Raft's heartbeats waited behind it for seconds: a busy 2-core host
// lost its leader during a change to 50,000 devices. The window lets a
// bounded number of sessions be between their Notify and their Pull; the
// next session's Notify goes when one of them pulls (or after the pull
// wait), so the work in flight stays bounded whatever the size of the
// fleet, and the change moves as fast as devices answer.
//
// How many may be in flight (limit) follows the server's own load, between
// a floor and size: every steerInterval, steer reads how long the
// process's goroutines waited to run (the runtime's scheduling latency)
// and halves the limit when it passed steerTarget, or grows it by a
// quarter when it did not and sessions waited for a place. A fixed window
// large enough for devices behind slow links (throughput is the window
// over their round trip) was, on a busy host, large enough that answers
// waited in run queues for hundreds of milliseconds: far past the
// millisecond round trips QUIC had measured on the idle connections, so
// both sides took their packets for lost and sent probes, four on
// average per device and side during the first change to 10,000 devices
// on one 2-core host (docs/performance.md), which made the host busier
// still. A server that is not busy widens to the whole window while a
// change is pushed.
//
// The queue is level-based: a session is queued at most once, and its
// Notify names the newest revision it is due when its turn comes.
type notifyWindow struct {
	mu       sync.Mutex
	queue    []*agentSession // FIFO of sessions due a Notify; guarded by mu
	limit    int             // pushes allowed in flight; guarded by mu
	inFlight int             // pushes in flight; guarded by mu
	// waited records that sessions waited in the queue for a place
	// since the last steer (a place was given back while some were
	// queued); guarded by mu.
	waited bool
	wake   chan struct{} // a worker may find something to take
	// size and floor bound limit; start is its first value, and the one
	// an idle window goes back to.
	size, floor, start int
	// pullWait bounds how long a push waits for the device's Pull.
	pullWait time.Duration
}

// Steering of the window (notifyWindow): its floor and first limit, how
// often it is steered, and the scheduling latency (the 90th percentile of
// the goroutines made runnable in the interval) above which the server
// counts as busy. The target lies well under QUIC's ack delay (25 ms), the
// margin its loss timers give a peer's answer beyond the round trip.
const (
	notifyWindowFloor = 32
	notifyWindowStart = 64
	steerInterval     = 100 * time.Millisecond
	steerTarget       = 10 * time.Millisecond
	// steerMinSamples is the fewest latencies an interval must have
	// measured to say anything: an idle server measures a handful.
	steerMinSamples = 20
)

func newNotifyWindow(size int, pullWait time.Duration) *notifyWindow {
	if size <= 0 {
		size = DefaultNotifyWindow
	}
	if pullWait <= 0 {
		pullWait = DefaultNotifyPullWait
	}
	floor := min(size, notifyWindowFloor)
	start := max(floor, min(size, notifyWindowStart))
	return &notifyWindow{
		wake: make(chan struct{}, 1), size: size, floor: floor, start: start,
		limit: start, pullWait: pullWait,
	}
}

// push queues sess, which must not be queued already.
func (w *notifyWindow) push(sess *agentSession) {
	w.mu.Lock()
	w.queue = append(w.queue, sess)
	w.mu.Unlock()
	w.signal()
}

func (w *notifyWindow) signal() {
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// take takes the oldest queued session and a place in the window for it,
// or returns nil when nothing is queued or the window is full. A session
// taken must be given back with done.
func (w *notifyWindow) take() *agentSession {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.queue) == 0 {
		return nil
	}
	if w.inFlight >= w.limit {
		return nil
	}
	sess := w.queue[0]
	w.queue[0] = nil
	w.queue = w.queue[1:]
	w.inFlight++
	if len(w.queue) > 0 && w.inFlight < w.limit {
		w.signal() // another worker may take the next
	}
	return sess
}

// done gives back the place of a session taken. Sessions still queued
// then waited for a place.
func (w *notifyWindow) done() {
	w.mu.Lock()
	w.inFlight--
	if len(w.queue) > 0 {
		w.waited = true
	}
	w.mu.Unlock()
	w.signal()
}

// queued returns how many sessions wait for their turn.
func (w *notifyWindow) queued() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.queue)
}

// current returns the window's limit.
func (w *notifyWindow) current() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.limit
}

// steer sets the limit from the scheduling latency of the last interval
// (p90, of samples latencies measured): halved, down to the floor, when
// it passed steerTarget; grown by a quarter, up to size, when it did not
// and a session waited for a place; left alone when the interval measured
// too little to tell or nothing waited. An idle window (nothing queued,
// in flight or waiting) goes back to its first limit if it was wider, as
// TCP's congestion window does after an idle spell: a change after a
// quiet spell began with all 256 pushes before the first interval could
// tell that they made the server busy.
func (w *notifyWindow) steer(p90 time.Duration, samples uint64) {
	w.mu.Lock()
	waited := w.waited || (len(w.queue) > 0 && w.inFlight >= w.limit)
	w.waited = false
	before := w.limit
	switch {
	case samples >= steerMinSamples && p90 > steerTarget:
		w.limit = max(w.floor, w.limit/2)
	case len(w.queue) == 0 && w.inFlight == 0 && !waited:
		// Idle: what the last change taught is stale, and the next one
		// may find the server busy; it starts again where the first did.
		w.limit = min(w.limit, w.start)
	case samples < steerMinSamples:
	case waited:
		w.limit = min(w.size, w.limit+max(1, w.limit/4))
	}
	grew := w.limit > before
	w.mu.Unlock()
	if grew {
		w.signal() // queued sessions may go
	}
}

// runNotifyWindow starts the window's workers and its steering; each
// returns when ctx ends.
func (a *agentServer) runNotifyWindow(ctx context.Context) {
	for range a.notifies.size {
		a.wg.Go(func() { a.notifyWorker(ctx) })
	}
	if a.notifies.floor < a.notifies.size {
		a.wg.Go(func() { a.steerNotifyWindow(ctx) })
	}
}

func (a *agentServer) notifyWorker(ctx context.Context) {
	for {
		sess := a.notifies.take()
		if sess == nil {
			select {
			case <-ctx.Done():
				return
			case <-a.notifies.wake:
				continue
			}
		}
		sess.pushNotify(ctx)
		a.notifies.done()
	}
}

// steerNotifyWindow steers the window every steerInterval by the
// scheduling latency the interval measured (a.schedLatency).
func (a *agentServer) steerNotifyWindow(ctx context.Context) {
	t := a.clock.NewTicker(steerInterval)
	defer t.Stop()
	a.schedLatency() // the first interval starts now
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C():
			a.notifies.steer(a.schedLatency())
		}
	}
}

// pushNotify writes the Notify sess is due, with the change's Delta when
// the agent can take it (pushedDelta), and waits, up to the window's pull
// wait, for the device to pull the revision or acknowledge it. If the
// session became due a newer revision meanwhile, it goes back in the
// queue.
func (sess *agentSession) pushNotify(ctx context.Context) {
	sess.wmu.Lock()
	sess.mu.Lock()
	rev, due, sent := sess.notifyRev, sess.due, sess.sent
	sess.mu.Unlock()
	n := &wire.Notify{Revision: rev}
	n.Delta, n.Base = sess.pushedDelta(rev, due, sent)
	err := sess.writeLocked(n)
	if err == nil && n.Delta != nil {
		// The agent holds due once it takes the Delta; if it finds it
		// holds another state than sent, it pulls, and the Pull's answer
		// sets sent again.
		sess.mu.Lock()
		sess.sent = due
		sess.mu.Unlock()
	}
	sess.wmu.Unlock()
	if err != nil {
		sess.writeFailed("Notify", err)
	} else {
		sess.a.stats.notifies.Add(1)
		if n.Delta != nil {
			sess.a.stats.pushedDeltas.Add(1)
			sess.a.stats.countDelta(n.Delta)
		}
		sess.awaitPull(ctx, rev)
	}
	sess.mu.Lock()
	// Due a newer revision than it was told and than it pulled since.
	again := err == nil && sess.notifyRev > max(rev, sess.pulled)
	sess.notifying = again
	sess.mu.Unlock()
	if again {
		sess.a.notifies.push(sess)
	}
}

// awaitPull waits until the device pulled revision rev or later or
// acknowledged it (a Notify's Delta), its connection ended, ctx ended or
// the window's pull wait passed.
func (sess *agentSession) awaitPull(ctx context.Context, rev uint64) {
	sess.mu.Lock()
	if sess.pulled >= rev || sess.acked >= rev {
		sess.mu.Unlock()
		return
	}
	if sess.pulledCh == nil {
		sess.pulledCh = make(chan struct{})
	}
	ch := sess.pulledCh
	sess.mu.Unlock()
	t := sess.a.clock.NewTimer(sess.a.notifies.pullWait)
	defer t.Stop()
	select {
	case <-ch:
	case <-t.C():
	case <-sess.conn.Context().Done():
	case <-ctx.Done():
	}
}

// markPulled records that the device was sent the Delta of revision rev,
// and frees the window place of a push waiting for it.
func (sess *agentSession) markPulled(rev uint64) {
	sess.mu.Lock()
	defer sess.mu.Unlock()
	if rev <= sess.pulled {
		return
	}
	sess.pulled = rev
	if sess.pulledCh != nil {
		close(sess.pulledCh)
		sess.pulledCh = nil
	}
}

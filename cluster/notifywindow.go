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
// fixed number of sessions be between their Notify and their Pull; the
// next session's Notify goes when one of them pulls (or after
// the pull wait), so the work in flight stays bounded whatever the size
// of the fleet, and the change moves as fast as devices answer.
//
// The queue is level-based: a session is queued at most once, and its
// Notify names the newest revision it is due when its turn comes.
type notifyWindow struct {
	mu    sync.Mutex
	queue []*agentSession // FIFO of sessions due a Notify; guarded by mu
	wake  chan struct{}   // a worker may find something queued
	size  int
	// pullWait bounds how long a push waits for the device's Pull.
	pullWait time.Duration
}

func newNotifyWindow(size int, pullWait time.Duration) *notifyWindow {
	if size <= 0 {
		size = DefaultNotifyWindow
	}
	if pullWait <= 0 {
		pullWait = DefaultNotifyPullWait
	}
	return &notifyWindow{wake: make(chan struct{}, 1), size: size, pullWait: pullWait}
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

// pop takes the oldest queued session, or nil.
func (w *notifyWindow) pop() *agentSession {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.queue) == 0 {
		return nil
	}
	sess := w.queue[0]
	w.queue[0] = nil
	w.queue = w.queue[1:]
	if len(w.queue) > 0 {
		w.signal() // another worker may take the next
	}
	return sess
}

// queued returns how many sessions wait for their turn.
func (w *notifyWindow) queued() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.queue)
}

// run starts the window's workers; each returns when ctx ends.
func (a *agentServer) runNotifyWindow(ctx context.Context) {
	for range a.notifies.size {
		a.wg.Go(func() { a.notifyWorker(ctx) })
	}
}

func (a *agentServer) notifyWorker(ctx context.Context) {
	for {
		sess := a.notifies.pop()
		if sess == nil {
			select {
			case <-ctx.Done():
				return
			case <-a.notifies.wake:
				continue
			}
		}
		sess.pushNotify(ctx)
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

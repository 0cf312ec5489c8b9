package chaos

import (
	"io"
	"net"
	"sync"
	"time"
)

// delayedWriter writes byte chunks to a stream in order, each no earlier than
// its due time, from its own goroutine (started on first use). It models the
// latency of a stream link: writers return as soon as their bytes are queued,
// and block only when more than limit bytes are in flight, as a full socket
// buffer would make them.
type delayedWriter struct {
	w     io.Writer
	limit int
	// onErr is called from the writing goroutine when a write fails; it may
	// call abort but not stop.
	onErr func(error)
	// onEOF is called from the writing goroutine when an EOF marker is
	// reached; the goroutine then exits.
	onEOF func()

	mu      sync.Mutex
	cond    *sync.Cond // signalled when queue space frees or state changes
	q       []chunk    // guarded by mu
	queued  int        // guarded by mu; bytes in q
	lastAt  time.Time  // guarded by mu; due time of the last chunk queued
	err     error      // guarded by mu; sticky write error
	stopped bool       // guarded by mu
	started bool       // guarded by mu
	ended   bool       // guarded by mu; EOF queued

	wake   chan struct{} // buffered(1)
	done   chan struct{} // closed by stop
	exited chan struct{} // closed when run returns
}

type chunk struct {
	data []byte
	at   time.Time
	eof  bool
}

func newDelayedWriter(w io.Writer, limit int, onErr func(error), onEOF func()) *delayedWriter {
	d := &delayedWriter{
		w: w, limit: limit, onErr: onErr, onEOF: onEOF,
		wake:   make(chan struct{}, 1),
		done:   make(chan struct{}),
		exited: make(chan struct{}),
	}
	d.cond = sync.NewCond(&d.mu)
	return d
}

// write queues a copy of b for delivery at at (or after the previous chunk,
// whichever is later, so bytes never overtake each other).
func (d *delayedWriter) write(b []byte, at time.Time) error {
	return d.push(chunk{data: append([]byte(nil), b...), at: at})
}

// finish queues an EOF marker after the queued bytes and waits until the
// writer has delivered everything (or failed, or was stopped).
func (d *delayedWriter) finish() {
	if err := d.push(chunk{eof: true, at: time.Now()}); err != nil {
		return
	}
	select {
	case <-d.exited:
	case <-d.done:
	}
}

func (d *delayedWriter) push(c chunk) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	for d.err == nil && !d.stopped && !d.ended && d.queued > 0 && d.queued+len(c.data) > d.limit {
		d.cond.Wait()
	}
	switch {
	case d.err != nil:
		return d.err
	case d.stopped || d.ended:
		return net.ErrClosed
	}
	if c.at.Before(d.lastAt) {
		c.at = d.lastAt
	}
	d.lastAt = c.at
	d.q = append(d.q, c)
	d.queued += len(c.data)
	d.ended = c.eof
	if !d.started {
		d.started = true
		go d.run()
	}
	select {
	case d.wake <- struct{}{}:
	default:
	}
	return nil
}

func (d *delayedWriter) run() {
	defer close(d.exited)
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		d.mu.Lock()
		if d.stopped {
			d.mu.Unlock()
			return
		}
		if len(d.q) == 0 {
			d.mu.Unlock()
			select {
			case <-d.wake:
				continue
			case <-d.done:
				return
			}
		}
		c := d.q[0]
		d.mu.Unlock()

		if wait := time.Until(c.at); wait > 0 {
			timer.Reset(wait)
			select {
			case <-timer.C:
			case <-d.done:
				return
			}
		}
		if c.eof {
			d.onEOF()
			return
		}
		_, err := d.w.Write(c.data)

		d.mu.Lock()
		if d.stopped {
			d.mu.Unlock()
			return
		}
		d.q[0] = chunk{}
		d.q = d.q[1:]
		d.queued -= len(c.data)
		if err != nil {
			d.err = err
		}
		d.cond.Broadcast()
		d.mu.Unlock()
		if err != nil {
			d.onErr(err)
			return
		}
	}
}

// abort discards queued bytes and makes pending and future writes fail,
// without waiting for the writing goroutine; it is safe to call from onErr
// and more than once.
func (d *delayedWriter) abort() {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.stopped {
		return
	}
	d.stopped = true
	d.q = nil
	d.cond.Broadcast()
	close(d.done)
}

// stop aborts and waits for the writing goroutine. Close the underlying
// stream first if a write may be blocked on it.
func (d *delayedWriter) stop() {
	d.abort()
	d.mu.Lock()
	started := d.started
	d.mu.Unlock()
	if started {
		<-d.exited
	}
}

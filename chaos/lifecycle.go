package chaos

import (
	"errors"
	"sync"
)

// ErrClosed is returned by Run on a component that was already closed.
var ErrClosed = errors.New("chaos: closed")

// lifecycle coordinates a component's Run(ctx) with its Close: Close stops a
// running component and waits for Run to return; a component closed before
// Run is cleaned up by Close itself.
type lifecycle struct {
	mu      sync.Mutex
	running bool          // guarded by mu
	closed  bool          // guarded by mu
	closing chan struct{} // closed by Close
	stopped chan struct{} // closed when Run returns
}

func newLifecycle() lifecycle {
	return lifecycle{closing: make(chan struct{}), stopped: make(chan struct{})}
}

// begin marks the component running; it fails if it ran or closed before.
func (l *lifecycle) begin() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case l.closed:
		return ErrClosed
	case l.running:
		return errors.New("chaos: Run called twice")
	}
	l.running = true
	return nil
}

// end is deferred by Run.
func (l *lifecycle) end() { close(l.stopped) }

// close requests a stop. It reports whether Run is in charge of cleaning up
// (then the caller waits on stopped) and whether this is the first close.
func (l *lifecycle) close() (running, first bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return l.running, false
	}
	l.closed = true
	close(l.closing)
	return l.running, true
}

package chaos

import (
	"container/heap"
	"errors"
	"sync"
	"time"
)

var (
	errSchedClosed = errors.New("scheduler closed")
	errSchedFull   = errors.New("scheduler queue full")
)

// scheduler delivers packets at their due time from one goroutine, earliest
// first and, for equal times, in the order they were pushed. It never blocks
// the pusher; a bounded heap keeps memory in check under load.
type scheduler struct {
	deliver func(*packet)
	max     int

	mu     sync.Mutex
	h      schedHeap // guarded by mu
	seq    uint64    // guarded by mu; tie-breaker for equal due times
	closed bool      // guarded by mu

	wake   chan struct{} // buffered(1): the earliest due time may have changed
	done   chan struct{} // closed by close
	exited chan struct{} // closed when run returns
}

type schedItem struct {
	at  time.Time
	seq uint64
	p   *packet
}

type schedHeap []schedItem

func (h schedHeap) Len() int { return len(h) }
func (h schedHeap) Less(i, j int) bool {
	if h[i].at.Equal(h[j].at) {
		return h[i].seq < h[j].seq
	}
	return h[i].at.Before(h[j].at)
}
func (h schedHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *schedHeap) Push(x any)   { *h = append(*h, x.(schedItem)) }
func (h *schedHeap) Pop() any {
	old := *h
	it := old[len(old)-1]
	old[len(old)-1] = schedItem{}
	*h = old[:len(old)-1]
	return it
}

// newScheduler starts the delivery goroutine; close stops it.
func newScheduler(max int, deliver func(*packet)) *scheduler {
	s := &scheduler{
		deliver: deliver,
		max:     max,
		wake:    make(chan struct{}, 1),
		done:    make(chan struct{}),
		exited:  make(chan struct{}),
	}
	go s.run()
	return s
}

// push schedules p for delivery at at.
func (s *scheduler) push(at time.Time, p *packet) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return errSchedClosed
	}
	if len(s.h) >= s.max {
		return errSchedFull
	}
	s.seq++
	heap.Push(&s.h, schedItem{at: at, seq: s.seq, p: p})
	if s.h[0].seq == s.seq { // new earliest: re-arm the timer
		select {
		case s.wake <- struct{}{}:
		default:
		}
	}
	return nil
}

// len returns the number of packets waiting.
func (s *scheduler) len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.h)
}

func (s *scheduler) run() {
	defer close(s.exited)
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	var due []*packet
	for {
		s.mu.Lock()
		now := time.Now()
		due = due[:0]
		for len(s.h) > 0 && !s.h[0].at.After(now) {
			due = append(due, heap.Pop(&s.h).(schedItem).p)
		}
		wait := time.Duration(-1)
		if len(s.h) > 0 {
			wait = s.h[0].at.Sub(now)
		}
		s.mu.Unlock()

		for i, p := range due {
			select {
			case <-s.done:
				return
			default:
			}
			s.deliver(p)
			due[i] = nil
		}
		if len(due) > 0 {
			continue // time moved on while delivering
		}
		var tc <-chan time.Time
		if wait >= 0 {
			timer.Reset(wait)
			tc = timer.C
		}
		select {
		case <-s.done:
			return
		case <-s.wake:
		case <-tc:
		}
		timer.Stop()
	}
}

// close stops delivery and discards queued packets (they were in flight on a
// link that no longer exists). It waits for the delivery goroutine.
func (s *scheduler) close() {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		<-s.exited
		return
	}
	s.closed = true
	s.h = nil
	s.mu.Unlock()
	close(s.done)
	<-s.exited
}

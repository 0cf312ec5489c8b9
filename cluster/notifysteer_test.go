package cluster

import (
	"context"
	"math"
	"runtime"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// busy and calm are scheduling latencies above and below steerTarget,
// each over enough samples to count.
const (
	busy  = 4 * steerTarget
	calm  = steerTarget / 4
	count = 10 * steerMinSamples
)

// TestNotifyWindowSteersByLoad: the window starts at notifyWindowStart,
// halves down to its floor while the server is busy, grows by a quarter
// up to its size while it is not and sessions wait for a place, and
// stays put when nothing waited or the interval measured too little.
func TestNotifyWindowSteersByLoad(t *testing.T) {
	w := newNotifyWindow(256, 0)
	if got := w.current(); got != notifyWindowStart {
		t.Fatalf("a new window allows %d pushes, want %d", got, notifyWindowStart)
	}
	// fill queues one session more than the window allows, takes what it
	// allows, and gives one place back while the last waits for it, as
	// the workers do; then it lets the last go and returns every place.
	fill := func() {
		t.Helper()
		n := w.current() + 1
		for range n {
			w.push(&agentSession{})
		}
		taken := 0
		for w.take() != nil {
			taken++
		}
		if taken != w.current() {
			t.Fatalf("took %d pushes with a window of %d", taken, w.current())
		}
		w.done() // the last session waited for this place
		if w.take() == nil {
			t.Fatal("a place given back did not let the waiting session go")
		}
		for range taken {
			w.done()
		}
	}

	w.steer(busy, count)
	if got, want := w.current(), max(notifyWindowFloor, notifyWindowStart/2); got != want {
		t.Fatalf("busy: window %d, want %d", got, want)
	}
	for range 10 {
		w.steer(busy, count)
	}
	if got := w.current(); got != notifyWindowFloor {
		t.Fatalf("busy for long: window %d, want the floor %d", got, notifyWindowFloor)
	}
	w.steer(calm, count)
	if got := w.current(); got != notifyWindowFloor {
		t.Fatalf("calm with nothing waiting: window %d, want it kept at %d", got, notifyWindowFloor)
	}
	fill()
	w.steer(calm, count)
	if got, want := w.current(), notifyWindowFloor+notifyWindowFloor/4; got != want {
		t.Fatalf("calm with sessions waiting: window %d, want %d", got, want)
	}
	fill()
	w.steer(busy, 0) // nothing measured: no change
	if got, want := w.current(), notifyWindowFloor+notifyWindowFloor/4; got != want {
		t.Fatalf("an interval without samples moved the window to %d, want %d", got, want)
	}
	// Sessions waiting while the window is full, with no place given
	// back in the interval (slow devices), also count as waiting.
	before := w.current()
	for range before + 1 {
		w.push(&agentSession{})
	}
	for w.take() != nil {
	}
	w.steer(calm, count)
	if got, want := w.current(), before+before/4; got != want {
		t.Fatalf("calm with a full window and a session queued: window %d, want %d", got, want)
	}
	for range before + 1 {
		w.done()
		w.take()
	}
	w.steer(busy, 0) // forget the places given back above
	for range 50 {
		fill()
		w.steer(calm, count)
	}
	if got := w.current(); got != 256 {
		t.Fatalf("calm for long: window %d, want its size 256", got)
	}
	// An interval with nothing queued, in flight or waiting: the next
	// change starts where the first did.
	w.steer(calm, count)
	if got := w.current(); got != notifyWindowStart {
		t.Fatalf("idle: window %d, want its first limit %d", got, notifyWindowStart)
	}
	w.steer(calm, 0)
	if got := w.current(); got != notifyWindowStart {
		t.Fatalf("idle again: window %d, want %d", got, notifyWindowStart)
	}
}

// TestNotifyWindowNarrowerThanItsFloorIsFixed: a window configured below
// the floor (tests use 2) is never steered.
func TestNotifyWindowNarrowerThanItsFloorIsFixed(t *testing.T) {
	w := newNotifyWindow(2, 0)
	for _, p90 := range []time.Duration{busy, calm} {
		w.push(&agentSession{})
		w.push(&agentSession{})
		w.push(&agentSession{})
		for w.take() != nil {
		}
		w.steer(p90, count)
		if got := w.current(); got != 2 {
			t.Fatalf("after p90 %v: window %d, want 2", p90, got)
		}
		w.done()
		w.done()
		for w.take() != nil {
			w.done()
		}
	}
}

// TestNotifyWindowHoldsItsLimit: workers never have more pushes in flight
// than the window's limit, and a push given back lets a waiting session
// go, in the order the sessions were queued.
func TestNotifyWindowHoldsItsLimit(t *testing.T) {
	w := newNotifyWindow(3, 0)
	sessions := make([]*agentSession, 5)
	for i := range sessions {
		sessions[i] = &agentSession{}
		w.push(sessions[i])
	}
	for i := range 3 {
		if got := w.take(); got != sessions[i] {
			t.Fatalf("take %d: got another session than the %dth queued", i, i)
		}
	}
	if got := w.take(); got != nil {
		t.Fatal("a fourth push went with a window of 3")
	}
	w.done()
	if got := w.take(); got != sessions[3] {
		t.Fatal("the place given back did not go to the next session queued")
	}
	if got := w.take(); got != nil {
		t.Fatal("a push went with the window full")
	}
	if got := w.queued(); got != 1 {
		t.Fatalf("%d sessions queued, want 1", got)
	}
}

// TestNotifyWindowIsSteeredEveryInterval: a server's steering reads the
// scheduling latency every steerInterval (the clock of a synctest bubble)
// and steers the window by it.
func TestNotifyWindowIsSteeredEveryInterval(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var mu sync.Mutex
		p90 := busy
		reads := 0
		a := &agentServer{
			agentDeps: agentDeps{clock: SystemClock{}},
			notifies:  newNotifyWindow(256, 0),
			schedLatency: func() (time.Duration, uint64) {
				mu.Lock()
				defer mu.Unlock()
				reads++
				return p90, count
			},
		}
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		a.wg.Go(func() { a.steerNotifyWindow(ctx) })
		synctest.Wait()
		if got := a.notifies.current(); got != notifyWindowStart {
			t.Fatalf("window %d before the first interval ended, want %d", got, notifyWindowStart)
		}
		time.Sleep(steerInterval)
		synctest.Wait()
		if got, want := a.notifies.current(), max(notifyWindowFloor, notifyWindowStart/2); got != want {
			t.Fatalf("window %d after one busy interval, want %d", got, want)
		}
		time.Sleep(steerInterval)
		synctest.Wait()
		if got, want := a.notifies.current(), max(notifyWindowFloor, notifyWindowStart/4); got != want {
			t.Fatalf("window %d after two busy intervals, want %d", got, want)
		}
		mu.Lock()
		if reads != 3 { // the interval's start and two ends
			t.Errorf("the latency was read %d times, want 3", reads)
		}
		mu.Unlock()
		cancel()
		a.wg.Wait()
	})
}

// TestHistogramQuantile: the p90 of a histogram's counts is the upper
// bound of the bucket that holds it; an unbounded last bucket reads as
// its lower bound.
func TestHistogramQuantile(t *testing.T) {
	buckets := []float64{0, 0.001, 0.010, 0.100, math.Inf(1)}
	for _, tc := range []struct {
		counts []uint64
		want   time.Duration
	}{
		{[]uint64{0, 0, 0, 0}, 0},
		{[]uint64{100, 0, 0, 0}, time.Millisecond},
		{[]uint64{90, 10, 0, 0}, time.Millisecond},
		{[]uint64{89, 11, 0, 0}, 10 * time.Millisecond},
		{[]uint64{50, 30, 19, 1}, 100 * time.Millisecond},
		{[]uint64{0, 0, 0, 7}, 100 * time.Millisecond},
	} {
		var n uint64
		for _, c := range tc.counts {
			n += c
		}
		if got := histogramQuantile(buckets, tc.counts, n, 0.9); got != tc.want {
			t.Errorf("p90 of %v: %v, want %v", tc.counts, got, tc.want)
		}
	}
}

// TestSchedLatenciesCountSinceTheLastRead: each read counts the
// latencies the runtime measured since the read before, not since the
// process started.
func TestSchedLatenciesCountSinceTheLastRead(t *testing.T) {
	s := newSchedLatencies()
	s.next()
	var wg sync.WaitGroup
	for range 2000 {
		wg.Go(runtime.Gosched)
	}
	wg.Wait()
	_, busyN := s.next()
	if busyN == 0 {
		t.Fatal("2,000 goroutines ran and no scheduling latency was measured")
	}
	_, quietN := s.next()
	if quietN >= busyN {
		t.Fatalf("a read right after another counted %d latencies, the one after 2,000 goroutines %d: it counts more than the interval", quietN, busyN)
	}
}

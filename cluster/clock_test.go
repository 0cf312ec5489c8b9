package cluster

import (
	"sync"
	"time"
)

// steppedClock is the system clock whose monotonic readings a test moves
// on (advance), as if that much time had passed without a word from
// anyone; the wall clock and the timers keep real time.
type steppedClock struct {
	SystemClock
	mu      sync.Mutex
	elapsed time.Duration // guarded by mu
}

func (c *steppedClock) Mono() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return time.Now().Add(c.elapsed)
}

func (c *steppedClock) advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.elapsed += d
}

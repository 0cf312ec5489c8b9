package chaos

import (
	"sync/atomic"
	"time"
)

// Clock is the minimal time source chaos scenarios inject into components
// that read the time or wait. Implementations are safe for concurrent use.
type Clock interface {
	// Now returns the current time as this clock sees it.
	Now() time.Time
	// After waits for d and then sends the time on the returned channel.
	After(d time.Duration) <-chan time.Time
	// NewTimer creates a Timer that fires once after d.
	NewTimer(d time.Duration) Timer
}

// Timer is the part of *time.Timer that components need.
type Timer interface {
	// C returns the channel on which the firing time is delivered.
	C() <-chan time.Time
	// Stop prevents the timer from firing; it reports whether it was active.
	Stop() bool
	// Reset changes the timer to fire after d; it reports whether it was active.
	Reset(d time.Duration) bool
}

// RealClock is the wall clock of the machine.
type RealClock struct{}

var _ Clock = RealClock{}

// Now returns time.Now().
func (RealClock) Now() time.Time { return time.Now() }

// After returns time.After(d).
func (RealClock) After(d time.Duration) <-chan time.Time { return time.After(d) }

// NewTimer returns a Timer backed by time.NewTimer.
func (RealClock) NewTimer(d time.Duration) Timer { return realTimer{time.NewTimer(d)} }

type realTimer struct{ t *time.Timer }

func (r realTimer) C() <-chan time.Time        { return r.t.C }
func (r realTimer) Stop() bool                 { return r.t.Stop() }
func (r realTimer) Reset(d time.Duration) bool { return r.t.Reset(d) }

// SkewedClock reports Inner's time shifted by a skew that may change at any
// moment, as a device whose RTC drifted or was set by hand would. Durations
// (After, NewTimer) are not affected: skew is an offset, not a rate.
// The zero skew is the Inner time; a nil Inner means RealClock.
type SkewedClock struct {
	// Inner is the clock being skewed; nil means RealClock{}.
	Inner Clock
	skew  atomic.Int64 // nanoseconds added to Inner.Now()
}

var _ Clock = (*SkewedClock)(nil)

// NewSkewedClock returns a clock reporting inner's time plus skew.
func NewSkewedClock(inner Clock, skew time.Duration) *SkewedClock {
	c := &SkewedClock{Inner: inner}
	c.skew.Store(int64(skew))
	return c
}

// SetSkew changes the offset added to Inner.Now(); it may be negative.
func (c *SkewedClock) SetSkew(d time.Duration) { c.skew.Store(int64(d)) }

// AddSkew shifts the offset by d (a clock step) and returns the new skew.
func (c *SkewedClock) AddSkew(d time.Duration) time.Duration {
	return time.Duration(c.skew.Add(int64(d)))
}

// Skew returns the current offset.
func (c *SkewedClock) Skew() time.Duration { return time.Duration(c.skew.Load()) }

// Now returns Inner.Now() plus the skew.
func (c *SkewedClock) Now() time.Time { return c.inner().Now().Add(c.Skew()) }

// After delegates to Inner.
func (c *SkewedClock) After(d time.Duration) <-chan time.Time { return c.inner().After(d) }

// NewTimer delegates to Inner.
func (c *SkewedClock) NewTimer(d time.Duration) Timer { return c.inner().NewTimer(d) }

func (c *SkewedClock) inner() Clock {
	if c.Inner == nil {
		return RealClock{}
	}
	return c.Inner
}

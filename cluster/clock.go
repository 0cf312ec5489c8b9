package cluster

import "time"

// Clock is the time source of a server's components. The wall clock (Now)
// is what a server stamps and judges by, and may be skewed (Config.Now);
// durations, timers and silences are measured on the local monotonic clock
// (Mono, NewTimer, NewTicker, AfterFunc), which steps of the wall clock do
// not move. Raft and memberlist keep their own timers.
type Clock interface {
	// Now reads the wall clock.
	Now() time.Time
	// Mono reads the monotonic clock; only differences of its readings
	// mean anything.
	Mono() time.Time
	// NewTimer returns a timer that fires once after d.
	NewTimer(d time.Duration) Timer
	// NewTicker returns a ticker that fires every d.
	NewTicker(d time.Duration) Ticker
	// AfterFunc calls f in its own goroutine after d, unless stopped
	// first.
	AfterFunc(d time.Duration, f func()) Timer
}

// Timer is a Clock's one-shot timer (time.Timer).
type Timer interface {
	// C is nil for a timer made by AfterFunc.
	C() <-chan time.Time
	Reset(d time.Duration) bool
	Stop() bool
}

// Ticker is a Clock's periodic timer (time.Ticker).
type Ticker interface {
	C() <-chan time.Time
	Stop()
}

// SystemClock is the host's clock, the package time. Under
// testing/synctest it is the bubble's fake clock.
type SystemClock struct{}

func (SystemClock) Now() time.Time  { return time.Now() }
func (SystemClock) Mono() time.Time { return time.Now() }

func (SystemClock) NewTimer(d time.Duration) Timer   { return sysTimer{time.NewTimer(d)} }
func (SystemClock) NewTicker(d time.Duration) Ticker { return sysTicker{time.NewTicker(d)} }
func (SystemClock) AfterFunc(d time.Duration, f func()) Timer {
	return sysTimer{time.AfterFunc(d, f)}
}

type sysTimer struct{ t *time.Timer }

func (t sysTimer) C() <-chan time.Time        { return t.t.C }
func (t sysTimer) Reset(d time.Duration) bool { return t.t.Reset(d) }
func (t sysTimer) Stop() bool                 { return t.t.Stop() }

type sysTicker struct{ t *time.Ticker }

func (t sysTicker) C() <-chan time.Time { return t.t.C }
func (t sysTicker) Stop()               { t.t.Stop() }

// wallClock is a Clock whose wall reading comes from elsewhere
// (Config.Now); everything else is the base clock's.
type wallClock struct {
	Clock
	now func() time.Time
}

func (c wallClock) Now() time.Time { return c.now() }

// serverClock is the clock a server runs on: Config.Clock (the system
// clock if nil) read through Config.Now if that is set.
func serverClock(cfg *Config) Clock {
	c := cfg.Clock
	if c == nil {
		c = SystemClock{}
	}
	if cfg.Now != nil {
		c = wallClock{Clock: c, now: cfg.Now}
	}
	return c
}

// sleep waits d on clock c, or until done is closed; it reports whether
// the wait ran out (rather than being cut short).
func sleep(c Clock, d time.Duration, done <-chan struct{}) bool {
	t := c.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C():
		return true
	case <-done:
		return false
	}
}

package agent

import (
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"github.com/meteor-edge/meteor/fsm/intent"
	"github.com/meteor-edge/meteor/wire"
)

// pace is the cadence of one reconcile class on the agent.
type pace struct {
	pull, probe, report time.Duration
	retryBase, retryMax time.Duration
	// jitter, in [0, 1], is the fraction of a retry wait drawn at random.
	jitter float64
}

// retryAfter is the wait after the n-th failure (n >= 1): retryBase
// doubled per failure up to retryMax, less a random share of up to jitter
// of it, so that devices failing together do not retry in step. int64n
// draws in [0, n).
func (p pace) retryAfter(n int, int64n func(int64) int64) time.Duration {
	d := backoff(p.retryBase, p.retryMax, n)
	if span := int64(float64(d) * p.jitter); span > 0 && int64n != nil {
		d -= time.Duration(int64n(span + 1))
	}
	return d
}

// settingsBook holds what the control plane configured on the device
// beyond its desired state (wire.Settings, protocol 1.4): the reconcile
// classes above all. Until a server sends settings (and with a server of
// protocol 1.3 or older, which sends none), every class has the agent's
// own cadences (Config: probe and pull intervals, report interval, retry
// bounds). The session sets it, the reconciler and the session read it;
// safe for concurrent use.
type settingsBook struct {
	fallback pace

	mu    sync.Mutex
	s     *wire.Settings  // the latest received; nil: none. Guarded by mu.
	paces map[string]pace // s's classes; guarded by mu
	inUse []string        // classes of the desired resources, sorted; guarded by mu
}

func newSettingsBook(cfg *Config) *settingsBook {
	return &settingsBook{fallback: pace{
		pull: cfg.PullInterval, probe: cfg.ProbeInterval, report: cfg.ReportInterval,
		retryBase: cfg.RetryMin, retryMax: cfg.RetryMax,
	}}
}

// set takes s in the place of the settings held, unless it is older (a
// lower Seq) than them; it reports whether it took it.
func (b *settingsBook) set(s *wire.Settings) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.s != nil && s.Seq < b.s.Seq {
		return false
	}
	b.s = s
	b.paces = make(map[string]pace, len(s.Classes))
	for _, c := range s.Classes {
		b.paces[c.Name] = pace{
			pull: c.PullInterval, probe: c.ProbeInterval, report: c.ReportInterval,
			retryBase: c.RetryBase, retryMax: c.RetryMax, jitter: c.RetryJitter,
		}
	}
	return true
}

// settings returns the settings held; nil if none.
func (b *settingsBook) settings() *wire.Settings {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.s
}

// paceOf returns the cadence of class: the class sent by the control
// plane, else its default class, else the agent's own.
func (b *settingsBook) paceOf(class string) pace {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.paceLocked(class)
}

func (b *settingsBook) paceLocked(class string) pace {
	if p, ok := b.paces[class]; ok {
		return p
	}
	if p, ok := b.paces[intent.DefaultClass]; ok {
		return p
	}
	return b.fallback
}

// setInUse records the classes of the desired resources, which decide
// the pull and report intervals.
func (b *settingsBook) setInUse(classes []string) {
	slices.Sort(classes)
	classes = slices.Compact(classes)
	b.mu.Lock()
	defer b.mu.Unlock()
	b.inUse = classes
}

// pullInterval is the shortest pull interval among the classes in use
// (the default class's when none is); welcome is the Welcome's, which
// stands for the agent's own before any settings arrived.
func (b *settingsBook) pullInterval(welcome time.Duration) time.Duration {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.s == nil && welcome > 0 {
		return welcome
	}
	return b.shortestLocked(func(p pace) time.Duration { return p.pull })
}

// reportInterval is the shortest report interval among the classes in
// use.
func (b *settingsBook) reportInterval() time.Duration {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.shortestLocked(func(p pace) time.Duration { return p.report })
}

func (b *settingsBook) shortestLocked(of func(pace) time.Duration) time.Duration {
	classes := b.inUse
	if len(classes) == 0 {
		classes = []string{intent.DefaultClass}
	}
	var out time.Duration
	for _, c := range classes {
		if d := of(b.paceLocked(c)); out == 0 || d < out {
			out = d
		}
	}
	return out
}

// probeIntervals returns the probe cadence of each class in use.
func (b *settingsBook) probeIntervals() map[string]time.Duration {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := make(map[string]time.Duration, len(b.inUse))
	for _, c := range b.inUse {
		out[c] = b.paceLocked(c).probe
	}
	return out
}

// jitterRand draws retry jitter.
func jitterRand(n int64) int64 { return rand.Int64N(n) }

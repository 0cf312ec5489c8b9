package agent

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/meteor-edge/meteor/agent/driver"
	"github.com/meteor-edge/meteor/fsm/intent"
	"github.com/meteor-edge/meteor/wire"
)

// countingDriver counts the drift checks (Current) of each resource, and
// fails the applies of resources named in fail.
type countingDriver struct {
	driver.Driver
	mu     sync.Mutex
	checks map[string]int
	fail   map[string]bool
}

func (d *countingDriver) Current(ctx context.Context, r intent.Resource) (driver.State, error) {
	d.mu.Lock()
	d.checks[r.ID]++
	d.mu.Unlock()
	return d.Driver.Current(ctx, r)
}

func (d *countingDriver) Apply(ctx context.Context, r intent.Resource) error {
	d.mu.Lock()
	fail := d.fail[r.ID]
	d.mu.Unlock()
	if fail {
		return errors.New("simulated failure")
	}
	return d.Driver.Apply(ctx, r)
}

func (d *countingDriver) take() map[string]int {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := d.checks
	d.checks = map[string]int{}
	return out
}

func testSettings(seq uint64, classes ...wire.SettingsClass) *wire.Settings {
	return &wire.Settings{Seq: seq, Classes: classes}
}

func class(name string, probe, pull time.Duration) wire.SettingsClass {
	return wire.SettingsClass{Name: name, PullInterval: pull, ProbeInterval: probe, ReportInterval: time.Hour,
		RetryBase: 10 * time.Second, RetryMax: time.Minute}
}

// TestClassCadences: each resource is checked on its class's cadence (a
// class the settings lack takes the default class's), the pull and report
// intervals are the shortest among the classes in use, a change of the
// settings takes effect at the next pass, and a failing apply retries
// after its class's backoff, jittered as the class says. On the
// reconciler's manual clock.
func TestClassCadences(t *testing.T) {
	r := newRig(t)
	sim, _ := r.reg.Lookup("sim")
	drv := &countingDriver{Driver: sim, checks: map[string]int{}, fail: map[string]bool{"bad": true}}
	r.reg.Register("sim", drv)
	res := func(id, class string) intent.Resource {
		x := simRes(id, id, nil)
		x.Class = class
		return x
	}
	r.record(1,
		desired(t, "net", 1, res("fw", "network-policy")),
		desired(t, "net", 1, res("pkg", "package")),
		desired(t, "net", 1, res("plain", "")),
		desired(t, "net", 1, res("odd", "no-such-class")),
		desired(t, "net", 1, res("bad", "package")),
	)
	pkg := class("package", 10*time.Minute, 30*time.Minute)
	pkg.RetryBase, pkg.RetryMax, pkg.RetryJitter = time.Minute, time.Hour, 0.5
	r.book.set(testSettings(1,
		class("default", time.Minute, 10*time.Minute),
		class("network-policy", 15*time.Second, time.Minute),
		pkg,
	))
	start := r.clock.Now()
	r.pass()
	if got := r.status("net/bad"); got.State != StateFailed {
		t.Fatalf("net/bad: %s, want failed", got.State)
	}
	// The class's backoff, less up to half of it at random.
	detail := r.status("net/bad").Detail
	at, err := time.Parse(time.RFC3339, strings.TrimPrefix(detail, "retrying at "))
	if err != nil {
		t.Fatalf("detail of net/bad: %q", detail)
	}
	if wait := at.Sub(start); wait < 29*time.Second || wait > time.Minute {
		t.Errorf("first retry of a package resource in %v, want 30s..1m (1m less up to half)", wait)
	}
	if got, want := r.book.pullInterval(0), time.Minute; got != want {
		t.Errorf("pull interval %v, want network-policy's %v", got, want)
	}
	if got, want := r.book.reportInterval(), time.Hour; got != want {
		t.Errorf("report interval %v, want %v", got, want)
	}

	drv.take()
	step := func(total, every time.Duration) map[string]int {
		for elapsed := time.Duration(0); elapsed < total; elapsed += every {
			r.clock.Advance(every)
			r.pass()
		}
		return drv.take()
	}
	got := step(10*time.Minute, 5*time.Second)
	for id, want := range map[string]int{"fw": 40, "plain": 10, "odd": 10, "pkg": 1} {
		if got[id] != want {
			t.Errorf("%s checked %d times in 10 minutes, want %d (all: %v)", id, got[id], want, got)
		}
	}

	// Live: package probes every 30 s from now on, default every 5 min.
	r.book.set(testSettings(2,
		class("default", 5*time.Minute, 10*time.Minute),
		class("network-policy", 15*time.Second, time.Minute),
		class("package", 30*time.Second, 30*time.Minute),
	))
	got = step(5*time.Minute, 5*time.Second)
	for id, want := range map[string]int{"fw": 20, "pkg": 10, "plain": 1} {
		if got[id] != want {
			t.Errorf("after the change %s checked %d times in 5 minutes, want %d (all: %v)", id, got[id], want, got)
		}
	}

	// Older settings (a server behind the one that sent these) are
	// ignored.
	if r.book.set(testSettings(1, class("default", time.Second, time.Second))) {
		t.Error("older settings replaced newer ones")
	}
}

// TestSettingsOverTheSession: a server of protocol 1.4 sends settings
// after the Welcome and again when they change; the agent journals them
// (a restarted agent has them before it connects), pulls at the shortest
// pull interval among its classes, and a change of it takes effect at
// once. A server of 1.3 sends none and gets no 1.4 report fields.
func TestSettingsOverTheSession(t *testing.T) {
	c := newTestCluster(t)
	s1 := c.startServer("s1")
	c.setDesired(1, upsert(t, "net", 1, intent.Resource{ID: "fw", Type: "sim", Class: "network-policy", Spec: map[string]any{"value": 1}}))
	c.setSettings(testSettings(5, class("default", time.Hour, time.Hour), class("network-policy", time.Hour, time.Hour)))
	cfg := c.agentConfig(t, "dev-1", s1)
	cfg.PullInterval = 50 * time.Millisecond // the agent's own: the settings replace it
	a, stop := runAgent(t, cfg)
	c.wait(t, 10*time.Second, "settings journaled", func() bool { return a.Status().SettingsSeq == 5 })
	c.wait(t, 10*time.Second, "converged", func() bool {
		st := a.Status()
		return len(st.Resources) == 1 && st.State == StateConverged
	})
	if st := a.Status(); st.PullInterval != time.Hour || st.ProbeIntervals["network-policy"] != time.Hour {
		t.Fatalf("pull interval %v, probe intervals %v; want the settings' hour", st.PullInterval, st.ProbeIntervals)
	}
	pulls := func() int {
		c.mu.Lock()
		defer c.mu.Unlock()
		return len(c.pulls)
	}
	before := pulls()
	// Live: network-policy pulls every 100 ms now.
	c.setSettings(testSettings(6, class("default", time.Hour, time.Hour), class("network-policy", time.Hour, 100*time.Millisecond)))
	c.wait(t, 10*time.Second, "pulls at the new interval", func() bool { return pulls() >= before+3 })
	if st := a.Status(); st.SettingsSeq != 6 || st.PullInterval != 100*time.Millisecond {
		t.Fatalf("settings seq %d, pull interval %v", st.SettingsSeq, st.PullInterval)
	}
	reports, _, _ := c.snapshot()
	for _, rep := range reports {
		if !rep.Edge {
			t.Errorf("report %d of a 1.4 session without the edge flag", rep.Seq)
		}
	}

	// A restart, to a server of 1.3, which sends no settings: the
	// journaled ones hold.
	stop()
	s1.setMode(serverMode{protocol13: true})
	a2 := startAgent(t, cfg)
	c.wait(t, 10*time.Second, "settings from the journal", func() bool { return a2.Status().SettingsSeq == 6 })
	c.wait(t, 10*time.Second, "a report to the 1.3 server", func() bool {
		rep := c.lastReport()
		return rep != nil && !rep.Edge && a2.Status().Connected
	})
}

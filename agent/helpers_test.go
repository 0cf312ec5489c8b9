package agent

import (
	"context"
	"encoding/hex"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/meteor-edge/meteor/agent/driver"
	"github.com/meteor-edge/meteor/agent/journal"
	"github.com/meteor-edge/meteor/fsm/intent"
	"github.com/meteor-edge/meteor/wire"
)

// testLogger routes logs to t.Log; METEOR_TEST_LOG sets the level
// (default warn).
func testLogger(t testing.TB) hclog.Logger {
	level := hclog.Warn
	if l := os.Getenv("METEOR_TEST_LOG"); l != "" {
		level = hclog.LevelFromString(l)
	}
	return hclog.New(&hclog.LoggerOptions{Name: t.Name(), Level: level, Output: t.Output()})
}

// fakeClock is a manual clock for reconcile passes called directly.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func newFakeClock() *fakeClock { return &fakeClock{now: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)} }

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// After never fires: tests using fakeClock call pass themselves.
func (c *fakeClock) After(time.Duration) <-chan time.Time { return nil }

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// body encodes a resource of an intent the way servers do.
func body(t testing.TB, intentName string, r intent.Resource) []byte {
	t.Helper()
	b, err := (&intent.ResourceBody{Intent: intentName, Resource: r}).Canonical()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// desired returns a journal entry for r of intentName at revision rev.
func desired(t testing.TB, intentName string, rev uint64, r intent.Resource) journal.DesiredResource {
	b := body(t, intentName, r)
	d := wire.DigestOf(b)
	return journal.DesiredResource{Key: intent.ResourceKey(intentName, r.ID), Digest: hex.EncodeToString(d[:]), Revision: rev, Body: b}
}

// upsert returns a Delta upsert for r of intentName at revision rev.
func upsert(t testing.TB, intentName string, rev uint64, r intent.Resource) wire.Upsert {
	b := body(t, intentName, r)
	return wire.Upsert{Key: intent.ResourceKey(intentName, r.ID), Digest: wire.DigestOf(b), Revision: rev, Body: b}
}

func fileRes(id, path, content string, requires ...string) intent.Resource {
	return intent.Resource{ID: id, Type: "file", Spec: map[string]any{"path": path, "content": content}, Requires: requires}
}

func simRes(id string, value any, spec map[string]any, requires ...string) intent.Resource {
	s := map[string]any{"value": value}
	for k, v := range spec {
		s[k] = v
	}
	return intent.Resource{ID: id, Type: "sim", Spec: s, Requires: requires}
}

// rig is a reconciler on a fresh journal with a manual clock and file
// paths confined under root; events records the step hooks.
type rig struct {
	t      *testing.T
	dir    string
	root   string
	clock  *fakeClock
	j      *journal.Journal
	reg    *driver.Registry
	sim    *driver.SimDevice
	st     *statusStore
	book   *settingsBook
	rec    *reconciler
	events []string // "begin app/x", "end app/x"
}

func newRig(t *testing.T) *rig {
	t.Helper()
	r := &rig{t: t, dir: t.TempDir(), root: t.TempDir(), clock: newFakeClock(), sim: driver.NewSimDevice(1)}
	var err error
	r.j, err = journal.Open(r.dir, journal.Options{Now: r.clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.j.Close() })
	r.reg, err = driver.NewRegistry(driver.Config{Root: r.root, Clock: r.clock, Sim: r.sim})
	if err != nil {
		t.Fatal(err)
	}
	cfg := DefaultConfig()
	cfg.Clock = r.clock
	cfg = cfg.withDefaults()
	log := testLogger(t)
	r.st = newStatusStore("dev-1")
	r.book = newSettingsBook(&cfg)
	rp := newReporter(r.j, r.st, r.clock, r.book.reportInterval, log)
	r.rec = newReconciler(&cfg, r.j, r.reg, r.st, rp, r.book, log)
	r.rec.hook = func(event, key string) {
		if event != "apply" {
			r.events = append(r.events, event+" "+key)
		}
	}
	return r
}

func (r *rig) record(rev uint64, res ...journal.DesiredResource) {
	r.t.Helper()
	if err := r.j.RecordDesired(rev, res); err != nil {
		r.t.Fatal(err)
	}
}

// pass runs one pass and returns the steps it began.
func (r *rig) pass() []string {
	r.t.Helper()
	r.events = nil
	if _, err := r.rec.pass(context.Background()); err != nil {
		r.t.Fatal(err)
	}
	var begun []string
	for _, e := range r.events {
		if k, ok := cutPrefix(e, "begin "); ok {
			begun = append(begun, k)
		}
	}
	return begun
}

func cutPrefix(s, p string) (string, bool) {
	if len(s) >= len(p) && s[:len(p)] == p {
		return s[len(p):], true
	}
	return "", false
}

// status returns the view of one resource after the last pass.
func (r *rig) status(key string) ResourceStatus {
	r.t.Helper()
	for _, s := range r.st.snapshot().Resources {
		if s.Key == key {
			return s
		}
	}
	r.t.Fatalf("no status for %s", key)
	return ResourceStatus{}
}

func (r *rig) path(p string) string { return filepath.Join(r.root, p) }

// fileMtimes maps each regular file under root to its modification time.
func fileMtimes(t testing.TB, root string) map[string]time.Time {
	t.Helper()
	out := map[string]time.Time{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		out[p] = fi.ModTime()
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// waitFor polls cond until it holds or the deadline passes.
func waitFor(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// flakyDriver wraps the sim driver with a probe verdict and apply error
// set by the test.
type flakyDriver struct {
	driver.Driver
	mu       sync.Mutex
	probe    driver.EffectiveResult
	applyErr error
}

func (d *flakyDriver) Apply(ctx context.Context, r intent.Resource) error {
	d.mu.Lock()
	err := d.applyErr
	d.mu.Unlock()
	if err != nil {
		return fmt.Errorf("flaky %q: %w", r.ID, err)
	}
	return d.Driver.Apply(ctx, r)
}

func (d *flakyDriver) Probe(ctx context.Context, r intent.Resource) (driver.Effective, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return driver.Effective{Result: d.probe, Detail: "flaky probe says " + d.probe.String()}, nil
}

func (d *flakyDriver) set(probe driver.EffectiveResult, applyErr error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.probe, d.applyErr = probe, applyErr
}

package cluster

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/hashicorp/go-hclog"
)

// recordingWorker is a leader worker that counts its runs and how many are
// running; it fails its first failFirst runs at once.
type recordingWorker struct {
	name      string
	failFirst int

	mu            sync.Mutex
	runs, running int // guarded by mu
}

func (w *recordingWorker) Name() string { return w.name }

func (w *recordingWorker) Run(ctx context.Context) error {
	w.mu.Lock()
	w.runs++
	if w.runs <= w.failFirst {
		w.mu.Unlock()
		return errors.New("injected failure")
	}
	w.running++
	w.mu.Unlock()
	<-ctx.Done()
	w.mu.Lock()
	w.running--
	w.mu.Unlock()
	return nil
}

func (w *recordingWorker) counts() (runs, running int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.runs, w.running
}

// TestLeaderWorkersFollowLeadership drives the leadership component with
// a fake leadership channel and barrier: workers start only once the
// barrier succeeded after gaining leadership, a failing worker is
// restarted after a backoff, and every worker is stopped and waited for
// when leadership is lost and when the component stops.
func TestLeaderWorkersFollowLeadership(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		changes := make(chan bool)
		var barriers atomic.Int32
		var ready atomic.Bool
		steady := &recordingWorker{name: "steady"}
		flaky := &recordingWorker{name: "flaky", failFirst: 2}
		l := &leadership{
			logger: hclog.NewNullLogger(), clock: SystemClock{}, changes: changes, ready: &ready,
			barrier: func() error {
				if barriers.Add(1) == 1 {
					return errors.New("injected: barrier timed out")
				}
				return nil
			},
			workers: []LeaderWorker{steady, flaky},
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- l.Run(ctx) }()

		synctest.Wait()
		if runs, _ := steady.counts(); runs != 0 || ready.Load() {
			t.Fatalf("a follower runs leader workers (%d runs) or is ready for reads (%v)", runs, ready.Load())
		}

		changes <- true
		synctest.Wait()
		if runs, _ := steady.counts(); runs != 0 || ready.Load() {
			t.Fatalf("workers started (%d runs) or ready for reads (%v) before the barrier succeeded", runs, ready.Load())
		}
		time.Sleep(time.Second) // the barrier is retried; the flaky worker restarts with backoff
		synctest.Wait()
		if !ready.Load() {
			t.Fatal("not ready for reads after the barrier")
		}
		if runs, running := steady.counts(); runs != 1 || running != 1 {
			t.Fatalf("steady worker: %d runs, %d running; want 1, 1", runs, running)
		}
		if runs, running := flaky.counts(); runs != 3 || running != 1 {
			t.Fatalf("flaky worker: %d runs, %d running; want 3 (two failures restarted), 1", runs, running)
		}

		changes <- false
		synctest.Wait()
		if _, running := steady.counts(); running != 0 || ready.Load() {
			t.Fatalf("after losing leadership: %d running, ready %v", running, ready.Load())
		}
		if _, running := flaky.counts(); running != 0 {
			t.Fatalf("flaky worker still running after losing leadership")
		}

		changes <- true
		synctest.Wait()
		if runs, running := steady.counts(); runs != 2 || running != 1 || !ready.Load() {
			t.Fatalf("leading again: steady worker %d runs, %d running, ready %v; want 2, 1, true", runs, running, ready.Load())
		}

		cancel()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		if _, running := steady.counts(); running != 0 || ready.Load() {
			t.Fatalf("after stopping: %d running, ready %v", running, ready.Load())
		}
	})
}

// scriptedWorker is a leader worker whose runs last as its script says,
// each then failing; it records when each run started.
type scriptedWorker struct {
	lasts  []time.Duration // how long run i lasts before failing
	starts chan time.Time
}

func (w *scriptedWorker) Name() string { return "scripted" }

func (w *scriptedWorker) Run(ctx context.Context) error {
	w.starts <- time.Now()
	if len(w.lasts) == 0 {
		<-ctx.Done()
		return nil
	}
	d := w.lasts[0]
	w.lasts = w.lasts[1:]
	select {
	case <-ctx.Done():
		return nil
	case <-time.After(d):
		return errors.New("injected failure")
	}
}

// TestLeaderWorkerBackoffResetsAfterARun: a worker that fails at once is
// restarted after a backoff that doubles, and one that failed after
// running for workerRetryMax or more is restarted after the least
// backoff again, not after the last failure's doubled one.
func TestLeaderWorkerBackoffResetsAfterARun(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		changes := make(chan bool)
		var ready atomic.Bool
		w := &scriptedWorker{
			lasts:  []time.Duration{0, 0, 0, 0, 0, time.Minute, 0},
			starts: make(chan time.Time, 16),
		}
		l := &leadership{
			logger: hclog.NewNullLogger(), clock: SystemClock{}, changes: changes, ready: &ready,
			barrier: func() error { return nil }, workers: []LeaderWorker{w},
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- l.Run(ctx) }()
		changes <- true
		var starts []time.Time
		for range 8 {
			starts = append(starts, <-w.starts)
		}
		var gaps []time.Duration
		for i := 1; i < len(starts); i++ {
			gaps = append(gaps, starts[i].Sub(starts[i-1]))
		}
		want := []time.Duration{
			100 * time.Millisecond, 200 * time.Millisecond, 400 * time.Millisecond, 800 * time.Millisecond,
			1600 * time.Millisecond,
			time.Minute + 100*time.Millisecond, // the minute's run, then the least backoff
			200 * time.Millisecond,
		}
		if !slices.Equal(gaps, want) {
			t.Errorf("gaps between runs %v, want %v", gaps, want)
		}
		cancel()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	})
}

// leaderRegistry records which servers run their leader worker.
type leaderRegistry struct {
	mu      sync.Mutex
	running map[string]int // guarded by mu; by server
}

// worker returns server id's worker.
func (r *leaderRegistry) worker(id string) LeaderWorker { return &registryWorker{r: r, id: id} }

func (r *leaderRegistry) check(want string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	for id, n := range r.running {
		if n != 0 && id != want || id == want && n != 1 {
			return fmt.Errorf("workers running: %v, want one on %s only", r.running, want)
		}
	}
	if r.running[want] != 1 {
		return fmt.Errorf("workers running: %v, want one on %s", r.running, want)
	}
	return nil
}

type registryWorker struct {
	r  *leaderRegistry
	id string
}

func (w *registryWorker) Name() string { return "registry" }

func (w *registryWorker) Run(ctx context.Context) error {
	w.r.mu.Lock()
	w.r.running[w.id]++
	w.r.mu.Unlock()
	<-ctx.Done()
	w.r.mu.Lock()
	w.r.running[w.id]--
	w.r.mu.Unlock()
	return nil
}

// TestLeaderWorkersRunOnTheLeaderOnly: a worker registered through
// Config.LeaderWorkers runs on the leader alone, and moves to the new
// leader when the leader dies (its own stopped by Shutdown).
func TestLeaderWorkersRunOnTheLeaderOnly(t *testing.T) {
	reg := &leaderRegistry{running: map[string]int{}}
	c := newTestCluster(t, 3, func(cfg *Config) {
		cfg.LeaderWorkers = []LeaderWorker{reg.worker(cfg.NodeID)}
	})
	leader := c.waitLeader()
	waitFor(t, 20*time.Second, func() error { return reg.check(leader.ID()) })
	c.kill(c.index(leader))
	next := c.waitLeader()
	waitFor(t, 20*time.Second, func() error { return reg.check(next.ID()) })
}

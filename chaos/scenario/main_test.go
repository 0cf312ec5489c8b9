package scenario

import (
	"context"
	"fmt"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	// See findLeaks: raft leaves the goroutine of a proposal queued on its
	// apply channel when a server crashes.
	goleak.VerifyTestMain(m, goleak.IgnoreTopFunction("github.com/hashicorp/raft.(*deferError).Error"))
}

// testWriter logs each write with t.Log until the test ends; goroutines
// still logging after that are silenced instead of panicking.
type testWriter struct {
	mu   sync.Mutex
	t    testing.TB
	done bool
}

func newTestWriter(t testing.TB) io.Writer {
	w := &testWriter{t: t}
	t.Cleanup(func() {
		w.mu.Lock()
		w.done = true
		w.mu.Unlock()
	})
	return w
}

func (w *testWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.done {
		w.t.Log(strings.TrimRight(string(p), "\n"))
	}
	return len(p), nil
}

// waitFor calls check every interval until it returns nil, and returns
// nil; or, once limit has passed (or ctx ended), the last error check
// returned. The conditions are about other goroutines, processes and
// links, so it polls; the deadline is what bounds the test, and check's
// context ends with it.
func waitFor(ctx context.Context, limit, every time.Duration, check func(ctx context.Context) error) error {
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	for {
		err := check(ctx)
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("after %v: %w", limit, err)
		case <-time.After(every):
		}
	}
}

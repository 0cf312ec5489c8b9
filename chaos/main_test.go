package chaos

import (
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// testLogger routes logs at level and above to t.Log until the test ends;
// goroutines still logging after that are silenced instead of panicking.
func testLogger(t testing.TB, name string, level hclog.Level) hclog.Logger {
	w := newTestWriter(t)
	return hclog.New(&hclog.LoggerOptions{Name: name, Level: level, Output: w, DisableTime: true})
}

type testWriter struct {
	mu   sync.Mutex
	t    testing.TB
	done bool
}

// newTestWriter returns an io.Writer logging each write with t.Log. Call it
// before any t.Cleanup that stops the goroutines using it, so it is silenced
// last.
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

// waitFor polls cond every few milliseconds until it holds or timeout passes.
func waitFor(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		<-tick.C
	}
}

// Package chaostest holds what the tests of Meteor's servers and chaos
// scenarios share: logs routed to the test that produced them, and the
// check that no goroutine outlives a package's tests.
package chaostest

import (
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"go.uber.org/goleak"
)

// VerifyNoLeaks looks for goroutines left by the tests until there are
// none or limit has passed, and returns the exit code for TestMain: 1 (and
// the goroutines on stderr) if some are left. memberlist's probe of a peer
// ends by its own timer, up to a probe interval after Shutdown, later on a
// busy host, hence the wait.
func VerifyNoLeaks(limit time.Duration) int {
	// hashicorp/raft never answers a proposal still queued on its apply
	// channel when it shuts down (docs/chaos.md): the goroutine waiting on
	// its future stays until the process exits.
	opt := goleak.IgnoreTopFunction("github.com/hashicorp/raft.(*deferError).Error")
	deadline := time.Now().Add(limit)
	for {
		err := goleak.Find(opt)
		if err == nil {
			return 0
		}
		if time.Now().After(deadline) {
			fmt.Fprintf(os.Stderr, "goroutines left after the tests: %v\n", err)
			return 1
		}
		time.Sleep(100 * time.Millisecond) // goleak.Find itself retries for a while
	}
}

// Logger routes logs at level and above to t.Log until the test ends.
func Logger(t testing.TB, name string, level hclog.Level) hclog.Logger {
	return hclog.New(&hclog.LoggerOptions{Name: name, Level: level, Output: NewWriter(t)})
}

// NewWriter returns an io.Writer logging each write with t.Log until the
// test ends; goroutines still logging after that are silenced instead of
// panicking. Call it before any t.Cleanup that stops the goroutines using
// it, so that it is silenced last.
func NewWriter(t testing.TB) io.Writer {
	w := &writer{t: t}
	t.Cleanup(func() {
		w.mu.Lock()
		w.done = true
		w.mu.Unlock()
	})
	return w
}

type writer struct {
	mu   sync.Mutex
	t    testing.TB
	done bool
}

func (w *writer) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.done {
		w.t.Log(strings.TrimRight(string(p), "\n"))
	}
	return len(p), nil
}

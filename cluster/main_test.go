package cluster

import (
	"fmt"
	"os"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// TestMain fails the package if a goroutine outlives the tests: every
// server goroutine is owned and waited for by Shutdown.
func TestMain(m *testing.M) {
	code := m.Run()
	if code == 0 {
		code = verifyNoLeaks(10 * time.Second)
	}
	os.Exit(code)
}

// verifyNoLeaks looks for leaked goroutines until none is left or limit
// has passed: memberlist's probe of a peer ends by its own timer, up to a
// probe interval after Shutdown, later still on a busy host.
func verifyNoLeaks(limit time.Duration) int {
	opts := []goleak.Option{
		// hashicorp/raft never answers a proposal still queued when it
		// shuts down (docs/chaos.md): the goroutine waiting on its future
		// stays until the process exits.
		goleak.IgnoreTopFunction("github.com/hashicorp/raft.(*deferError).Error"),
	}
	deadline := time.Now().Add(limit)
	for {
		err := goleak.Find(opts...)
		if err == nil {
			return 0
		}
		if time.Now().After(deadline) {
			fmt.Fprintf(os.Stderr, "goroutines left after the tests: %v\n", err)
			return 1
		}
		time.Sleep(100 * time.Millisecond) // goleak.Find already retries for ~2 s
	}
}

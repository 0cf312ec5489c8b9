package scenario

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/meteor-edge/meteor/chaos/chaostest"
)

func TestMain(m *testing.M) {
	RunFleetProcessIfAsked()
	code := m.Run()
	if code == 0 {
		code = chaostest.VerifyNoLeaks(10 * time.Second)
	}
	os.Exit(code)
}

func newTestWriter(t testing.TB) io.Writer { return chaostest.NewWriter(t) }

// waitFor calls check every interval until it returns nil, and returns
// nil; or, once limit has passed (or ctx ended), the last error check
// returned before that. The conditions are about other goroutines, processes and
// links, so it polls; the deadline is what bounds the test, and check's
// context ends with it.
func waitFor(ctx context.Context, limit, every time.Duration, check func(ctx context.Context) error) error {
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	var last error
	for {
		err := check(ctx)
		if err == nil {
			return nil
		}
		// A try cut short by the deadline says less than the one before.
		if ctx.Err() == nil || last == nil {
			last = err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("after %v: %w", limit, last)
		case <-time.After(every):
		}
	}
}

// TestWaitFor checks the helper: it returns once the condition holds, and
// at the deadline with the last error seen before it.
func TestWaitFor(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		err := waitFor(context.Background(), 10*time.Second, 100*time.Millisecond, func(context.Context) error {
			if time.Since(start) < 2*time.Second {
				return errors.New("not yet")
			}
			return nil
		})
		if err != nil || time.Since(start) != 2*time.Second {
			t.Errorf("after %v: %v, want nil after 2s", time.Since(start), err)
		}
	})
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		tries := 0
		err := waitFor(context.Background(), time.Second, 100*time.Millisecond, func(ctx context.Context) error {
			tries++
			if time.Since(start) < 950*time.Millisecond {
				return fmt.Errorf("try %d: not yet", tries)
			}
			<-ctx.Done() // the last try hangs until the deadline cuts it
			return ctx.Err()
		})
		if err == nil || !strings.Contains(err.Error(), "try 10: not yet") || time.Since(start) != time.Second {
			t.Errorf("after %v: %v, want the 10th try's error after 1s", time.Since(start), err)
		}
	})
}

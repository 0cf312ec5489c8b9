package benchkit

import (
	"context"
	"fmt"
	"time"
)

// WaitFor calls check, each call bounded by 2 s, every interval until it
// succeeds, ctx ends, p (if not nil) exits, or timeout passes. The errors
// for an exited process and a timeout end with the last lines of p's log.
func WaitFor(ctx context.Context, timeout, interval time.Duration, p *Proc, check func(context.Context) error) error {
	deadline := time.Now().Add(timeout)
	for {
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		err := check(cctx)
		cancel()
		if err == nil {
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if p != nil && p.Exited() {
			return fmt.Errorf("exited (%v); last log lines from %s:\n%s", p.Err(), p.LogPath, p.LogTail(20))
		}
		if time.Now().After(deadline) {
			if p == nil {
				return fmt.Errorf("not ready after %s: %w", timeout, err)
			}
			return fmt.Errorf("not ready after %s: %w; last log lines from %s:\n%s", timeout, err, p.LogPath, p.LogTail(20))
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(interval):
		}
	}
}

package api

import (
	"context"
	"fmt"
	"time"
)

// WatchEvery is how often WatchIntent reads by default.
const WatchEvery = time.Second

// IntentReading is one reading of where an intent's current revision
// stands: its progress over the devices it targets and its rollout.
type IntentReading struct {
	Progress *IntentProgress
	Rollout  *RolloutStatus
}

// WatchIntent reads intent name's progress and rollout every every
// (WatchEvery when 0) and hands each reading to fn until fn says done or
// returns an error, a read fails (after the retries every request gets),
// or ctx ends, whose error it then returns wrapped.
//
// It is the one place the CLI waits on an intent (meteor apply --wait):
// once the servers answer blocking reads, it will wait on them instead of
// sleeping between reads, and its callers will not change.
func (c *Client) WatchIntent(ctx context.Context, name string, o ReadOptions, every time.Duration, fn func(IntentReading) (bool, error)) error {
	if every <= 0 {
		every = WatchEvery
	}
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return fmt.Errorf("watch intent %q: %w", name, ctx.Err())
		case <-t.C:
		}
		p, err := c.IntentProgress(ctx, name, o)
		if err != nil {
			return err
		}
		ro, err := c.Rollout(ctx, name, o)
		if err != nil {
			return err
		}
		done, err := fn(IntentReading{Progress: p, Rollout: ro})
		if done || err != nil {
			return err
		}
		t.Reset(every)
	}
}

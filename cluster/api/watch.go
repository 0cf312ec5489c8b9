package api

import (
	"context"
	"fmt"
	"time"
)

// WatchEvery is the least time between WatchIntent's readings by
// default.
const WatchEvery = time.Second

// watchWait bounds each of WatchIntent's blocking reads, so a watch
// notices a server that went away.
const watchWait = 30 * time.Second

// IntentReading is one reading of where an intent's current revision
// stands: its progress over the devices it targets and its rollout.
type IntentReading struct {
	Progress *IntentProgress
	Rollout  *RolloutStatus
}

// WatchIntent reads intent name's progress and rollout and hands each
// reading to fn until fn says done or returns an error, a read fails
// (after the retries every request gets), or ctx ends, whose error it
// then returns wrapped. After the first reading each read is a blocking
// one (ReadOptions.WaitIndex): it waits on the server until the state has
// moved past the last reading's, and readings stay at least every
// (WatchEvery when 0) apart. It is the one place the CLI waits on an
// intent (meteor apply --wait).
func (c *Client) WatchIntent(ctx context.Context, name string, o ReadOptions, every time.Duration, fn func(IntentReading) (bool, error)) error {
	if every <= 0 {
		every = WatchEvery
	}
	var index uint64
	for {
		read := time.Now()
		po := o
		po.WaitIndex, po.Wait = index, watchWait
		p, err := c.IntentProgress(ctx, name, po)
		if err != nil {
			if ctx.Err() != nil {
				return fmt.Errorf("watch intent %q: %w", name, ctx.Err())
			}
			return err
		}
		index = p.Index
		ro, err := c.Rollout(ctx, name, o)
		if err != nil {
			return err
		}
		done, err := fn(IntentReading{Progress: p, Rollout: ro})
		if done || err != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("watch intent %q: %w", name, ctx.Err())
		case <-time.After(every - time.Since(read)):
		}
	}
}

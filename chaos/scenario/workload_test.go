package scenario

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/hashicorp/go-hclog"
)

// TestRunLength checks how long a run lasts: its duration if the workload
// has its operations by then, until it has them if not, and never past
// the limit.
func TestRunLength(t *testing.T) {
	const d = 5 * time.Second
	tests := []struct {
		name    string
		limit   time.Duration
		minOps  int
		reached time.Duration // when the workload has minOps completed; <0 never
		want    time.Duration
	}{
		{"enough within the duration", 0, 50, 3 * time.Second, d},
		{"enough at the duration", 0, 50, d, d},
		{"goes on until enough", 0, 50, 12 * time.Second, 12 * time.Second},
		{"stops at the default limit", 0, 50, -1, d + 30*time.Second},
		{"stops at the limit given", 20 * time.Second, 50, -1, 20 * time.Second},
		{"a limit below the duration is the duration", time.Second, 50, -1, d},
		{"no minimum", 0, -1, -1, d},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				start := time.Now()
				completed := func() int {
					if tt.reached >= 0 && time.Since(start) >= tt.reached {
						return 50
					}
					return 10
				}
				l := newRunLength(d, tt.limit, tt.minOps)
				got := l.wait(context.Background(), hclog.NewNullLogger(), completed)
				// The workload is polled every 50 ms past the duration.
				if got < tt.want || got > tt.want+50*time.Millisecond {
					t.Errorf("ran %v, want %v", got, tt.want)
				}
			})
		})
	}
}

// TestRunLengthCancelled checks that a run ends with its context.
func TestRunLengthCancelled(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 8*time.Second)
		defer cancel()
		got := newRunLength(5*time.Second, 0, 50).wait(ctx, hclog.NewNullLogger(), func() int { return 0 })
		if got != 8*time.Second {
			t.Errorf("ran %v, want 8s (the context's end)", got)
		}
	})
}

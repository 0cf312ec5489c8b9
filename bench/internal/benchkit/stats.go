package benchkit

import (
	"math"
	"strconv"
	"time"
)

// Percentile returns the p-th percentile (0 < p <= 100) of sorted by the
// nearest-rank method, or 0 if sorted is empty.
func Percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	rank := int(math.Ceil(p / 100 * float64(len(sorted))))
	rank = min(max(rank, 1), len(sorted))
	return sorted[rank-1]
}

// MS returns d in milliseconds.
func MS(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// Thousands writes n with comma separators: 10000 is "10,000".
func Thousands(n int) string {
	s := strconv.Itoa(n)
	start := 0
	if n < 0 {
		start = 1
	}
	for i := len(s) - 3; i > start; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}

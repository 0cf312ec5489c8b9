package cluster

import (
	"math"
	"runtime/metrics"
	"time"
)

// schedLatencyMetric is the runtime's histogram of how long goroutines
// waited between being made runnable and running.
const schedLatencyMetric = "/sched/latencies:seconds"

// schedLatencies reads the process's scheduling latency over intervals:
// each call returns the 90th percentile of the latencies the runtime
// measured since the call before, and how many it measured. It is how a
// server tells that it is busy (notifyWindow): a host whose cores are
// taken keeps runnable goroutines waiting, whichever process took them.
type schedLatencies struct {
	sample      []metrics.Sample
	prev, delta []uint64 // the counts at the last call, and since it
}

func newSchedLatencies() *schedLatencies {
	return &schedLatencies{sample: []metrics.Sample{{Name: schedLatencyMetric}}}
}

// next returns the p90 and the count of the latencies measured since the
// last call (the first call measures from the process's start).
func (s *schedLatencies) next() (p90 time.Duration, n uint64) {
	metrics.Read(s.sample)
	if s.sample[0].Value.Kind() != metrics.KindFloat64Histogram {
		return 0, 0 // a runtime without the metric: never busy
	}
	h := s.sample[0].Value.Float64Histogram()
	if len(s.prev) != len(h.Counts) {
		s.prev, s.delta = make([]uint64, len(h.Counts)), make([]uint64, len(h.Counts))
	}
	for i, c := range h.Counts {
		s.delta[i] = c - s.prev[i]
		n += s.delta[i]
		s.prev[i] = c
	}
	return histogramQuantile(h.Buckets, s.delta, n, 0.9), n
}

// histogramQuantile returns the upper bound of the bucket that holds the
// q quantile of the n counts (0 for none). counts[i] counts values in
// [buckets[i], buckets[i+1]); an unbounded last bucket reads as its lower
// bound.
func histogramQuantile(buckets []float64, counts []uint64, n uint64, q float64) time.Duration {
	if n == 0 {
		return 0
	}
	rank := uint64(q*float64(n-1)) + 1
	var acc uint64
	for i, c := range counts {
		acc += c
		if acc >= rank {
			upper := buckets[i+1]
			if math.IsInf(upper, 1) {
				upper = buckets[i]
			}
			return time.Duration(upper * float64(time.Second))
		}
	}
	return 0
}

package cluster

import (
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/meteor-edge/meteor/fsm"
	"github.com/meteor-edge/meteor/scheduler"
)

// BenchmarkStatusEvaluate measures the owner's periodic evaluation of
// 10,000 devices it owns, connected and converged, while nothing changes:
// what a fleet at rest costs its owner every StatusEvalInterval. It
// reports the share of devices classified (the rest were passed over as
// settled) and the transitions committed, which must be none. "due" is
// the evaluation as it runs: no record changed, so it judges the devices
// due, none here, and a sweep every sweepEvery evaluations. "records"
// reads every record at every evaluation and passes over the settled
// ones, as evaluations did before they were driven by the devices' due
// times; "sweep" judges every device at every evaluation, as they did
// before settled devices were passed over.
func BenchmarkStatusEvaluate(b *testing.B) {
	b.Run("due", func(b *testing.B) { benchmarkStatusEvaluate(b, sweepEvery, false) })
	b.Run("records", func(b *testing.B) { benchmarkStatusEvaluate(b, sweepEvery, true) })
	b.Run("sweep", func(b *testing.B) { benchmarkStatusEvaluate(b, 1, true) })
}

func benchmarkStatusEvaluate(b *testing.B, every int, readRecords bool) {
	const devices = 10000
	p := newLocalProposer(b)
	p.mustApply(b, fsm.PutIntentType, &fsm.PutIntentRequest{Intent: simpleIntent("motd", "v1"), Time: time.Now().UnixNano()})
	cfg := DefaultConfig()
	cfg.NodeID = "s1"
	cfg.TrustReportedLabels = true // the devices are selected by their region
	cfg.StatusBatchInterval = time.Millisecond
	cfg.StatusEvalInterval = time.Hour // evaluated by the benchmark only
	o := newStatusOwner(&cfg, hclog.NewNullLogger(), SystemClock{}, p.state, p,
		fixedOwners{{ID: "s1", Region: "eu"}}, scheduler.NewPlanner())
	o.sweepEvery = every
	stop := runComponent(b, o.Run)
	defer stop()
	convergedFleet(b, p, o, devices, "s1")
	// The first evaluation judges every device (and settles them).
	if err := o.evaluate(time.Now()); err != nil {
		b.Fatal(err)
	}
	time.Sleep(10 * time.Millisecond) // what it queued commits
	recs, err := p.state.Read().Devices(nil)
	if err != nil {
		b.Fatal(err)
	}
	byStatus := map[string]int{}
	for _, rec := range recs {
		byStatus[rec.Status]++
	}
	if byStatus[scheduler.StatusConverged] != devices {
		b.Fatalf("devices by status %v (%s: %s); want all %d converged", byStatus, recs[0].ID, recs[0].StatusReason, devices)
	}
	transitions, judged, passed := o.transitions.Load(), o.judged.Load(), o.passed.Load()
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		if readRecords {
			o.mu.Lock()
			o.records = nil
			o.mu.Unlock()
		}
		if err := o.evaluate(time.Now()); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/devices, "ns/device")
	j, ps := o.judged.Load()-judged, o.passed.Load()-passed
	b.ReportMetric(float64(j)/float64(j+ps), "judged/owned")
	if n := o.transitions.Load() - transitions; n != 0 {
		b.Fatalf("%d transitions committed while nothing changed", n)
	}
}

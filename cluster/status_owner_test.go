package cluster

import (
	"context"
	"maps"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/meteor-edge/meteor/fsm"
	"github.com/meteor-edge/meteor/fsm/intent"
	"github.com/meteor-edge/meteor/scheduler"
	"github.com/meteor-edge/meteor/wire"
)

// Unit tests of the status owner without a cluster: a state machine in
// memory committed to by a localProposer, a fixed ownership view, and the
// fake clock of testing/synctest.

var euLabels = map[string]string{"region": "eu"}

// runUnitStatusOwner runs a status owner, "s1", the only server, on an
// in-memory state machine holding one intent and the given devices,
// connected to another server. stop ends it.
func runUnitStatusOwner(t *testing.T, devices ...string) (p *localProposer, o *statusOwner, stop func()) {
	t.Helper()
	p = newLocalProposer(t)
	p.mustApply(t, fsm.PutIntentType, &fsm.PutIntentRequest{Intent: simpleIntent("motd", "v1"), Time: time.Now().UnixNano()})
	for _, id := range devices {
		connectDevice(t, p, id, true)
	}
	cfg := DefaultConfig()
	cfg.NodeID = "s1"
	withFastStatus(nil)(&cfg)
	o = newStatusOwner(&cfg, hclog.NewNullLogger(), SystemClock{}, p.state, p,
		fixedOwners{{ID: "s1", Region: "eu"}}, scheduler.NewPlanner())
	return p, o, runComponent(t, o.Run)
}

// connectDevice commits a device's session as another server would.
func connectDevice(t testing.TB, p *localProposer, id string, connected bool) {
	t.Helper()
	p.mustApply(t, fsm.DeviceSessionType, &fsm.DeviceSessionRequest{
		ID: id, Labels: euLabels, SessionID: "s", Server: "s2", Conn: "c", Connected: connected, Time: time.Now().UnixNano(),
	})
}

func convergedReport(seq uint64) *wire.Report {
	return &wire.Report{Seq: seq, Full: true, Status: "converged", Resources: []wire.ResourceReport{{
		Key: "motd/motd", AppliedDigest: wire.Digest{1}, AppliedRevision: 1, Effective: wire.EffectiveOK,
	}}}
}

// TestStatusOwnerCommitsReportsInBatches: reports arriving within the
// batch interval share one Raft entry, and each is acknowledged (ingest
// returns) only once that entry is committed.
func TestStatusOwnerCommitsReportsInBatches(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p, o, stop := runUnitStatusOwner(t, "dev-a", "dev-b")
		defer stop()

		var wg sync.WaitGroup
		errs := make([]error, 2)
		for i, id := range []string{"dev-a", "dev-b"} {
			wg.Go(func() { errs[i] = o.ingest(context.Background(), id, 0, convergedReport(4)) })
		}
		synctest.Wait()
		if n := p.committed(fsm.StatusBatchType); n != 0 {
			t.Fatalf("%d status entries committed before the batch interval passed", n)
		}
		wg.Wait() // the fake clock moves on to the end of the batch interval
		for _, err := range errs {
			if err != nil {
				t.Fatal(err)
			}
		}
		if n, e, tr := p.committed(fsm.StatusBatchType), o.entries.Load(), o.transitions.Load(); n != 1 || e != 1 || tr != 2 {
			t.Fatalf("%d status entries committed, owner counts %d entries and %d transitions; want 1, 1, 2", n, e, tr)
		}
		for _, id := range []string{"dev-a", "dev-b"} {
			rec, err := p.state.Read().Device(nil, id)
			if err != nil {
				t.Fatal(err)
			}
			if rec.ReportSeq != 4 || rec.StatusOwner != "s1" || rec.Status == "" {
				t.Fatalf("%s: seq %d, owner %q, status %q", id, rec.ReportSeq, rec.StatusOwner, rec.Status)
			}
		}
	})
}

// TestStatusOwnerSilenceBecomesUnreachable: a disconnected device that is
// not heard of for its class's threshold, measured on the owner's own
// clock, is committed as unreachable by the periodic evaluation.
func TestStatusOwnerSilenceBecomesUnreachable(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p, _, stop := runUnitStatusOwner(t, "dev-quiet")
		defer stop()
		connectDevice(t, p, "dev-quiet", false)

		status := func() *fsm.DeviceRecord {
			t.Helper()
			rec, err := p.state.Read().Device(nil, "dev-quiet")
			if err != nil {
				t.Fatal(err)
			}
			return rec
		}
		time.Sleep(500 * time.Millisecond) // half the threshold (withFastStatus: 1 s)
		synctest.Wait()
		if rec := status(); rec.Status == scheduler.StatusUnreachable {
			t.Fatalf("unreachable after half the threshold: %q", rec.StatusReason)
		}
		time.Sleep(2 * time.Second)
		synctest.Wait()
		if rec := status(); rec.Status != scheduler.StatusUnreachable || !strings.Contains(rec.StatusReason, "no contact for") {
			t.Fatalf("status %q (%q) after 2.5 s of silence, want unreachable", rec.Status, rec.StatusReason)
		}
	})
}

// TestStatusOwnerJudgesByWrittenClasses: a class written through the
// state machine takes the place of the server's built-in one at once: a
// default class allowing 10 s of silence keeps a device silent for 2.5 s
// reachable, which the built-in threshold (1 s here) would not.
func TestStatusOwnerJudgesByWrittenClasses(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p, _, stop := runUnitStatusOwner(t, "dev-quiet")
		defer stop()
		def := intent.BuiltinClasses()[scheduler.DefaultClass]
		def.UnreachableAfter = 10 * time.Second
		p.mustApply(t, fsm.PutClassType, &fsm.PutClassRequest{Class: &def, Time: time.Now().UnixNano()})
		connectDevice(t, p, "dev-quiet", false)
		time.Sleep(2500 * time.Millisecond)
		synctest.Wait()
		rec, err := p.state.Read().Device(nil, "dev-quiet")
		if err != nil {
			t.Fatal(err)
		}
		if rec.Status == scheduler.StatusUnreachable {
			t.Fatalf("unreachable after 2.5 s although the written class allows 10 s: %q", rec.StatusReason)
		}
		time.Sleep(10 * time.Second)
		synctest.Wait()
		if rec, _ := p.state.Read().Device(nil, "dev-quiet"); rec.Status != scheduler.StatusUnreachable || !strings.Contains(rec.StatusReason, "default allows 10s") {
			t.Fatalf("status %q (%q) after 12.5 s, want unreachable by the written class", rec.Status, rec.StatusReason)
		}
	})
}

// TestStatusOwnerFailedCommitIsNotAcknowledged: a report whose transition
// cannot be committed is not acknowledged, and the same report sent again
// once commits succeed is committed then.
func TestStatusOwnerFailedCommitIsNotAcknowledged(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p, o, stop := runUnitStatusOwner(t, "dev-a")
		defer stop()

		p.setFail(func(mt fsm.MessageType) bool { return mt == fsm.StatusBatchType })
		if err := o.ingest(context.Background(), "dev-a", 0, convergedReport(2)); err == nil {
			t.Fatal("a report whose commit failed was acknowledged")
		}
		if n := o.failed.Load(); n != 1 {
			t.Fatalf("%d failed status batches counted, want 1", n)
		}
		p.setFail(nil)
		if err := o.ingest(context.Background(), "dev-a", 0, convergedReport(2)); err != nil {
			t.Fatalf("the report sent again: %v", err)
		}
		if n, e := o.failed.Load(), o.entries.Load(); n != 1 || e != 1 {
			t.Fatalf("%d failed and %d committed status batches counted, want 1 and 1", n, e)
		}
		rec, err := p.state.Read().Device(nil, "dev-a")
		if err != nil {
			t.Fatal(err)
		}
		if rec.ReportSeq != 2 {
			t.Fatalf("report seq %d committed, want 2", rec.ReportSeq)
		}
	})
}

// TestStatusOwnerReportWaitsForThePendingCommit: a report that changes
// nothing beyond a transition still being committed is acknowledged only
// once that transition is. Acknowledged before, it was lost when the
// commit failed: the owner forgot the device, and the agent, its report
// acknowledged, had no reason to send the content again.
func TestStatusOwnerReportWaitsForThePendingCommit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p, o, stop := runUnitStatusOwner(t, "dev-a")
		defer stop()

		p.setFail(func(mt fsm.MessageType) bool { return mt == fsm.StatusBatchType })
		first := make(chan error, 1)
		go func() { first <- o.ingest(context.Background(), "dev-a", 0, convergedReport(2)) }()
		synctest.Wait() // report 2 is queued, its batch not yet due
		second := make(chan error, 1)
		go func() { second <- o.ingest(context.Background(), "dev-a", 0, convergedReport(3)) }()
		synctest.Wait()
		select {
		case err := <-second:
			t.Fatalf("report 3, which only repeats report 2, answered %v before report 2's commit", err)
		default:
		}
		if err := <-first; err == nil {
			t.Fatal("report 2 acknowledged although its commit failed")
		}
		if err := <-second; err == nil {
			t.Fatal("report 3 acknowledged although the commit it depends on failed")
		}

		p.setFail(nil)
		if err := o.ingest(context.Background(), "dev-a", 0, convergedReport(3)); err != nil {
			t.Fatalf("report 3 sent again: %v", err)
		}
		rec, err := p.state.Read().Device(nil, "dev-a")
		if err != nil {
			t.Fatal(err)
		}
		if rec.ReportSeq != 3 || len(rec.Resources) != 1 || rec.Resources[0].AppliedRevision != 1 {
			t.Fatalf("committed report seq %d with resources %+v; want 3 with motd/motd at revision 1", rec.ReportSeq, rec.Resources)
		}
	})
}

// TestChangedResourceStates: the owner commits the resource statuses that
// changed since it last queued, and "removed" for resources gone.
func TestChangedResourceStates(t *testing.T) {
	s := func(kv ...string) []queuedState {
		var out []queuedState
		for i := 0; i < len(kv); i += 2 {
			out = append(out, queuedState{key: kv[i], status: kv[i+1]})
		}
		return out
	}
	for _, c := range []struct {
		was, now []queuedState
		want     map[string]string
	}{
		{nil, nil, nil},
		{s("a", "converged"), s("a", "converged"), nil},
		{nil, s("a", "pending", "b", "pending"), map[string]string{"a": "pending", "b": "pending"}},
		{s("a", "pending", "b", "pending"), nil, map[string]string{"a": "removed", "b": "removed"}},
		{s("a", "pending", "c", "failed", "d", "converged"), s("b", "pending", "c", "converged", "d", "converged", "e", "drifted"),
			map[string]string{"a": "removed", "b": "pending", "c": "converged", "e": "drifted"}},
	} {
		if got := changedResourceStates(c.was, c.now); !maps.Equal(got, c.want) || (got == nil) != (c.want == nil) {
			t.Errorf("changedResourceStates(%v, %v) = %v, want %v", c.was, c.now, got, c.want)
		}
	}
}

// TestStatusOwnerMendsALateStaleStatus: a status batch of this owner whose
// outcome it never learned (its forward timed out) can be applied after
// a newer judgement of the owner's and set an older one over it. The
// owner's evaluation notices that the replica's status is its own but not
// its latest, and commits its judgement again.
func TestStatusOwnerMendsALateStaleStatus(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p, o, stop := runUnitStatusOwner(t, "dev-a")
		defer stop()
		if err := o.ingest(context.Background(), "dev-a", 0, convergedReport(4)); err != nil {
			t.Fatal(err)
		}
		read := func() *fsm.DeviceRecord {
			t.Helper()
			rec, err := p.state.Read().Device(nil, "dev-a")
			if err != nil {
				t.Fatal(err)
			}
			return rec
		}
		judged := read()
		if judged.Status == "" || judged.StatusOwner != "s1" {
			t.Fatalf("after the report: status %q by %q", judged.Status, judged.StatusOwner)
		}

		// The late batch: judged on report 3, before the one committed.
		p.mustApply(t, fsm.StatusBatchType, &fsm.StatusBatchRequest{Owner: "s1", Transitions: []fsm.StatusTransition{{
			Device: "dev-a", Seq: 3, Time: time.Now().Add(-time.Second).UnixNano(), Revision: judged.StatusRevision,
			Status: scheduler.StatusPending, Reason: "a judgement of report 3", Basis: judged.StatusIndex,
		}}})
		if rec := read(); rec.Status != scheduler.StatusPending || rec.ReportSeq != 4 || judged.Status == scheduler.StatusPending {
			t.Fatalf("the late batch: status %q over %q, report %d; want pending over report 4", rec.Status, judged.Status, rec.ReportSeq)
		}
		late := p.committed(fsm.StatusBatchType)
		// Evaluations (withFastStatus: every 200 ms) and a batch; half the
		// 1 s the device may stay silent before it is unreachable.
		time.Sleep(500 * time.Millisecond)
		synctest.Wait()
		if rec := read(); rec.Status != judged.Status || rec.StatusReason != judged.StatusReason {
			t.Fatalf("after the owner's evaluations: %q (%s); want its judgement %q (%s) again", rec.Status, rec.StatusReason, judged.Status, judged.StatusReason)
		}
		if n := p.committed(fsm.StatusBatchType) - late; n != 1 {
			t.Fatalf("%d status batches mended it; want one", n)
		}
	})
}

package cluster

import (
	"context"
	"fmt"
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

// mutableOwners is an ownerView whose alive servers a test changes.
type mutableOwners struct {
	mu sync.Mutex
	c  []ownerCandidate
}

func (m *mutableOwners) ownerCandidates() []ownerCandidate {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.c
}

func (m *mutableOwners) set(c ...ownerCandidate) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.c = c
}

// convergedFleet registers n devices ("dev-00000"...) in sessions on
// server, all in region eu, and has o ingest from each a report of
// everything its desired state holds, applied and confirmed. The owner's
// configuration must trust reported labels.
func convergedFleet(tb testing.TB, p *localProposer, o *statusOwner, n int, server string) []string {
	tb.Helper()
	rev := p.state.Read().Revision()
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("dev-%05d", i)
		// Each new device takes a revision; acknowledge past all of them.
		p.mustApply(tb, fsm.DeviceSessionType, &fsm.DeviceSessionRequest{
			ID: ids[i], Labels: euLabels, SessionID: "s", Server: server, Conn: "c", Connected: true,
			AckedRevision: rev + uint64(n), Time: time.Now().UnixNano(),
		})
	}
	read := p.state.Read()
	for _, id := range ids {
		desired, err := o.planner.Desired(read, id, euLabels)
		if err != nil {
			tb.Fatal(err)
		}
		rep := &wire.Report{Seq: 1, Full: true, Status: "converged"}
		for _, r := range desired.Resources {
			rep.Resources = append(rep.Resources, wire.ResourceReport{Key: r.Key, AppliedDigest: r.Digest, AppliedRevision: r.Revision, Effective: wire.EffectiveOK})
		}
		if err := o.ingest(context.Background(), id, 0, rep); err != nil {
			tb.Fatal(err)
		}
	}
	return ids
}

// TestStatusOwnerPassesOverSettledDevices: an evaluation classifies only
// the devices whose judgement may have changed: those whose records
// changed, all of them when a class, an intent or the alive servers
// change or the sweep is due, and those time alone moves (disconnected
// but not yet unreachable). A settled device costs no classification.
func TestStatusOwnerPassesOverSettledDevices(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p, o, owners := startEvaluatedOwner(t, ownerCandidate{ID: "s1", Region: "eu"}, ownerCandidate{ID: "s2", Region: "eu"})
		ids := convergedFleet(t, p, o, 6, "s2")
		mine := 0
		for _, id := range ids {
			if ownerOf(id, "eu", owners.ownerCandidates()) == "s1" {
				mine++
			}
		}
		if mine == 0 {
			t.Fatal("s1 owns none of the devices: pick other IDs")
		}

		evaluate := func(what string, wantJudged int) {
			t.Helper()
			j, ps := o.judged.Load(), o.passed.Load()
			if err := o.evaluate(time.Now()); err != nil {
				t.Fatal(err)
			}
			time.Sleep(time.Second) // what it queued commits
			if got := int(o.judged.Load() - j); got != wantJudged {
				t.Fatalf("%s: %d devices classified, %d passed over; want %d classified", what, got, int(o.passed.Load()-ps), wantJudged)
			}
		}
		evaluate("first evaluation", mine)
		evaluate("nothing changed", 0)

		// One device's record changes: that device alone.
		var one string
		for _, id := range ids {
			if ownerOf(id, "eu", owners.ownerCandidates()) == "s1" {
				one = id
				break
			}
		}
		rec, _ := p.state.Read().Device(nil, one)
		p.mustApply(t, fsm.DeviceSessionType, &fsm.DeviceSessionRequest{
			ID: one, SessionID: "s", Server: "s2", Conn: "c", Connected: true, AckedRevision: rec.AckedRevision, Time: time.Now().UnixNano(),
		})
		evaluate("one record changed", 1)

		// A device enrolls: it moves the cluster revision, and only the
		// new device is judged (a fleet connecting enrolls thousands).
		newcomer := ""
		for i := 0; newcomer == ""; i++ {
			if id := fmt.Sprintf("newcomer-%d", i); ownerOf(id, "eu", owners.ownerCandidates()) == "s1" {
				newcomer = id
			}
		}
		rev := p.state.Read().Revision()
		p.mustApply(t, fsm.DeviceSessionType, &fsm.DeviceSessionRequest{
			ID: newcomer, Labels: map[string]string{"region": "eu"}, SessionID: "n", Server: "s2", Conn: "c", Connected: true, Time: time.Now().UnixNano(),
		})
		if p.state.Read().Revision() == rev {
			t.Fatal("enrolling a device did not move the cluster revision")
		}
		ids = append(ids, newcomer)
		mine++
		evaluate("a device enrolled", 1)

		// A class changes what every device is judged by.
		def := intent.BuiltinClasses()[scheduler.DefaultClass]
		def.UnreachableAfter = time.Minute
		p.mustApply(t, fsm.PutClassType, &fsm.PutClassRequest{Class: &def, Time: time.Now().UnixNano()})
		evaluate("a class written", mine)
		evaluate("nothing changed since the class", 0)

		// The sweep comes round however quiet the fleet.
		for range sweepEvery - 2 {
			evaluate("between sweeps", 0)
		}
		evaluate("the sweep", mine)

		// The session server dies without recording the disconnects: the
		// owner judges every device again, counts them disconnected, and
		// judges them at every evaluation until they are unreachable.
		owners.set(ownerCandidate{ID: "s1", Region: "eu"})
		if n := len(ids); n != mine {
			// Devices s2 owned move to s1 with the candidates.
			mine = 0
			for _, id := range ids {
				if ownerOf(id, "eu", owners.ownerCandidates()) == "s1" {
					mine++
				}
			}
		}
		evaluate("the session server gone", mine)
		evaluate("their transitions committed", mine) // the commits changed their records
		// The devices this owner heard of last more than a threshold ago
		// are unreachable at once; the others are due when it passes,
		// which their judgement named (Recheck), and judged only then.
		silent := 0
		for _, id := range ids {
			if rec, err := p.state.Read().Device(nil, id); err != nil || rec.Status != scheduler.StatusUnreachable {
				silent++
			}
		}
		if silent == 0 {
			t.Fatal("every device is unreachable already: nothing left to wait for")
		}
		evaluate("silent, not yet unreachable", 0)
		time.Sleep(def.UnreachableAfter / 2)
		evaluate("silent, halfway to the threshold", 0)
		time.Sleep(def.UnreachableAfter / 2)
		evaluate("silent past the class's threshold", silent)
		for _, id := range ids {
			if rec, err := p.state.Read().Device(nil, id); err != nil || rec.Status != scheduler.StatusUnreachable {
				t.Fatalf("%s: %v %+v, want unreachable", id, err, rec)
			}
		}
		evaluate("unreachable", silent) // the commits changed their records
		evaluate("unreachable, nothing changed", 0)
	})
}

// TestStatusOwnerJudgesADeviceWhenDue: a connected device with work left
// is judged again when its progress deadline passes, which its judgement
// named, and not at the evaluations before; when that judgement's commit
// fails, the owner forgets the device, and the next evaluation reads the
// records again and judges it, though no record changed.
func TestStatusOwnerJudgesADeviceWhenDue(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newLocalProposer(t)
		p.mustApply(t, fsm.PutIntentType, &fsm.PutIntentRequest{Intent: simpleIntent("motd", "v1"), Time: time.Now().UnixNano()})
		def := intent.BuiltinClasses()[scheduler.DefaultClass]
		def.ProgressDeadline = time.Minute
		p.mustApply(t, fsm.PutClassType, &fsm.PutClassRequest{Class: &def, Time: time.Now().UnixNano()})
		connectDevice(t, p, "dev-slow", true) // acknowledged nothing: pending
		cfg := DefaultConfig()
		cfg.NodeID = "s1"
		cfg.TrustReportedLabels = true     // the device is selected by its region
		cfg.StatusEvalInterval = time.Hour // evaluated by the test
		// s2, alive, holds the device's session; s1 owns every device in eu.
		o := newStatusOwner(&cfg, hclog.NewNullLogger(), SystemClock{}, p.state, p,
			fixedOwners{{ID: "s1", Region: "eu"}, {ID: "s2", Region: "us"}}, scheduler.NewPlanner())
		stop := runComponent(t, o.Run)
		defer stop()

		status := func() string {
			t.Helper()
			rec, err := p.state.Read().Device(nil, "dev-slow")
			if err != nil {
				t.Fatal(err)
			}
			return rec.Status
		}
		evaluate := func(what string, wantJudged int, wantStatus string) {
			t.Helper()
			j := o.judged.Load()
			if err := o.evaluate(time.Now()); err != nil {
				t.Fatal(err)
			}
			time.Sleep(time.Second) // what it queued commits
			if got := int(o.judged.Load() - j); got != wantJudged {
				t.Fatalf("%s: %d devices classified, want %d", what, got, wantJudged)
			}
			if got := status(); got != wantStatus {
				t.Fatalf("%s: status %s, want %s", what, got, wantStatus)
			}
		}
		start := time.Now()
		evaluate("first evaluation", 1, scheduler.StatusPending)
		evaluate("its transition committed", 1, scheduler.StatusPending)
		evaluate("nothing changed", 0, scheduler.StatusPending)
		time.Sleep(start.Add(def.ProgressDeadline - time.Second).Sub(time.Now()))
		evaluate("a second before its deadline", 0, scheduler.StatusPending)
		evaluate("at its deadline", 0, scheduler.StatusPending) // stuck once past it

		p.setFail(func(mt fsm.MessageType) bool { return mt == fsm.StatusBatchType })
		evaluate("past its deadline, the commit failing", 1, scheduler.StatusPending)
		if n := o.failed.Load(); n != 1 {
			t.Fatalf("%d failed status batches, want 1", n)
		}
		p.setFail(nil)
		evaluate("after the failed commit", 1, scheduler.StatusStuck)
		evaluate("stuck committed", 1, scheduler.StatusStuck)
		evaluate("stuck, nothing changed", 0, scheduler.StatusStuck)
		time.Sleep(time.Hour)
		evaluate("stuck an hour later", 0, scheduler.StatusStuck)
	})
}

// TestStatusOwnerLetsGoOfADeviceItNoLongerOwns: a device whose new record
// names another owner (relabelled into another server's region) is let
// go by the next evaluation, without being judged; the others stay.
func TestStatusOwnerLetsGoOfADeviceItNoLongerOwns(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p, o, _ := startEvaluatedOwner(t, ownerCandidate{ID: "s1", Region: "eu"}, ownerCandidate{ID: "s2", Region: "us"})
		ids := convergedFleet(t, p, o, 3, "s2")
		held := func(id string) bool {
			o.mu.Lock()
			defer o.mu.Unlock()
			_, ok := o.devices[id]
			return ok
		}
		for range 2 { // the first judges every device, the second passes over them settled
			if err := o.evaluate(time.Now()); err != nil {
				t.Fatal(err)
			}
			time.Sleep(time.Second)
		}
		for _, id := range ids {
			if !held(id) {
				t.Fatalf("s1 does not hold %s, in region eu", id)
			}
		}
		p.mustApply(t, fsm.DeviceSessionType, &fsm.DeviceSessionRequest{
			ID: ids[0], Labels: map[string]string{"region": "us"}, SessionID: "s", Server: "s2", Conn: "c", Connected: true, Time: time.Now().UnixNano(),
		})
		j := o.judged.Load()
		if err := o.evaluate(time.Now()); err != nil {
			t.Fatal(err)
		}
		if n := o.judged.Load() - j; n != 0 {
			t.Errorf("%d devices judged; want none (the one changed is s2's now)", n)
		}
		if held(ids[0]) {
			t.Errorf("s1 still holds %s, which s2 owns now", ids[0])
		}
		for _, id := range ids[1:] {
			if !held(id) {
				t.Errorf("s1 let go of %s, which it still owns", id)
			}
		}
	})
}

// TestStatusOwnerLetsGoWhenOwnershipFollowsSessions: once every candidate
// speaks the peer API under which ownership follows the session, the
// devices in session elsewhere are let go at the next evaluation, though
// no device record and no candidate's ID or region changed.
func TestStatusOwnerLetsGoWhenOwnershipFollowsSessions(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p, o, owners := startEvaluatedOwner(t, ownerCandidate{ID: "s1", Region: "eu"}, ownerCandidate{ID: "s2", Region: "eu"})
		convergedFleet(t, p, o, 6, "s2")
		held := func() int {
			o.mu.Lock()
			defer o.mu.Unlock()
			return len(o.devices)
		}
		for range 2 {
			if err := o.evaluate(time.Now()); err != nil {
				t.Fatal(err)
			}
			time.Sleep(time.Second)
		}
		if held() == 0 {
			t.Fatal("s1 is the home owner of none of the devices: pick other IDs")
		}
		owners.set(ownerCandidate{ID: "s1", Region: "eu", PeerAPI: peerAPISessionOwner}, ownerCandidate{ID: "s2", Region: "eu", PeerAPI: peerAPISessionOwner})
		if err := o.evaluate(time.Now()); err != nil {
			t.Fatal(err)
		}
		if n := held(); n != 0 {
			t.Errorf("s1 holds %d devices in session on s2, which owns them now", n)
		}
	})
}

// startEvaluatedOwner runs status owner s1 among the owner candidates
// cands, on a replica holding one intent, trusting reported labels; the
// test runs its evaluations. It stops with the test.
func startEvaluatedOwner(t *testing.T, cands ...ownerCandidate) (*localProposer, *statusOwner, *mutableOwners) {
	t.Helper()
	p := newLocalProposer(t)
	p.mustApply(t, fsm.PutIntentType, &fsm.PutIntentRequest{Intent: simpleIntent("motd", "v1"), Time: time.Now().UnixNano()})
	cfg := DefaultConfig()
	cfg.NodeID = "s1"
	cfg.TrustReportedLabels = true
	cfg.StatusEvalInterval = time.Hour // evaluated by the test
	owners := &mutableOwners{}
	owners.set(cands...)
	o := newStatusOwner(&cfg, hclog.NewNullLogger(), SystemClock{}, p.state, p, owners, scheduler.NewPlanner())
	t.Cleanup(runComponent(t, o.Run))
	return p, o, owners
}

// TestStatusOwnerChecksADeviceTakenOnByAReport: a device this owner took
// on otherwise than by an evaluation (a report ingested: a session server
// sent it here), and judged settled when it fell due, is still asked
// whose it is at the next evaluation that reads every record, and let go:
// another server owns it.
func TestStatusOwnerChecksADeviceTakenOnByAReport(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p, o, _ := startEvaluatedOwner(t, ownerCandidate{ID: "s1", Region: "eu"}, ownerCandidate{ID: "s2", Region: "us"})
		ids := convergedFleet(t, p, o, 2, "s2")
		// In region us, s2's; no intent selects it, so a judgement of it
		// has no resource state to commit, and s2 committed its status.
		const other = "kiosk-us"
		p.mustApply(t, fsm.DeviceSessionType, &fsm.DeviceSessionRequest{
			ID: other, Labels: map[string]string{"region": "us"}, SessionID: "u", Server: "s2", Conn: "c", Connected: true, Time: time.Now().UnixNano(),
		})
		p.mustApply(t, fsm.StatusBatchType, &fsm.StatusBatchRequest{Owner: "s2", Transitions: []fsm.StatusTransition{
			{Device: other, Status: scheduler.StatusConverged, Time: time.Now().UnixNano()},
		}})
		for range 2 {
			if err := o.evaluate(time.Now()); err != nil {
				t.Fatal(err)
			}
			time.Sleep(time.Second)
		}
		// Taken on as a report would, and due at once: judged, and
		// settled, by the record no evaluation found this owner's.
		o.mu.Lock()
		d := o.ownedLocked(other, p.state.Read())
		o.scheduleLocked(d, o.clock.Mono())
		o.mu.Unlock()
		if err := o.evaluate(time.Now()); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Second)
		o.mu.Lock()
		settled := d.settled != nil
		o.mu.Unlock()
		if !settled {
			t.Fatal("the device taken on was not settled when judged: the test no longer sets up what it checks")
		}
		// A record of one of its own changes: the next evaluation reads
		// every record.
		rec, _ := p.state.Read().Device(nil, ids[0])
		p.mustApply(t, fsm.DeviceSessionType, &fsm.DeviceSessionRequest{
			ID: ids[0], SessionID: "s", Server: "s2", Conn: "c", Connected: true, AckedRevision: rec.AckedRevision, Time: time.Now().UnixNano(),
		})
		if err := o.evaluate(time.Now()); err != nil {
			t.Fatal(err)
		}
		o.mu.Lock()
		_, held := o.devices[other]
		o.mu.Unlock()
		if held {
			t.Errorf("s1 still holds %s, which s2 owns", other)
		}
	})
}

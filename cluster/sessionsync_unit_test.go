package cluster

import (
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/meteor-edge/meteor/fsm"
)

// Unit tests of sessionSync and the sessionRecorder without a cluster or
// agents: sessions are bare agentSessions, commits go to a state machine
// in memory through a localProposer, and time is testing/synctest's.

type unitSync struct {
	*sessionSync
	p         *localProposer
	rerecords *atomic.Uint64
}

// newUnitSync runs a sessionSync and its sessionRecorder until the test
// function returns (stop).
func newUnitSync(t *testing.T) (*unitSync, func()) {
	t.Helper()
	cfg := DefaultConfig()
	cfg.NodeID = "s1"
	cfg.SessionCheckInterval = time.Second
	p := newLocalProposer(t)
	rec := newSessionRecorder(p, cfg.ApplyTimeout)
	var rerecords atomic.Uint64
	y := newSessionSync(&cfg, hclog.NewNullLogger(), SystemClock{}, p.state, rec, &rerecords)
	stopRec := runComponent(t, rec.Run)
	stopSync := runComponent(t, y.Run)
	return &unitSync{sessionSync: y, p: p, rerecords: &rerecords}, func() { stopSync(); stopRec() }
}

// start starts a session, without a connection, and lets sessionSync
// take it in.
func (u *unitSync) start(device, conn string) *agentSession {
	sess := &agentSession{deviceID: device, id: newSessionID(), connID: conn, labels: euLabels}
	u.started(sess)
	synctest.Wait()
	return sess
}

func (u *unitSync) record(t *testing.T, device string) *fsm.DeviceRecord {
	t.Helper()
	rec, err := u.p.state.Read().Device(nil, device)
	if err != nil {
		t.Fatal(err)
	}
	return rec
}

// TestSessionSyncRecordsSessions: a session that starts is committed as
// connected here, an acknowledged revision that moves on is committed
// with it, and a session that stops is committed as disconnected.
func TestSessionSyncRecordsSessions(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		u, stop := newUnitSync(t)
		defer stop()
		sess := u.start("dev-1", "c1")
		if rec := u.record(t, "dev-1"); !sess.recordedHere(rec, "s1") || !sess.isRecorded(0) {
			t.Fatalf("record %+v after the session started", rec)
		}
		sess.mu.Lock()
		sess.acked = 5
		sess.mu.Unlock()
		u.changed(sess)
		synctest.Wait()
		if rec := u.record(t, "dev-1"); rec.AckedRevision != 5 || !sess.isRecorded(5) {
			t.Fatalf("acknowledged revision %d recorded, want 5", rec.AckedRevision)
		}
		u.stopped(sess)
		synctest.Wait()
		if rec := u.record(t, "dev-1"); rec.Connected {
			t.Fatalf("record %+v after the session stopped, want disconnected", rec)
		}
		if n := u.rerecords.Load(); n != 0 {
			t.Errorf("%d sessions recorded again, want 0", n)
		}
	})
}

// TestSessionSyncRetriesFailedCommits: commits that fail (no leader) are
// retried with backoff until they succeed; the session's wait for the
// first attempt ends with the first failure.
func TestSessionSyncRetriesFailedCommits(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		u, stop := newUnitSync(t)
		defer stop()
		u.p.setFail(func(mt fsm.MessageType) bool { return mt == fsm.DeviceSessionBatchType })
		sess := u.start("dev-1", "c1")
		if err := sess.waitAttempted(t.Context(), 0); err != nil {
			t.Fatal(err)
		}
		if sess.isRecorded(0) {
			t.Fatal("recorded although every commit fails")
		}
		time.Sleep(3 * time.Second) // retries at 100 ms, 200 ms, ... 1 s
		synctest.Wait()
		u.p.setFail(nil)
		time.Sleep(syncRetryMax)
		synctest.Wait()
		if rec := u.record(t, "dev-1"); !sess.recordedHere(rec, "s1") {
			t.Fatalf("record %+v once commits succeed again", rec)
		}
	})
}

// TestSessionSyncRepairsOverwrittenRecord: a live session whose record
// another server's late write overwrote is recorded again at the next
// full comparison, without any event about the session.
func TestSessionSyncRepairsOverwrittenRecord(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		u, stop := newUnitSync(t)
		defer stop()
		sess := u.start("dev-1", "c1")
		u.p.mustApply(t, fsm.DeviceSessionType, &fsm.DeviceSessionRequest{
			ID: "dev-1", SessionID: sessionString(sess.id), Server: "gone", Conn: "stale", Connected: true, Time: time.Now().UnixNano(),
		})
		if rec := u.record(t, "dev-1"); sess.recordedHere(rec, "s1") {
			t.Fatal("the late write did not overwrite the record")
		}
		time.Sleep(time.Second) // SessionCheckInterval
		synctest.Wait()
		if rec := u.record(t, "dev-1"); !sess.recordedHere(rec, "s1") {
			t.Fatalf("record %+v after a full comparison, want connected here", rec)
		}
		if n := u.rerecords.Load(); n != 1 {
			t.Errorf("%d sessions recorded again, want 1", n)
		}
	})
}

// TestSessionSyncLeavesACarriedAckToItsReport: at feature level 4, an
// acknowledged revision that a report being handed to the owner carries
// (agentSession.carrying) is left to that report's commit, by the pass an
// event sets off and by the full comparisons alike, however long the
// report takes; once no report carries it, it is committed alone.
func TestSessionSyncLeavesACarriedAckToItsReport(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		u, stop := newUnitSync(t)
		defer stop()
		if l := u.p.state.Read().ActiveLevel(); l < fsm.LevelAckWithStatus {
			t.Fatalf("active level %d", l)
		}
		sess := u.start("dev-1", "c1")
		set := func(acked, carrying uint64) {
			sess.mu.Lock()
			sess.acked, sess.carrying = acked, carrying
			sess.mu.Unlock()
		}
		set(5, 5)
		u.changedAfter(sess, 100*time.Millisecond)
		time.Sleep(3 * time.Second) // the wait, and three full comparisons
		synctest.Wait()
		if rec := u.record(t, "dev-1"); rec.AckedRevision != 0 {
			t.Fatalf("acknowledged revision %d committed alone while a report carried it", rec.AckedRevision)
		}
		// A newer acknowledgement than the report carries is not left to it.
		set(6, 5)
		u.changed(sess)
		synctest.Wait()
		if rec := u.record(t, "dev-1"); rec.AckedRevision != 6 {
			t.Fatalf("acknowledged revision %d recorded, want 6", rec.AckedRevision)
		}
		// The report failed (recordReport then marks the device).
		set(7, 0)
		u.changed(sess)
		synctest.Wait()
		if rec := u.record(t, "dev-1"); rec.AckedRevision != 7 {
			t.Fatalf("acknowledged revision %d recorded, want 7", rec.AckedRevision)
		}
	})
}

package cluster

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"
	"unsafe"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/meteor-edge/meteor/chaos"
	"github.com/meteor-edge/meteor/cluster/api"
	"github.com/meteor-edge/meteor/fsm"
	"github.com/meteor-edge/meteor/scheduler"
	"github.com/meteor-edge/meteor/wire"
)

// withFastStatus tightens the status machinery for tests: a device silent
// for a second is unreachable, owners re-evaluate five times a second, and
// a silent agent connection is dropped after two seconds.
func withFastStatus(next func(*Config)) func(*Config) {
	return func(cfg *Config) {
		if next != nil {
			next(cfg)
		}
		classes := testAgentClasses()
		for name, cl := range classes {
			cl.ReportInterval = 500 * time.Millisecond
			cl.UnreachableAfter = time.Second
			classes[name] = cl
		}
		cfg.Classes = classes
		cfg.StatusEvalInterval = 200 * time.Millisecond
		cfg.StatusBatchInterval = 20 * time.Millisecond
		cfg.AgentIdleTimeout = 2 * time.Second
	}
}

func deviceOn(t *testing.T, s *Server, id string) *api.Device {
	t.Helper()
	d, err := client(s).GetDevice(context.Background(), id, api.ReadOptions{Stale: true})
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func waitStatus(t *testing.T, c *testCluster, id, want string) {
	t.Helper()
	waitFor(t, 30*time.Second, func() error {
		for _, s := range c.alive() {
			d, err := client(s).GetDevice(context.Background(), id, api.ReadOptions{Stale: true})
			if err != nil {
				return err
			}
			if d.Status != want {
				return fmt.Errorf("%s sees %s %s (%s), want %s", s.ID(), id, d.Status, d.StatusReason, want)
			}
		}
		return nil
	})
}

// TestDeviceCutOffAndBack tells the story the timeline must tell: a device
// converges, is cut off (its link goes silent, the server drops the
// session, the owner finds it unreachable), comes back and converges again.
func TestDeviceCutOffAndBack(t *testing.T) {
	pki := newTestPKI(t)
	c := newTestCluster(t, 3, withFastStatus(pki.withAgents(t)))
	c.propose(filesIntent("store-config", 2, "v1"))
	ra := startAgent(t, pki, "store-9", agentAddrs(c), map[string]string{"region": "eu"}, chaos.LinkProfile{}, nil)
	waitStatus(t, c, "store-9", scheduler.StatusConverged)

	ra.pc.SetBlackhole(true)
	waitStatus(t, c, "store-9", scheduler.StatusUnreachable)
	d := deviceOn(t, c.alive()[0], "store-9")
	if d.Connected || !strings.Contains(d.StatusReason, "no contact for") {
		t.Fatalf("unreachable device: connected %v, reason %q", d.Connected, d.StatusReason)
	}
	ra.pc.SetBlackhole(false)
	waitStatus(t, c, "store-9", scheduler.StatusConverged)

	tl, err := client(c.alive()[1]).Timeline(context.Background(), "store-9", api.ReadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var story []string
	for _, e := range tl.Entries {
		if len(story) == 0 || story[len(story)-1] != e.Status {
			story = append(story, e.Status)
		}
	}
	// Before it first converged the device may have been pending and
	// progressing, depending on how its reports fell: skip to that point.
	for len(story) > 0 && story[0] != scheduler.StatusConverged {
		story = story[1:]
	}
	if diff := cmp.Diff([]string{"converged", "unreachable", "converged"}, story); diff != "" {
		t.Fatalf("timeline story (-want +got):\n%s\nentries: %+v", diff, tl.Entries)
	}
}

// TestOwnerLossLosesNoTransition kills the owner of devices in the middle
// of a rollout: every transition committed before stays, the devices get
// a new owner and converge, and every server reports the same counts.
func TestOwnerLossLosesNoTransition(t *testing.T) {
	pki := newTestPKI(t)
	c := newTestCluster(t, 3, withFastStatus(pki.withAgents(t)))
	c.propose(filesIntent("store-config", 2, "v1"))
	const n = 12
	for i := range n {
		startAgent(t, pki, fmt.Sprintf("dev-%02d", i), agentAddrs(c), map[string]string{"region": "eu"}, chaos.LinkProfile{}, nil)
	}
	for i := range n {
		waitStatus(t, c, fmt.Sprintf("dev-%02d", i), scheduler.StatusConverged)
	}
	// Roll out a change and, while devices are moving, kill the server that
	// owns the most of them.
	c.propose(filesIntent("store-config", 2, "v2"))
	shares := map[string]int{}
	for i := range n {
		shares[deviceOn(t, c.alive()[0], fmt.Sprintf("dev-%02d", i)).Owner]++
	}
	victim, most := "", -1
	for id, k := range shares {
		if k > most {
			victim, most = id, k
		}
	}
	before := map[string][]api.TimelineEntry{}
	for i := range n {
		id := fmt.Sprintf("dev-%02d", i)
		tl, err := client(c.alive()[0]).Timeline(context.Background(), id, api.ReadOptions{})
		if err != nil {
			t.Fatal(err)
		}
		before[id] = tl.Entries
	}
	for i, s := range c.servers {
		if s != nil && s.ID() == victim {
			c.kill(i)
		}
	}
	waitFor(t, 60*time.Second, func() error {
		for _, s := range c.alive() {
			st, err := client(s).Status(context.Background(), api.ReadOptions{Stale: true})
			if err != nil {
				return err
			}
			if len(st.Intents) != 1 || st.Intents[0].Converged != n || st.ByStatus[scheduler.StatusConverged] != n {
				return fmt.Errorf("%s: %+v %+v", s.ID(), st.ByStatus, st.Intents)
			}
		}
		return nil
	})
	var first *api.FleetStatus
	for _, s := range c.alive() {
		st, err := client(s).Status(context.Background(), api.ReadOptions{Stale: true})
		if err != nil {
			t.Fatal(err)
		}
		if first == nil {
			first = st
		} else if diff := cmp.Diff(first, st, ignoreReadIndex); diff != "" {
			t.Fatalf("servers disagree on the fleet (-first +%s):\n%s", s.ID(), diff)
		}
	}
	for id, old := range before {
		tl, err := client(c.alive()[0]).Timeline(context.Background(), id, api.ReadOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if len(tl.Entries) < len(old) {
			t.Fatalf("%s lost transitions: %d before the owner died, %d after", id, len(old), len(tl.Entries))
		}
		if diff := cmp.Diff(old, tl.Entries[:len(old)]); diff != "" {
			t.Fatalf("%s: committed transitions changed (-before +after):\n%s", id, diff)
		}
	}
}

// TestSkewedLastSeenIsNotSilence: a device's last-seen time is stamped by
// the server that held its session, whose clock may run minutes behind the
// owner's, and the owner's own wall clock may be stepped. Neither offset is
// silence: the owner declares the device unreachable only once it has
// itself gone the class's threshold, on its own monotonic clock, without
// hearing of it.
func TestSkewedLastSeenIsNotSilence(t *testing.T) {
	clock := &steppedClock{}
	c := newTestCluster(t, 1, withFastStatus(func(cfg *Config) {
		cfg.StatusEvalInterval = time.Hour // evaluate only when the test says
		cfg.Clock = clock
	}))
	s := c.waitLeader()
	advance := clock.advance

	c.propose(simpleIntent("motd", "v1"))
	now := time.Now()
	behind := now.Add(-10 * time.Minute) // the session server's clock
	ctx := context.Background()
	for _, connected := range []bool{true, false} {
		res, _, err := s.apply(ctx, fsm.DeviceSessionType, &fsm.DeviceSessionRequest{
			ID: "dev-skew", Labels: map[string]string{"region": "eu"}, SessionID: "s1",
			Server: "elsewhere", Connected: connected, Time: behind.UnixNano(),
		})
		if err == nil {
			err = res.Err
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	// The owner's own verdict, as queued for commit (the commit itself is
	// batched and asynchronous).
	status := func(at time.Time) string {
		t.Helper()
		if err := s.status.evaluate(at); err != nil {
			t.Fatal(err)
		}
		s.status.mu.Lock()
		defer s.status.mu.Unlock()
		d, ok := s.status.devices["dev-skew"]
		if !ok {
			t.Fatal("the owner did not take the device on")
		}
		return d.status
	}
	// Fast classes allow a second of silence; the stamp says ten minutes.
	if got := status(now); got == scheduler.StatusUnreachable {
		t.Fatalf("unreachable at once: a clock offset was taken for silence")
	}
	// The owner's wall clock stepped forward by five minutes: still no
	// silence measured.
	if got := status(now.Add(5 * time.Minute)); got == scheduler.StatusUnreachable {
		t.Fatalf("unreachable after a step of the owner's wall clock")
	}
	advance(2 * time.Second)
	if got := status(time.Now()); got != scheduler.StatusUnreachable {
		t.Fatalf("status %q two seconds of the owner's own silence later, want unreachable", got)
	}
	waitStatus(t, c, "dev-skew", scheduler.StatusUnreachable)
}

// TestDuplicateReportWaitsForItsCommit: a report is acknowledged only once
// its transition is committed, and so is a duplicate of it (the same seq
// resent, or arriving through another session) that comes in while the
// first still waits: acknowledging the duplicate at once would lose the
// report if that commit then failed.
func TestDuplicateReportWaitsForItsCommit(t *testing.T) {
	c := newTestCluster(t, 1, func(cfg *Config) {
		cfg.StatusBatchSize = 2
		cfg.StatusBatchInterval = time.Hour // commit only when two are queued
	})
	s := c.waitLeader()
	report := func(seq uint64, key string) *wire.Report {
		return &wire.Report{Seq: seq, Full: true, Status: "converged", Resources: []wire.ResourceReport{{
			Key: key, AppliedDigest: wire.Digest{1}, AppliedRevision: 1, Effective: wire.EffectiveOK,
		}}}
	}
	labels := map[string]string{"region": "eu"}
	for _, id := range []string{"dev-a", "dev-b"} {
		if err := s.sessionRec.record(context.Background(), &fsm.DeviceSessionRequest{ID: id, Labels: labels, SessionID: "s", Server: s.ID(), Conn: "c", Connected: true, Time: 1}); err != nil {
			t.Fatal(err)
		}
	}
	first := make(chan error, 1)
	go func() { first <- s.status.ingest(context.Background(), "dev-a", 0, report(7, "app/a")) }()
	waitFor(t, 5*time.Second, func() error {
		s.status.mu.Lock()
		defer s.status.mu.Unlock()
		if len(s.status.queue) != 1 {
			return fmt.Errorf("%d transitions queued", len(s.status.queue))
		}
		return nil
	})
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	err := s.status.ingest(ctx, "dev-a", 0, report(7, "app/a"))
	cancel()
	if err == nil {
		t.Fatal("a duplicate was acknowledged while the report it repeats was not committed")
	}
	// A second device's report fills the batch: both commit, and the
	// duplicate is acknowledged.
	if err := s.status.ingest(context.Background(), "dev-b", 0, report(1, "app/b")); err != nil {
		t.Fatal(err)
	}
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	if err := s.status.ingest(context.Background(), "dev-a", 0, report(7, "app/a")); err != nil {
		t.Fatalf("duplicate after the commit: %v", err)
	}
}

// TestReportBeforeTheSessionRecordIsNotAcknowledged: the state machine
// drops a status transition of a device it does not know, so a report that
// arrives before the device's session is committed (its record failed
// during an election, say) must not be acknowledged: the agent sends it
// again once the record is in.
func TestReportBeforeTheSessionRecordIsNotAcknowledged(t *testing.T) {
	c := newTestCluster(t, 1, nil)
	s := c.waitLeader()
	rep := &wire.Report{Seq: 3, Full: true, Status: "converged", Resources: []wire.ResourceReport{{
		Key: "app/a", AppliedDigest: wire.Digest{1}, AppliedRevision: 1, Effective: wire.EffectiveOK,
	}}}
	labels := map[string]string{"region": "eu"}
	ctx := context.Background()
	if err := s.status.ingest(ctx, "dev-early", 0, rep); err == nil {
		t.Fatal("a report of a device without a committed session was acknowledged")
	}
	if err := s.sessionRec.record(ctx, &fsm.DeviceSessionRequest{ID: "dev-early", Labels: labels, SessionID: "s", Server: s.ID(), Conn: "c", Connected: true, Time: 1}); err != nil {
		t.Fatal(err)
	}
	if err := s.status.ingest(ctx, "dev-early", 0, rep); err != nil {
		t.Fatal(err)
	}
	rec, err := s.State().Read().Device(nil, "dev-early")
	if err != nil {
		t.Fatal(err)
	}
	if rec.ReportSeq != 3 || len(rec.Resources) != 1 {
		t.Fatalf("record after the resent report: seq %d, %d resources", rec.ReportSeq, len(rec.Resources))
	}
}

// ignoreReadIndex leaves out of a comparison of fleet answers the Raft
// index each was read at: servers that agree on the fleet may have
// applied a command more or less (a no-op, a session record) when asked.
var ignoreReadIndex = cmp.Options{cmpopts.IgnoreFields(api.FleetStatus{}, "Index"), cmpopts.IgnoreFields(api.IntentProgress{}, "Index")}

// TestOwnedDevicesShareRepeatedStrings: the owner's copies of two devices'
// reports of the same resource keep one copy of its key and digest.
func TestOwnedDevicesShareRepeatedStrings(t *testing.T) {
	c := newTestCluster(t, 1, nil)
	s := c.waitLeader()
	report := func() *wire.Report {
		// Each report decoded from the wire brings its own key.
		return &wire.Report{Seq: 1, Full: true, Status: "converged", Resources: []wire.ResourceReport{{
			Key: strings.Clone("app/cfg"), AppliedDigest: wire.Digest{7}, AppliedRevision: 1, Effective: wire.EffectiveOK,
		}}}
	}
	for _, id := range []string{"dev-a", "dev-b"} {
		if err := s.sessionRec.record(context.Background(), &fsm.DeviceSessionRequest{ID: id, Labels: map[string]string{"region": "eu"}, SessionID: "s", Server: s.ID(), Conn: "c", Connected: true, Time: 1}); err != nil {
			t.Fatal(err)
		}
		if err := s.status.ingest(context.Background(), id, 0, report()); err != nil {
			t.Fatal(err)
		}
	}
	s.status.mu.Lock()
	defer s.status.mu.Unlock()
	a, b := s.status.devices["dev-a"], s.status.devices["dev-b"]
	if a == nil || b == nil || len(a.rec.Resources) != 1 || len(b.rec.Resources) != 1 {
		t.Fatal("the owner does not hold both devices' reports")
	}
	ra, rb := a.rec.Resources[0], b.rec.Resources[0]
	if ra.Key != "app/cfg" || ra.AppliedDigest != rb.AppliedDigest {
		t.Fatalf("reports changed: %+v, %+v", ra, rb)
	}
	if unsafe.StringData(ra.Key) != unsafe.StringData(rb.Key) || unsafe.StringData(ra.AppliedDigest) != unsafe.StringData(rb.AppliedDigest) {
		t.Error("the owner keeps a copy of the key and digest for each device")
	}
}

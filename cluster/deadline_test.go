package cluster

import (
	"context"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/meteor-edge/meteor/fsm"
	"github.com/meteor-edge/meteor/fsm/intent"
	"github.com/meteor-edge/meteor/scheduler"
	"github.com/meteor-edge/meteor/wire"
)

// TestDeadlineStatusesCommitted: the owner of a kiosk on a link whose
// sessions drop for an hour at a time commits deadline-at-risk once the
// kiosk stays offline past its usual gaps with its certificate's rotation
// deadline hours away, and deadline-missed once the deadline passes; both
// are in the device record (what /v1/devices and meteor status read), in
// its timeline with the resource, and counted by status. On the fake
// clock of a synctest bubble.
func TestDeadlineStatusesCommitted(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newLocalProposer(t)
		start := time.Now()
		in := &intent.Intent{Name: "pos-cert", Selector: map[string]string{"region": "eu"}, Resources: []intent.Resource{{
			ID: "tls", Type: "sim", Class: "certificate", Spec: map[string]any{"value": "v7"},
			Rotation: &intent.Rotation{Deadline: start.Add(8 * time.Hour).UTC().Format(time.RFC3339)},
		}}}
		p.mustApply(t, fsm.PutIntentType, &fsm.PutIntentRequest{Intent: in, Time: start.UnixNano()})
		cfg := DefaultConfig()
		cfg.NodeID = "s1"
		withFastStatus(nil)(&cfg)
		cfg.Classes = scheduler.DefaultClasses() // certificate: pull 10m, unreachable after 15m
		cfg.StatusEvalInterval = time.Minute
		cfg.TrustReportedLabels = true // the kiosk's region selects the intent
		o := newStatusOwner(&cfg, hclog.NewNullLogger(), SystemClock{}, p.state, p,
			fixedOwners{{ID: "s1", Region: "eu"}}, scheduler.NewPlanner())
		defer runComponent(t, o.Run)()

		// The kiosk connects and reports the old certificate applied.
		connectDevice(t, p, "kiosk-7", true)
		if err := o.ingest(context.Background(), "kiosk-7", 0, &wire.Report{Seq: 1, Full: true, Status: "progressing", States: true,
			Resources: []wire.ResourceReport{{Key: "pos-cert/tls", AppliedDigest: wire.Digest{9}, State: wire.StatePending}}}); err != nil {
			t.Fatal(err)
		}
		// Its link: an hour offline, twice.
		for range 2 {
			connectDevice(t, p, "kiosk-7", false)
			time.Sleep(time.Hour)
			connectDevice(t, p, "kiosk-7", true)
			time.Sleep(10 * time.Minute)
		}
		connectDevice(t, p, "kiosk-7", false) // hour 2h20m: offline again
		rec := func() *fsm.DeviceRecord {
			t.Helper()
			synctest.Wait()
			r, err := p.state.Read().Device(nil, "kiosk-7")
			if err != nil {
				t.Fatal(err)
			}
			return r
		}
		time.Sleep(50 * time.Minute) // within its usual gap
		if r := rec(); r.Status != scheduler.StatusUnreachable {
			t.Fatalf("offline 50m: %s (%s), want unreachable", r.Status, r.StatusReason)
		}
		time.Sleep(2 * time.Hour) // hour 5h10m: offline 2h50m, longer than any gap
		r := rec()
		if r.Status != scheduler.StatusDeadlineAtRisk || !strings.HasPrefix(r.StatusReason, "pos-cert/tls: rotation deadline "+start.Add(8*time.Hour).UTC().Format(time.RFC3339)+" at risk") {
			t.Fatalf("offline 2h50m with the deadline 2h50m away: %s (%s), want deadline-at-risk", r.Status, r.StatusReason)
		}
		if got := statusCounts([]*fsm.DeviceRecord{r}); got[scheduler.StatusDeadlineAtRisk] != 1 {
			t.Errorf("status counts %v", got)
		}
		time.Sleep(3 * time.Hour) // past the deadline
		r = rec()
		if r.Status != scheduler.StatusDeadlineMissed {
			t.Fatalf("past the deadline: %s (%s), want deadline-missed", r.Status, r.StatusReason)
		}
		tl, err := p.state.Read().Timeline(nil, "kiosk-7")
		if err != nil {
			t.Fatal(err)
		}
		seen := map[string]bool{}
		for _, e := range tl {
			if st := e.Resources["pos-cert/tls"]; st != "" {
				seen[st] = true
			}
			seen[e.Status] = true
		}
		for _, want := range []string{scheduler.StatusDeadlineAtRisk, scheduler.StatusDeadlineMissed} {
			if !seen[want] {
				t.Errorf("the timeline has no %s entry: %+v", want, tl)
			}
		}
	})
}

// TestFightAndOverrideStatuses: an agent's fighting hold is committed as
// the status fighting with the count, in the device's timeline with the
// resource; an override hold as overridden with who, until when and why.
func TestFightAndOverrideStatuses(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p, o, stop := runUnitStatusOwner(t, "till-3")
		defer stop()
		p.mustApply(t, fsm.SetDeviceLabelsType, &fsm.SetDeviceLabelsRequest{ID: "till-3", Labels: euLabels, Time: time.Now().UnixNano()})
		p.mustApply(t, fsm.DeviceSessionType, &fsm.DeviceSessionRequest{ID: "till-3", Labels: euLabels, SessionID: "s", Server: "s2", Conn: "c",
			Connected: true, AckedRevision: p.state.Read().Revision(), Time: time.Now().UnixNano()})
		now := time.Now()
		report := func(seq uint64, state wire.ResourceState, h wire.Hold) *fsm.DeviceRecord {
			t.Helper()
			rep := &wire.Report{Seq: seq, Full: true, Status: state.String(), States: true, Edge: true, Resources: []wire.ResourceReport{{
				Key: "motd/motd", AppliedDigest: wire.Digest{1}, AppliedRevision: 1, Effective: wire.EffectiveOK, State: state, Hold: h,
			}}}
			if err := o.ingest(context.Background(), "till-3", 0, rep); err != nil {
				t.Fatal(err)
			}
			rec, err := p.state.Read().Device(nil, "till-3")
			if err != nil {
				t.Fatal(err)
			}
			return rec
		}
		rec := report(1, wire.StateDrifted, wire.Hold{Kind: wire.HoldFighting, Since: now.UnixNano(), Until: now.Add(time.Minute).UnixNano(), Count: 3})
		if rec.Status != scheduler.StatusFighting || !strings.Contains(rec.StatusReason, "drift corrected 3 times since") {
			t.Fatalf("fighting: %s (%s)", rec.Status, rec.StatusReason)
		}
		rec = report(2, wire.StateOverridden, wire.Hold{Kind: wire.HoldOverride, Since: now.UnixNano(), Until: now.Add(24 * time.Hour).UnixNano(), Holder: "uid 0 (root)", Note: "vendor hotfix"})
		if rec.Status != scheduler.StatusOverridden || !strings.Contains(rec.StatusReason, "overridden on the device by uid 0 (root) until ") || !strings.HasSuffix(rec.StatusReason, ": vendor hotfix") {
			t.Fatalf("overridden: %s (%s)", rec.Status, rec.StatusReason)
		}
		tl, _ := p.state.Read().Timeline(nil, "till-3")
		var states []string
		for _, e := range tl {
			states = append(states, e.Resources["motd/motd"])
		}
		if !strings.Contains(strings.Join(states, ","), "fighting,overridden") {
			t.Errorf("timeline resource states %v", states)
		}
	})
}

package cluster

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/meteor-edge/meteor/fsm"
	"github.com/meteor-edge/meteor/wire"
)

// TestReportResourceStates: a 1.1 agent's typed resource states and a 1.0
// agent's states (at the start of the detail) are classified alike; the
// record keeps the typed state, and the 1.0 detail as it came. Both
// reports go through a follower, so either may be forwarded to its owner.
func TestReportResourceStates(t *testing.T) {
	pki := newTestPKI(t)
	c := newTestCluster(t, 3, pki.withAgents(t))
	c.propose(fileIntentN("store", 2, "v0"))
	f := c.follower()
	c.waitConverged()
	labels := map[string]string{"region": "eu"}

	report := func(device string, minor uint16, rep *wire.Report) {
		t.Helper()
		a := dialAgent(t, f.AgentAddr(), pki.deviceTLS(t, device))
		h := hello(labels)
		h.Minor = minor
		a.send(h)
		expect[*wire.Welcome](a)
		a.send(&wire.Pull{Inventory: true})
		d := expect[*wire.Delta](a)
		a.send(&wire.Ack{Revision: d.TargetRevision})
		for _, u := range d.Upserts {
			r := wire.ResourceReport{Key: u.Key, Effective: wire.EffectiveOK, State: wire.StateConverged, Detail: "content and mode match"}
			if u.Key == "store/r00" {
				r = wire.ResourceReport{Key: u.Key, State: wire.StateBlocked, Detail: "requires store/r01, which is failed"}
			} else {
				r.AppliedDigest, r.AppliedRevision = u.Digest, u.Revision
			}
			if !rep.States {
				r.Detail, r.State = r.State.String()+": "+r.Detail, wire.StateUnknown
			}
			rep.Resources = append(rep.Resources, r)
		}
		a.send(rep)
		if ack := expect[*wire.ReportAck](a); ack.Seq != rep.Seq {
			t.Fatalf("%s: report ack %d", device, ack.Seq)
		}
	}
	report("dev-new", wire.MinorReportStates, &wire.Report{Seq: 1, DesiredRevision: 1, Full: true, Status: "blocked", States: true})
	report("dev-old", 0, &wire.Report{Seq: 1, DesiredRevision: 1, Full: true, Status: "blocked"})

	const reason = "store/r00: requires store/r01, which is failed"
	for _, dev := range []string{"dev-new", "dev-old"} {
		waitFor(t, 10*time.Second, func() error {
			d, err := client(f).GetDevice(context.Background(), dev, apiStale)
			if err != nil {
				return err
			}
			if d.Status != "blocked" || d.StatusReason != reason {
				return fmt.Errorf("%s: status %q (%s), want blocked (%s)", dev, d.Status, d.StatusReason, reason)
			}
			agent := map[string]string{}
			for _, st := range d.States {
				agent[st.Key] = st.AgentState
			}
			if want := map[string]string{"store/r00": "blocked", "store/r01": "converged"}; !cmp.Equal(agent, want) {
				return fmt.Errorf("%s: agent states %v, want %v", dev, agent, want)
			}
			return nil
		})
	}

	want := map[string][]fsm.ResourceStatus{
		"dev-new": {
			{Key: "store/r00", Effective: "unknown", State: "blocked", Detail: "requires store/r01, which is failed"},
			{Key: "store/r01", Effective: "ok", State: "converged", Detail: "content and mode match"},
		},
		"dev-old": {
			{Key: "store/r00", Effective: "unknown", Detail: "blocked: requires store/r01, which is failed"},
			{Key: "store/r01", Effective: "ok", Detail: "converged: content and mode match"},
		},
	}
	for dev, want := range want {
		rec, err := f.State().Read().Device(nil, dev)
		if err != nil {
			t.Fatal(err)
		}
		ignore := func(r *fsm.ResourceStatus) { r.AppliedDigest, r.AppliedRevision, r.UpdatedAt = "", 0, 0 }
		got := append([]fsm.ResourceStatus(nil), rec.Resources...)
		for i := range got {
			ignore(&got[i])
		}
		for i := range want {
			ignore(&want[i])
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("%s resources (-want +got):\n%s", dev, diff)
		}
	}
}

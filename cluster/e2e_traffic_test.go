package cluster

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/meteor-edge/meteor/chaos"
	"github.com/meteor-edge/meteor/cluster/api"
	"github.com/meteor-edge/meteor/fsm/intent"
	"github.com/meteor-edge/meteor/wire"
)

// TestAgentTrafficReachesTheDevice: real agents count their traffic and
// report it; GET /v1/devices/ID carries what the agent's own status says
// its last report carried, and sort=traffic puts the device that
// downloaded a large desired state before the one with nothing to do.
func TestAgentTrafficReachesTheDevice(t *testing.T) {
	pki := newTestPKI(t)
	c := newTestCluster(t, 1, pki.withAgents(t))
	big := &intent.Intent{Name: "media", Selector: map[string]string{"region": "eu"}}
	for i := range 10 {
		big.Resources = append(big.Resources, intent.Resource{ID: fmt.Sprintf("clip%02d", i), Type: "file",
			Spec: map[string]any{"path": fmt.Sprintf("/srv/media/clip%02d.txt", i), "content": strings.Repeat(fmt.Sprintf("clip %d ", i), 1000)}})
	}
	c.propose(big)
	servers := agentAddrs(c)
	heavy := startAgent(t, pki, "kiosk-heavy", servers, map[string]string{"region": "eu"}, chaos.LinkProfile{}, nil)
	light := startAgent(t, pki, "kiosk-light", servers, map[string]string{"region": "us"}, chaos.LinkProfile{}, nil)
	waitDeviceConverged(t, c, "kiosk-heavy")
	cl := client(c.waitLeader())

	// The device's traffic is the agent's own count at its last report.
	var dev *api.Device
	var reported *wire.Traffic
	waitFor(t, 60*time.Second, func() error {
		st := heavy.Status()
		d, err := cl.GetDevice(context.Background(), "kiosk-heavy", api.ReadOptions{Stale: true})
		if err != nil {
			return err
		}
		if st.ReportedTraffic == nil || d.Traffic == nil || d.ReportSeq != st.ReportedTrafficSeq {
			return fmt.Errorf("the device shows report %d (traffic %v), the agent's last carried seq %d", d.ReportSeq, d.Traffic != nil, st.ReportedTrafficSeq)
		}
		dev, reported = d, st.ReportedTraffic
		return nil
	})
	tr := dev.Traffic
	want := &api.DeviceTraffic{
		AsOf: tr.AsOf, Day: wire.TrafficDayStart(reported.Day).Format(time.DateOnly), Today: api.TrafficCounts(reported.Total()),
		PreviousDay: wire.TrafficDayStart(reported.Day).AddDate(0, 0, -1).Format(time.DateOnly), Previous: api.TrafficCounts(reported.Previous),
	}
	for _, s := range reported.Servers {
		want.Servers = append(want.Servers, api.ServerTraffic{Server: s.Server, TrafficCounts: api.TrafficCounts(s.TrafficCounts)})
	}
	if diff := cmp.Diff(want, tr); diff != "" {
		t.Fatalf("the device's traffic against the agent's last report (-agent +device):\n%s", diff)
	}
	if len(tr.Servers) != 1 || tr.Servers[0].Server != servers[0] || tr.AsOf.IsZero() {
		t.Fatalf("traffic %+v, want one row for %s", tr, servers[0])
	}
	// The files' contents alone are 70 KB down.
	if tr.Today.RecvBytes < 70_000 || tr.Today.SentPackets == 0 || tr.Today.RecvPackets == 0 {
		t.Fatalf("today %+v", tr.Today)
	}
	if now := heavy.Status().Traffic; len(now.Today) != 1 || now.Today[0].RecvBytes < tr.Today.RecvBytes {
		t.Fatalf("the agent counts %+v now, below what it reported", now)
	}

	// The heaviest first.
	waitFor(t, 60*time.Second, func() error {
		d, err := cl.GetDevice(context.Background(), "kiosk-light", api.ReadOptions{Stale: true})
		if err != nil {
			return err
		}
		if d.Traffic == nil {
			return fmt.Errorf("kiosk-light has no traffic yet (agent reported seq %d)", light.Status().ReportedTrafficSeq)
		}
		return nil
	})
	list, err := cl.QueryDevices(context.Background(), api.DeviceQuery{Sort: "traffic"}, api.ReadOptions{Stale: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(list.Devices) != 2 || list.Devices[0].ID != "kiosk-heavy" || list.Devices[1].ID != "kiosk-light" ||
		list.Devices[0].TrafficToday == nil || list.Devices[1].TrafficToday == nil ||
		list.Devices[0].TrafficToday.Bytes() <= list.Devices[1].TrafficToday.Bytes() {
		t.Fatalf("sorted by traffic: %+v", list.Devices)
	}
}

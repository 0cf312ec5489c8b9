package cluster

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/hashicorp/go-hclog"

	"github.com/meteor-edge/meteor/cluster/api"
	"github.com/meteor-edge/meteor/fsm"
	"github.com/meteor-edge/meteor/scheduler"
	"github.com/meteor-edge/meteor/wire"
)

// TestDeviceQuerySortsByTraffic: ?sort=traffic lists the devices that
// exchanged the most bytes on the server's UTC day first: a report of an
// earlier day counts nothing today, one from the day after (an agent
// whose clock is ahead) counts its previous day; devices that never
// reported traffic come last, ties in ID order; limit keeps the top.
// GET /v1/devices/{id} shows a device's counts per server and in total.
func TestDeviceQuerySortsByTraffic(t *testing.T) {
	now := time.Date(2026, 12, 2, 15, 0, 0, 0, time.UTC)
	today := wire.TrafficDay(now)
	p := newLocalProposer(t)
	row := func(server string, sent, recv uint64) fsm.ServerTraffic {
		return fsm.ServerTraffic{Server: server, TrafficCounts: fsm.TrafficCounts{SentBytes: sent, RecvBytes: recv, SentPackets: sent / 100, RecvPackets: recv / 100}}
	}
	fleet := map[string]*fsm.DeviceTraffic{
		"dev-a": {AsOf: now.Add(-time.Minute).UnixNano(), Day: today, Servers: []fsm.ServerTraffic{row("s1:7443", 2000, 1000), row("s2:7443", 1200, 800)},
			Previous: fsm.TrafficCounts{SentBytes: 190_000, RecvBytes: 150_000, SentPackets: 900, RecvPackets: 800}},
		"dev-b": {AsOf: now.UnixNano(), Day: today, Servers: []fsm.ServerTraffic{row("s1:7443", 6000, 3000)}},
		"dev-c": {AsOf: now.Add(-30 * time.Hour).UnixNano(), Day: today - 1, Servers: []fsm.ServerTraffic{row("s1:7443", 100_000, 100_000)}},
		"dev-d": nil,
		"dev-e": {AsOf: now.UnixNano(), Day: today + 1, Servers: []fsm.ServerTraffic{row("s1:7443", 100, 0)}, Previous: fsm.TrafficCounts{SentBytes: 4000, RecvBytes: 3000}},
	}
	for id, tr := range fleet {
		connectDevice(t, p, id, true)
		p.mustApply(t, fsm.StatusBatchType, &fsm.StatusBatchRequest{Owner: "s1", Transitions: []fsm.StatusTransition{
			{Device: id, Seq: 1, Time: now.UnixNano(), Status: scheduler.StatusConverged, Full: true, Traffic: tr},
		}})
	}
	cfg := DefaultConfig()
	cfg.NodeID, cfg.TrustReportedLabels = "s1", true
	h := &httpAPI{
		cfg: &cfg, logger: hclog.NewNullLogger(), clock: wallClock{Clock: SystemClock{}, now: func() time.Time { return now }},
		state: p.state, propose: p, node: &fakeLeader{leads: true}, owners: fixedOwners{{ID: "s1", Region: "eu"}}, planner: scheduler.NewPlanner(),
	}
	handler := h.handler()
	get := func(path string, want int, v any) string {
		t.Helper()
		w := httptest.NewRecorder()
		handler.ServeHTTP(w, httptest.NewRequest(http.MethodGet, path, nil))
		if w.Code != want {
			t.Fatalf("%s: %d %s, want %d", path, w.Code, w.Body, want)
		}
		if v != nil {
			if err := json.Unmarshal(w.Body.Bytes(), v); err != nil {
				t.Fatal(err)
			}
		}
		return w.Body.String()
	}

	var list api.DeviceList
	get("/v1/devices?stale=true&sort=traffic", http.StatusOK, &list)
	var order []string
	var bytes []uint64
	for _, d := range list.Devices {
		order = append(order, d.ID)
		if d.TrafficToday != nil {
			bytes = append(bytes, d.TrafficToday.Bytes())
		}
	}
	if want := []string{"dev-b", "dev-e", "dev-a", "dev-c", "dev-d"}; !cmp.Equal(order, want) || list.Sort != "traffic" {
		t.Fatalf("sorted by traffic: %v (sort %q), want %v", order, list.Sort, want)
	}
	if want := []uint64{9000, 7000, 5000, 0}; !cmp.Equal(bytes, want) {
		t.Errorf("today's bytes %v, want %v (and none for dev-d)", bytes, want)
	}
	var top api.DeviceList
	get("/v1/devices?stale=true&sort=traffic&limit=2&connected=true", http.StatusOK, &top)
	if len(top.Devices) != 2 || top.Devices[0].ID != "dev-b" || top.Devices[1].ID != "dev-e" || top.Matched != 5 || top.Next != "" {
		t.Errorf("the top 2: %+v", top)
	}
	var plain api.DeviceList
	get("/v1/devices?stale=true", http.StatusOK, &plain)
	if plain.Devices[0].ID != "dev-a" || plain.Devices[0].TrafficToday != nil || plain.Sort != "" {
		t.Errorf("unsorted listing: first %+v, sort %q", plain.Devices[0], plain.Sort)
	}

	var dev api.Device
	get("/v1/devices/dev-a?stale=true", http.StatusOK, &dev)
	want := &api.DeviceTraffic{
		AsOf: now.Add(-time.Minute), Day: "2026-12-02", Today: api.TrafficCounts{SentBytes: 3200, RecvBytes: 1800, SentPackets: 32, RecvPackets: 18},
		Servers: []api.ServerTraffic{
			{Server: "s1:7443", TrafficCounts: api.TrafficCounts{SentBytes: 2000, RecvBytes: 1000, SentPackets: 20, RecvPackets: 10}},
			{Server: "s2:7443", TrafficCounts: api.TrafficCounts{SentBytes: 1200, RecvBytes: 800, SentPackets: 12, RecvPackets: 8}},
		},
		PreviousDay: "2026-12-01", Previous: api.TrafficCounts{SentBytes: 190_000, RecvBytes: 150_000, SentPackets: 900, RecvPackets: 800},
	}
	if diff := cmp.Diff(want, dev.Traffic); diff != "" {
		t.Errorf("GET /v1/devices/dev-a traffic (-want +got):\n%s", diff)
	}
	if body := get("/v1/devices/dev-d?stale=true", http.StatusOK, nil); strings.Contains(body, `"traffic"`) {
		t.Errorf("a device without traffic shows some: %s", body)
	}

	for _, tc := range []struct{ query, says string }{
		{"sort=bytes", "sort="},
		{"sort=traffic&after=dev-b", "give limit, not after"},
		{"sort=traffic&group_by=status", "group_by lists none"},
	} {
		if body := get("/v1/devices?stale=true&"+tc.query, http.StatusBadRequest, nil); !strings.Contains(body, tc.says) {
			t.Errorf("?%s: %s, want it to say %q", tc.query, body, tc.says)
		}
	}
}

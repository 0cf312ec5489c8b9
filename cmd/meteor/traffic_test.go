package main

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/meteor-edge/meteor/cluster/api"
)

func TestByteSize(t *testing.T) {
	for n, want := range map[uint64]string{
		0: "0 B", 999: "999 B", 1000: "1.0 KB", 41_230: "41.2 KB", 999_949: "999.9 KB", 999_960: "1.0 MB",
		3_400_000: "3.4 MB", 12_000_000_000: "12.0 GB", 1 << 62: "4611686.0 TB",
	} {
		if got := byteSize(n); got != want {
			t.Errorf("byteSize(%d) = %q, want %q", n, got, want)
		}
	}
}

// sampleTraffic is 41.2 KB today over 3 servers, 190.3 KB yesterday.
func sampleTraffic() *api.DeviceTraffic {
	srv := func(name string, up, down uint64) api.ServerTraffic {
		return api.ServerTraffic{Server: name, TrafficCounts: api.TrafficCounts{SentBytes: up, RecvBytes: down, SentPackets: up / 200, RecvPackets: down / 200}}
	}
	return &api.DeviceTraffic{
		AsOf: time.Now().Add(-12 * time.Second), Day: "2026-12-02",
		Today: api.TrafficCounts{SentBytes: 23_000, RecvBytes: 18_200, SentPackets: 115, RecvPackets: 91},
		Servers: []api.ServerTraffic{
			srv("10.0.0.1:7443", 17_000, 14_000), srv("10.0.0.2:7443", 3_000, 2_200), srv("10.0.0.3:7443", 3_000, 2_000),
		},
		PreviousDay: "2026-12-01", Previous: api.TrafficCounts{SentBytes: 100_300, RecvBytes: 90_000},
	}
}

// TestPrintDeviceTraffic: get device shows the day's traffic in one
// line, describe device adds a line per server; a device whose agent
// reports none says so.
func TestPrintDeviceTraffic(t *testing.T) {
	d := &api.Device{DeviceSummary: api.DeviceSummary{ID: "pos-1"}, Traffic: sampleTraffic()}
	var b bytes.Buffer
	printDevice(&b, d, false)
	line := "Traffic:    today 41.2 KB (up 23.0 KB, down 18.2 KB) over 3 servers; yesterday 190.3 KB  (UTC day 2026-12-02, reported 12s ago)"
	if !strings.Contains(b.String(), line) {
		t.Errorf("get device lacks %q:\n%s", line, b.String())
	}
	if strings.Contains(b.String(), "10.0.0.1:7443") {
		t.Errorf("get device lists the servers:\n%s", b.String())
	}
	b.Reset()
	printDevice(&b, d, true)
	for _, want := range []string{line, "SERVER", "10.0.0.1:7443  31.0 KB  17.0 KB  14.0 KB  85/70", "10.0.0.3:7443  5.0 KB"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("describe device lacks %q:\n%s", want, b.String())
		}
	}
	b.Reset()
	printDevice(&b, &api.Device{DeviceSummary: api.DeviceSummary{ID: "pos-2"}}, true)
	if want := "Traffic:    not reported"; !strings.Contains(b.String(), want) {
		t.Errorf("a device without traffic: no %q in\n%s", want, b.String())
	}
}

// TestGetDevicesSortedByTraffic: --sort traffic --limit N asks the server
// for the top N by traffic and shows them with a TRAFFIC TODAY column.
func TestGetDevicesSortedByTraffic(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if q := r.URL.Query(); r.URL.Path != "/v1/devices" || q.Get("sort") != "traffic" || q.Get("limit") != "2" {
			http.Error(w, "unexpected "+r.URL.String(), http.StatusBadRequest)
			return
		}
		json.NewEncoder(w).Encode(api.DeviceList{Matched: 5, Sort: "traffic", Devices: []api.DeviceSummary{
			{ID: "pos-9", Status: "converged", TrafficToday: &api.TrafficCounts{SentBytes: 1_500_000, RecvBytes: 900_000}},
			{ID: "pos-2", Status: "converged"},
		}})
	}))
	defer srv.Close()
	out, err := run(t, "--addr", srv.URL, "get", "devices", "--sort", "traffic", "--limit", "2")
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(out, "\n")
	if !strings.HasPrefix(lines[0], "ID     TRAFFIC TODAY  STATUS") || !strings.HasPrefix(lines[1], "pos-9  2.4 MB         converged") ||
		!strings.HasPrefix(lines[2], "pos-2  -              converged") || !strings.Contains(out, "the 2 heaviest of 5 devices") {
		t.Errorf("output:\n%s", out)
	}
}

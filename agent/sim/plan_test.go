package sim

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestRetailMix(t *testing.T) {
	plans, err := planFleet("sim", MixRetail, 0, 7, 1, 0, "")
	if err != nil {
		t.Fatal(err)
	}
	if len(plans) != RetailDevices {
		t.Fatalf("%d devices, want %d", len(plans), RetailDevices)
	}
	got := map[string]int{}
	roles := map[string]int{}
	ids := map[string]bool{}
	for _, p := range plans {
		got[p.link.name]++
		roles[p.labels["link"]+"/"+p.labels["role"]]++
		if ids[p.id] {
			t.Fatalf("duplicate ID %s", p.id)
		}
		ids[p.id] = true
		if p.labels["region"] == "" || p.labels["site"] == "" || p.labels["link"] != p.link.name {
			t.Fatalf("%s labels %v", p.id, p.labels)
		}
	}
	want := map[string]int{LinkFiber: 720, LinkCellular: 360, LinkPopup: 120}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("links (-want +got):\n%s", diff)
	}
	wantRoles := map[string]int{"fiber/store-gateway": 120, "fiber/pos-terminal": 600, "cellular/kiosk": 360, "popup/pos-terminal": 120}
	if diff := cmp.Diff(wantRoles, roles); diff != "" {
		t.Fatalf("roles (-want +got):\n%s", diff)
	}
	again, err := planFleet("sim", MixRetail, 0, 7, 1, 0, "")
	if err != nil {
		t.Fatal(err)
	}
	for i := range plans {
		if plans[i].seed != again[i].seed || plans[i].id != again[i].id {
			t.Fatalf("plan %d differs between runs with the same seed", i)
		}
	}
}

func TestLinks(t *testing.T) {
	cell, err := linkByName(LinkCellular, 0.01, 0.05)
	if err != nil {
		t.Fatal(err)
	}
	if cell.base.Loss != 0.05 || cell.base.OutageEvery != 1800*time.Millisecond || cell.base.OutageFor != 80*time.Millisecond {
		t.Fatalf("scaled cellular: %+v", cell.base)
	}
	fiber, err := linkByName(LinkFiber, 1, 0.05)
	if err != nil {
		t.Fatal(err)
	}
	if fiber.base.Loss != 0 {
		t.Fatalf("fiber got loss %v", fiber.base.Loss)
	}
	if _, err := planFleet("sim", "dial-up", 3, 1, 1, 0, ""); err == nil {
		t.Fatal("unknown profile accepted")
	}
	if _, err := planFleet("sim", LinkFiber, 0, 1, 1, 0, ""); err == nil {
		t.Fatal("zero devices accepted")
	}
	// Own region near, others far.
	if regionDelay("eu-west", "eu-west") >= regionDelay("eu-west", "us-east") ||
		regionDelay("ap-south", "us-east") != regionDelay("us-east", "ap-south") {
		t.Fatal("region delays")
	}
}

func TestPercentiles(t *testing.T) {
	f := func(v float64) *float64 { return &v }
	tests := []struct {
		times []float64
		n     int
		want  Percentiles
	}{
		{nil, 0, Percentiles{}},
		{[]float64{3, 1, 2, 4}, 4, Percentiles{P50: f(2), P90: f(4), P99: f(4), P100: f(4)}},
		{[]float64{1, 2}, 4, Percentiles{P50: f(2)}},
		{[]float64{5}, 100, Percentiles{}},
	}
	for _, tt := range tests {
		got := percentiles(append([]float64(nil), tt.times...), tt.n)
		if diff := cmp.Diff(tt.want, got); diff != "" {
			t.Errorf("percentiles(%v, %d) (-want +got):\n%s", tt.times, tt.n, diff)
		}
	}
}

package journal

import (
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestTrafficSurvivesReopen: the traffic counters saved are what a
// journal opened again reads; before any save there are none, and after a
// power cut a save fails and the last saved counters stay.
func TestTrafficSurvivesReopen(t *testing.T) {
	dir := t.TempDir()
	j := openT(t, dir)
	days, err := j.Traffic()
	if err != nil || days != nil {
		t.Fatalf("traffic of a new journal: %v, %v", days, err)
	}
	want := []TrafficDay{
		{Day: 20788, Servers: []TrafficCount{{Server: "s1:7443", SentBytes: 1000, RecvBytes: 800, SentPackets: 9, RecvPackets: 7}}},
		{Day: 20789, Servers: []TrafficCount{
			{Server: "s1:7443", SentBytes: 42, RecvBytes: 28, SentPackets: 1, RecvPackets: 1},
			{Server: "s2:7443", SentBytes: 1 << 40, SentPackets: 3},
		}},
	}
	must(t, j.SaveTraffic(want))
	closeT(t, j)

	j = openT(t, dir)
	defer closeT(t, j)
	got, err := j.Traffic()
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("traffic after reopening (-want +got):\n%s", diff)
	}
	j.PowerCut()
	if err := j.SaveTraffic(nil); !errors.Is(err, ErrPowerCut) {
		t.Fatalf("save after a power cut: %v", err)
	}
	if got, _ := j.Traffic(); len(got) != 2 {
		t.Fatalf("traffic after a refused save: %v", got)
	}
}

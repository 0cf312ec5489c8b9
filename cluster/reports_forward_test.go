package cluster

import (
	"testing"

	"github.com/meteor-edge/meteor/wire"
)

// TestForwardedReportsFitTheOwner: a 1.2 agent's report is forwarded to an
// owner of an earlier protocol (a server not upgraded yet, which says no
// minor in gossip) without the correction counts its decoder would
// refuse, and whole to an owner of 1.2.
func TestForwardedReportsFitTheOwner(t *testing.T) {
	rep := &wire.Report{Seq: 7, States: true, Corrections: true, Resources: []wire.ResourceReport{
		{Key: "net/policy", State: wire.StateConverged, Corrections: 3},
	}}
	for _, tc := range []struct {
		minor uint16
		want  bool
	}{{0, false}, {1, false}, {wire.MinorReportCorrections, true}, {wire.ProtocolMinor, true}} {
		got := reportFor(rep, tc.minor)
		var back wire.Report
		if err := back.Decode(got.Append(nil)); err != nil {
			t.Fatal(err)
		}
		if back.Corrections != tc.want || (back.Resources[0].Corrections == 3) != tc.want || !back.States {
			t.Errorf("to an owner of minor %d: corrections flag %v, count %d, states %v; want the counts %v", tc.minor, back.Corrections, back.Resources[0].Corrections, back.States, tc.want)
		}
	}
	if !rep.Corrections || rep.Resources[0].Corrections != 3 {
		t.Error("reportFor changed the agent's report")
	}
}

// TestForwardedReportsKeepTrafficFor13: a 1.3 agent's traffic counts are
// forwarded only to an owner of 1.3 or later; to one of 1.2 the report
// goes without them, its correction counts kept.
func TestForwardedReportsKeepTrafficFor13(t *testing.T) {
	rep := &wire.Report{Seq: 8, States: true, Corrections: true,
		Resources: []wire.ResourceReport{{Key: "net/policy", State: wire.StateConverged, Corrections: 3}},
		Traffic:   &wire.Traffic{Day: 20789, Servers: []wire.ServerTraffic{{Server: "s1:7443", TrafficCounts: wire.TrafficCounts{SentBytes: 1500, SentPackets: 2}}}},
	}
	for _, tc := range []struct {
		minor                uint16
		traffic, corrections bool
	}{{0, false, false}, {wire.MinorReportCorrections, false, true}, {wire.MinorReportTraffic, true, true}, {wire.ProtocolMinor, true, true}} {
		var back wire.Report
		if err := back.Decode(reportFor(rep, tc.minor).Append(nil)); err != nil {
			t.Fatal(err)
		}
		if (back.Traffic != nil) != tc.traffic || back.Corrections != tc.corrections {
			t.Errorf("to an owner of minor %d: traffic %+v, corrections %v; want traffic %v, corrections %v", tc.minor, back.Traffic, back.Corrections, tc.traffic, tc.corrections)
		}
	}
	if rep.Traffic == nil {
		t.Error("reportFor changed the agent's report")
	}
}

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

package scenario

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/meteor-edge/meteor/chaos"
	"github.com/meteor-edge/meteor/chaos/hosts"
)

// harnessDriver is a hosts.Driver acting on an in-process Harness: kill is
// a crash, start a restart from the data dir, isolate and cut go through
// the harness's chaos.Network. Plans never overlap faults, so heal and mend
// heal the whole network.
type harnessDriver struct{ h *Harness }

func (d harnessDriver) Supports(a hosts.Action) bool {
	return a != hosts.Pause && a != hosts.Unpause
}

func (d harnessDriver) Do(ctx context.Context, a hosts.Action, i, peer int) (string, error) {
	id := d.h.ID(i)
	switch a {
	case hosts.Kill:
		return "crash " + id, d.h.Kill(i)
	case hosts.Start:
		return "restart " + id, d.h.Restart(i)
	case hosts.Isolate:
		d.h.Network().Isolate(id)
		return "isolate " + id, nil
	case hosts.Cut:
		d.h.Network().CutOneWay(id, d.h.ID(peer))
		d.h.Network().CutOneWay(d.h.ID(peer), id)
		return "cut " + id + " " + d.h.ID(peer), nil
	case hosts.Heal, hosts.Mend:
		d.h.Network().Heal()
		return "heal", nil
	}
	return "", fmt.Errorf("%w: %s", hosts.ErrUnsupported, a)
}

// TestRunDeploymentInjects runs the deployment checks against an
// in-process cluster with the faults injected by a seeded plan through a
// driver, as `meteor chaos attack` does against a real deployment. A
// device bound is set on a cluster without devices, so that the run fails
// one check and writes its report.
func TestRunDeploymentInjects(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a real cluster")
	}
	ctx := context.Background()
	h, err := NewHarness(ctx, HarnessConfig{Servers: 3, Dir: t.TempDir(), Seed: 31, Log: newTestWriter(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	addrs := []string{h.HTTPURL(0), h.HTTPURL(1), h.HTTPURL(2)}
	dir := t.TempDir()
	res, err := RunDeployment(ctx, addrs, DeploymentOptions{TLS: h.TLSConfig(),
		Seed: 31, Duration: 6 * time.Second, Dir: dir, Log: newTestWriter(t), Name: "harness",
		Driver: harnessDriver{h},
		Plan: hosts.PlanConfig{
			GapMin: 300 * time.Millisecond, GapMax: 600 * time.Millisecond,
			HoldMin: 800 * time.Millisecond, HoldMax: 1500 * time.Millisecond,
		},
		DeviceBounds: map[string]time.Duration{"*": time.Second},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d faults, %d ops (%d unknown, %d dropped), %s, state agreed at index %d (%.12s), reconverged in %s, %d watch samples",
		res.Faults, res.Ops, res.Unknown, res.Dropped, res.Linearizability, res.Index, res.Digest, res.Reconverge, res.WatchSamples)
	t.Logf("%s", res.Plan)
	if res.Faults < 2 || res.Faults != len(res.Plan.Episodes) {
		t.Errorf("%d faults injected, plan has %d", res.Faults, len(res.Plan.Episodes))
	}
	if res.Completed < 50 || res.Linearizability != porcupine.Ok || res.Index == 0 || res.Digest == "" || res.WatchSamples == 0 {
		t.Errorf("ops %d (%d completed in %s), %s, index %d, digest %q, samples %d",
			res.Ops, res.Completed, res.Ran.Round(time.Millisecond), res.Linearizability, res.Index, res.Digest, res.WatchSamples)
	}
	if len(res.Violations) != 1 || !strings.Contains(res.Violations[0], "none of the 0 devices") {
		t.Fatalf("violations %q, want only the missing devices", res.Violations)
	}
	// Every fault action is in the log, and every fault was undone.
	undone := map[string]int{}
	for _, f := range res.FaultLog.Faults() {
		if a := hosts.Action(f.Kind); a.Undo() != "" {
			undone[string(a)]++
		} else if a == hosts.Start {
			undone[string(hosts.Kill)]--
		} else if a == hosts.Heal {
			undone[string(hosts.Isolate)]--
		} else if a == hosts.Mend {
			undone[string(hosts.Cut)]--
		}
	}
	for a, n := range undone {
		if n != 0 {
			t.Errorf("%s: %d more faults than undos", a, n)
		}
	}
	if res.Report != filepath.Join(dir, "report-harness-31") {
		t.Fatalf("report %q", res.Report)
	}
	for _, f := range []string{"result.json", "faults.jsonl", "history.json", "plan.json"} {
		if fi, err := os.Stat(filepath.Join(res.Report, f)); err != nil || fi.Size() == 0 {
			t.Errorf("report %s: %v", f, err)
		}
	}
	fl, err := os.Open(filepath.Join(res.Report, "faults.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	defer fl.Close()
	logged, err := chaos.ReadFaultLog(fl)
	if err != nil || len(logged) < 2*res.Faults {
		t.Errorf("fault log: %d actions for %d faults, %v", len(logged), res.Faults, err)
	}
}

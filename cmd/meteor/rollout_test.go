package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/meteor-edge/meteor/cluster"
	"github.com/meteor-edge/meteor/cluster/api"
)

// TestPrintRollout: the status shows state, reason and what the rollout
// waits for above a table of its waves, the current wave marked, with
// each wave's approval and a line naming failed devices.
func TestPrintRollout(t *testing.T) {
	var out bytes.Buffer
	printRollout(&out, &api.RolloutStatus{
		Intent: "store-net", Revision: 12, StableRevision: 9, State: api.RolloutWaitingApproval,
		Reason:     "wave 2 (tenth) waits for approval: meteor rollout approve store-net --wave 2",
		WaitingFor: "wave 2 (tenth) waits for approval: meteor rollout approve store-net --wave 2",
		Wave:       2, AppliedBy: "ci (3f9a)",
		Counts: api.RolloutCounts{Targeted: 40, Released: 1, Acknowledged: 1, Converged: 1},
		Waves: []api.RolloutWave{
			{Number: 1, Name: "pilot", State: "done", Devices: 1, Released: 1, Converged: 1},
			{Number: 2, Name: "tenth", State: "waiting-approval", Devices: 4, Approval: true},
			{Number: 3, Name: "everyone", State: "pending", Devices: 35, Approval: true, ApprovedBy: "ops (77aa)", Failed: 7,
				SampleFailed: []string{"d1 (failed)", "d2 (stuck)", "d3 (failed)", "d4 (unhealthy)", "d5 (failed)"}},
		},
	})
	lines := strings.Split(out.String(), "\n")
	for i, want := range [][]string{
		0:  {"Rollout:", "store-net revision 12 (stable 9)"},
		1:  {"State:", "waiting-approval"},
		2:  {"Reason:", "meteor rollout approve store-net --wave 2"},
		3:  {"Devices:", "40 targeted, 1 released, 1 acknowledged, 1 converged, 0 failed"},
		4:  {"Applied by:", "ci (3f9a)"},
		5:  {"Waves:"},
		6:  {"WAVE", "NAME", "STATE", "DEVICES", "RELEASED", "CONVERGED", "FAILED", "APPROVAL"},
		7:  {" 1 ", "pilot", "done", " -"},
		8:  {"*2 ", "tenth", "waiting-approval", "required"},
		9:  {" 3 ", "everyone", "pending", "35", "approved by ops (77aa)"},
		10: {"Wave 3 failed: d1 (failed), d2 (stuck), d3 (failed), d4 (unhealthy), d5 (failed) and 2 more"},
	} {
		if i >= len(lines) {
			t.Fatalf("output has %d lines:\n%s", len(lines), out.String())
		}
		for _, w := range want {
			if !strings.Contains(lines[i], w) {
				t.Errorf("line %d %q: no %q", i, lines[i], w)
			}
		}
	}
	if strings.Contains(out.String(), "Waiting for:") {
		t.Errorf("the reason is printed twice:\n%s", out.String())
	}
}

// TestPlanOutput: one summary line per intent as the docs show it, the
// changed keys per device (the first 20 unless --all), conflicts last;
// an unchanged document says applying it changes nothing.
func TestPlanOutput(t *testing.T) {
	in := api.IntentPlan{
		Intent: "store-net", Action: api.PlanUpdate, CurrentRevision: 12, Rollout: "waves", Targeted: 40, Changed: 38,
		Waves:     []api.PlanWave{{Number: 1, Name: "pilot", Devices: 1}, {Number: 2, Name: "tenth", Devices: 4}, {Number: 3, Name: "everyone", Devices: 35}},
		Conflicts: []api.PlanConflict{{Key: "store-net/motd", OtherIntent: "banner", OtherKey: "banner/m", Target: "file /etc/motd", Devices: 7, Sample: []string{"d00", "d01", "d02", "d03", "d04"}}},
	}
	for i := range 38 {
		in.Devices = append(in.Devices, api.DevicePlan{ID: fmt.Sprintf("d%02d", i), Wave: 3, Changes: []api.ResourceChange{
			{Key: "store-net/motd", Action: api.ChangeChange}, {Key: "store-net/old", Action: api.ChangeRemove},
		}})
	}
	unchanged := api.IntentPlan{Intent: "logging", Action: api.PlanUnchanged, CurrentRevision: 7, Rollout: "immediate", Targeted: 1}
	var out bytes.Buffer
	printPlan(&out, &api.Plan{Intents: []api.IntentPlan{in, unchanged}}, false)
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	want := "store-net: update revision 12 -> new; 40 devices targeted, 38 change; waves: 1 (pilot) 1 device, 2 (tenth) 4, 3 (everyone) 35"
	if lines[0] != want {
		t.Errorf("summary:\n got %q\nwant %q", lines[0], want)
	}
	if lines[1] != "  d00 (wave 3): change store-net/motd, remove store-net/old" {
		t.Errorf("first device: %q", lines[1])
	}
	if lines[21] != "  ... and 18 more devices (--all lists them)" {
		t.Errorf("after 20 devices: %q", lines[21])
	}
	if lines[22] != "  conflict: store-net/motd and banner/m (intent banner) both manage file /etc/motd on 7 devices (d00, d01, d02, d03, d04, ...)" {
		t.Errorf("conflict: %q", lines[22])
	}
	if got := lines[len(lines)-1]; got != "logging: unchanged (revision 7): applying it changes nothing; 1 device targeted" {
		t.Errorf("unchanged: %q", got)
	}
	out.Reset()
	printPlan(&out, &api.Plan{Intents: []api.IntentPlan{in}}, true)
	if n := strings.Count(out.String(), "(wave 3)"); n != 38 || strings.Contains(out.String(), "more devices") {
		t.Errorf("--all lists %d devices:\n%s", n, out.String())
	}
}

// TestWaitRollout: --wait prints a line whenever the rollout's summary
// changes, returns without error once it completes, and with the reason
// once it stops.
func TestWaitRollout(t *testing.T) {
	seq := func(states ...api.RolloutStatus) func(context.Context) (*api.RolloutStatus, error) {
		return func(context.Context) (*api.RolloutStatus, error) {
			st := states[0]
			if len(states) > 1 {
				states = states[1:]
			}
			return &st, nil
		}
	}
	progressing := api.RolloutStatus{Intent: "net", Revision: 3, State: api.RolloutProgressing, Wave: 1, Waves: make([]api.RolloutWave, 2), Counts: api.RolloutCounts{Targeted: 4}}
	released := progressing
	released.Counts.Released = 2
	done := released
	done.State, done.Reason = api.RolloutCompleted, "every wave passed its gate"
	var out bytes.Buffer
	st, err := waitRollout(context.Background(), seq(progressing, progressing, released, released, done), &out, 0)
	if err != nil || st.State != api.RolloutCompleted {
		t.Fatalf("wait for a completing rollout: %+v, %v", st, err)
	}
	if n := strings.Count(out.String(), "\n"); n != 3 || !strings.Contains(out.String(), "net revision 3: progressing, wave 1 of 2; 4 targeted, 2 released") {
		t.Fatalf("progress lines:\n%s", out.String())
	}

	paused := released
	paused.State, paused.Reason = api.RolloutPaused, "wave 1: 1 of 2 (50%) devices failed, stuck or unhealthy, above the 0% threshold (d1 (failed)): paused"
	_, err = waitRollout(context.Background(), seq(progressing, paused), &bytes.Buffer{}, 0)
	if err == nil || !strings.Contains(err.Error(), "rollout of net revision 3 paused: wave 1: 1 of 2") {
		t.Fatalf("wait for a rollout that pauses: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err = waitRollout(ctx, seq(progressing), &bytes.Buffer{}, time.Hour); err == nil || !strings.Contains(err.Error(), "gave up waiting") {
		t.Fatalf("wait past the timeout: %v", err)
	}
}

// TestRolloutCommands runs the commands against a server: apply of an
// unchanged document says so, plan says it changes nothing, a wave waits
// for approval until 'rollout approve', 'rollout status --wait' returns
// once the rollout completes, and history, events and undo show and do
// what they say.
func TestRolloutCommands(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	l, err := cluster.StartLocal(ctx, cluster.LocalOptions{Servers: 1, Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	base := []string{"--addr", l.HTTPAddr(0), "--ca-cert", writeCACert(t, l.CA())}
	cli := func(args ...string) string {
		t.Helper()
		out, err := run(t, append(base, args...)...)
		if err != nil {
			t.Fatalf("meteor %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return out
	}
	dir := t.TempDir()
	file := filepath.Join(dir, "net.yaml")
	write := func(doc string) {
		t.Helper()
		if err := os.WriteFile(file, []byte(doc), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("name: store-net\nresources:\n  - {id: motd, type: file, spec: {path: /etc/motd, content: v1}}\n")
	first := cli("apply", "-f", file)
	if !strings.Contains(first, "intent/store-net applied: revision ") {
		t.Fatalf("apply: %s", first)
	}
	rev := strings.TrimSpace(strings.TrimPrefix(first, "intent/store-net applied: revision "))
	if out := cli("apply", "-f", file); out != "intent store-net unchanged (revision "+rev+")\n" {
		t.Fatalf("apply of the same document: %q", out)
	}
	if out := cli("plan", "-f", file); !strings.HasPrefix(out, "store-net: unchanged (revision "+rev+"): applying it changes nothing") {
		t.Fatalf("plan of the same document: %q", out)
	}
	if out := cli("rollout", "status", "store-net"); !strings.Contains(out, "State:       completed") || !strings.Contains(out, "no rollout block") {
		t.Fatalf("status without a rollout:\n%s", out)
	}

	write("name: store-net\nresources:\n  - {id: motd, type: file, spec: {path: /etc/motd, content: v2}}\nrollout:\n  waves:\n    - {name: pilot, count: 1, approval: true}\n")
	if out := cli("plan", "-f", file); !strings.HasPrefix(out, "store-net: update revision "+rev+" -> new; 0 devices targeted, 0 change; waves: 1 (pilot) 0 devices") {
		t.Fatalf("plan of a change: %q", out)
	}
	cli("apply", "-f", file)
	deadline := time.Now().Add(10 * time.Second)
	for {
		out := cli("rollout", "status", "store-net")
		if strings.Contains(out, "State:       waiting-approval") && strings.Contains(out, "meteor rollout approve store-net --wave 1") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the rollout never waited for approval:\n%s", out)
		}
		time.Sleep(100 * time.Millisecond) // the leader's rollout worker judges once a second
	}
	if _, err := run(t, append(base, "rollout", "approve", "store-net", "--wave", "3")...); err == nil || !strings.Contains(err.Error(), "waves 1 to 1") {
		t.Fatalf("approve of a wave that does not exist: %v", err)
	}
	cli("rollout", "approve", "store-net", "--reason", "pilot store ready")
	var st api.RolloutStatus
	if err := json.Unmarshal([]byte(cli("-o", "json", "rollout", "status", "store-net", "--wait", "--timeout", "20s")), &st); err != nil || st.State != api.RolloutCompleted {
		t.Fatalf("status --wait: %+v, %v", st, err)
	}
	if _, err := run(t, append(base, "rollout", "pause", "store-net")...); err == nil || !strings.Contains(err.Error(), "is completed: nothing to pause") {
		t.Fatalf("pause of a completed rollout: %v", err)
	}

	hist := cli("rollout", "history", "store-net")
	if !strings.Contains(hist, "(current)") || strings.Count(hist, "completed") != 2 || !strings.Contains(hist, "no rollout block") {
		t.Fatalf("history:\n%s", hist)
	}
	events := cli("rollout", "events", "store-net")
	for _, want := range []string{"started", "waiting", "approved", "wave 1 approved by system", "completed"} {
		if !strings.Contains(events, want) {
			t.Errorf("events: no %q in\n%s", want, events)
		}
	}
	if out := cli("rollout", "undo", "store-net"); !strings.Contains(out, "holds the document of revision "+rev) {
		t.Fatalf("undo: %q", out)
	}
	if out := cli("rollout", "list"); !strings.Contains(out, "store-net") || !strings.Contains(out, "completed") {
		t.Fatalf("rollout list:\n%s", out)
	}
	if _, err := run(t, append(base, "rollout", "status", "nothing")...); err == nil {
		t.Fatal("status of an unknown intent: no error")
	}
}

// TestPrintDeviceList: a grouped answer shows each value's count and
// sample; a listed one shows the device's state on the intent and the
// resource asked about, and where the next page starts.
func TestPrintDeviceList(t *testing.T) {
	var out bytes.Buffer
	printDeviceList(&out, &api.DeviceList{Matched: 9, GroupBy: "applied-digest", Groups: []api.DeviceGroup{
		{Value: "9f2c", Count: 7, Sample: []string{"a", "b", "c", "d", "e"}},
		{Value: "none", Count: 2, Sample: []string{"f", "g"}},
	}})
	for _, want := range []string{"APPLIED-DIGEST", "a, b, c, d, e, and 2 more", "f, g", "9 devices in 2 groups"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("grouped: no %q in\n%s", want, out.String())
		}
	}
	out.Reset()
	printDeviceList(&out, &api.DeviceList{Matched: 3, Next: "pos-2", Devices: []api.DeviceSummary{
		{ID: "pos-1", Status: "failed", StatusReason: "store-net/policy: exit status 1", Intent: &api.DeviceIntent{Name: "store-net", Revision: 12, CurrentRevision: 12, State: "failed", Resources: 2, Converged: 1},
			Resource: &api.ResourceState{Key: "store-net/policy", State: "failed", AppliedDigest: "0123456789abcdef"}},
		{ID: "pos-2", Status: "converged", Intent: &api.DeviceIntent{Name: "store-net", Revision: 9, CurrentRevision: 12, State: "not-released", Resources: 2, Converged: 2}},
	}})
	for _, want := range []string{"INTENT REV", "ON INTENT", "failed (1/2)", "not-released (2/2)", "0123456789ab ", "store-net/policy: exit status 1", "2 of 3 devices shown; the next page: --after pos-2"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("listed: no %q in\n%s", want, out.String())
		}
	}
}

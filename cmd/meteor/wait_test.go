package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/meteor-edge/meteor/agent"
	"github.com/meteor-edge/meteor/agent/sim"
	"github.com/meteor-edge/meteor/cluster"
	"github.com/meteor-edge/meteor/cluster/api"
)

// TestApplyWaitJudge: a revision is done once every targeted device
// converged on it; it stops when its rollout stops, a newer revision
// replaces it, or every device settled with some failed; anything else
// is still on its way.
func TestApplyWaitJudge(t *testing.T) {
	a := applyWait{intent: "net", revision: 7}
	prog := func(rev uint64, targeted, released, converged, failed int) *api.IntentProgress {
		return &api.IntentProgress{Name: "net", Revision: rev, IntentCounts: api.IntentCounts{Targeted: targeted, Released: released, Acknowledged: released, Converged: converged, Failed: failed}}
	}
	waves := func(state, reason string) *api.RolloutStatus {
		return &api.RolloutStatus{Intent: "net", Revision: 7, State: state, Reason: reason, Wave: 2, Waves: make([]api.RolloutWave, 3)}
	}
	for _, tc := range []struct {
		name    string
		r       api.IntentReading
		done    bool
		stopped string // a part of the error, "" for none
		line    string
	}{
		{"converged", api.IntentReading{Progress: prog(7, 3, 3, 3, 0)}, true, "", "net revision 7: 3 of 3 devices converged (100%); 3 released, 3 acknowledged, 0 failed, 0 unreachable"},
		{"no device", api.IntentReading{Progress: prog(7, 0, 0, 0, 0)}, true, "", "net revision 7: targets no device"},
		{"on its way", api.IntentReading{Progress: prog(7, 1200, 1200, 1198, 1)}, false, "", "1198 of 1200 devices converged (99.8%)"},
		{"failed, others on their way", api.IntentReading{Progress: prog(7, 3, 3, 1, 1)}, false, "", "1 failed"},
		{"failed, others converged", api.IntentReading{Progress: prog(7, 3, 3, 2, 1)}, false, "1 of 3 devices failed, the other 2 converged", ""},
		{"failed, not all released", api.IntentReading{Progress: prog(7, 3, 2, 1, 1), Rollout: waves(api.RolloutProgressing, "")}, false, "", "rollout progressing, wave 2 of 3"},
		{"rollout paused", api.IntentReading{Progress: prog(7, 3, 2, 1, 1), Rollout: waves(api.RolloutPaused, "wave 2: 1 of 2 failed")}, false, "its rollout is paused: wave 2: 1 of 2 failed", ""},
		{"rollout aborted", api.IntentReading{Progress: prog(7, 3, 2, 1, 0), Rollout: waves(api.RolloutAborted, "aborted by ops")}, false, "its rollout is aborted", ""},
		{"replaced", api.IntentReading{Progress: prog(8, 3, 3, 3, 0)}, false, "revision 8 replaced it", ""},
		{"replica behind", api.IntentReading{Progress: prog(6, 3, 3, 3, 0)}, false, "", "net revision 6"},
	} {
		line, done, err := a.judge(tc.r)
		if done != tc.done {
			t.Errorf("%s: done %v, want %v", tc.name, done, tc.done)
		}
		switch {
		case tc.stopped == "" && err != nil:
			t.Errorf("%s: %v, want no error", tc.name, err)
		case tc.stopped != "" && (err == nil || !errors.Is(err, errStopped) || !strings.Contains(err.Error(), tc.stopped)):
			t.Errorf("%s: error %v, want one saying %q", tc.name, err, tc.stopped)
		}
		if !strings.Contains(line, tc.line) {
			t.Errorf("%s: line %q lacks %q", tc.name, line, tc.line)
		}
	}
}

// TestApplyWaitAndProgress runs three simulated devices against a real
// server: 'apply --wait' returns once they converged on the new revision
// and 'get progress' shows them there, with their statuses over time;
// a revision they cannot apply makes --wait fail naming them; one whose
// rollout waits for an approval makes it give up at --timeout, saying
// what is missing.
func TestApplyWaitAndProgress(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	l, err := cluster.StartLocal(ctx, cluster.LocalOptions{Servers: 1, Dir: t.TempDir(), Agents: true})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	opts := sim.DefaultOptions()
	opts.Servers, opts.CA, opts.BaseDir = l.AgentAddrs(), l.CA(), t.TempDir()
	opts.Devices, opts.Profile, opts.Seed = 3, sim.LinkFiber, 1
	opts.RampBatch, opts.RampEvery = 3, 10*time.Millisecond
	opts.Agent = func(c *agent.Config) {
		c.PullInterval, c.ReportInterval = 2*time.Second, time.Second
		c.RetryMin, c.RetryMax = 200*time.Millisecond, time.Second
	}
	fleet, err := sim.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	fctx, stopFleet := context.WithCancel(ctx)
	fleetDone := make(chan error, 1)
	go func() { fleetDone <- fleet.Run(fctx) }()
	defer func() {
		stopFleet()
		if err := <-fleetDone; err != nil && !errors.Is(err, context.Canceled) {
			t.Errorf("fleet: %v", err)
		}
	}()
	c := l.Client(0)
	for {
		st, err := c.Status(ctx, api.ReadOptions{})
		if err == nil && st.Devices == 3 {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("the devices never registered: %+v, %v", st, err)
		case <-time.After(100 * time.Millisecond):
		}
	}

	base := []string{"--addr", l.HTTPAddr(0), "--ca-cert", writeCACert(t, l.CA())}
	file := filepath.Join(t.TempDir(), "net.yaml")
	meteor := func(doc string, args ...string) (int, string, string) {
		t.Helper()
		if doc != "" {
			if err := os.WriteFile(file, []byte(doc), 0o600); err != nil {
				t.Fatal(err)
			}
		}
		return cliRun(t, append(base, args...)...)
	}

	// revisionOf is the revision an apply wrote (the cluster's revisions
	// count the devices' registrations too).
	revisionOf := func(out string) string {
		t.Helper()
		_, rest, ok := strings.Cut(out, "intent/net applied: revision ")
		rev, _, _ := strings.Cut(rest, "\n")
		if !ok || rev == "" {
			t.Fatalf("apply wrote no revision:\n%s", out)
		}
		return rev
	}
	code, out, errOut := meteor("name: net\nresources:\n  - {id: cfg, type: sim, spec: {value: v1, applyTime: 10ms}}\n", "apply", "-f", file, "--wait", "--timeout", "60s")
	rev := revisionOf(out)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if last := lines[len(lines)-1]; code != exitOK || !strings.HasSuffix(last, "net revision "+rev+": 3 of 3 devices converged (100%); 3 released, 3 acknowledged, 0 failed, 0 unreachable") {
		t.Fatalf("apply --wait: exit %d, the last progress line is %q\n%s%s", code, last, out, errOut)
	}

	code, out, errOut = meteor("", "get", "progress", "net")
	for _, want := range []string{"net revision " + rev + ", the current one (progress covers the current revision only)", "Targeted:      3 devices", "Converged:     3  (100%)", "Device statuses since the revision was written:", "CONVERGED"} {
		if code != exitOK || !strings.Contains(out, want) {
			t.Errorf("get progress: exit %d, no %q in\n%s%s", code, want, out, errOut)
		}
	}
	var p api.IntentProgress
	if _, out, _ = meteor("", "-o", "json", "get", "progress", "net"); json.Unmarshal([]byte(out), &p) != nil || fmt.Sprint(p.Revision) != rev || p.Converged != 3 || len(p.Series) == 0 {
		t.Errorf("get progress -o json: %+v\n%s", p, out)
	}
	if code, _, errOut = meteor("", "get", "progress", "nothing"); code != exitNotFound {
		t.Errorf("progress of an unknown intent: exit %d, %s", code, errOut)
	}

	// The events kept: the revision written, then each device's status
	// transitions on it; -o json prints one event a line.
	code, out, errOut = meteor("", "events", "--intent", "net", "--kind", "intent,status")
	if code != exitOK || !strings.Contains(out, "intent    put           net@"+rev) || strings.Count(out, " status    -             sim-fiber-") < 3 || !strings.Contains(out, "converged") {
		t.Errorf("events --intent net: exit %d\n%s%s", code, out, errOut)
	}
	_, out, _ = meteor("", "-o", "json", "events", "--device", "sim-fiber-0001")
	var kinds []string
	for line := range strings.Lines(out) {
		var e api.Event
		if err := json.Unmarshal([]byte(line), &e); err != nil || e.Device != "sim-fiber-0001" || e.ID == "" {
			t.Fatalf("events -o json: line %q: %+v, %v", line, e, err)
		}
		kinds = append(kinds, e.Kind+"/"+e.Action)
	}
	if !slices.Contains(kinds, "device/registered") || !slices.Contains(kinds, "session/connected") || !slices.Contains(kinds, "status/") {
		t.Errorf("events --device sim-fiber-0001: %v, want its registration, connection and status", kinds)
	}
	if code, _, errOut = meteor("", "events", "--kind", "weather"); code == exitOK || !strings.Contains(errOut, "weather") {
		t.Errorf("events --kind weather: exit %d, %s", code, errOut)
	}

	// A simulated device refuses file resources: each one fails.
	code, out, errOut = meteor("name: net\nresources:\n  - {id: cfg, type: sim, spec: {value: v1, applyTime: 10ms}}\n  - {id: motd, type: file, spec: {path: /etc/motd, content: hi}}\n", "apply", "-f", file, "--wait", "--timeout", "60s")
	if code != exitError || !strings.Contains(errOut, "intent net revision "+revisionOf(out)+": stopped: 3 of 3 devices failed; failed: sim-") || !strings.Contains(errOut, "; failed: sim-") ||
		!strings.Contains(errOut, "(meteor get devices --intent net --intent-state failed)") {
		t.Fatalf("apply --wait of a failing revision: exit %d\n%s%s", code, out, errOut)
	}

	// describe device puts the device's status in words beside its
	// owner's reason, each resource's three states side by side, and its
	// latest transitions.
	code, out, errOut = meteor("", "describe", "device", "sim-fiber-0001")
	for _, want := range []string{
		"Device:     sim-fiber-0001\n",
		"(reported by the device, trusted by this cluster)",
		"Connected:  yes, to " + l.ID(0) + ", session ",
		"Status:     failed - the last apply failed; the agent retries with backoff unless the error is terminal (since ",
		"            why: net/motd: apply failed (attempt 1, terminal): unknown resource type \"file\": not simulated",
		"KEY       STATE      STATUS     INTENDED",
		"\n  net/cfg   converged  ",
		"\n  net/motd  failed     ",
		"error: unknown resource type",
		"Timeline of sim-fiber-0001 (oldest first):",
	} {
		if code != exitOK || !strings.Contains(out, want) {
			t.Errorf("describe device: exit %d, no %q in\n%s%s", code, want, out, errOut)
		}
	}
	if !regexp.MustCompile(`(?m)^  \S+ +\d+ +converged +`+l.ID(0)+` `).MatchString(out) || !regexp.MustCompile(`(?m)^  \S+ +\d+ +failed +`+l.ID(0)+` +net/motd: apply failed`).MatchString(out) {
		t.Errorf("describe device: the timeline lacks the converged and the failed transition:\n%s", out)
	}
	var desc struct {
		Device struct {
			ID     string           `yaml:"id"`
			States []map[string]any `yaml:"resource_states"`
		} `yaml:"device"`
		Timeline struct {
			Entries []map[string]any `yaml:"entries"`
		} `yaml:"timeline"`
	}
	_, out, _ = meteor("", "-o", "yaml", "describe", "device", "sim-fiber-0001")
	if err := yaml.Unmarshal([]byte(out), &desc); err != nil || desc.Device.ID != "sim-fiber-0001" || len(desc.Device.States) != 2 || len(desc.Timeline.Entries) == 0 {
		t.Errorf("describe device -o yaml: %v\n%s", err, out)
	}
	if code, _, errOut = meteor("", "describe", "device", "nothing"); code != exitNotFound {
		t.Errorf("describe of an unknown device: exit %d, %s", code, errOut)
	}

	code, out, errOut = meteor("name: net\nresources:\n  - {id: cfg, type: sim, spec: {value: v2, applyTime: 10ms}}\nrollout:\n  waves:\n    - {name: pilot, count: 1, approval: true}\n",
		"apply", "-f", file, "--wait", "--timeout", "3s")
	if code != exitError || !strings.Contains(errOut, "gave up waiting for intent net revision "+revisionOf(out)+": 0 of 3 devices converged, 3 not released yet") ||
		!strings.Contains(out, "rollout waiting-approval, wave 1 of 1 - wave 1 (pilot) waits for approval") {
		t.Fatalf("apply --wait past the timeout: exit %d\n%s%s", code, out, errOut)
	}
}

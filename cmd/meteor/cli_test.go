package main

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/meteor-edge/meteor/cluster"
	"github.com/meteor-edge/meteor/cluster/api"
)

// cliRun runs a command line as main does and returns its exit status,
// stdout and stderr.
func cliRun(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code := execute(context.Background(), newRootCmd(), args, &out, &errOut)
	return code, out.String(), errOut.String()
}

// TestCommandLineErrors: an unknown command or subcommand, a group run
// without its subcommand and an unknown flag or -o value are usage errors:
// exit status 2, the error and the command's usage on stderr, nothing on
// stdout. The bare root still prints its help.
func TestCommandLineErrors(t *testing.T) {
	for _, tc := range []struct {
		args      []string
		err       string
		usageOf   string
		available string
	}{
		{[]string{"frob"}, `unknown command "frob" for "meteor"`, "meteor [command]", "apply"},
		{[]string{"get", "foo"}, `unknown command "foo" for "meteor get"`, "meteor get [command]", "devices"},
		{[]string{"get", "devcies"}, `(did you mean devices?)`, "meteor get [command]", "intents"},
		{[]string{"delete"}, `"meteor delete" needs a subcommand: intent`, "meteor delete [command]", "intent"},
		{[]string{"rollout"}, `"meteor rollout" needs a subcommand: `, "meteor rollout [command]", "approve"},
		{[]string{"get", "--bogus"}, "unknown flag: --bogus", "meteor get [command]", "devices"},
		{[]string{"-o", "xml", "get", "intents"}, `-o "xml": the output format is one of table, json, yaml`, "meteor get intents", "--stale"},
	} {
		code, out, errOut := cliRun(t, tc.args...)
		if code != exitUsage || out != "" {
			t.Errorf("meteor %s: exit %d, stdout %q; want exit %d and nothing", strings.Join(tc.args, " "), code, out, exitUsage)
		}
		first, usage, _ := strings.Cut(errOut, "\n")
		if !strings.HasPrefix(first, "Error: ") || !strings.Contains(first, tc.err) {
			t.Errorf("meteor %s: first line %q, want the error %q", strings.Join(tc.args, " "), first, tc.err)
		}
		if !strings.Contains(usage, "Usage:\n  "+tc.usageOf) || !strings.Contains(usage, tc.available) {
			t.Errorf("meteor %s: no usage of %q on stderr:\n%s", strings.Join(tc.args, " "), tc.usageOf, errOut)
		}
	}
	if code, out, _ := cliRun(t); code != exitOK || !strings.Contains(out, "Available Commands:") {
		t.Errorf("meteor: exit %d, want its help:\n%s", code, out)
	}
}

// TestVersionOutput: 'meteor version' prints the version as text, JSON or
// YAML.
func TestVersionOutput(t *testing.T) {
	if _, out, _ := cliRun(t, "version"); out != "meteor "+cluster.Version+"\n" {
		t.Errorf("version: %q", out)
	}
	var v versionInfo
	_, out, _ := cliRun(t, "version", "-o", "json")
	if err := json.Unmarshal([]byte(out), &v); err != nil || v.Version != cluster.Version {
		t.Errorf("version -o json: %q (%v)", out, err)
	}
	if _, out, _ := cliRun(t, "-o", "yaml", "version"); out != "version: "+cluster.Version+"\n" {
		t.Errorf("version -o yaml: %q", out)
	}
}

// TestYAMLIsTheJSONValue: -o yaml prints the value -o json prints, field
// for field and in the same order, with strings that would read as
// another type quoted.
func TestYAMLIsTheJSONValue(t *testing.T) {
	since := time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
	d := &api.Device{
		DeviceSummary: api.DeviceSummary{ID: "pos-1", Labels: map[string]string{"store": "042", "pilot": "true"}, Connected: true,
			DesiredRevision: 12, Counts: map[string]int{"converged": 2}, StatusSince: &since},
		States: []api.ResourceState{{Key: "net/motd", State: "converged", AppliedDigest: "1234", Attempts: 2}},
	}
	var y bytes.Buffer
	if err := printValue(&y, outputYAML, d); err != nil {
		t.Fatal(err)
	}
	var fromYAML, fromJSON any
	if err := yaml.Unmarshal(y.Bytes(), &fromYAML); err != nil {
		t.Fatalf("the YAML does not parse: %v\n%s", err, y.String())
	}
	b, _ := json.Marshal(d)
	if err := json.Unmarshal(b, &fromJSON); err != nil {
		t.Fatal(err)
	}
	// Through JSON, numbers of both become float64 and times strings.
	yj, err := json.Marshal(fromYAML)
	if err != nil {
		t.Fatal(err)
	}
	var back any
	json.Unmarshal(yj, &back)
	if a, b := mustJSON(t, back), mustJSON(t, fromJSON); a != b {
		t.Errorf("YAML value\n%s\n is not the JSON value\n%s", a, b)
	}
	for _, want := range []string{"id: pos-1\n", "store: \"042\"", "pilot: \"true\"", "applied_digest: \"1234\"", "desired_revision: 12\n", "resource_states:\n  - key: net/motd"} {
		if !strings.Contains(y.String(), want) {
			t.Errorf("YAML lacks %q:\n%s", want, y.String())
		}
	}
	if strings.Index(y.String(), "id:") > strings.Index(y.String(), "connected:") {
		t.Errorf("fields out of the JSON's order:\n%s", y.String())
	}
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestWording: counts take the word their number takes, and a share
// short of the whole never shows as 100 %, nor a share above none as 0 %.
func TestWording(t *testing.T) {
	for _, tc := range []struct {
		n    uint64
		want string
	}{{0, "0 devices"}, {1, "1 device"}, {2, "2 devices"}} {
		if got := plural(tc.n, "device", "devices"); got != tc.want {
			t.Errorf("plural(%d) = %q, want %q", tc.n, got, tc.want)
		}
	}
	for _, tc := range []struct {
		n, total int
		want     string
	}{
		{1198, 1200, "99.8%"}, {11999, 12000, "99.99%"}, {1200, 1200, "100%"}, {600, 1200, "50%"},
		{1, 1200, "0.1%"}, {1, 12000, "0.01%"}, {0, 1200, "0%"}, {1, 3, "33%"}, {1, 12, "8.3%"}, {0, 0, "-"}, {5, 4, "100%"},
	} {
		if got := percent(tc.n, tc.total); got != tc.want {
			t.Errorf("percent(%d, %d) = %q, want %q", tc.n, tc.total, got, tc.want)
		}
	}
}

// TestLogFlags: server, agent, dev and sim take --log-level and
// --log-json (cliflags.Logs, tested in its package).
func TestLogFlags(t *testing.T) {
	root := newRootCmd()
	for _, name := range []string{"server", "agent", "dev", "sim"} {
		cmd, _, err := root.Find([]string{name})
		if err != nil || cmd.Flags().Lookup("log-json") == nil || cmd.Flags().Lookup("log-level") == nil {
			t.Errorf("meteor %s: no --log-json or --log-level (%v)", name, err)
		}
	}
}

package intent

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"go.yaml.in/yaml/v3"
)

// sameIntent are the same intent written in YAML and in JSON.
var sameIntent = []struct {
	name, yaml, json string
}{
	{
		name: "file and exec",
		yaml: `
# Store firewall.
name: store-net
selector:
  role: store-gateway
  region: "*"
resources:
  - id: ruleset
    type: file
    class: network-policy
    spec:
      path: /etc/nftables.d/meteor-store.nft
      mode: "0640"
      content: |
        table inet meteor_store {
        }
  - id: load
    type: exec
    requires: [ruleset]
    drift: report
    spec:
      check: [nft, -c, -f, /etc/nftables.d/meteor-store.nft]
      apply: [/usr/sbin/nft, -f, /etc/nftables.d/meteor-store.nft]
      timeout: 30s
      env: {LANG: C}
    probe:
      command: [nft, list, table, inet, meteor_store]
rollout:
  strategy: waves
  waves: [5, 25, 100, {name: everyone, percent: 100%, approval: true, gate: {hold: 1h}}]
  onFailure: {threshold: 1.5, action: revert}
  window: "02:00-05:00"
`,
		json: `{
  "name": "store-net",
  "selector": {"region": "*", "role": "store-gateway"},
  "resources": [
    {
      "id": "ruleset", "type": "file", "class": "network-policy",
      "spec": {
        "path": "/etc/nftables.d/meteor-store.nft",
        "mode": "0640",
        "content": "table inet meteor_store {\n}\n"
      }
    },
    {
      "id": "load", "type": "exec", "requires": ["ruleset"], "drift": "report",
      "spec": {
        "check": ["nft", "-c", "-f", "/etc/nftables.d/meteor-store.nft"],
        "apply": ["/usr/sbin/nft", "-f", "/etc/nftables.d/meteor-store.nft"],
        "timeout": "30s",
        "env": {"LANG": "C"}
      },
      "probe": {"command": ["nft", "list", "table", "inet", "meteor_store"]}
    }
  ],
  "rollout": {
    "strategy": "waves",
    "waves": [5, 25.0, 1e2, {"name": "everyone", "percent": "100%", "approval": true, "gate": {"hold": "1h"}}],
    "onFailure": {"threshold": 1.5, "action": "revert"}, "window": "02:00-05:00"
  }
}`,
	},
	{
		name: "sim numbers",
		yaml: `
name: kiosk-sim
selector: {link: cellular}
resources:
  - id: a
    type: sim
    spec: {value: 5.0, failureRate: 0, applyTime: 0s}
    probe: {driftRate: 0.25}
  - id: b
    type: sim
    spec: {value: 2024-11-27}
    requires: [a]
  - id: c
    type: sim
    spec: {value: 18446744073709551615}
    probe: {}
  - id: d
    type: sim
    spec: {value: -9223372036854775808}
rollout: {maxParallel: 9223372036854775807, gate: {converged: 1e-9}, window: null}
`,
		json: `{"name": "kiosk-sim", "selector": {"link": "cellular"}, "resources": [
  {"id": "a", "type": "sim", "spec": {"value": 5, "failureRate": 0.0, "applyTime": "0s"}, "probe": {"driftRate": 0.25}},
  {"id": "b", "type": "sim", "spec": {"value": "2024-11-27"}, "requires": ["a"]},
  {"id": "c", "type": "sim", "spec": {"value": 1.8446744073709551615e19}},
  {"id": "d", "type": "sim", "spec": {"value": -9223372036854775808}}
], "rollout": {"maxParallel": 9223372036854775807, "gate": {"converged": 0.000000001}, "window": null}}`,
	},
}

func TestParseYAMLAndJSONAgree(t *testing.T) {
	for _, tc := range sameIntent {
		t.Run(tc.name, func(t *testing.T) {
			fromYAML, err := Parse([]byte(tc.yaml))
			if err != nil {
				t.Fatalf("Parse(yaml): %v", err)
			}
			fromJSON, err := Parse([]byte(tc.json))
			if err != nil {
				t.Fatalf("Parse(json): %v", err)
			}
			if diff := cmp.Diff(fromYAML, fromJSON); diff != "" {
				t.Errorf("YAML and JSON differ (-yaml +json):\n%s", diff)
			}
			for i := range fromYAML.Resources {
				if got, want := fromJSON.Resources[i].Digest(), fromYAML.Resources[i].Digest(); got != want {
					t.Errorf("resources[%d]: JSON digest %s, YAML digest %s", i, got, want)
				}
			}
			checkCanonicalRoundTrip(t, fromYAML)
		})
	}
}

func TestParseNumbers(t *testing.T) {
	in, err := Parse([]byte(sameIntent[1].yaml))
	if err != nil {
		t.Fatal(err)
	}
	got := []any{
		in.Resources[0].Spec["value"], in.Resources[0].Spec["failureRate"], in.Resources[0].Probe["driftRate"],
		in.Resources[1].Spec["value"], in.Resources[2].Spec["value"], in.Resources[2].Probe,
		in.Rollout["maxParallel"], in.Resources[3].Spec["value"], in.Rollout["gate"].(map[string]any)["converged"], in.Rollout["window"],
	}
	want := []any{
		int64(5), int64(0), 0.25,
		"2024-11-27", float64(18446744073709551615), map[string]any(nil),
		int64(9223372036854775807), int64(-9223372036854775808), 1e-9, nil,
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("decoded values (-want +got):\n%s", diff)
	}
}

// checkCanonicalRoundTrip checks that Parse of in's canonical encoding
// gives back in, and that encoding is stable.
func checkCanonicalRoundTrip(t *testing.T, in *Intent) {
	t.Helper()
	b, err := in.Canonical()
	if err != nil {
		t.Fatalf("Canonical: %v", err)
	}
	again, err := Parse(b)
	if err != nil {
		t.Fatalf("Parse(Canonical()): %v\n%s", err, b)
	}
	if diff := cmp.Diff(in, again); diff != "" {
		t.Errorf("Parse(Canonical()) differs (-want +got):\n%s", diff)
	}
	b2, err := again.Canonical()
	if err != nil {
		t.Fatalf("Canonical: %v", err)
	}
	if string(b) != string(b2) {
		t.Errorf("Canonical not stable:\n%s\n%s", b, b2)
	}
}

func TestParseAll(t *testing.T) {
	stream := `
---
name: store-net
resources: [{id: a, type: sim, spec: {value: 1}}]
---
# comments only
---
name: store-logging
resources: [{id: a, type: sim, spec: {value: 2}}]
...
`
	got, err := ParseAll([]byte(stream))
	if err != nil {
		t.Fatal(err)
	}
	want := []*Intent{
		{Name: "store-net", Resources: []Resource{{ID: "a", Type: TypeSim, Spec: map[string]any{"value": int64(1)}}}},
		{Name: "store-logging", Resources: []Resource{{ID: "a", Type: TypeSim, Spec: map[string]any{"value": int64(2)}}}},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("ParseAll (-want +got):\n%s", diff)
	}
	// Parse takes a single intent among empty documents.
	one, err := Parse([]byte("---\n# nothing\n---\n" + "name: x\nresources: [{id: a, type: sim, spec: {value: 1}}]\n"))
	if err != nil || one.Name != "x" {
		t.Errorf("Parse with empty documents = %v, %v", one, err)
	}
}

func TestParseAllErrors(t *testing.T) {
	for _, tc := range []struct {
		name, stream, want string
	}{
		{
			name:   "empty",
			stream: "---\n---\n",
			want:   `intent: empty document`,
		},
		{
			name: "duplicate name",
			stream: `name: store-net
resources: [{id: a, type: sim, spec: {value: 1}}]
---
name: store-logging
resources: [{id: a, type: sim, spec: {value: 1}}]
---
resources: [{id: a, type: sim, spec: {value: 1}}]
name: store-net
`,
			want: `intent "store-net": name: duplicate intent name (first at line 1) (line 8)`,
		},
		{
			name: "error in second document",
			stream: `name: store-net
resources: [{id: a, type: sim, spec: {value: 1}}]
---
name: store-logging
resources: [{id: a, type: sim, spec: {valu: 1}}]
`,
			want: `intent "store-logging": resources[0].spec.valu: unknown field; allowed: applyTime, failureRate, value (line 5)`,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseAll([]byte(tc.stream))
			if err == nil {
				t.Fatal("ParseAll succeeded")
			}
			if diff := cmp.Diff(tc.want, err.Error()); diff != "" {
				t.Errorf("error (-want +got):\n%s", diff)
			}
			var verr *ValidationError
			if !errors.As(err, &verr) {
				t.Errorf("error is %T, want *ValidationError", err)
			}
		})
	}
}

// TestExamples checks that every example document parses, validates, and
// means the same when converted to JSON.
func TestExamples(t *testing.T) {
	files, err := filepath.Glob("../../docs/examples/*.yaml")
	if err != nil {
		t.Fatal(err)
	}
	retail, err := filepath.Glob("../../docs/examples/retail/*.yaml")
	if err != nil {
		t.Fatal(err)
	}
	files = append(files, retail...)
	if len(files) < 4 {
		t.Fatalf("found %d examples, want at least 4", len(files))
	}
	for _, file := range files {
		t.Run(filepath.Base(file), func(t *testing.T) {
			data, err := os.ReadFile(file)
			if err != nil {
				t.Fatal(err)
			}
			in, err := Parse(data)
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			if err := in.Validate(); err != nil {
				t.Fatalf("Validate: %v", err)
			}
			if want := strings.TrimSuffix(filepath.Base(file), ".yaml"); in.Name != want {
				t.Errorf("intent name %q, want the file name %q", in.Name, want)
			}
			checkCanonicalRoundTrip(t, in)

			// The same document converted to JSON by another decoder.
			var generic any
			if err := yaml.Unmarshal(data, &generic); err != nil {
				t.Fatal(err)
			}
			asJSON, err := json.Marshal(generic)
			if err != nil {
				t.Fatal(err)
			}
			fromJSON, err := Parse(asJSON)
			if err != nil {
				t.Fatalf("Parse(JSON): %v", err)
			}
			if diff := cmp.Diff(in, fromJSON); diff != "" {
				t.Errorf("YAML and JSON differ (-yaml +json):\n%s", diff)
			}
		})
	}
}

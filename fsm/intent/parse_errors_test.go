package intent

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// badDocs are documents Parse must reject, each with the exact message.
var badDocs = []struct {
	name string
	doc  string
	want string
}{
	{
		name: "syntax error",
		doc:  "name: store-net\nresources: [\n",
		want: `intent: invalid YAML: did not find expected node content (line 2)`,
	},
	{
		name: "empty",
		doc:  "# nothing here\n",
		want: `intent: empty document`,
	},
	{
		name: "two documents",
		doc:  "name: a\n---\nname: b\n",
		want: `intent: found 2 documents, want 1 (line 2)`,
	},
	{
		name: "root is a list",
		doc:  "- name: store-net\n",
		want: `intent: must be a mapping, got list (line 1)`,
	},
	{
		name: "name missing",
		doc: `selector: {role: pos}
resources:
  - {id: a, type: sim, spec: {value: 1}}
`,
		want: `intent: name: required (line 1)`,
	},
	{
		name: "name not a label",
		doc: `resources:
  - {id: a, type: sim, spec: {value: 1}}
name: Store_Net
`,
		want: `intent: name: must be a DNS label: a-z, 0-9 and '-', starting and ending with a letter or digit (line 3)`,
	},
	{
		name: "name too long",
		doc:  "name: " + strings.Repeat("a", 64) + "\nresources: [{id: a, type: sim, spec: {value: 1}}]\n",
		want: `intent: name: must be at most 63 characters, got 64 (line 1)`,
	},
	{
		name: "name not a string",
		doc:  "name: 42\nresources: []\n",
		want: `intent: name: must be a string, got integer (line 1)`,
	},
	{
		name: "unknown top-level field",
		doc:  "name: store-net\nresource: []\n",
		want: `intent "store-net": resource: unknown field (line 2)`,
	},
	{
		name: "unknown resource field",
		doc: `name: store-net
resources:
  - id: a
    type: sim
    spec: {value: 1}
  - id: b
    type: sim
    sepc: {value: 2}
`,
		want: `intent "store-net": resources[1].sepc: unknown field (line 8)`,
	},
	{
		name: "duplicate field",
		doc: `name: store-net
resources:
  - id: a
    type: sim
    spec:
      value: 1
      value: 2
`,
		want: `intent "store-net": resources[0].spec.value: duplicate field (first at line 6) (line 7)`,
	},
	{
		name: "duplicate field in JSON",
		doc:  `{"name": "store-net", "name": "other", "resources": []}`,
		want: `intent "store-net": name: duplicate field (first at line 1) (line 1)`,
	},
	{
		name: "merge key",
		doc: `name: store-net
base: &base {value: 1}
resources:
  - id: a
    type: sim
    spec:
      <<: *base
`,
		want: `intent "store-net": base: unknown field (line 2)`,
	},
	{
		name: "merge key in spec",
		doc: `name: store-net
resources:
  - id: a
    type: sim
    spec: &s {value: 1}
  - id: b
    type: sim
    spec:
      <<: *s
`,
		want: `intent "store-net": resources[1].spec: merge keys (<<) are not supported (line 9)`,
	},
	{
		name: "non-string key",
		doc: `name: store-net
resources:
  - id: a
    type: sim
    spec:
      value: 1
      7: seven
`,
		want: `intent "store-net": resources[0].spec: field names must be strings, got integer (line 7)`,
	},
	{
		name: "binary value",
		doc:  "name: store-net\nrollout:\n  blob: !!binary aGVsbG8=\nresources: []\n",
		want: `intent "store-net": rollout.blob: binary values are not supported; use a base64 string (line 3)`,
	},
	{
		name: "not a number",
		doc:  "name: store-net\nresources:\n  - {id: a, type: sim, spec: {value: .nan}}\n",
		want: `intent "store-net": resources[0].spec.value: must be a finite number (line 3)`,
	},
	{
		name: "resources not a list",
		doc:  "name: store-net\nresources: {id: a}\n",
		want: `intent "store-net": resources: must be a list, got mapping (line 2)`,
	},
	{
		name: "no resources",
		doc:  "name: store-net\nselector: {role: pos}\nresources: []\n",
		want: `intent "store-net": resources: at least one resource is required (line 3)`,
	},
	{
		name: "too many resources",
		doc:  "name: store-net\nresources:\n" + strings.Repeat("  - {id: a, type: sim, spec: {value: 1}}\n", MaxResources+1),
		want: `intent "store-net": resources: at most 256 resources are allowed, got 257 (line 2)`,
	},
	{
		name: "resource not a mapping",
		doc:  "name: store-net\nresources:\n  - a\n",
		want: `intent "store-net": resources[0]: must be a mapping, got string (line 3)`,
	},
	{
		name: "selector key",
		doc: `name: store-net
selector:
  role: pos
  meteor.io/: x
resources: [{id: a, type: sim, spec: {value: 1}}]
`,
		want: `intent "store-net": selector["meteor.io/"]: invalid label key: the name must be 1-63 of A-Z, a-z, 0-9, '.', '_' and '-', starting and ending with a letter or digit (line 4)`,
	},
	{
		name: "selector key prefix",
		doc: `name: store-net
selector:
  Meteor.IO/role: pos
resources: [{id: a, type: sim, spec: {value: 1}}]
`,
		want: `intent "store-net": selector["Meteor.IO/role"]: invalid label key: the prefix must be a DNS subdomain (line 3)`,
	},
	{
		name: "selector value",
		doc: `name: store-net
selector:
  site: store 42
resources: [{id: a, type: sim, spec: {value: 1}}]
`,
		want: `intent "store-net": selector.site: invalid label value: must be "*" or at most 63 of A-Z, a-z, 0-9, '.', '_' and '-', starting and ending with a letter or digit (line 3)`,
	},
	{
		name: "selector value not a string",
		doc:  "name: store-net\nselector:\n  floor: 2\nresources: []\n",
		want: `intent "store-net": selector.floor: must be a string, got integer (line 3)`,
	},
	{
		name: "id missing",
		doc: `name: store-net
resources:
  - type: sim
    spec: {value: 1}
`,
		want: `intent "store-net": resources[0].id: required (line 3)`,
	},
	{
		name: "duplicate id",
		doc: `name: store-net
resources:
  - {id: a, type: sim, spec: {value: 1}}
  - {id: b, type: sim, spec: {value: 1}}
  - {id: a, type: sim, spec: {value: 1}}
`,
		want: `intent "store-net": resources[2].id: duplicate id "a" (first in resources[0]) (line 5)`,
	},
	{
		name: "unknown type",
		doc:  "name: store-net\nresources:\n  - id: a\n    type: fiel\n    spec: {path: /etc/a}\n",
		want: `intent "store-net": resources[0].type: unknown type "fiel"; allowed: certificate, exec, file, sim (line 4)`,
	},
	{
		name: "class not a label",
		doc:  "name: store-net\nresources:\n  - id: a\n    type: sim\n    class: Network_Policy\n    spec: {value: 1}\n",
		want: `intent "store-net": resources[0].class: must be a DNS label: a-z, 0-9 and '-', starting and ending with a letter or digit (line 5)`,
	},
	{
		name: "drift policy",
		doc:  "name: store-net\nresources:\n  - id: a\n    type: sim\n    spec: {value: 1}\n    drift: ignore\n",
		want: `intent "store-net": resources[0].drift: unknown drift policy "ignore"; allowed: correct, tolerate, report (line 6)`,
	},
	{
		name: "requires unknown",
		doc: `name: store-net
resources:
  - id: a
    type: sim
    spec: {value: 1}
    requires: [b]
`,
		want: `intent "store-net": resources[0].requires[0]: unknown resource "b" (line 6)`,
	},
	{
		name: "requires itself",
		doc: `name: store-net
resources:
  - id: a
    type: sim
    spec: {value: 1}
    requires:
      - a
`,
		want: `intent "store-net": resources[0].requires[0]: resource cannot require itself (line 7)`,
	},
	{
		name: "requires twice",
		doc: `name: store-net
resources:
  - {id: a, type: sim, spec: {value: 1}}
  - id: b
    type: sim
    spec: {value: 1}
    requires:
      - a
      - a
`,
		want: `intent "store-net": resources[1].requires[1]: duplicate requirement "a" (line 9)`,
	},
	{
		name: "requires cycle",
		doc: `name: store-net
resources:
  - id: a
    type: sim
    spec: {value: 1}
    requires: [c]
  - id: b
    type: sim
    spec: {value: 1}
    requires: [a]
  - id: c
    type: sim
    spec: {value: 1}
    requires: [b]
`,
		want: `intent "store-net": resources[0].requires: cycle a -> c -> b -> a (line 6)`,
	},
	{
		name: "spec missing",
		doc:  "name: store-net\nresources:\n  - id: a\n    type: sim\n",
		want: `intent "store-net": resources[0].spec: required (line 3)`,
	},
	{
		name: "spec not a mapping",
		doc:  "name: store-net\nresources:\n  - id: a\n    type: sim\n    spec: [1]\n",
		want: `intent "store-net": resources[0].spec: must be a mapping, got list (line 5)`,
	},
	{
		name: "probe not a mapping",
		doc:  "name: store-net\nresources:\n  - id: a\n    type: sim\n    spec: {value: 1}\n    probe: true\n",
		want: `intent "store-net": resources[0].probe: must be a mapping, got boolean (line 6)`,
	},
	{
		name: "rollout not a mapping",
		doc:  "name: store-net\nresources:\n  - {id: a, type: sim, spec: {value: 1}}\nrollout: [5, 25, 100]\n",
		want: `intent "store-net": rollout: must be a mapping, got list (line 4)`,
	},
	{
		name: "nested too deeply",
		doc:  "name: store-net\nresources:\n  - id: a\n    type: sim\n    spec: {value: 1}\nrollout: {a: " + strings.Repeat("[", 40) + strings.Repeat("]", 40) + "}\n",
		want: `intent "store-net": rollout.a` + strings.Repeat("[0]", 32) + `: nested too deeply (more than 32 levels) (line 6)`,
	},
	{
		name: "JSON with a path error",
		doc:  `{"name": "store-net", "resources": [{"id": "a", "type": "file", "spec": {"path": "a", "content": ""}}]}`,
		want: `intent "store-net": resources[0].spec.path: must be absolute (line 1)`,
	},
	{
		name: "written before missing",
		doc: `name: store-net
resources:
  - id: a
    type: file
    spec:
      pth: /etc/a
      content: x
`,
		want: `intent "store-net": resources[0].spec.pth: unknown field; allowed: content, contentBase64, mode, path (line 6)`,
	},
	{
		name: "first error in document order",
		doc: `name: store-net
resources:
  - id: b
    type: file
    spec:
      content: x
      path: relative
    requires: [nope]
  - id: A
    type: sim
    spec: {value: 1}
selector: {role: "no way"}
`,
		want: `intent "store-net": resources[0].spec.path: must be absolute (line 7)`,
	},
}

func TestParseErrors(t *testing.T) {
	cases := append(badDocs, specBadDocs...)
	for _, c := range certDocs {
		c.doc = withPEM(t, c.doc)
		cases = append(cases, c)
	}
	if len(cases) < 25 {
		t.Fatalf("only %d bad documents", len(cases))
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			in, err := Parse([]byte(tc.doc))
			if err == nil {
				t.Fatalf("Parse succeeded: %+v", in)
			}
			if got := err.Error(); got != tc.want {
				t.Errorf("Parse error\n got: %s\nwant: %s", got, tc.want)
			}
			var verr *ValidationError
			if !errors.As(err, &verr) {
				t.Errorf("Parse error is %T, want *ValidationError", err)
			}
		})
	}
}

func TestParseTooLarge(t *testing.T) {
	doc := []byte("name: big\n# " + strings.Repeat("x", MaxDocumentSize) + "\n")
	for name, parse := range map[string]func([]byte) error{
		"Parse":    func(b []byte) error { _, err := Parse(b); return err },
		"ParseAll": func(b []byte) error { _, err := ParseAll(b); return err },
	} {
		err := parse(doc)
		if !errors.Is(err, ErrTooLarge) {
			t.Errorf("%s: error %v, want ErrTooLarge", name, err)
		}
	}
	_, err := Parse(doc)
	want := fmt.Sprintf("parse intent: intent document too large: %d bytes, limit 1048576", len(doc))
	if diff := cmp.Diff(want, err.Error()); diff != "" {
		t.Errorf("error (-want +got):\n%s", diff)
	}
}

func TestParseAliasBudget(t *testing.T) {
	// Each level doubles the values; without a budget this is a billion.
	var b strings.Builder
	b.WriteString("name: bomb\nresources: [{id: a, type: sim, spec: {value: 1}}]\nrollout:\n  l0: &l0 [x, x]\n")
	for i := 1; i < 30; i++ {
		fmt.Fprintf(&b, "  l%d: &l%d [*l%d, *l%d]\n", i, i, i-1, i-1)
	}
	_, err := Parse([]byte(b.String()))
	var verr *ValidationError
	if !errors.As(err, &verr) || !strings.Contains(verr.Msg, "more than 100000 values") {
		t.Fatalf("Parse error %v, want the value budget", err)
	}
}

// TestJSONSyntaxErrors: a document that opens a JSON object and does not
// parse is reported as invalid JSON at the line and column the JSON
// parser stopped, alone or in a stream; broken YAML stays invalid YAML.
func TestJSONSyntaxErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		doc  string
		all  bool
		want string
	}{
		{"truncated", "{\"name\": \"store-net\",\n \"resources\": [\n", false,
			`intent: invalid JSON: unexpected end of JSON input (line 2, column 16)`},
		{"bad character", "{\"name\": \"store-net\",\n \"resources\": [}\n", false,
			`intent: invalid JSON: invalid character '}' looking for beginning of value (line 2, column 16)`},
		{"in a stream", "{\"name\": \"a\", \"resources\": [{\"id\": \"x\", \"type\": \"sim\", \"spec\": {\"value\": 1}}]}\n---\n{\"name\": \"b\",\n\"resources\": [\n", true,
			`intent: invalid JSON: unexpected end of JSON input (line 4, column 15)`},
		{"YAML in a stream of JSON", "{\"name\": \"a\", \"resources\": [{\"id\": \"x\", \"type\": \"sim\", \"spec\": {\"value\": 1}}]}\n---\nname: b\nresources: [\n", true,
			`intent: invalid YAML: did not find expected node content (line 4)`},
		{"YAML", "name: store-net\nresources: [\n", false,
			`intent: invalid YAML: did not find expected node content (line 2)`},
	} {
		var err error
		if tc.all {
			_, err = ParseAll([]byte(tc.doc))
		} else {
			_, err = Parse([]byte(tc.doc))
		}
		if err == nil || err.Error() != tc.want {
			t.Errorf("%s:\n got %v\nwant %s", tc.name, err, tc.want)
		}
		var ve *ValidationError
		if !errors.As(err, &ve) {
			t.Errorf("%s: %T, not a *ValidationError", tc.name, err)
		}
	}
	// Well-formed JSON parses as it did.
	if _, err := Parse([]byte(`{"name": "a", "resources": [{"id": "x", "type": "sim", "spec": {"value": 1}}]}`)); err != nil {
		t.Errorf("JSON document: %v", err)
	}
}

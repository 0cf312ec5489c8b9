package intent

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"go.yaml.in/yaml/v3"
)

// yamlDocument is the one document the YAML parser reads from data.
func yamlDocument(t testing.TB, data []byte) *yaml.Node {
	t.Helper()
	docs, err := documents(data)
	if err != nil || len(docs) != 1 {
		t.Fatalf("the YAML parser on %q: %d documents, %v", data, len(docs), err)
	}
	return docs[0]
}

// nodeView is what the decoder reads of a node.
type nodeView struct {
	Kind         yaml.Kind
	Tag, Value   string
	Line, Column int
	Content      []nodeView
}

func viewOf(n *yaml.Node) nodeView {
	v := nodeView{Kind: n.Kind, Tag: n.ShortTag(), Value: n.Value, Line: n.Line, Column: n.Column}
	if n.Kind != yaml.ScalarNode {
		v.Value = ""
	}
	for _, c := range n.Content {
		v.Content = append(v.Content, viewOf(c))
	}
	return v
}

// checkSameTree fails unless jsonDocument takes data and builds the tree
// the YAML parser builds.
func checkSameTree(t *testing.T, data []byte) {
	t.Helper()
	got, ok := jsonDocument(data)
	if !ok {
		t.Fatalf("jsonDocument declined strict JSON %q", data)
	}
	if diff := cmp.Diff(viewOf(yamlDocument(t, data)), viewOf(got)); diff != "" {
		t.Fatalf("jsonDocument(%q) differs from the YAML parser (-yaml +json):\n%s", data, diff)
	}
}

func TestJSONDocumentBuildsTheYAMLParsersTree(t *testing.T) {
	docs := []string{
		`{}`,
		`{"name":"a"}`,
		"\n\n  {\n  \"name\" : \"a\",\n\t\"n\": [1, -2, 3.5, 1e3, -0, 0.25E-2, 12345678901234567890, true, false, null, [], {}]\n}\n",
		`{"s": "é and ü then \"quoted\" \\ \b\f\n\r\t \u00e9\u4e2d"}`,
		"{\"ünïcödé\": {\"k\":   \"v\"}, \"x\": \"中文\", \"y\": 1}",
		`{"a":{"b":{"c":[{"d":[1,[2,[3]]]}]}}}`,
		`{"dup": 1, "dup": 2}`,
		"{\"a\": 1}\r\n",
		`{"date": "2026-01-01", "yes": "yes", "on": "on", "tilde": "~", "num": "1"}`,
	}
	for _, tc := range sameIntent {
		docs = append(docs, tc.json)
	}
	files, _ := filepath.Glob("testdata/*.json")
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		docs = append(docs, string(b))
	}
	for _, d := range docs {
		if json.Valid([]byte(d)) && strings.HasPrefix(strings.TrimSpace(d), "{") {
			checkSameTree(t, []byte(d))
		}
	}

	// Random JSON values, compact and indented.
	r := rand.New(rand.NewPCG(1, 2))
	for i := range 300 {
		v := map[string]any{"k": randomJSON(r, 0)}
		b, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		if i%2 == 1 {
			var ind bytes.Buffer
			if err := json.Indent(&ind, b, "", strings.Repeat(" ", 1+i%4)); err != nil {
				t.Fatal(err)
			}
			b = ind.Bytes()
		}
		checkSameTree(t, b)
	}
}

func randomJSON(r *rand.Rand, depth int) any {
	k := r.IntN(8)
	if depth > 4 {
		k = r.IntN(5)
	}
	switch k {
	case 0:
		return nil
	case 1:
		return r.IntN(2) == 0
	case 2:
		return r.NormFloat64() * 1e6
	case 3:
		return r.Int64() - r.Int64()
	case 4:
		runes := []rune{'a', 'Z', '0', ' ', '"', '\\', '/', '\n', '\t', 'é', '中', '\u2028', '#', ':', '-', '{', '[', '&', '*', '!'}
		s := make([]rune, r.IntN(12))
		for i := range s {
			s[i] = runes[r.IntN(len(runes))]
		}
		return string(s)
	case 5, 6:
		m := map[string]any{}
		for range r.IntN(5) {
			m[fmt.Sprint(randomJSON(r, 5))] = randomJSON(r, depth+1)
		}
		return m
	default:
		l := make([]any, r.IntN(5))
		for i := range l {
			l[i] = randomJSON(r, depth+1)
		}
		return l
	}
}

// The YAML parser refuses JSON's escape \/; a JSON document with it
// parses.
func TestJSONEscapedSlash(t *testing.T) {
	in, err := Parse([]byte(`{"name":"a","resources":[{"id":"r","type":"file","spec":{"path":"\/etc\/motd","content":"x"}}]}`))
	if err != nil {
		t.Fatal(err)
	}
	if got := in.Resources[0].Spec["path"]; got != "/etc/motd" {
		t.Fatalf("path = %q, want /etc/motd", got)
	}
}

func TestJSONDocumentDeclines(t *testing.T) {
	for _, d := range []string{
		``, `[]`, `"a"`, `{`, `{"a":}`, `{"a":1,}`, `{'a':1}`, `{a: 1}`,
		`{"a":01}`, `{"a":1.}`, `{"a":.5}`, `{"a":+1}`, `{"a":tru}`, `{"a":truex}`,
		`{"a":1} {}`, "{\"a\":1}\n---\n", `{"a":"\ud800"}`, `{"a":"\x"}`, "{\"a\":\"\t\"}",
		"{\"a\":1}\r", "{\"a\":\"\xff\"}", `{"a":1 # comment
}`,
	} {
		if _, ok := jsonDocument([]byte(d)); ok {
			t.Errorf("jsonDocument took %q", d)
		}
	}
}

// FuzzJSONDocument checks that whatever jsonDocument takes, the YAML
// parser reads as the same tree.
func FuzzJSONDocument(f *testing.F) {
	for _, tc := range sameIntent {
		f.Add([]byte(tc.json))
	}
	f.Add([]byte(`{"s": "\u00e9\n", "n": [1, 2.5e-3, true, null]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		got, ok := jsonDocument(data)
		if !ok {
			return
		}
		if !json.Valid(data) {
			t.Fatalf("jsonDocument took %q, which is not JSON", data)
		}
		docs, err := documents(data)
		if err != nil {
			// The YAML parser refuses some JSON, such as the escape \/.
			return
		}
		if len(docs) != 1 {
			t.Fatalf("jsonDocument took %q, the YAML parser read %d documents", data, len(docs))
		}
		if diff := cmp.Diff(viewOf(docs[0]), viewOf(got)); diff != "" {
			t.Fatalf("jsonDocument(%q) differs from the YAML parser (-yaml +json):\n%s", data, diff)
		}
	})
}

// benchDoc is an intent document of about 1 KiB, as bench/intents writes.
var benchDoc = []byte(`{"name":"bench-0042","selector":{"role":"pos","region":"eu"},"resources":[` +
	`{"id":"motd","type":"file","spec":{"path":"/etc/motd","mode":"0644","content":"` + strings.Repeat("abcdefghij", 60) + `"}},` +
	`{"id":"hosts","type":"file","spec":{"path":"/etc/hosts","content":"127.0.0.1 localhost\\n10.0.0.1 gw\\n"}},{"id":"flag","type":"sim","spec":{"value":"on","applyTime":"1s"}}]}`)

// BenchmarkParseJSON compares Parse of a JSON document with the same
// document read through the YAML parser (go test -bench ParseJSON
// ./fsm/intent).
func BenchmarkParseJSON(b *testing.B) {
	if _, err := Parse(benchDoc); err != nil {
		b.Fatal(err)
	}
	b.Run("direct", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := Parse(benchDoc); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("yaml-parser", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			docs, err := documents(benchDoc)
			if err != nil {
				b.Fatal(err)
			}
			if _, _, err := parseDocument(docs[0]); err != nil {
				b.Fatal(err)
			}
		}
	})
}

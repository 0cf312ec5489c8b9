package intent

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// FuzzParse checks that Parse never panics, and that a parsed intent
// survives a trip through its canonical encoding unchanged.
func FuzzParse(f *testing.F) {
	files, _ := filepath.Glob("../../docs/examples/*.yaml")
	for _, file := range files {
		if data, err := os.ReadFile(file); err == nil {
			f.Add(data)
		}
	}
	for _, tc := range sameIntent {
		f.Add([]byte(tc.yaml))
		f.Add([]byte(tc.json))
	}
	for _, tc := range badDocs {
		if len(tc.doc) < 4096 {
			f.Add([]byte(tc.doc))
		}
	}
	for _, tc := range rolloutBadDocs {
		f.Add([]byte(rolloutDoc(tc.block)))
	}
	f.Add([]byte("name: x\nresources: [{id: a, type: sim, spec: {value: \"\\x7f\\u0085\\ufeff\"}}]\n"))
	f.Add([]byte("name: x\nresources: [{id: a, type: sim, spec: &s {value: 1}}, {id: b, type: sim, spec: *s}]\n"))

	f.Fuzz(func(t *testing.T, data []byte) {
		_, _ = ParseAll(data)
		in, err := Parse(data)
		if err != nil {
			return
		}
		b, err := in.Canonical()
		if err != nil {
			t.Fatalf("Canonical of a parsed intent: %v", err)
		}
		again, err := Parse(b)
		if err != nil {
			t.Fatalf("Parse(Canonical()): %v\ninput: %q\ncanonical: %s", err, data, b)
		}
		if diff := cmp.Diff(in, again); diff != "" {
			t.Fatalf("Parse(Canonical()) differs (-first +again):\n%s", diff)
		}
		for i := range in.Resources {
			if in.Resources[i].Digest() != again.Resources[i].Digest() {
				t.Fatalf("resources[%d]: digest changed", i)
			}
		}
	})
}

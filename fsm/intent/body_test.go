package intent

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

func TestResourceBodyCanonical(t *testing.T) {
	b := &ResourceBody{Intent: "store-net", Resource: Resource{
		ID: "motd", Type: TypeFile, Requires: []string{"dir"},
		Spec: map[string]any{"path": "/etc/motd", "content": "<b>&</b>", "mode": "0644"},
	}}
	got, err := b.Canonical()
	if err != nil {
		t.Fatal(err)
	}
	want := `{"intent":"store-net","resource":{"id":"motd","type":"file",` +
		`"spec":{"content":"<b>&</b>","mode":"0644","path":"/etc/motd"},"requires":["dir"]}}`
	if string(got) != want {
		t.Fatalf("Canonical:\n got %s\nwant %s", got, want)
	}
	back, err := DecodeResourceBody(got)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(b, back); diff != "" {
		t.Errorf("round trip (-want +got):\n%s", diff)
	}
	if k := back.Key(); k != "store-net/motd" {
		t.Errorf("Key() = %q", k)
	}
}

func TestDecodeResourceBodyIsStrict(t *testing.T) {
	for name, data := range map[string]string{
		"not json":       `{`,
		"unknown field":  `{"intent":"a","resource":{"id":"x","type":"file","spec":{}},"extra":1}`,
		"unknown nested": `{"intent":"a","resource":{"id":"x","type":"file","spec":{},"timeout":"5s"}}`,
		"trailing data":  `{"intent":"a","resource":{"id":"x","type":"file","spec":{}}}{}`,
		"trailing brace": `{"intent":"a","resource":{"id":"x","type":"file","spec":{}}}}`,
	} {
		if b, err := DecodeResourceBody([]byte(data)); err == nil {
			t.Errorf("%s: decoded %+v, want an error", name, b)
		}
	}
}

func TestResourceKey(t *testing.T) {
	if k := ResourceKey("pos", "tls-cert"); k != "pos/tls-cert" {
		t.Fatalf("ResourceKey = %q", k)
	}
	for _, tt := range []struct {
		key, name, id string
		ok            bool
	}{
		{"pos/tls-cert", "pos", "tls-cert", true},
		{"pos/a/b", "pos", "a/b", true},
		{"pos", "", "", false},
		{"/x", "", "", false},
		{"pos/", "", "", false},
		{"", "", "", false},
	} {
		name, id, ok := SplitResourceKey(tt.key)
		if ok != tt.ok || (ok && (name != tt.name || id != tt.id)) {
			t.Errorf("SplitResourceKey(%q) = %q, %q, %v; want %q, %q, %v", tt.key, name, id, ok, tt.name, tt.id, tt.ok)
		}
	}
}

// FuzzDecodeResourceBody checks that DecodeResourceBody never panics and
// that a decoded body's canonical encoding decodes to the same body (up to
// empty against nil lists and maps) and encodes to the same bytes.
func FuzzDecodeResourceBody(f *testing.F) {
	f.Add([]byte(`{"intent":"pos","resource":{"id":"motd","type":"file","spec":{"path":"/etc/motd","n":1.5,"l":[1,"a",null]}}}`))
	f.Add([]byte(`{"intent":"","resource":{"id":"","type":"","spec":null,"requires":[]}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		b, err := DecodeResourceBody(data)
		if err != nil {
			return
		}
		enc, err := b.Canonical()
		if err != nil {
			t.Fatalf("Canonical of a decoded body: %v", err)
		}
		back, err := DecodeResourceBody(enc)
		if err != nil {
			t.Fatalf("canonical bytes do not decode: %v\n%s", err, enc)
		}
		again, err := back.Canonical()
		if err != nil || string(again) != string(enc) {
			t.Fatalf("canonical encoding is not stable:\n%s\n%s", enc, again)
		}
		if diff := cmp.Diff(b, back, cmpopts.EquateEmpty()); diff != "" {
			t.Fatalf("round trip (-first +second):\n%s", diff)
		}
	})
}

package intent

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"strings"
)

// ResourceBody is one resource as a device receives it: the resource and
// the name of the intent it belongs to. Servers send it, and agents
// journal it, as its Canonical encoding, the JSON
//
//	{"intent":"<name>","resource":<Resource>}
//
// A device holds it under ResourceKey(Intent, Resource.ID). The digest a
// device compares to tell whether it holds the desired version is the
// SHA-256 of the canonical bytes (wire.DigestOf; wire checks it on every
// Delta and imports nothing of Meteor's, so the definition lives there).
type ResourceBody struct {
	Intent   string   `json:"intent"`
	Resource Resource `json:"resource"`
}

// Canonical returns the body's canonical bytes: encoding/json's encoding
// (struct fields in declaration order, map keys sorted) without HTML
// escaping and without a trailing newline. Equal bodies give equal bytes.
func (b *ResourceBody) Canonical() ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(b); err != nil {
		return nil, fmt.Errorf("encode resource %q of intent %q: %w", b.Resource.ID, b.Intent, err)
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}

// Key returns the device-wide key the body is held under.
func (b *ResourceBody) Key() string { return ResourceKey(b.Intent, b.Resource.ID) }

// DecodeResourceBody decodes a body. It is strict: unknown fields and
// trailing data are errors, so a device never acts on a resource it only
// partly understands.
func DecodeResourceBody(data []byte) (*ResourceBody, error) {
	var out ResourceBody
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&out); err != nil {
		return nil, fmt.Errorf("decode resource body: %w", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, fmt.Errorf("decode resource body: data after the body")
	}
	return &out, nil
}

// ResourceKey returns the device-wide key of resource id of intent name:
// "<intent>/<resource id>". Intent names cannot hold '/', so the key is
// unique on a device and SplitResourceKey gives the two back.
func ResourceKey(intentName, resourceID string) string { return intentName + "/" + resourceID }

// SplitResourceKey splits a key made by ResourceKey into the intent name
// and the resource ID. ok is false unless the key has both, non-empty.
func SplitResourceKey(key string) (intentName, resourceID string, ok bool) {
	intentName, resourceID, ok = strings.Cut(key, "/")
	return intentName, resourceID, ok && intentName != "" && resourceID != ""
}

package intent

import (
	"testing"
	"time"
)

// TestRotation: a rotation window parses from YAML (timestamps quoted or
// not), survives the canonical encoding, and its errors name the field.
func TestRotation(t *testing.T) {
	in, err := Parse([]byte(`name: pos-cert
resources:
  - id: tls
    type: sim
    class: certificate
    spec: {value: v7}
    rotation: {notBefore: 2026-12-05T02:00:00+01:00, deadline: "2026-12-08T00:00:00Z"}
`))
	if err != nil {
		t.Fatal(err)
	}
	nb, dl := in.Resources[0].Rotation.Times()
	if !nb.Equal(time.Date(2026, 12, 5, 1, 0, 0, 0, time.UTC)) || !dl.Equal(time.Date(2026, 12, 8, 0, 0, 0, 0, time.UTC)) {
		t.Errorf("times %v %v", nb, dl)
	}
	b, err := in.Canonical()
	if err != nil {
		t.Fatal(err)
	}
	again, err := Parse(b)
	if err != nil || *again.Resources[0].Rotation != *in.Resources[0].Rotation {
		t.Fatalf("canonical round trip: %v %+v", err, again)
	}
	for doc, want := range map[string]string{
		"rotation: {deadline: tomorrow}": `intent "x": resources[0].rotation.deadline: must be an RFC 3339 time such as 2026-12-05T02:00:00Z, got "tomorrow" (line 3)`,
		"rotation: {}":                   `intent "x": resources[0].rotation: needs notBefore, deadline or both; leave rotation out for none (line 3)`,
		"rotation: {notBefore: 2026-12-05T00:00:00Z, deadline: 2026-12-04T00:00:00Z}": `intent "x": resources[0].rotation.deadline: must be after notBefore (line 3)`,
		"rotation: {by: 2026-12-05T00:00:00Z}":                                        `intent "x": resources[0].rotation.by: unknown field (line 3)`,
		"rotation: 2026-12-05T00:00:00Z":                                              `intent "x": resources[0].rotation: must be a mapping with notBefore and deadline, got string (line 3)`,
	} {
		_, err := Parse([]byte("name: x\nresources:\n  - {id: a, type: sim, spec: {value: 1}, " + doc + "}\n"))
		if err == nil || err.Error() != want {
			t.Errorf("%s: %v, want %s", doc, err, want)
		}
	}
}

package intent

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"unicode/utf8"
)

// digestDomain prefixes the encoding a resource digest is computed over,
// so that a future change of encoding cannot collide with this one.
const digestDomain = "meteor/resource/v1\n"

// Canonical returns the deterministic JSON encoding of the intent: struct
// fields in declaration order, map keys sorted, no insignificant space.
// Equal intents give equal bytes, and Parse of the result gives back an
// intent equal to one that Parse produced.
//
// Besides what encoding/json escapes, Canonical escapes U+007F-U+009F,
// U+FEFF, U+FFFE and U+FFFF, which YAML does not accept raw (Parse reads
// JSON with a YAML parser).
func (in *Intent) Canonical() ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(in); err != nil {
		return nil, fmt.Errorf("encode intent %q: %w", in.Name, err)
	}
	return escapeForYAML(bytes.TrimSuffix(buf.Bytes(), []byte("\n"))), nil
}

// escapeForYAML replaces the runes YAML rejects in a document with JSON
// \u escapes. Outside strings JSON is printable ASCII, so every such rune
// sits inside a string and the result is equivalent JSON.
func escapeForYAML(b []byte) []byte {
	var out []byte
	for i := 0; i < len(b); {
		r, size := utf8.DecodeRune(b[i:])
		if needsEscape(r) {
			if out == nil {
				out = append(make([]byte, 0, len(b)+16), b[:i]...)
			}
			out = fmt.Appendf(out, `\u%04x`, r)
		} else if out != nil {
			out = append(out, b[i:i+size]...)
		}
		i += size
	}
	if out == nil {
		return b
	}
	return out
}

func needsEscape(r rune) bool {
	return (r >= 0x7f && r <= 0x9f) || r == 0xfeff || r == 0xfffe || r == 0xffff
}

// Digest returns the hex SHA-256 of the resource's desired state: its type,
// effective class, spec, probe, effective drift policy, requirements
// (sorted, since their order carries no meaning), rotation window and
// whether it is disruptive. The ID is not part of
// the digest. Resources that mean the same give the same digest whether
// they were written in YAML or JSON.
//
// Digest is defined for valid resources; it panics if the spec or probe
// holds a value encoding/json cannot encode, which Validate rejects.
func (r *Resource) Digest() string {
	spec := r.Spec
	if spec == nil {
		spec = map[string]any{}
	}
	var probe map[string]any
	if len(r.Probe) > 0 {
		probe = r.Probe
	}
	var requires []string
	if len(r.Requires) > 0 {
		requires = slices.Clone(r.Requires)
		slices.Sort(requires)
	}
	b, err := json.Marshal(struct {
		Type       string         `json:"type"`
		Class      string         `json:"class"`
		Spec       map[string]any `json:"spec"`
		Probe      map[string]any `json:"probe,omitempty"`
		Drift      string         `json:"drift"`
		Requires   []string       `json:"requires,omitempty"`
		Rotation   *Rotation      `json:"rotation,omitempty"`
		Disruptive bool           `json:"disruptive,omitempty"`
	}{r.Type, r.EffectiveClass(), spec, probe, r.EffectiveDrift(), requires, r.Rotation, r.Disruptive})
	if err != nil {
		panic(fmt.Sprintf("intent: digest of resource %q: %v", r.ID, err))
	}
	h := sha256.New()
	h.Write([]byte(digestDomain))
	h.Write(b)
	return hex.EncodeToString(h.Sum(nil))
}

// Clone returns a deep copy of the intent. Nil maps and slices stay nil.
func (in *Intent) Clone() *Intent {
	if in == nil {
		return nil
	}
	out := &Intent{
		Name:     in.Name,
		Selector: maps.Clone(in.Selector),
		Rollout:  cloneMap(in.Rollout),
	}
	if in.Resources != nil {
		out.Resources = make([]Resource, len(in.Resources))
		for i := range in.Resources {
			out.Resources[i] = in.Resources[i].clone()
		}
	}
	return out
}

func (r *Resource) clone() Resource {
	c := *r
	c.Spec = cloneMap(r.Spec)
	c.Probe = cloneMap(r.Probe)
	c.Requires = slices.Clone(r.Requires)
	if r.Rotation != nil {
		w := *r.Rotation
		c.Rotation = &w
	}
	return c
}

func cloneMap(m map[string]any) map[string]any {
	if m == nil {
		return nil
	}
	out := make(map[string]any, len(m))
	for k, v := range m {
		out[k] = cloneValue(v)
	}
	return out
}

func cloneValue(v any) any {
	switch v := v.(type) {
	case map[string]any:
		return cloneMap(v)
	case []any:
		if v == nil {
			return v
		}
		out := make([]any, len(v))
		for i, e := range v {
			out[i] = cloneValue(e)
		}
		return out
	default:
		return v
	}
}

package intent

import (
	"fmt"
	"math"
	"unicode/utf8"

	"go.yaml.in/yaml/v3"
)

const (
	// maxDepth bounds the nesting of Spec, Probe and Rollout values.
	maxDepth = 32
	// maxValues bounds the number of YAML nodes one document decodes to,
	// counting every use of an alias.
	maxValues = 100_000
)

// decoder turns the yaml.Node tree of one document into an Intent,
// recording where each field starts. It stops at the first problem, in
// document order.
type decoder struct {
	intent string // name for error messages, once known to be valid
	pos    positions
	last   position // the latest start recorded in pos
	values int      // nodes decoded so far, aliases expanded
	bytes  int      // string bytes decoded so far, aliases expanded
}

func (d *decoder) errorf(p path, format string, args ...any) error {
	line, _ := d.pos.locate(p)
	return &ValidationError{
		Intent: d.intent,
		Field:  p.String(),
		Line:   line,
		Msg:    fmt.Sprintf(format, args...),
	}
}

// open records that the field at p starts at node n.
func (d *decoder) open(p path, n *yaml.Node) {
	at := position{n.Line, n.Column}
	d.pos[p.String()] = span{start: at, end: at}
	if d.last.before(at) {
		d.last = at
	}
}

// close records that everything in the field at p has been decoded.
func (d *decoder) close(p path) {
	key := p.String()
	sp := d.pos[key]
	sp.end = d.last
	d.pos[key] = sp
}

// errorAt is errorf for a problem found at node n, which has no path of
// its own (a mapping key).
func (d *decoder) errorAt(p path, n *yaml.Node, format string, args ...any) error {
	return &ValidationError{
		Intent: d.intent,
		Field:  p.String(),
		Line:   n.Line,
		Msg:    fmt.Sprintf(format, args...),
	}
}

// document decodes a document node whose content is not empty.
func (d *decoder) document(doc *yaml.Node) (*Intent, error) {
	root, err := d.deref(nil, doc.Content[0])
	if err != nil {
		return nil, err
	}
	d.open(nil, root)
	if root.Kind != yaml.MappingNode {
		return nil, d.errorf(nil, "must be a mapping, got %s", nodeKind(root))
	}
	d.intent = scanName(root)

	in := &Intent{}
	err = d.fields(nil, root, func(key string, p path, v *yaml.Node) error {
		var err error
		switch key {
		case "name":
			in.Name, err = d.optString(p, v)
		case "selector":
			in.Selector, err = d.selector(p, v)
		case "resources":
			in.Resources, err = d.resources(p, v)
		case "rollout":
			in.Rollout, err = d.object(p, v, false)
		default:
			err = d.errorf(p, "unknown field")
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	d.close(nil)
	return in, nil
}

// scanName returns the document's name if it is a valid one, so that
// errors found before the name field is reached can still name the intent.
func scanName(root *yaml.Node) string {
	for i := 0; i+1 < len(root.Content); i += 2 {
		k, v := root.Content[i], root.Content[i+1]
		if k.Kind == yaml.ScalarNode && k.Value == "name" && v.Kind == yaml.ScalarNode &&
			v.ShortTag() == "!!str" && dnsLabelMsg(v.Value) == "" {
			return v.Value
		}
	}
	return ""
}

func (d *decoder) selector(p path, n *yaml.Node) (map[string]string, error) {
	n, err := d.deref(p, n)
	if err != nil || isNull(n) {
		return nil, err
	}
	if n.Kind != yaml.MappingNode {
		return nil, d.errorf(p, "must be a mapping, got %s", nodeKind(n))
	}
	sel := make(map[string]string, len(n.Content)/2)
	err = d.fields(p, n, func(key string, p path, v *yaml.Node) error {
		s, err := d.str(p, v)
		sel[key] = s
		return err
	})
	if err != nil || len(sel) == 0 {
		return nil, err
	}
	return sel, nil
}

func (d *decoder) resources(p path, n *yaml.Node) ([]Resource, error) {
	n, err := d.deref(p, n)
	if err != nil || isNull(n) {
		return nil, err
	}
	if n.Kind != yaml.SequenceNode {
		return nil, d.errorf(p, "must be a list, got %s", nodeKind(n))
	}
	out := make([]Resource, 0, len(n.Content))
	for i, item := range n.Content {
		ip := p.index(i)
		d.open(ip, item)
		r, err := d.resource(ip, item)
		if err != nil {
			return nil, err
		}
		d.close(ip)
		out = append(out, r)
	}
	return out, nil
}

func (d *decoder) resource(p path, n *yaml.Node) (Resource, error) {
	var r Resource
	n, err := d.deref(p, n)
	if err != nil {
		return r, err
	}
	if n.Kind != yaml.MappingNode {
		return r, d.errorf(p, "must be a mapping, got %s", nodeKind(n))
	}
	err = d.fields(p, n, func(key string, p path, v *yaml.Node) error {
		var err error
		switch key {
		case "id":
			r.ID, err = d.optString(p, v)
		case "type":
			r.Type, err = d.optString(p, v)
		case "class":
			r.Class, err = d.optString(p, v)
		case "spec":
			r.Spec, err = d.object(p, v, true)
		case "probe":
			r.Probe, err = d.object(p, v, false)
		case "drift":
			r.Drift, err = d.optString(p, v)
		case "requires":
			r.Requires, err = d.stringList(p, v)
		case "rotation":
			r.Rotation, err = d.rotation(p, v)
		case "disruptive":
			r.Disruptive, err = d.boolean(p, v)
		default:
			err = d.errorf(p, "unknown field")
		}
		return err
	})
	return r, err
}

// boolean decodes true or false; null means false.
func (d *decoder) boolean(p path, n *yaml.Node) (bool, error) {
	n, err := d.deref(p, n)
	if err != nil || isNull(n) {
		return false, err
	}
	if n.Kind == yaml.ScalarNode && n.ShortTag() == "!!bool" {
		var b bool
		if err := n.Decode(&b); err == nil {
			return b, nil
		}
	}
	return false, d.errorf(p, "must be true or false, got %s", nodeKind(n))
}

// rotation decodes a resource's rotation window; null means none.
func (d *decoder) rotation(p path, n *yaml.Node) (*Rotation, error) {
	n, err := d.deref(p, n)
	if err != nil || isNull(n) {
		return nil, err
	}
	if n.Kind != yaml.MappingNode {
		return nil, d.errorf(p, "must be a mapping with notBefore and deadline, got %s", nodeKind(n))
	}
	w := &Rotation{}
	err = d.fields(p, n, func(key string, p path, v *yaml.Node) error {
		var err error
		switch key {
		case "notBefore":
			w.NotBefore, err = d.optString(p, v)
		case "deadline":
			w.Deadline, err = d.optString(p, v)
		default:
			err = d.errorf(p, "unknown field")
		}
		return err
	})
	return w, err
}

func (d *decoder) stringList(p path, n *yaml.Node) ([]string, error) {
	n, err := d.deref(p, n)
	if err != nil || isNull(n) {
		return nil, err
	}
	if n.Kind != yaml.SequenceNode {
		return nil, d.errorf(p, "must be a list of strings, got %s", nodeKind(n))
	}
	if len(n.Content) == 0 {
		return nil, nil
	}
	out := make([]string, 0, len(n.Content))
	for i, item := range n.Content {
		ip := p.index(i)
		d.open(ip, item)
		s, err := d.str(ip, item)
		if err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	return out, nil
}

// object decodes an optional mapping of free-form values (spec, probe,
// rollout). Null gives nil; so does an empty mapping unless keepEmpty, as
// an empty probe or rollout means the same as an absent one.
func (d *decoder) object(p path, n *yaml.Node, keepEmpty bool) (map[string]any, error) {
	n, err := d.deref(p, n)
	if err != nil || isNull(n) {
		return nil, err
	}
	if n.Kind != yaml.MappingNode {
		return nil, d.errorf(p, "must be a mapping, got %s", nodeKind(n))
	}
	m, err := d.mapping(p, n, 0)
	if err != nil {
		return nil, err
	}
	if len(m) == 0 && !keepEmpty {
		return nil, nil
	}
	return m, nil
}

// value decodes a free-form value at the given nesting depth.
func (d *decoder) value(p path, n *yaml.Node, depth int) (any, error) {
	if depth > maxDepth {
		return nil, d.errorf(p, "nested too deeply (more than %d levels)", maxDepth)
	}
	n, err := d.deref(p, n)
	if err != nil {
		return nil, err
	}
	switch n.Kind {
	case yaml.ScalarNode:
		return d.scalar(p, n)
	case yaml.MappingNode:
		return d.mapping(p, n, depth)
	case yaml.SequenceNode:
		if tag := n.ShortTag(); tag != "!!seq" {
			return nil, d.errorf(p, "unsupported tag %s", tag)
		}
		out := make([]any, 0, len(n.Content))
		for i, item := range n.Content {
			ip := p.index(i)
			d.open(ip, item)
			v, err := d.value(ip, item, depth+1)
			if err != nil {
				return nil, err
			}
			d.close(ip)
			out = append(out, v)
		}
		return out, nil
	default:
		return nil, d.errorf(p, "unsupported YAML node")
	}
}

func (d *decoder) mapping(p path, n *yaml.Node, depth int) (map[string]any, error) {
	if tag := n.ShortTag(); tag != "!!map" {
		return nil, d.errorf(p, "unsupported tag %s", tag)
	}
	out := make(map[string]any, len(n.Content)/2)
	err := d.fields(p, n, func(key string, p path, v *yaml.Node) error {
		val, err := d.value(p, v, depth+1)
		out[key] = val
		return err
	})
	return out, err
}

// fields walks mapping n in document order, records where each entry
// starts, rejects non-string and duplicate keys, and calls fn per entry.
func (d *decoder) fields(p path, n *yaml.Node, fn func(key string, p path, v *yaml.Node) error) error {
	if tag := n.ShortTag(); tag != "!!map" {
		return d.errorf(p, "unsupported tag %s", tag)
	}
	seen := make(map[string]int, len(n.Content)/2)
	for i := 0; i+1 < len(n.Content); i += 2 {
		kn, err := d.deref(p, n.Content[i])
		if err != nil {
			return err
		}
		key, err := d.key(p, kn)
		if err != nil {
			return err
		}
		kp := p.field(key)
		d.open(kp, kn)
		if first, dup := seen[key]; dup {
			return d.errorf(kp, "duplicate field (first at line %d)", first)
		}
		seen[key] = kn.Line
		if err := fn(key, kp, n.Content[i+1]); err != nil {
			return err
		}
		d.close(kp)
	}
	return nil
}

func (d *decoder) key(p path, n *yaml.Node) (string, error) {
	if n.Kind == yaml.ScalarNode {
		switch n.ShortTag() {
		case "!!str", "!!timestamp":
			return d.text(p, n)
		case "!!merge":
			return "", d.errorAt(p, n, "merge keys (<<) are not supported")
		}
	}
	return "", d.errorAt(p, n, "field names must be strings, got %s", nodeKind(n))
}

// str decodes a string; timestamps count as strings.
func (d *decoder) str(p path, n *yaml.Node) (string, error) {
	n, err := d.deref(p, n)
	if err != nil {
		return "", err
	}
	if n.Kind == yaml.ScalarNode {
		if tag := n.ShortTag(); tag == "!!str" || tag == "!!timestamp" {
			return d.text(p, n)
		}
	}
	return "", d.errorf(p, "must be a string, got %s", nodeKind(n))
}

// optString decodes a string that may be null, meaning empty.
func (d *decoder) optString(p path, n *yaml.Node) (string, error) {
	n, err := d.deref(p, n)
	if err != nil || isNull(n) {
		return "", err
	}
	return d.str(p, n)
}

func (d *decoder) text(p path, n *yaml.Node) (string, error) {
	if !utf8.ValidString(n.Value) {
		return "", d.errorf(p, "must be valid UTF-8")
	}
	d.bytes += len(n.Value)
	if d.bytes > MaxDocumentSize {
		return "", d.errorf(p, "document expands to more than %d bytes", MaxDocumentSize)
	}
	return n.Value, nil
}

func (d *decoder) scalar(p path, n *yaml.Node) (any, error) {
	switch tag := n.ShortTag(); tag {
	case "!!null":
		return nil, nil
	case "!!str", "!!timestamp":
		return d.text(p, n)
	case "!!bool":
		var b bool
		if err := n.Decode(&b); err != nil {
			return nil, d.errorf(p, "invalid boolean %s", quote(n.Value))
		}
		return b, nil
	case "!!int", "!!float":
		if tag == "!!int" {
			var i int64
			if err := n.Decode(&i); err == nil {
				return i, nil
			}
		}
		var f float64
		if err := n.Decode(&f); err != nil {
			return nil, d.errorf(p, "invalid number %s", quote(n.Value))
		}
		if math.IsNaN(f) || math.IsInf(f, 0) {
			return nil, d.errorf(p, "must be a finite number")
		}
		return normalizeNumber(f), nil
	case "!!binary":
		return nil, d.errorf(p, "binary values are not supported; use a base64 string")
	default:
		return nil, d.errorf(p, "unsupported tag %s", tag)
	}
}

// normalizeNumber returns f as an int64 when it is integral and in range.
func normalizeNumber(f float64) any {
	if f == math.Trunc(f) && f >= -(1<<63) && f < 1<<63 {
		return int64(f)
	}
	return f
}

// deref follows an alias to its anchored node, and counts the node against
// the document's budget.
func (d *decoder) deref(p path, n *yaml.Node) (*yaml.Node, error) {
	d.values++
	if d.values > maxValues {
		return nil, d.errorf(p, "document has more than %d values (aliases expanded)", maxValues)
	}
	if n.Kind == yaml.AliasNode {
		if n.Alias == nil || n.Alias.Kind == yaml.AliasNode {
			return nil, d.errorf(p, "invalid alias")
		}
		return n.Alias, nil
	}
	return n, nil
}

func isNull(n *yaml.Node) bool {
	return n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null"
}

// nodeKind names what a node holds, for error messages.
func nodeKind(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "mapping"
	case yaml.SequenceNode:
		return "list"
	case yaml.ScalarNode:
		switch n.ShortTag() {
		case "!!null":
			return "null"
		case "!!bool":
			return "boolean"
		case "!!int":
			return "integer"
		case "!!float":
			return "number"
		case "!!str", "!!timestamp":
			return "string"
		default:
			return n.ShortTag()
		}
	default:
		return "YAML node"
	}
}

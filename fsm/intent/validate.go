package intent

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// ValidationError is a problem with the content of an intent document.
type ValidationError struct {
	// Intent is the intent's name, "" when it is missing or invalid.
	Intent string
	// Field is the path of the offending field, such as
	// resources[2].spec.path, or "" for the document as a whole.
	Field string
	// Line is the 1-based line of the field in the parsed document (of its
	// nearest parent when the field is missing), 0 when unknown.
	Line int
	// Column is the 1-based column of a JSON syntax error on Line, 0 when
	// unknown.
	Column int
	// Msg says what is wrong.
	Msg string
}

// Error renders the error as
//
//	intent "store-net": resources[2].spec.path: must be absolute (line 14)
func (e *ValidationError) Error() string {
	var b strings.Builder
	if e.Intent != "" {
		fmt.Fprintf(&b, "intent %q: ", e.Intent)
	} else {
		b.WriteString("intent: ")
	}
	if e.Field != "" {
		b.WriteString(e.Field)
		b.WriteString(": ")
	}
	b.WriteString(e.Msg)
	switch {
	case e.Line > 0 && e.Column > 0:
		fmt.Fprintf(&b, " (line %d, column %d)", e.Line, e.Column)
	case e.Line > 0:
		fmt.Fprintf(&b, " (line %d)", e.Line)
	}
	return b.String()
}

// maxKeyLen bounds the length of map keys in Spec, Probe and Rollout.
const maxKeyLen = 256

// Validate checks the intent against the rules of the document model, the
// built-in resource types (see spec.go) and the rollout block (see
// rollout.go), and returns the first problem as a *ValidationError, or
// nil. Validate is deterministic: for an intent that came from Parse the
// first problem is the first in the document, and otherwise the first in
// field order, with map keys sorted. Proposers and Parse use it.
func (in *Intent) Validate() error {
	return in.validate(nil, true)
}

// ValidateCommitted is Validate without the rules of the rollout block's
// fields (RolloutSpec), for intents already committed: a rollout block
// stored before those rules existed may break them, and a replica must
// still accept the intent when it replays the log. The rollout block must
// still hold only plain values within the size limits. Such an intent's
// RolloutSpec fails; the state machine rolls it out at once.
func (in *Intent) ValidateCommitted() error {
	return in.validate(nil, false)
}

// validate checks the intent, with the rollout rules when strict.
func (in *Intent) validate(pos positions, strict bool) error {
	c := &checker{pos: pos}
	nameMsg := dnsLabelMsg(in.Name)
	if nameMsg == "" {
		c.intent = in.Name
	} else {
		c.fail(path{".name"}, "%s", nameMsg)
	}
	c.selector(path{".selector"}, in.Selector)
	c.resources(path{".resources"}, in.Resources)
	before := len(c.found)
	c.values(path{".rollout"}, in.Rollout)
	if strict && len(c.found) == before && len(in.Rollout) > 0 {
		// The typed rules read values that passed the generic ones.
		c.rollout(path{".rollout"}, in.Rollout)
	}

	if len(c.found) == 0 {
		// A valid intent's canonical encoding fits the document limit, so
		// it can always be stored and submitted again.
		if c.size > MaxDocumentSize {
			c.fail(nil, "encoded intent is larger than %d bytes", MaxDocumentSize)
		} else if b, err := in.Canonical(); err != nil {
			c.fail(nil, "%v", err)
		} else if len(b) > MaxDocumentSize {
			c.fail(nil, "encoded intent is larger than %d bytes", MaxDocumentSize)
		}
	}
	return c.first()
}

// checker collects the problems of one intent; first picks the one to
// report.
type checker struct {
	intent string
	pos    positions
	found  []problem
	size   int // lower bound of the encoded size of the free-form values
}

type problem struct {
	err *ValidationError
	at  place
}

func (c *checker) fail(p path, format string, args ...any) {
	line, at := c.pos.locate(p)
	c.found = append(c.found, problem{
		err: &ValidationError{Intent: c.intent, Field: p.String(), Line: line, Msg: fmt.Sprintf(format, args...)},
		at:  at,
	})
}

// first returns the problem that comes first in the document (see
// positions.locate); without positions, or between problems at the same
// place, the first found.
func (c *checker) first() error {
	if len(c.found) == 0 {
		return nil
	}
	best := c.found[0]
	for _, p := range c.found[1:] {
		if p.at.before(best.at) {
			best = p
		}
	}
	return best.err
}

func (c *checker) selector(p path, sel map[string]string) {
	for _, key := range sortedKeys(sel) {
		kp := p.field(key)
		if msg := labelKeyMsg(key); msg != "" {
			c.fail(kp, "%s", msg)
		} else if msg := labelValueMsg(sel[key]); msg != "" {
			c.fail(kp, "%s", msg)
		}
	}
}

func (c *checker) resources(p path, rs []Resource) {
	switch {
	case len(rs) == 0:
		c.fail(p, "at least one resource is required")
		return
	case len(rs) > MaxResources:
		c.fail(p, "at most %d resources are allowed, got %d", MaxResources, len(rs))
		return
	}
	index := make(map[string]int, len(rs)) // ID -> first resource with it
	for i := range rs {
		if _, dup := index[rs[i].ID]; !dup && dnsLabelMsg(rs[i].ID) == "" {
			index[rs[i].ID] = i
		}
	}
	for i := range rs {
		c.resource(p.index(i), &rs[i], i, index)
	}
	c.cycles(p, rs, index)
}

func (c *checker) resource(p path, r *Resource, i int, index map[string]int) {
	if msg := dnsLabelMsg(r.ID); msg != "" {
		c.fail(p.field("id"), "%s", msg)
	} else if first := index[r.ID]; first != i {
		c.fail(p.field("id"), "duplicate id %q (first in resources[%d])", r.ID, first)
	}
	typeOK := slices.Contains(builtinTypes, r.Type)
	switch {
	case r.Type == "":
		c.fail(p.field("type"), "required")
	case !typeOK:
		c.fail(p.field("type"), "unknown type %s; allowed: %s", quote(r.Type), strings.Join(builtinTypes, ", "))
	}
	if r.Class != "" {
		if msg := dnsLabelMsg(r.Class); msg != "" {
			c.fail(p.field("class"), "%s", msg)
		}
	}
	c.values(p.field("spec"), r.Spec)
	c.values(p.field("probe"), r.Probe)
	if typeOK {
		c.typeRules(p, r)
	}
	switch r.Drift {
	case "", DriftCorrect, DriftTolerate, DriftReport:
	default:
		c.fail(p.field("drift"), "unknown drift policy %s; allowed: %s, %s, %s", quote(r.Drift), DriftCorrect, DriftTolerate, DriftReport)
	}
	if r.Rotation != nil {
		c.rotation(p.field("rotation"), r.Rotation)
	}
	seen := make(map[string]bool, len(r.Requires))
	for j, dep := range r.Requires {
		jp := p.field("requires").index(j)
		if strings.Contains(dep, ":") { // a precondition on the device
			if _, err := ParseRequirement(dep); err != nil {
				c.fail(jp, "%v", err)
			} else if seen[dep] {
				c.fail(jp, "duplicate requirement %s", quote(dep))
			}
			seen[dep] = true
			continue
		}
		switch _, ok := index[dep]; {
		case seen[dep]:
			c.fail(jp, "duplicate requirement %s", quote(dep))
		case dep == r.ID:
			c.fail(jp, "resource cannot require itself")
		case !ok:
			c.fail(jp, "unknown resource %s", quote(dep))
		}
		seen[dep] = true
	}
}

// rotation checks a rotation window: RFC 3339 times, at least one, the
// deadline after notBefore.
func (c *checker) rotation(p path, w *Rotation) {
	var times [2]time.Time
	for i, f := range []struct{ key, s string }{{"notBefore", w.NotBefore}, {"deadline", w.Deadline}} {
		if f.s == "" {
			continue
		}
		t, err := time.Parse(time.RFC3339, f.s)
		if err != nil {
			c.fail(p.field(f.key), "must be an RFC 3339 time such as 2026-12-05T02:00:00Z, got %s", quote(f.s))
			continue
		}
		times[i] = t
	}
	switch {
	case w.NotBefore == "" && w.Deadline == "":
		c.fail(p, "needs notBefore, deadline or both; leave rotation out for none")
	case !times[0].IsZero() && !times[1].IsZero() && !times[1].After(times[0]):
		c.fail(p.field("deadline"), "must be after notBefore")
	}
}

// cycles reports the first requirement cycle found by a depth-first walk
// in document order, at the requires field of the resource it starts from:
// "cycle a -> b -> a". Unknown and self requirements are reported elsewhere
// and skipped here.
func (c *checker) cycles(p path, rs []Resource, index map[string]int) {
	const (
		unvisited = iota
		onStack
		done
	)
	state := make([]int, len(rs))
	var stack []int
	var visit func(i int) bool
	visit = func(i int) bool {
		state[i] = onStack
		stack = append(stack, i)
		for _, dep := range rs[i].Requires {
			j, ok := index[dep]
			if !ok || j == i {
				continue
			}
			switch state[j] {
			case onStack:
				start := slices.Index(stack, j)
				ids := make([]string, 0, len(stack)-start+1)
				for _, k := range stack[start:] {
					ids = append(ids, rs[k].ID)
				}
				ids = append(ids, rs[j].ID)
				c.fail(p.index(j).field("requires"), "cycle %s", strings.Join(ids, " -> "))
				return true
			case unvisited:
				if visit(j) {
					return true
				}
			}
		}
		stack = stack[:len(stack)-1]
		state[i] = done
		return false
	}
	for i := range rs {
		if state[i] == unvisited && visit(i) {
			return
		}
	}
}

// values checks that a free-form mapping holds only values Parse can
// produce and encoding/json can encode, within the size limits.
func (c *checker) values(p path, m map[string]any) {
	if m != nil {
		c.value(p, m, 0)
	}
}

func (c *checker) value(p path, v any, depth int) {
	if depth > maxDepth {
		c.fail(p, "nested too deeply (more than %d levels)", maxDepth)
		return
	}
	switch v := v.(type) {
	case nil, bool, int, int64:
		c.size++
	case float64:
		c.size++
		if math.IsNaN(v) || math.IsInf(v, 0) {
			c.fail(p, "must be a finite number")
		}
	case string:
		c.size += len(v)
		if len(v) > MaxStringSize {
			c.fail(p, "must be at most %d bytes, got %d", MaxStringSize, len(v))
		} else if !utf8.ValidString(v) {
			c.fail(p, "must be valid UTF-8")
		}
	case []any:
		for i, e := range v {
			c.value(p.index(i), e, depth+1)
		}
	case map[string]any:
		for _, k := range sortedKeys(v) {
			kp := p.field(k)
			c.size += len(k)
			if len(k) > maxKeyLen {
				c.fail(kp, "field name must be at most %d bytes, got %d", maxKeyLen, len(k))
			} else if !utf8.ValidString(k) {
				c.fail(kp, "field name must be valid UTF-8")
			}
			c.value(kp, v[k], depth+1)
		}
	default:
		c.fail(p, "unsupported value of type %T", v)
	}
}

// dnsLabelMsg returns what is wrong with s as a DNS label (RFC 1123), or "".
func dnsLabelMsg(s string) string {
	switch {
	case s == "":
		return "required"
	case len(s) > 63:
		return fmt.Sprintf("must be at most 63 characters, got %d", len(s))
	case !isLabel(s, 63, isDNSChar):
		return "must be a DNS label: a-z, 0-9 and '-', starting and ending with a letter or digit"
	}
	return ""
}

// CheckLabel checks a label as selectors do (labelKeyMsg, labelValueMsg),
// for the other places labels are written: token scopes, enrollment and
// device labels.
func CheckLabel(key, value string) error {
	if msg := labelKeyMsg(key); msg != "" {
		return fmt.Errorf("%q: %s", key, msg)
	}
	if msg := labelValueMsg(value); msg != "" {
		return fmt.Errorf("%s=%q: %s", key, value, msg)
	}
	return nil
}

// labelKeyMsg checks a selector key like a Kubernetes label key: an
// optional DNS subdomain prefix and '/', then a name of at most 63 of
// A-Z, a-z, 0-9, '.', '_' and '-', starting and ending with a letter or
// digit.
func labelKeyMsg(key string) string {
	name := key
	if prefix, rest, ok := strings.Cut(key, "/"); ok {
		name = rest
		if !isDNSSubdomain(prefix) {
			return "invalid label key: the prefix must be a DNS subdomain"
		}
	}
	if !isLabel(name, 63, isLabelChar) {
		return "invalid label key: the name must be 1-63 of A-Z, a-z, 0-9, '.', '_' and '-', starting and ending with a letter or digit"
	}
	return ""
}

// labelValueMsg checks a selector value: "*", or a Kubernetes label value
// (empty, or like a label key name).
func labelValueMsg(v string) string {
	if v == "*" || v == "" || isLabel(v, 63, isLabelChar) {
		return ""
	}
	return `invalid label value: must be "*" or at most 63 of A-Z, a-z, 0-9, '.', '_' and '-', starting and ending with a letter or digit`
}

// isDNSSubdomain reports whether s is lower-case DNS labels joined by dots,
// at most 253 characters.
func isDNSSubdomain(s string) bool {
	if s == "" || len(s) > 253 {
		return false
	}
	for label := range strings.SplitSeq(s, ".") {
		if !isLabel(label, 63, isDNSChar) {
			return false
		}
	}
	return true
}

// isLabel reports whether s is 1 to max characters allowed by inner, with
// an alphanumeric first and last character.
func isLabel(s string, max int, inner func(byte) bool) bool {
	if s == "" || len(s) > max || !isAlnum(s[0]) || !isAlnum(s[len(s)-1]) {
		return false
	}
	for i := 0; i < len(s); i++ {
		if !inner(s[i]) {
			return false
		}
	}
	return true
}

func isAlnum(c byte) bool {
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9')
}

func isDNSChar(c byte) bool {
	return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-'
}

func isLabelChar(c byte) bool {
	return isAlnum(c) || c == '-' || c == '_' || c == '.'
}

// quote quotes a value from the document for an error message, cut short
// if it is long.
func quote(s string) string {
	const max = 64
	if len(s) <= max {
		return strconv.Quote(s)
	}
	cut := max
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return strconv.Quote(s[:cut]) + "..."
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

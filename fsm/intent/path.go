package intent

import (
	"strconv"
	"strings"
)

// path is the location of a field in an intent document, one rendered step
// per element: ".name", "[2]" or `["meteor.io/role"]`. Its String form is
// what ValidationError.Field holds, e.g. resources[2].spec.path.
type path []string

func (p path) field(name string) path {
	if simpleKey(name) {
		return p.with("." + name)
	}
	return p.with("[" + strconv.Quote(name) + "]")
}

func (p path) index(i int) path {
	return p.with("[" + strconv.Itoa(i) + "]")
}

// with returns p extended by step, never sharing p's backing array.
func (p path) with(step string) path {
	q := make(path, len(p), len(p)+1)
	copy(q, p)
	return append(q, step)
}

func (p path) String() string {
	return strings.TrimPrefix(strings.Join(p, ""), ".")
}

// simpleKey reports whether name can be written after a dot in a path
// without ambiguity.
func simpleKey(name string) bool {
	if name == "" {
		return false
	}
	for i, c := range name {
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c == '_':
		case (c >= '0' && c <= '9') || c == '-':
			if i == 0 {
				return false
			}
		default:
			return false
		}
	}
	return true
}

// position is a place in a parsed document, 1-based.
type position struct{ line, col int }

func (a position) before(b position) bool {
	return a.line < b.line || (a.line == b.line && a.col < b.col)
}

// span is where a field starts (its key for a mapping entry, its first
// character for a list item) and where the last field inside it starts.
type span struct{ start, end position }

// positions maps the String form of a field path to its span. Nil means
// the intent was not parsed and no lines are known.
type positions map[string]span

// place is where a problem sorts in the document.
type place struct {
	at      position
	missing bool // the field is absent: it sorts after its parent's content
}

func (a place) before(b place) bool {
	if a.at != b.at {
		return a.at.before(b.at)
	}
	return !a.missing && b.missing
}

// locate returns the line to report for the field at p and where it sorts
// in the document. A field absent from the document is reported at the line
// of its nearest parent that is present, and sorts after everything in that
// parent, so that problems with what was written come before what is
// missing.
func (ps positions) locate(p path) (line int, at place) {
	if ps == nil {
		return 0, place{}
	}
	for n := len(p); n >= 0; n-- {
		if sp, ok := ps[p[:n].String()]; ok {
			if n == len(p) {
				return sp.start.line, place{at: sp.start}
			}
			return sp.start.line, place{at: sp.end, missing: true}
		}
	}
	return 0, place{}
}

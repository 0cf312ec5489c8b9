package intent

import (
	"unicode/utf16"
	"unicode/utf8"

	"go.yaml.in/yaml/v3"
)

// JSON documents skip the YAML parser. A YAML parser reads JSON (a JSON
// object is a YAML flow mapping), but it is general and slow: under
// intent writes it was the largest part of Parse. jsonDocument builds the
// same yaml.Node tree from strict JSON directly (same kinds, tags, values,
// lines and columns), so the decoder and its positions serve both. Any
// input it does not take, because it is not strict JSON or holds
// something whose YAML reading it does not reproduce, goes to the YAML
// parser as before, which then gives the error or the document.

// jsonDocument returns the document node of data if data is one strict
// JSON object (with blanks around it), else ok false.
func jsonDocument(data []byte) (doc *yaml.Node, ok bool) {
	// A YAML document is turned away by its first byte, before the whole
	// input is scanned for UTF-8.
	if !LooksJSON(data) || !utf8.Valid(data) {
		return nil, false
	}
	p := &jsonNodes{data: data, line: 1}
	root, ok := p.value(0)
	if !ok {
		return nil, false
	}
	p.blanks()
	if p.bad || p.i != len(p.data) {
		return nil, false
	}
	return &yaml.Node{Kind: yaml.DocumentNode, Line: root.Line, Column: root.Column, Content: []*yaml.Node{root}}, true
}

// jsonNodes is a strict JSON reader that tracks lines and columns as the
// YAML parser counts them: from 1, columns in characters.
type jsonNodes struct {
	data []byte
	i    int
	line int
	// lineStart is the offset of the current line's first byte.
	lineStart int
	// bad is set once the input is found not to be strict JSON, or to hold
	// something the reader does not reproduce.
	bad bool
}

func (p *jsonNodes) column() int {
	return utf8.RuneCount(p.data[p.lineStart:p.i]) + 1
}

// blanks skips JSON whitespace.
func (p *jsonNodes) blanks() {
	for p.i < len(p.data) {
		switch p.data[p.i] {
		case '\n':
			p.i++
			p.line++
			p.lineStart = p.i
		case ' ', '\t', '\r':
			// A lone CR ends a line for YAML but not for this count: not
			// worth reproducing.
			if p.data[p.i] == '\r' && (p.i+1 >= len(p.data) || p.data[p.i+1] != '\n') {
				p.bad = true
				return
			}
			p.i++
		default:
			return
		}
	}
}

func (p *jsonNodes) value(depth int) (*yaml.Node, bool) {
	if depth > maxDepth+8 {
		return nil, false // the YAML parser gives the decoder its error
	}
	p.blanks()
	if p.bad || p.i >= len(p.data) {
		return nil, false
	}
	n := &yaml.Node{Line: p.line, Column: p.column()}
	switch c := p.data[p.i]; {
	case c == '{':
		n.Kind, n.Tag, n.Style = yaml.MappingNode, "!!map", yaml.FlowStyle
		p.i++
		p.blanks()
		if p.i < len(p.data) && p.data[p.i] == '}' {
			p.i++
			return n, true
		}
		for {
			p.blanks()
			if p.i >= len(p.data) || p.data[p.i] != '"' {
				return nil, false
			}
			k, ok := p.value(depth + 1)
			if !ok {
				return nil, false
			}
			p.blanks()
			if p.i >= len(p.data) || p.data[p.i] != ':' {
				return nil, false
			}
			p.i++
			v, ok := p.value(depth + 1)
			if !ok {
				return nil, false
			}
			n.Content = append(n.Content, k, v)
			if !p.next('}') {
				return n, !p.bad
			}
		}
	case c == '[':
		n.Kind, n.Tag, n.Style = yaml.SequenceNode, "!!seq", yaml.FlowStyle
		p.i++
		p.blanks()
		if p.i < len(p.data) && p.data[p.i] == ']' {
			p.i++
			return n, true
		}
		for {
			v, ok := p.value(depth + 1)
			if !ok {
				return nil, false
			}
			n.Content = append(n.Content, v)
			if !p.next(']') {
				return n, !p.bad
			}
		}
	case c == '"':
		s, ok := p.str()
		if !ok {
			return nil, false
		}
		n.Kind, n.Tag, n.Style, n.Value = yaml.ScalarNode, "!!str", yaml.DoubleQuotedStyle, s
		return n, true
	default:
		start := p.i
		if !p.literal() {
			return nil, false
		}
		n.Kind, n.Value = yaml.ScalarNode, string(p.data[start:p.i])
		n.Tag = n.ShortTag() // resolved as the YAML parser resolves a plain scalar
		return n, true
	}
}

// next reads the separator after an element of a mapping or list: true
// after a comma (another element follows), false after end (the
// collection closed). On anything else it sets p.bad.
func (p *jsonNodes) next(end byte) bool {
	p.blanks()
	if p.i < len(p.data) {
		switch p.data[p.i] {
		case ',':
			p.i++
			return true
		case end:
			p.i++
			return false
		}
	}
	p.bad = true
	return false
}

// str reads a JSON string at p.i. It declines escapes of UTF-16
// surrogates, which the two parsers may read differently.
func (p *jsonNodes) str() (string, bool) {
	p.i++ // the opening quote
	start := p.i
	var buf []byte // nil until an escape is met
	for p.i < len(p.data) {
		c := p.data[p.i]
		switch {
		case c == '"':
			s := p.data[start:p.i]
			p.i++
			if buf != nil {
				return string(buf), true
			}
			return string(s), true
		case c < 0x20:
			return "", false
		case c == '\\':
			if buf == nil {
				buf = append([]byte(nil), p.data[start:p.i]...)
			}
			if p.i+1 >= len(p.data) {
				return "", false
			}
			e := p.data[p.i+1]
			p.i += 2
			switch e {
			case '"', '\\', '/':
				buf = append(buf, e)
			case 'b':
				buf = append(buf, '\b')
			case 'f':
				buf = append(buf, '\f')
			case 'n':
				buf = append(buf, '\n')
			case 'r':
				buf = append(buf, '\r')
			case 't':
				buf = append(buf, '\t')
			case 'u':
				if p.i+4 > len(p.data) {
					return "", false
				}
				r := rune(0)
				for _, h := range p.data[p.i : p.i+4] {
					v, ok := hexDigit(h)
					if !ok {
						return "", false
					}
					r = r<<4 | v
				}
				if utf16.IsSurrogate(r) {
					return "", false
				}
				p.i += 4
				buf = utf8.AppendRune(buf, r)
			default:
				return "", false
			}
		default:
			if buf != nil {
				buf = append(buf, c)
			}
			p.i++
		}
	}
	return "", false
}

func hexDigit(c byte) (rune, bool) {
	switch {
	case '0' <= c && c <= '9':
		return rune(c - '0'), true
	case 'a' <= c && c <= 'f':
		return rune(c-'a') + 10, true
	case 'A' <= c && c <= 'F':
		return rune(c-'A') + 10, true
	}
	return 0, false
}

// literal reads a JSON number, true, false or null at p.i.
func (p *jsonNodes) literal() bool {
	for _, word := range [...]string{"true", "false", "null"} {
		if len(p.data)-p.i >= len(word) && string(p.data[p.i:p.i+len(word)]) == word {
			p.i += len(word)
			return true
		}
	}
	// -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
	digits := func() int {
		n := 0
		for p.i < len(p.data) && '0' <= p.data[p.i] && p.data[p.i] <= '9' {
			p.i++
			n++
		}
		return n
	}
	if p.i < len(p.data) && p.data[p.i] == '-' {
		p.i++
	}
	if p.i < len(p.data) && p.data[p.i] == '0' {
		p.i++
	} else if digits() == 0 {
		return false
	}
	if p.i < len(p.data) && p.data[p.i] == '.' {
		p.i++
		if digits() == 0 {
			return false
		}
	}
	if p.i < len(p.data) && (p.data[p.i] == 'e' || p.data[p.i] == 'E') {
		p.i++
		if p.i < len(p.data) && (p.data[p.i] == '+' || p.data[p.i] == '-') {
			p.i++
		}
		if digits() == 0 {
			return false
		}
	}
	return true
}

package intent

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// ErrTooLarge is returned, wrapped, for input larger than MaxDocumentSize.
var ErrTooLarge = errors.New("intent document too large")

// Parse parses and validates one intent document, in YAML or JSON. The
// input may hold empty documents around the intent, but not a second one;
// use ParseAll for streams.
//
// Errors about the content are *ValidationError, with the line of the
// offending field. Input larger than MaxDocumentSize gives an error
// wrapping ErrTooLarge.
func Parse(data []byte) (*Intent, error) {
	if len(data) > MaxDocumentSize {
		return nil, fmt.Errorf("parse intent: %w: %d bytes, limit %d", ErrTooLarge, len(data), MaxDocumentSize)
	}
	if doc, ok := jsonDocument(data); ok {
		in, _, err := parseDocument(doc)
		return in, err
	}
	docs, err := documents(data)
	if err != nil {
		return nil, jsonOrYAMLError(data, 0, err)
	}
	switch len(docs) {
	case 0:
		return nil, &ValidationError{Msg: "empty document"}
	case 1:
	default:
		return nil, &ValidationError{
			Line: docs[1].Line,
			Msg:  fmt.Sprintf("found %d documents, want 1", len(docs)),
		}
	}
	in, _, err := parseDocument(docs[0])
	return in, err
}

// ParseAll parses and validates a stream of intent documents separated by
// "---", skipping empty ones. Intent names must be unique in the stream.
// It returns the first error; lines count from the start of the stream.
// The whole stream is limited to MaxDocumentSize.
func ParseAll(data []byte) ([]*Intent, error) {
	if len(data) > MaxDocumentSize {
		return nil, fmt.Errorf("parse intents: %w: %d bytes, limit %d", ErrTooLarge, len(data), MaxDocumentSize)
	}
	var err error
	var docs []*yaml.Node
	if doc, ok := jsonDocument(data); ok {
		docs = []*yaml.Node{doc}
	} else if docs, err = documents(data); err != nil {
		return nil, streamSyntaxError(data, err)
	}
	if len(docs) == 0 {
		return nil, &ValidationError{Msg: "empty document"}
	}
	out := make([]*Intent, 0, len(docs))
	first := make(map[string]int, len(docs)) // name -> line of its name field
	for _, doc := range docs {
		in, pos, err := parseDocument(doc)
		if err != nil {
			return nil, err
		}
		line, _ := pos.locate(path{".name"})
		if prev, dup := first[in.Name]; dup {
			return nil, &ValidationError{
				Intent: in.Name,
				Field:  "name",
				Line:   line,
				Msg:    fmt.Sprintf("duplicate intent name (first at line %d)", prev),
			}
		}
		first[in.Name] = line
		out = append(out, in)
	}
	return out, nil
}

// documents splits data into its non-empty YAML documents.
func documents(data []byte) ([]*yaml.Node, error) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var docs []*yaml.Node
	for {
		doc := new(yaml.Node)
		err := dec.Decode(doc)
		if errors.Is(err, io.EOF) {
			return docs, nil
		}
		if err != nil {
			return nil, syntaxError(err)
		}
		if doc.Kind != yaml.DocumentNode || len(doc.Content) != 1 {
			return nil, &ValidationError{Line: doc.Line, Msg: "invalid YAML document"}
		}
		if isNull(doc.Content[0]) {
			continue
		}
		docs = append(docs, doc)
	}
}

// syntaxError turns an error of the YAML parser, "yaml: line 3: did not
// find expected key", into a ValidationError with that line.
func syntaxError(err error) error {
	msg := strings.TrimPrefix(err.Error(), "yaml: ")
	line := 0
	if rest, ok := strings.CutPrefix(msg, "line "); ok {
		if num, text, ok := strings.Cut(rest, ": "); ok {
			if n, err := strconv.Atoi(num); err == nil {
				line, msg = n, text
			}
		}
	}
	return &ValidationError{Line: line, Msg: "invalid YAML: " + msg}
}

// parseDocument decodes and validates one non-empty document node.
func parseDocument(doc *yaml.Node) (*Intent, positions, error) {
	d := &decoder{pos: positions{}}
	in, err := d.document(doc)
	if err != nil {
		return nil, nil, err
	}
	if err := in.validate(d.pos, true); err != nil {
		return nil, nil, err
	}
	return in, d.pos, nil
}

// JSON is YAML in flow style, and the YAML parser reads both; but its
// error on broken JSON ("did not find expected node content") speaks of
// YAML. A document that opens a JSON object is meant as JSON, and its
// syntax error is the JSON parser's, with the line and column.

// LooksJSON reports whether data's first non-blank byte opens a JSON
// object.
func LooksJSON(data []byte) bool {
	t := bytes.TrimLeft(data, " \t\r\n")
	return len(t) > 0 && t[0] == '{'
}

// CheckJSON returns nil if data is one well-formed JSON value, else a
// *ValidationError "invalid JSON: ..." with the line and column of the
// error. Lines count from firstLine+1.
func CheckJSON(data []byte, firstLine int) error {
	if json.Valid(data) {
		return nil // without building the value, as Unmarshal would
	}
	var v any
	err := json.Unmarshal(data, &v)
	var se *json.SyntaxError
	if err == nil || !errors.As(err, &se) {
		return nil
	}
	// Offset counts the bytes read up to and including the offending
	// one; at the end of the input there is none.
	at := int(se.Offset) - 1
	if se.Offset >= int64(len(data)) {
		at = len(bytes.TrimRight(data, " \t\r\n"))
	}
	at = max(0, min(at, len(data)))
	line := firstLine + 1 + bytes.Count(data[:at], []byte("\n"))
	col := at - bytes.LastIndexByte(data[:at], '\n')
	return &ValidationError{Line: line, Column: col, Msg: "invalid JSON: " + se.Error()}
}

// jsonOrYAMLError is the syntax error to report for a document that the
// YAML parser refused with yamlErr: the JSON parser's if the document
// opens a JSON object, else the YAML one. The document starts after line
// firstLine of its stream.
func jsonOrYAMLError(doc []byte, firstLine int, yamlErr error) error {
	if LooksJSON(doc) {
		if err := CheckJSON(doc, firstLine); err != nil {
			return err
		}
	}
	return yamlErr
}

// streamSyntaxError is jsonOrYAMLError for a stream of documents: the
// document judged is the one holding the YAML error's line, or with no
// line the first JSON document that does not parse.
func streamSyntaxError(data []byte, yamlErr error) error {
	var ve *ValidationError
	line := 0
	if errors.As(yamlErr, &ve) {
		line = ve.Line
	}
	for _, d := range splitDocuments(data) {
		if line != 0 && (line <= d.before || line > d.before+d.lines) {
			continue
		}
		if err := jsonOrYAMLError(d.text, d.before, nil); err != nil {
			return err
		}
		if line != 0 {
			break
		}
	}
	return yamlErr
}

// streamDocument is one document of a stream: its text, the lines of the
// stream before it, and its own.
type streamDocument struct {
	text          []byte
	before, lines int
}

// splitDocuments splits a stream at its "---" lines, which belong to no
// document.
func splitDocuments(data []byte) []streamDocument {
	var out []streamDocument
	cur := streamDocument{}
	n := 0
	for len(data) > 0 {
		line := data
		if i := bytes.IndexByte(data, '\n'); i >= 0 {
			line, data = data[:i+1], data[i+1:]
		} else {
			data = nil
		}
		n++
		if rest, ok := bytes.CutPrefix(line, []byte("---")); ok && len(bytes.TrimSpace(rest)) == 0 {
			out = append(out, cur)
			cur = streamDocument{before: n}
			continue
		}
		cur.text = append(cur.text, line...)
		cur.lines++
	}
	return append(out, cur)
}

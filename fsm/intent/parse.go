package intent

import (
	"bytes"
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
	docs, err := documents(data)
	if err != nil {
		return nil, err
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
	docs, err := documents(data)
	if err != nil {
		return nil, err
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

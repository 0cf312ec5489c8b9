package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"
)

// The formats of -o: every command that prints data prints a table (or
// text) for people, or the API's JSON value, or that same value as YAML.
const (
	outputTable = "table"
	outputJSON  = "json"
	outputYAML  = "yaml"
)

var outputFormats = []string{outputTable, outputJSON, outputYAML}

// checkOutput refuses an -o value other than the formats, naming them.
func checkOutput(o string) error {
	if slices.Contains(outputFormats, o) {
		return nil
	}
	return fmt.Errorf("-o %q: the output format is one of %s", o, strings.Join(outputFormats, ", "))
}

// structured reports whether -o asks for a value (json or yaml) rather
// than a table.
func (g *globals) structured() bool { return g.output != outputTable }

// print writes v in the format -o asks for, json or yaml; the table of a
// value is each command's own.
func (g *globals) print(w io.Writer, v any) error {
	return printValue(w, g.output, v)
}

// printValue writes v as indented JSON, or as YAML of the same value: the
// JSON's field names and order, its numbers and strings.
func printValue(w io.Writer, format string, v any) error {
	if format == outputYAML {
		return printYAML(w, v)
	}
	return printJSON(w, v)
}

func printJSON(w io.Writer, v any) error {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		return err
	}
	_, err := w.Write(buf.Bytes())
	return err
}

// printYAML writes v as YAML by way of its JSON, so that both formats show
// one value: the API types carry JSON tags only. JSON is YAML in flow
// style; decoded into nodes and re-encoded in block style it keeps the
// fields in their order, and strings that would read as another type
// (a digest of digits, "true") stay quoted.
func printYAML(w io.Writer, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(b, &doc); err != nil {
		return fmt.Errorf("YAML of the JSON answer: %w", err)
	}
	blockStyle(&doc)
	var buf bytes.Buffer
	enc := yaml.NewEncoder(&buf)
	enc.SetIndent(2)
	if err := enc.Encode(&doc); err != nil {
		return err
	}
	if err := enc.Close(); err != nil {
		return err
	}
	_, err = w.Write(buf.Bytes())
	return err
}

// blockStyle drops the flow and quoting styles the JSON text gave the
// nodes; the encoder quotes what needs it.
func blockStyle(n *yaml.Node) {
	n.Style = 0
	for _, c := range n.Content {
		blockStyle(c)
	}
}

// plural says "1 device", "2 devices": one word after a count, the one the
// count takes.
func plural(n uint64, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return fmt.Sprintf("%d %s", n, many)
}

// nDevices says "1 device" or "N devices".
func nDevices(n int) string { return plural(uint64(n), "device", "devices") }

// percent is n of total as a percentage for people: one decimal below
// 10 %, none above, and never rounded up to 100 % while one is missing
// (1198 of 1200 is 99.8 %, 11999 of 12000 99.99 %), nor down to 0 % once
// one is there.
func percent(n, total int) string {
	if total <= 0 {
		return "-"
	}
	if n >= total {
		return "100%"
	}
	if n <= 0 {
		return "0%"
	}
	p := 100 * float64(n) / float64(total)
	for digits := 0; digits < 6; digits++ {
		scale := math.Pow10(digits)
		r := math.Round(p*scale) / scale
		if r < 100 && r > 0 && (digits > 0 || p >= 10) {
			return fmt.Sprintf("%.*f%%", digits, r)
		}
	}
	return fmt.Sprintf("%g%%", p)
}

// actionResult is what a command that only acts (the API answers it with
// no value) prints under -o json or yaml: what it did, to what.
type actionResult struct {
	Done   string `json:"done"`
	Target string `json:"target"`
}

// acted reports an action: its result under -o json or yaml, else text.
func (g *globals) acted(w io.Writer, done, target, text string) error {
	if g.structured() {
		return g.print(w, actionResult{Done: done, Target: target})
	}
	_, err := fmt.Fprintln(w, text)
	return err
}

package benchkit

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
)

// WriteResults writes rep as dir/NAME.json and md as dir/NAME.md,
// creating dir if need be.
func WriteResults(dir, name string, rep any, md string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("create results dir: %w", err)
	}
	b, err := json.MarshalIndent(rep, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, name+".json"), append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("write results: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, name+".md"), []byte(md), 0o644); err != nil {
		return fmt.Errorf("write results: %w", err)
	}
	return nil
}

// ResultsLine prints where WriteResults put the files.
func ResultsLine(w io.Writer, dir, name string) {
	fmt.Fprintf(w, "results: %s, %s\n", filepath.Join(dir, name+".json"), filepath.Join(dir, name+".md"))
}

// PrintSummary ends the stdout table: a blank line, the notes, then the
// verdicts.
func PrintSummary(w io.Writer, notes, verdicts []string) {
	fmt.Fprintln(w)
	for _, n := range notes {
		fmt.Fprintf(w, "note: %s\n", n)
	}
	for _, v := range verdicts {
		fmt.Fprintf(w, "verdict: %s\n", v)
	}
}

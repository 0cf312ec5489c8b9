// Command report gathers the summary rows that every benchmark driver
// writes into its results JSON (key "summary") and writes the one table of
// all of them, bench/results/README.md, and prints it. `make bench` runs it
// last; it reads only files, so it can be run again at any time.
package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/meteor-edge/meteor/bench/internal/benchkit"
)

// expected are the six rows the table must have, by number; a missing one
// is shown as not run rather than silently left out.
var expected = map[int]string{
	1: "intent writes: Meteor vs etcd (make bench-intents)",
	2: "fan-out convergence: Meteor vs Mosquitto (make bench-fanout)",
	3: "reconnect storm: 0-RTT vs full handshakes (make bench-storm)",
	4: "scale: largest fleet on one machine (make bench-scale)",
	5: "seed scenario: retail fleet, three changes (make bench-retail)",
	6: "edge footprint: one idle agent, fiber and cellular (make bench-footprint)",
}

// source is one results file's date, machine and rows.
type source struct {
	File    string           `json:"-"`
	Date    string           `json:"date"`
	Machine benchkit.Machine `json:"machine"`
	Summary []benchkit.Row   `json:"summary"`
}

func main() {
	dir := flag.String("dir", "bench/results", "results directory to read and write README.md into")
	flag.Parse()
	md, err := build(*dir)
	if err != nil {
		fmt.Fprintln(os.Stderr, "report:", err)
		os.Exit(1)
	}
	if err := os.WriteFile(filepath.Join(*dir, "README.md"), []byte(md), 0o644); err != nil {
		fmt.Fprintln(os.Stderr, "report:", err)
		os.Exit(1)
	}
	io.WriteString(os.Stdout, md)
	fmt.Printf("\nresults: %s\n", filepath.Join(*dir, "README.md"))
}

// load reads every *.json in dir that has summary rows.
func load(dir string) ([]source, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*.json"))
	if err != nil {
		return nil, err
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("no results in %s: run make bench first", dir)
	}
	var out []source
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		var s source
		if err := json.Unmarshal(b, &s); err != nil {
			return nil, fmt.Errorf("%s: %w", f, err)
		}
		if len(s.Summary) == 0 {
			continue
		}
		s.File = filepath.Base(f)
		out = append(out, s)
	}
	return out, nil
}

// build renders the table.
func build(dir string) (string, error) {
	srcs, err := load(dir)
	if err != nil {
		return "", err
	}
	if len(srcs) == 0 {
		return "", errors.New("no results file has summary rows: run make bench first")
	}
	type item struct {
		row benchkit.Row
		src *source
	}
	// A figure measured by more than one results file (a part run on its
	// own, say) is taken from the newest.
	type key struct {
		bench  int
		figure string
	}
	newest := map[key]item{}
	var order []key
	seen := map[int]bool{}
	for i := range srcs {
		for _, r := range srcs[i].Summary {
			k := key{r.Bench, r.Figure}
			prev, ok := newest[k]
			if !ok {
				order = append(order, k)
			}
			if !ok || srcs[i].Date > prev.src.Date {
				newest[k] = item{r, &srcs[i]}
			}
			seen[r.Bench] = true
		}
	}
	var items []item
	for _, k := range order {
		items = append(items, newest[k])
	}
	slices.SortStableFunc(items, func(a, b item) int { return a.row.Bench - b.row.Bench })

	var b strings.Builder
	b.WriteString("# Meteor benchmarks\n\n")
	b.WriteString("Written by `make bench` (`go run ./bench/report`) from the `summary` rows of each results file here; each figure was measured in the run named in its source, against its peer in the same run. " +
		"Elections are the Raft leader elections held while the figure was measured (Meteor's, then the peer's where it has them), won or not: the growth of the highest Raft term the servers report.\n\n")
	b.WriteString("| # | figure | Meteor | peer | ratio | goal | met | elections | source |\n")
	b.WriteString("|---:|---|---|---|---:|---|:---:|---:|---|\n")
	for _, it := range items {
		r := it.row
		peer := r.Peer
		if r.PeerName != "" && peer != "" {
			peer = r.PeerName + ": " + peer
		}
		met := ""
		if r.Met != nil {
			met = map[bool]string{true: "yes", false: "**no**"}[*r.Met]
		}
		fmt.Fprintf(&b, "| %d | %s | %s | %s | %s | %s | %s | %s | %s (%s) |\n",
			r.Bench, cell(r.Figure), cell(r.Meteor), cell(peer), cell(r.Ratio), cell(r.Goal), met, elections(r), it.src.File, it.src.Date)
	}
	var missing []int
	for n := range expected {
		if !seen[n] {
			missing = append(missing, n)
		}
	}
	slices.Sort(missing)
	for _, n := range missing {
		fmt.Fprintf(&b, "| %d | %s | not run | | | | | | |\n", n, expected[n])
	}

	b.WriteString("\n## Notes\n\n")
	for _, it := range items {
		if it.row.Note != "" {
			fmt.Fprintf(&b, "- %d, %s: %s\n", it.row.Bench, it.row.Figure, it.row.Note)
		}
	}
	b.WriteString("\n## Machines\n\n")
	for _, s := range srcs {
		fmt.Fprintf(&b, "- %s: %s\n", s.File, s.Machine.Measured(s.Date))
	}
	return b.String(), nil
}

// elections is a row's elections cell: Meteor's count, then the peer's
// after a slash where it has one; empty where none was recorded.
func elections(r benchkit.Row) string {
	count := func(n *int) string {
		if n == nil {
			return "-"
		}
		return fmt.Sprint(*n)
	}
	switch {
	case r.PeerElections != nil:
		return count(r.Elections) + " / " + count(r.PeerElections)
	case r.Elections != nil:
		return count(r.Elections)
	}
	return ""
}

// cell keeps a value from breaking the markdown table.
func cell(s string) string { return strings.ReplaceAll(s, "|", "\\|") }

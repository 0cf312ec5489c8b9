// Command report gathers the summary rows that every benchmark driver
// writes into its results JSON (key "summary") and writes the one table of
// all of them, bench/results/README.md, and prints it: every row with its
// peer or its goal, a line for each goal of the table
// (benchkit.GoalKeys) that no results file answers, and the row "leader
// elections during any benchmark", the sum of the elections every results
// file records for its clusters over their whole lives (key
// "leader_elections"; goal 0, met only when every file records them).
// `make bench` runs it last; it reads only files, so it can be run again
// at any time.
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

// expected are the six benchmarks the table must have, by number; a
// missing one is shown as not run rather than silently left out, as is a
// goal of benchkit.GoalKeys no row answers.
var expected = map[int]string{
	1: "intent writes: Meteor vs etcd (make bench-intents)",
	2: "fan-out convergence: Meteor vs Mosquitto (make bench-fanout)",
	3: "sessions: idle memory, reconnect storm (make bench-sessions)",
	4: "scale: largest fleet on one machine (make bench-fleet)",
	5: "seed scenario: retail fleet, three changes (make bench-retail)",
	6: "edge footprint: one idle agent, fiber and cellular (make bench-footprint)",
}

// source is one results file's date, machine, rows and the leader
// elections of its clusters (nil in files written before they were
// recorded).
type source struct {
	File      string                `json:"-"`
	Date      string                `json:"date"`
	Machine   benchkit.Machine      `json:"machine"`
	Summary   []benchkit.Row        `json:"summary"`
	Elections *benchkit.ElectionLog `json:"leader_elections"`
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

// item is one row of the table and the results file it came from.
type item struct {
	row benchkit.Row
	src *source
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
	b.WriteString("The last row adds up the leader elections of every Meteor cluster the runs behind the table started, each over its whole life (the results' `leader_elections`).\n\n")
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
	keys := map[string]bool{}
	for _, it := range items {
		keys[it.row.Key] = true
	}
	for _, g := range benchkit.GoalKeys {
		if g.Key != electionsKey && !keys[g.Key] {
			fmt.Fprintf(&b, "| | %s | not run (%s) | | | %s | | | |\n", cell(g.Row), g.Target, cell(g.Goal))
		}
	}
	var used []*source
	for _, it := range items {
		if !slices.Contains(used, it.src) {
			used = append(used, it.src)
		}
	}
	er := electionsRow(used, items)
	met := map[bool]string{true: "yes", false: "**no**"}[*er.Met]
	var files []string
	for _, src := range used {
		files = append(files, src.File)
	}
	fmt.Fprintf(&b, "| all | %s | %s | | | %s | %s | %s | %s |\n", cell(er.Figure), cell(er.Meteor), cell(er.Goal), met, elections(er), strings.Join(files, ", "))

	b.WriteString("\n## Notes\n\n")
	for _, it := range items {
		if it.row.Note != "" {
			fmt.Fprintf(&b, "- %d, %s: %s\n", it.row.Bench, it.row.Figure, it.row.Note)
		}
	}
	if er.Note != "" {
		fmt.Fprintf(&b, "- all, %s: %s\n", er.Figure, er.Note)
	}
	b.WriteString("\n## Machines\n\n")
	for _, s := range srcs {
		fmt.Fprintf(&b, "- %s: %s\n", s.File, s.Machine.Measured(s.Date))
	}
	return b.String(), nil
}

// electionsKey is the goal row this command computes itself.
const electionsKey = "elections"

// electionsRow sums the leader elections of the clusters of the results
// files the table's rows come from. The goal is 0; it is met only when
// every one of those files recorded its clusters' elections.
func electionsRow(srcs []*source, items []item) benchkit.Row {
	row := benchkit.Row{Key: electionsKey, Figure: "leader elections during any benchmark (every cluster, its whole life)", Goal: "0"}
	total := 0
	var per, unrecorded, unknown []string
	for _, s := range srcs {
		if s.Elections == nil {
			unrecorded = append(unrecorded, s.File)
			continue
		}
		total += s.Elections.Total
		per = append(per, fmt.Sprintf("%s %d", strings.TrimSuffix(s.File, ".json"), s.Elections.Total))
		for _, c := range s.Elections.Clusters {
			switch {
			case c.Error != "":
				unknown = append(unknown, fmt.Sprintf("%s, %s: %s", s.File, c.Name, c.Error))
			case c.Elections > 0:
				per = append(per, fmt.Sprintf("(%s: %d)", c.Name, c.Elections))
			}
		}
	}
	row.Meteor, row.Elections = fmt.Sprint(total), new(total)
	if len(unrecorded) > 0 {
		row.Meteor += fmt.Sprintf(" (%d of %d results files record none)", len(unrecorded), len(srcs))
	}
	row.Met = benchkit.MetGoal(total == 0 && len(unrecorded) == 0 && len(unknown) == 0)
	var note []string
	if len(per) > 0 {
		note = append(note, "by results file: "+strings.Join(per, ", "))
	}
	if len(unrecorded) > 0 {
		note = append(note, "not recorded (results from before elections were counted per cluster): "+strings.Join(unrecorded, ", "))
	}
	if len(unknown) > 0 {
		note = append(note, "unknown: "+strings.Join(unknown, "; "))
	}
	var without []string
	for _, it := range items {
		if it.row.Elections == nil {
			without = append(without, fmt.Sprintf("%d %s", it.row.Bench, it.row.Figure))
		}
	}
	if len(without) > 0 {
		note = append(note, "rows without a count of their own window: "+strings.Join(without, "; "))
	}
	row.Note = strings.Join(note, "; ")
	return row
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

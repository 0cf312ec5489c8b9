package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/meteor-edge/meteor/bench/internal/benchkit"
)

func writeJSON(t *testing.T, dir, name string, v any) {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestBuildOrdersRowsAndNamesMissingOnes(t *testing.T) {
	dir := t.TempDir()
	writeJSON(t, dir, "b.json", map[string]any{"date": "D2", "summary": []benchkit.Row{
		{Bench: 3, Name: "storm", Figure: "time to resume", Meteor: "2 s", Peer: "5 s", PeerName: "full", Ratio: "0.40", Elections: new(0), PeerElections: new(2)},
	}})
	writeJSON(t, dir, "a.json", map[string]any{"date": "D1", "summary": []benchkit.Row{
		{Bench: 1, Name: "intents", Figure: "writes|s", Meteor: "10", Goal: ">= 1x", Met: benchkit.MetGoal(false), Note: "cpu bound", Elections: new(1)},
	}})
	writeJSON(t, dir, "old.json", map[string]any{"date": "D0"}) // no summary: ignored

	md, err := build(dir)
	if err != nil {
		t.Fatal(err)
	}
	i1 := strings.Index(md, "| 1 | writes\\|s | 10 |  |  | >= 1x | **no** | 1 | a.json (D1) |")
	i3 := strings.Index(md, "| 3 | time to resume | 2 s | full: 5 s | 0.40 |  |  | 0 / 2 | b.json (D2) |")
	if i1 < 0 || i3 < 0 || i1 > i3 {
		t.Fatalf("rows missing or out of order:\n%s", md)
	}
	if !strings.Contains(md, "**no**") || !strings.Contains(md, "- 1, writes|s: cpu bound") {
		t.Fatalf("goal or note not rendered:\n%s", md)
	}
	for _, n := range []string{"| 2 |", "| 4 |", "| 5 |"} {
		if !strings.Contains(md, n) || !strings.Contains(md, "not run") {
			t.Fatalf("missing row %s not shown as not run:\n%s", n, md)
		}
	}
	if strings.Contains(md, "old.json") {
		t.Fatalf("a file without summary rows was listed:\n%s", md)
	}
}

func TestBuildTakesTheNewestOfAFigure(t *testing.T) {
	dir := t.TempDir()
	writeJSON(t, dir, "fleet.json", map[string]any{"date": "2026-11-29T17:06:14Z", "summary": []benchkit.Row{
		{Bench: 4, Figure: "largest fleet", Meteor: "10,000"},
		{Bench: 5, Figure: "change 1", Meteor: "3.3 s"},
	}})
	writeJSON(t, dir, "retail.json", map[string]any{"date": "2026-11-29T18:50:00Z", "summary": []benchkit.Row{
		{Bench: 5, Figure: "change 1", Meteor: "2.1 s"},
	}})
	md, err := build(dir)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(md, "3.3 s") || !strings.Contains(md, "| 5 | change 1 | 2.1 s |") || !strings.Contains(md, "| 4 | largest fleet | 10,000 |") {
		t.Fatalf("want the newer change 1 and the scale row:\n%s", md)
	}
}

func TestBuildWithoutResults(t *testing.T) {
	if _, err := build(t.TempDir()); err == nil {
		t.Fatal("no error for an empty results directory")
	}
}

func TestBuildShowsMissingGoalsAndSumsElections(t *testing.T) {
	dir := t.TempDir()
	writeJSON(t, dir, "intents.json", map[string]any{"date": "D1",
		"leader_elections": benchkit.ElectionLog{Total: 2, Clusters: []benchkit.ClusterElections{{Name: "intents: meteor", Elections: 2}}},
		"summary": []benchkit.Row{
			{Bench: 1, Key: "intents-writes", Figure: "writes", Meteor: "10", Elections: new(1)},
			{Bench: 1, Key: "intents-cpu", Figure: "cpu", Meteor: "1 ms", Elections: new(1)},
		}})
	writeJSON(t, dir, "fleet.json", map[string]any{"date": "D2",
		"leader_elections": benchkit.ElectionLog{Total: 0, Clusters: []benchkit.ClusterElections{{Name: "scale 10000"}}},
		"summary":          []benchkit.Row{{Bench: 4, Key: "fleet-connect", Figure: "connect", Meteor: "10,000 devices in 90 s"}}})
	md, err := build(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"| | 10,000 devices, 99 % applied | not run (make bench-fanout) |",
		"| | server memory per idle session | not run (make bench-sessions) |",
		"| all | leader elections during any benchmark (every cluster, its whole life) | 2 | | | 0 | **no** | 2 | intents.json, fleet.json |",
		"by results file: intents 2, (intents: meteor: 2), fleet 0",
		"rows without a count of their own window: 4 connect",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("missing %q in:\n%s", want, md)
		}
	}
	if strings.Contains(md, "| | connect 100,000 devices | not run") || strings.Contains(md, "| | server CPU per write | not run") {
		t.Errorf("a goal answered by a row shown as not run:\n%s", md)
	}

	// No elections anywhere, and one file that records none: not met.
	dir = t.TempDir()
	writeJSON(t, dir, "a.json", map[string]any{"date": "D1", "leader_elections": benchkit.ElectionLog{}, "summary": []benchkit.Row{{Bench: 1, Figure: "x", Elections: new(0)}}})
	writeJSON(t, dir, "b.json", map[string]any{"date": "D1", "summary": []benchkit.Row{{Bench: 2, Figure: "y", Elections: new(0)}}})
	md, err = build(dir)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(md, "| 0 (1 of 2 results files record none) | | | 0 | **no** |") || !strings.Contains(md, "not recorded (results from before elections were counted per cluster): b.json") {
		t.Errorf("unrecorded elections counted as met:\n%s", md)
	}
	os.Remove(filepath.Join(dir, "b.json"))
	if md, err = build(dir); err != nil || !strings.Contains(md, "| 0 | | | 0 | yes |") {
		t.Errorf("no elections, all recorded: not met (%v):\n%s", err, md)
	}
}

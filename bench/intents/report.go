package main

import (
	"fmt"
	"io"
	"strings"

	"github.com/meteor-edge/meteor/bench/internal/benchkit"
)

// report is everything a run found; it is written as intents.json.
type report struct {
	Date     string           `json:"date"`
	Machine  benchkit.Machine `json:"machine"`
	Versions versionInfo      `json:"versions"`
	Params   paramInfo        `json:"params"`
	Leaders  map[string]any   `json:"leaders"`
	Results  []*levelResult   `json:"results"`
	Ratios   []ratio          `json:"ratios"`
	Verdict  string           `json:"verdict"`
	Notes    []string         `json:"notes"`
	// Summary is this benchmark's row in bench/results/README.md.
	Summary []benchkit.Row `json:"summary"`
}

type versionInfo struct {
	Meteor      string `json:"meteor"`
	Etcd        string `json:"etcd"`
	EtcdGateway string `json:"etcd_gateway_put"`
	EtcdSkipped string `json:"etcd_skipped,omitempty"`
}

type paramInfo struct {
	Clients            []int   `json:"clients"`
	WarmupSec          float64 `json:"warmup_s"`
	DurationSec        float64 `json:"duration_s"`
	Keys               int     `json:"keys"`
	DocBytes           int     `json:"doc_bytes"`
	MeteorRequestBytes int     `json:"meteor_request_bytes"`
	EtcdRequestBytes   int     `json:"etcd_request_bytes,omitempty"`
	Servers            int     `json:"servers_per_system"`
	Profiled           bool    `json:"leaders_profiled_with_perf"`
	LeaderOnly         bool    `json:"leader_only"`
}

// ratio compares Meteor with etcd at one level: Throughput is Meteor's
// writes/s over etcd's (higher is better for Meteor), P99 Meteor's p99
// over etcd's (lower is better for Meteor).
type ratio struct {
	Clients    int     `json:"clients"`
	Throughput float64 `json:"throughput_meteor_over_etcd"`
	P99        float64 `json:"p99_meteor_over_etcd"`
}

// goalClients and goalRatio state the goal: at 64 clients Meteor writes
// at least as fast as etcd.
const (
	goalClients = 64
	goalRatio   = 1.0
)

// ratios pairs each level's Meteor and etcd rows.
func ratios(results []*levelResult) []ratio {
	var out []ratio
	for _, m := range results {
		if m.System != "meteor" {
			continue
		}
		for _, e := range results {
			if e.System == "etcd" && e.Clients == m.Clients && e.WritesPerSec > 0 {
				r := ratio{Clients: m.Clients, Throughput: m.WritesPerSec / e.WritesPerSec}
				if e.P99ms > 0 {
					r.P99 = m.P99ms / e.P99ms
				}
				out = append(out, r)
			}
		}
	}
	return out
}

// verdict is the one-line answer for the goal level.
func verdict(rs []ratio) string {
	for _, r := range rs {
		if r.Clients != goalClients {
			continue
		}
		state := "NOT MET"
		if r.Throughput >= goalRatio {
			state = "MET"
		}
		return fmt.Sprintf("goal %s: at %d clients Meteor writes %.2fx etcd's throughput (goal >= %.1fx); p99 %.2fx etcd's",
			state, goalClients, r.Throughput, goalRatio, r.P99)
	}
	return fmt.Sprintf("goal not evaluated: no Meteor and etcd rows at %d clients", goalClients)
}

// summaryRows gives the goal level's writes/s, Meteor against etcd, for
// the table of all benchmarks.
func summaryRows(rep *report) []benchkit.Row {
	row := benchkit.Row{Bench: 1, Name: "intents", Figure: fmt.Sprintf("intent writes/s at %d clients, 3 servers each", goalClients),
		PeerName: "etcd " + rep.Versions.Etcd, Goal: fmt.Sprintf("Meteor >= %.1fx etcd", goalRatio)}
	find := func(system string) *levelResult {
		for _, r := range rep.Results {
			if r.System == system && r.Clients == goalClients {
				return r
			}
		}
		return nil
	}
	m, e := find("meteor"), find("etcd")
	if m != nil {
		row.Meteor = fmt.Sprintf("%.0f writes/s (p99 %.1f ms)", m.WritesPerSec, m.P99ms)
		row.Elections = new(m.Elections)
	}
	if e != nil {
		row.Peer = fmt.Sprintf("%.0f writes/s (p99 %.1f ms)", e.WritesPerSec, e.P99ms)
		row.PeerElections = new(e.Elections)
	}
	for _, r := range rep.Ratios {
		if r.Clients == goalClients {
			row.Ratio = fmt.Sprintf("%.2f", r.Throughput)
			row.Met = benchkit.MetGoal(r.Throughput >= goalRatio)
		}
	}
	if rep.Versions.EtcdSkipped != "" {
		row.PeerName, row.Note = "etcd", "etcd skipped: "+rep.Versions.EtcdSkipped
	} else if m != nil && e != nil {
		row.Note = fmt.Sprintf("server CPU per write: Meteor %.2f ms, etcd %.2f ms; clients and both clusters share the machine's cores", m.ServerCPUms, e.ServerCPUms)
	}
	return []benchkit.Row{row}
}

// rowHeader and row print the stdout table one row at a time.
func rowHeader(w io.Writer) {
	fmt.Fprintf(w, "%-7s %7s %10s %8s %8s %7s %14s %9s\n", "system", "clients", "writes/s", "p50 ms", "p99 ms", "errors", "srv cpu ms/wr", "elections")
}

func row(w io.Writer, r *levelResult) {
	fmt.Fprintf(w, "%-7s %7d %10.0f %8.2f %8.2f %7d %14.3f %9d\n", r.System, r.Clients, r.WritesPerSec, r.P50ms, r.P99ms, r.Errors, r.ServerCPUms, r.Elections)
	for k, n := range r.ErrorKinds {
		fmt.Fprintf(w, "        %d x %s, e.g. %s\n", n, k, r.ErrorSamples[k])
	}
}

func printSummary(w io.Writer, rep *report) {
	if len(rep.Ratios) > 0 {
		fmt.Fprintf(w, "\n%-7s %22s %18s\n", "clients", "meteor/etcd writes/s", "meteor/etcd p99")
		for _, r := range rep.Ratios {
			fmt.Fprintf(w, "%-7d %22.2f %18.2f\n", r.Clients, r.Throughput, r.P99)
		}
	}
	benchkit.PrintSummary(w, rep.Notes, []string{rep.Verdict})
}

// writeResults writes intents.json and intents.md into dir.
func writeResults(dir string, rep *report) error {
	return benchkit.WriteResults(dir, "intents", rep, markdown(rep))
}

func markdown(rep *report) string {
	var b strings.Builder
	p := rep.Params
	fmt.Fprintf(&b, "# Intent writes: Meteor vs etcd\n\n")
	fmt.Fprintf(&b, "%s\n\n", rep.Machine.Measured(rep.Date))
	etcd := rep.Versions.Etcd
	if rep.Versions.EtcdSkipped != "" {
		etcd = "skipped: " + rep.Versions.EtcdSkipped
	}
	fmt.Fprintf(&b, "Meteor %s and etcd %s, three servers each on 127.0.0.1. %.0f s measured after %.0f s warm-up per level; %d keys; %d-byte documents (Meteor request %d bytes",
		rep.Versions.Meteor, etcd, p.DurationSec, p.WarmupSec, p.Keys, p.DocBytes, p.MeteorRequestBytes)
	if p.EtcdRequestBytes > 0 {
		fmt.Fprintf(&b, ", etcd request %d bytes", p.EtcdRequestBytes)
	}
	fmt.Fprintf(&b, ").\n\n")
	fmt.Fprintf(&b, "| system | clients | writes/s | p50 ms | p99 ms | errors | server CPU ms/write | leader elections | load1 |\n")
	fmt.Fprintf(&b, "|---|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, r := range rep.Results {
		fmt.Fprintf(&b, "| %s | %d | %.0f | %.2f | %.2f | %d | %.3f | %d | %.2f |\n", r.System, r.Clients, r.WritesPerSec, r.P50ms, r.P99ms, r.Errors, r.ServerCPUms, r.Elections, r.Load1)
	}
	if len(rep.Ratios) > 0 {
		fmt.Fprintf(&b, "\n| clients | Meteor/etcd writes/s | Meteor/etcd p99 |\n|---:|---:|---:|\n")
		for _, r := range rep.Ratios {
			fmt.Fprintf(&b, "| %d | %.2f | %.2f |\n", r.Clients, r.Throughput, r.P99)
		}
	}
	fmt.Fprintf(&b, "\n**Verdict:** %s\n\n", rep.Verdict)
	for _, n := range rep.Notes {
		fmt.Fprintf(&b, "- %s\n", n)
	}
	return b.String()
}

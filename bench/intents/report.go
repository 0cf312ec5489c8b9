package main

import (
	"fmt"
	"io"
	"maps"
	"slices"
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
	// Summary is this benchmark's rows in bench/results/README.md.
	Summary []benchkit.Row `json:"summary"`
	// Elections are the leader elections of the Meteor cluster over its
	// whole life.
	Elections benchkit.ElectionLog `json:"leader_elections"`
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
	Rounds             int     `json:"rounds"`
	LeaderOnly         bool    `json:"leader_only"`
}

// ratio compares Meteor with etcd at one level: Throughput is Meteor's
// writes/s over etcd's (higher is better for Meteor), P99 Meteor's p99
// over etcd's (lower is better for Meteor).
type ratio struct {
	Clients    int     `json:"clients"`
	Throughput float64 `json:"throughput_meteor_over_etcd"`
	P99        float64 `json:"p99_meteor_over_etcd"`
	// ThroughputByRound is the writes/s ratio of each round's two
	// windows, which shows the spread the pooled ratio hides.
	ThroughputByRound []float64 `json:"throughput_by_round"`
}

// goalClients and goalRatio state the goals: at 64 clients Meteor writes
// at least goalRatio times as fast as etcd with a p99 no higher than
// etcd's, and spends no more server CPU per write.
const (
	goalClients = 64
	goalRatio   = 1.2
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
				for i := range min(len(m.RoundWritesPerSec), len(e.RoundWritesPerSec)) {
					if e.RoundWritesPerSec[i] > 0 {
						r.ThroughputByRound = append(r.ThroughputByRound, m.RoundWritesPerSec[i]/e.RoundWritesPerSec[i])
					}
				}
				out = append(out, r)
			}
		}
	}
	return out
}

// writesMet says whether the writes goal is met at r.
func writesMet(r ratio) bool { return r.Throughput >= goalRatio && r.P99 > 0 && r.P99 <= 1 }

// verdict is the one-line answer for the goal level.
func verdict(rs []ratio, results []*levelResult) string {
	for _, r := range rs {
		if r.Clients != goalClients {
			continue
		}
		m, e := find(results, "meteor", goalClients), find(results, "etcd", goalClients)
		cpu := ""
		if m != nil && e != nil && e.ServerCPUms > 0 {
			cpu = fmt.Sprintf("; server CPU per write %.3f ms against etcd's %.3f ms (%.2fx; goal <= 1.0x): %s",
				m.ServerCPUms, e.ServerCPUms, m.ServerCPUms/e.ServerCPUms, verdictState(m.ServerCPUms <= e.ServerCPUms))
		}
		return fmt.Sprintf("writes goal %s: at %d clients Meteor writes %.2fx etcd's throughput (goal >= %.1fx) with a p99 %.2fx etcd's (goal <= 1.0x)%s",
			verdictState(writesMet(r)), goalClients, r.Throughput, goalRatio, r.P99, cpu)
	}
	return fmt.Sprintf("goal not evaluated: no Meteor and etcd rows at %d clients", goalClients)
}

func verdictState(met bool) string {
	if met {
		return "MET"
	}
	return "NOT MET"
}

// find returns the row of system at clients, or nil.
func find(results []*levelResult, system string, clients int) *levelResult {
	for _, r := range results {
		if r.System == system && r.Clients == clients {
			return r
		}
	}
	return nil
}

// summaryRows gives the goal level's writes/s and server CPU per write,
// Meteor against etcd, for the table of all benchmarks.
func summaryRows(rep *report) []benchkit.Row {
	writes := benchkit.Row{Bench: 1, Name: "intents", Key: "intents-writes", Figure: fmt.Sprintf("intent writes/s at %d clients, 3 servers each", goalClients),
		PeerName: "etcd " + rep.Versions.Etcd, Goal: fmt.Sprintf(">= %.1fx etcd, p99 <= etcd's", goalRatio)}
	cpu := benchkit.Row{Bench: 1, Name: "intents", Key: "intents-cpu", Figure: fmt.Sprintf("server CPU per write at %d clients (three servers together)", goalClients),
		PeerName: "etcd " + rep.Versions.Etcd, Goal: "<= etcd's"}
	m, e := find(rep.Results, "meteor", goalClients), find(rep.Results, "etcd", goalClients)
	if m != nil {
		writes.Meteor = fmt.Sprintf("%.0f writes/s (p99 %.1f ms)", m.WritesPerSec, m.P99ms)
		cpu.Meteor = fmt.Sprintf("%.3f ms", m.ServerCPUms)
		writes.Elections, cpu.Elections = new(m.Elections), new(m.Elections)
	}
	if e != nil {
		writes.Peer = fmt.Sprintf("%.0f writes/s (p99 %.1f ms)", e.WritesPerSec, e.P99ms)
		cpu.Peer = fmt.Sprintf("%.3f ms", e.ServerCPUms)
		writes.PeerElections, cpu.PeerElections = new(e.Elections), new(e.Elections)
	}
	for _, r := range rep.Ratios {
		if r.Clients == goalClients {
			writes.Ratio = fmt.Sprintf("%.2f (p99 %.2f)", r.Throughput, r.P99)
			writes.Met = benchkit.MetGoal(writesMet(r))
		}
	}
	if m != nil && e != nil && e.ServerCPUms > 0 {
		cpu.Ratio = fmt.Sprintf("%.2f", m.ServerCPUms/e.ServerCPUms)
		cpu.Met = benchkit.MetGoal(m.ServerCPUms <= e.ServerCPUms)
	}
	if rep.Versions.EtcdSkipped != "" {
		writes.PeerName, writes.Note = "etcd", "etcd skipped: "+rep.Versions.EtcdSkipped
		cpu.PeerName, cpu.Note = "etcd", writes.Note
	} else if m != nil && e != nil {
		writes.Note = fmt.Sprintf("closed-loop clients spreading writes over the three servers of each system, %s measured, the systems taking turns; server CPU per write: Meteor %.3f ms, etcd %.3f ms; clients and both clusters share the machine's cores", roundsText(rep.Params, rep.Ratios), m.ServerCPUms, e.ServerCPUms)
		var by []string
		for _, name := range slices.Sorted(maps.Keys(m.ServerCPUmsBy)) {
			by = append(by, fmt.Sprintf("%s %.3f", name, m.ServerCPUmsBy[name]))
		}
		cpu.Note = fmt.Sprintf("CPU time (user + system, /proc) of all three servers in the measured window over the writes completed in it; Meteor per server (ms): %s; the load generator used %.3f ms per Meteor write and %.3f per etcd write on the same cores", strings.Join(by, ", "), m.DriverCPUms, e.DriverCPUms)
	}
	return []benchkit.Row{writes, cpu}
}

// roundsText says how the goal level was measured: the windows and, with
// more than one, each round's writes/s ratio.
func roundsText(p paramInfo, rs []ratio) string {
	rounds := max(p.Rounds, 1)
	if rounds == 1 {
		return fmt.Sprintf("%.0f s", p.DurationSec)
	}
	text := fmt.Sprintf("%d windows of %.0f s each", rounds, p.DurationSec)
	for _, r := range rs {
		if r.Clients == goalClients && len(r.ThroughputByRound) > 0 {
			text += " (writes/s ratio by round " + byRound(r.ThroughputByRound) + ")"
		}
	}
	return text
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
		fmt.Fprintf(w, "\n%-7s %22s %18s  %s\n", "clients", "meteor/etcd writes/s", "meteor/etcd p99", "writes/s by round")
		for _, r := range rep.Ratios {
			fmt.Fprintf(w, "%-7d %22.2f %18.2f  %s\n", r.Clients, r.Throughput, r.P99, byRound(r.ThroughputByRound))
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
	fmt.Fprintf(&b, "Meteor %s and etcd %s, three servers each on 127.0.0.1. %d rounds of %.0f s measured after %.0f s warm-up per system and level, the systems taking turns; %d keys; %d-byte documents (Meteor request %d bytes",
		rep.Versions.Meteor, etcd, max(p.Rounds, 1), p.DurationSec, p.WarmupSec, p.Keys, p.DocBytes, p.MeteorRequestBytes)
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
		fmt.Fprintf(&b, "\n| clients | Meteor/etcd writes/s | Meteor/etcd p99 | writes/s by round |\n|---:|---:|---:|---|\n")
		for _, r := range rep.Ratios {
			fmt.Fprintf(&b, "| %d | %.2f | %.2f | %s |\n", r.Clients, r.Throughput, r.P99, byRound(r.ThroughputByRound))
		}
	}
	fmt.Fprintf(&b, "\n**Verdict:** %s\n\n", rep.Verdict)
	for _, n := range rep.Notes {
		fmt.Fprintf(&b, "- %s\n", n)
	}
	return b.String()
}

// byRound lists ratios with two decimals.
func byRound(xs []float64) string {
	var out []string
	for _, x := range xs {
		out = append(out, fmt.Sprintf("%.2f", x))
	}
	return strings.Join(out, " ")
}

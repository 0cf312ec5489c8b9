package main

import (
	"fmt"
	"io"
	"strings"

	"github.com/meteor-edge/meteor/bench/internal/benchkit"
)

// benchRow is this benchmark's number in the summary table.
const benchRow = 6

// The footprint goals.
const (
	goalBytesPerDay = 200_000 // IP bytes, both directions
	goalPushMS      = 1000
	goalRSS         = 15 << 20
	goalCPUPercent  = 0.1
	goalBinaryBytes = 12_000_000
)

// report is bench/results/footprint.json.
type report struct {
	Date       string           `json:"date"`
	Machine    benchkit.Machine `json:"machine"`
	Version    string           `json:"meteor_version"`
	Params     paramInfo        `json:"params"`
	Binary     binaryInfo       `json:"agent_binary"`
	NFTSkipped string           `json:"nft_skipped,omitempty"`
	Profiles   []*profileResult `json:"profiles"`
	WallSec    float64          `json:"wall_sec"`
	Notes      []string         `json:"notes"`
	Summary    []benchkit.Row   `json:"summary"`
	// Elections are the leader elections of each profile's cluster over
	// its whole life.
	Elections benchkit.ElectionLog `json:"leader_elections"`
}

type paramInfo struct {
	DurationSec float64  `json:"idle_window_sec"`
	Profiles    []string `json:"profiles"`
	Pushes      int      `json:"pushes"`
	PushGapSec  float64  `json:"push_gap_sec"`
	Resources   int      `json:"resources"`
}

// kb writes bytes in kilobytes (1,000 bytes).
func kb(n float64) string { return fmt.Sprintf("%.1f KB", n/1e3) }

// mib writes bytes in MiB.
func mib(n uint64) string { return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20)) }

// summaryRows are the goal rows: idle traffic and push latency per
// profile, then the agent's RSS and CPU (the highest of the profiles) and
// its binary.
func summaryRows(rep *report) []benchkit.Row {
	var rows []benchkit.Row
	window := rep.Params.DurationSec
	for _, p := range rep.Profiles {
		elections := p.Elections
		pushOK := p.PushMaxMS <= goalPushMS
		rows = append(rows, benchkit.Row{
			Bench: benchRow, Name: "footprint",
			Figure: fmt.Sprintf("idle traffic a day, converged device, %s (IP bytes both ways, from %.0f s)", p.Profile, window),
			Meteor: fmt.Sprintf("%s (%s on its server, %s of RTT probes, %s else on the others)",
				kb(p.DayBytes), kb(p.ConnectedIPBytesPerDay), kb(p.ProbesPerDay), kb(p.OthersUnprobed)),
			Goal:      "≤ 200 KB a day, pushes within 1 s",
			Met:       benchkit.MetGoal(p.DayBytes <= goalBytesPerDay && pushOK && p.NATDropped == 0),
			Elections: &elections,
			Note:      trafficNote(p, window),
		}, benchkit.Row{
			Bench: benchRow, Name: "footprint",
			Figure:    fmt.Sprintf("push latency to an idle device, %s (write committed to ack visible, p50 / max of %d)", p.Profile, len(p.PushMS)),
			Meteor:    fmt.Sprintf("%.0f / %.0f ms", p.PushP50MS, p.PushMaxMS),
			Goal:      "≤ 1 s",
			Met:       benchkit.MetGoal(pushOK),
			Elections: &elections,
		})
	}
	if len(rep.Profiles) > 0 {
		rss, cpu := rep.Profiles[0], rep.Profiles[0]
		for _, p := range rep.Profiles[1:] {
			if p.RSSBytes > rss.RSSBytes {
				rss = p
			}
			if p.CPUPercent > cpu.CPUPercent {
				cpu = p
			}
		}
		re, ce := rss.Elections, cpu.Elections
		rows = append(rows, benchkit.Row{
			Bench: benchRow, Name: "footprint",
			Figure:    "agent RSS, idle (VmRSS at the end of the window, highest profile)",
			Meteor:    fmt.Sprintf("%s (%s; peak %s)", mib(rss.RSSBytes), rss.Profile, mib(rss.HWMBytes)),
			Goal:      "≤ 15 MiB",
			Met:       benchkit.MetGoal(rss.RSSBytes <= goalRSS),
			Elections: &re,
		}, benchkit.Row{
			Bench: benchRow, Name: "footprint",
			Figure:    "agent CPU, idle (% of one core over the window, highest profile)",
			Meteor:    fmt.Sprintf("%.3f %% (%s)", cpu.CPUPercent, cpu.Profile),
			Goal:      "≤ 0.1 % of one core",
			Met:       benchkit.MetGoal(cpu.CPUPercent <= goalCPUPercent),
			Elections: &ce,
		})
	}
	b := rep.Binary
	static := "static"
	if !b.Static {
		static = "dynamic (" + b.Interpreter + ")"
	}
	rows = append(rows, benchkit.Row{
		Bench: benchRow, Name: "footprint",
		Figure: "agent binary",
		Meteor: fmt.Sprintf("%.1f MB, %s", float64(b.Bytes)/1e6, static),
		Goal:   "≤ 12 MB, static",
		Met:    benchkit.MetGoal(b.Bytes <= goalBinaryBytes && b.Static),
		Note:   binaryNote(b),
	})
	return rows
}

func trafficNote(p *profileResult, window float64) string {
	var parts []string
	parts = append(parts, fmt.Sprintf("counted by the user-space proxies, extrapolated from a %.0f s idle window once the agent had learned its NAT binding (%.0f s after converging: %s)", window, p.WarmupSec, p.KeepAlive))
	parts = append(parts, fmt.Sprintf("the proxies are NATs keeping a binding %.0f s after the device last sent; %d datagrams from a server met a lapsed binding in the window", float64(p.NATBindingSec), p.NATDropped))
	parts = append(parts, probeNote(p))
	if p.NFTTotal != nil {
		parts = append(parts, fmt.Sprintf("nftables on loopback counted %s a day", kb(p.NFTIPBytesPerDay)))
	}
	if p.ProxyCountedBytes > 0 {
		parts = append(parts, fmt.Sprintf("over the whole run the agent's own counters said %s, the proxies %s (%.1f %%; the proxies also count what followed the agent's last report)",
			kb(float64(p.AgentCountedBytes)), kb(float64(p.ProxyCountedBytes)), 100*float64(p.AgentCountedBytes)/float64(p.ProxyCountedBytes)))
	}
	if p.Server != p.ServerEnd {
		parts = append(parts, fmt.Sprintf("the session moved from %s to %s", p.Server, p.ServerEnd))
	}
	return strings.Join(parts, "; ")
}

// probeNote says how the probe rounds were counted.
func probeNote(p *profileResult) string {
	cost := fmt.Sprintf("each %s, measured over the %d rounds after the connect", kb(float64(p.ProbeRoundBytes)), p.ProbeRoundsBefore+p.ProbeRoundsInWindow)
	if !p.ProbeRoundMeasured {
		cost = fmt.Sprintf("each counted at the %s of the connect's race of full handshakes (no round came to measure), more than a resumed round costs", kb(float64(p.ProbeRoundBytes)))
	}
	s := fmt.Sprintf("RTT probes: %.0f rounds a day while the choice is stable (every %s), %s; %d round(s) before the window, %d in it (%s a day on the other paths if extrapolated, not counted: a day holds %.0f), the agent's last round put the next %s away; the race cost %s",
		p.ProbeRoundsPerDay, agentProbeMax, cost, p.ProbeRoundsBefore, p.ProbeRoundsInWindow, kb(p.OthersIPBytesPerDay), p.ProbeRoundsPerDay, orNone(p.NextProbe), kb(float64(p.RaceBytes)))
	if p.ProbeRoundsInWindow == 0 {
		s = fmt.Sprintf("RTT probes: %.0f rounds a day while the choice is stable (every %s), %s; %d round(s) before the window, none in it, the agent's last round put the next %s away; the race cost %s",
			p.ProbeRoundsPerDay, agentProbeMax, cost, p.ProbeRoundsBefore, orNone(p.NextProbe), kb(float64(p.RaceBytes)))
	}
	return s
}

func orNone(s string) string {
	if s == "" {
		return "(no round yet)"
	}
	return s
}

func binaryNote(b binaryInfo) string {
	return "the binary the benchmark ran the agent with: " + b.Path
}

// notes are what limits the figures.
func notes(rep *report) []string {
	n := []string{
		"The bytes are the counts of the user-space UDP proxy in front of each server (upload: datagrams the agent sent, dropped ones included; download: datagrams delivered to it), with 28 bytes of IPv4 and UDP headers added per datagram; the agent's own counters are compared with them over the whole run.",
		fmt.Sprintf("The session's bytes a day are extrapolated from a %s idle window per profile, which starts once the agent has learned its NAT binding and the Raft log has settled. RTT probe rounds to the other servers are counted apart: a stable day holds one (every 24 h), each at the cost measured over the rounds the agent made since it connected (counted in its log), since a round that falls into a window of minutes would be extrapolated into a hundred.", fmtSec(rep.Params.DurationSec)),
		"Push latency runs from the write's answer (it is committed) to a blocking read (?index=N&wait=30s) showing the device's acknowledgement: it includes the owner committing the acknowledgement through Raft.",
		"Everything runs on one machine on loopback: the servers, the proxies and the agent share its CPUs.",
	}
	if rep.NFTSkipped != "" {
		n = append(n, "No nftables cross-check: "+rep.NFTSkipped+".")
	} else {
		n = append(n, "nftables cross-check: a table of the benchmark's own counts the loopback datagrams to and from each proxy port at the input hook (IP bytes, headers included), over the same window.")
	}
	return n
}

func fmtSec(s float64) string {
	if s >= 60 && int(s)%60 == 0 {
		return fmt.Sprintf("%d min", int(s)/60)
	}
	return fmt.Sprintf("%.0f s", s)
}

// verdicts say, for each row with a goal, whether it was met.
func verdicts(rows []benchkit.Row) []string {
	var out []string
	for _, r := range rows {
		if r.Met == nil {
			continue
		}
		v := "met"
		if !*r.Met {
			v = "NOT met"
		}
		out = append(out, fmt.Sprintf("%s: %s, goal %s: %s", r.Figure, r.Meteor, r.Goal, v))
	}
	return out
}

// printProfile writes one profile's figures to stdout.
func printProfile(w io.Writer, p *profileResult) {
	fmt.Fprintf(w, "\n%s: connected to %s, idle window %.0f s, converged in %.1f s\n", p.Profile, p.Server, p.WindowSec, p.ConvergeSec)
	fmt.Fprintf(w, "  %-10s %9s %11s %9s %11s %14s %14s\n", "server", "up pkts", "up bytes", "down pkts", "down bytes", "IP bytes/day", "nft bytes/day")
	for _, pr := range p.Paths {
		name := pr.Server
		if pr.Connected {
			name += "*"
		}
		nft := "-"
		if pr.NFT != nil {
			nft = benchkit.Thousands(int(perDay(pr.NFT.UpBytes+pr.NFT.DownBytes, secs(p.WindowSec))))
		}
		fmt.Fprintf(w, "  %-10s %9d %11d %9d %11d %14s %14s\n", name, pr.UpPackets, pr.UpBytes, pr.DownPackets, pr.DownBytes,
			benchkit.Thousands(int(pr.IPBytesPerDay)), nft)
	}
	fmt.Fprintf(w, "  total %s a day; RSS %s (peak %s); CPU %.3f %% of one core; pushes p50 %.0f ms, max %.0f ms; elections %d\n",
		kb(p.DayBytes), mib(p.RSSBytes), mib(p.HWMBytes), p.CPUPercent, p.PushP50MS, p.PushMaxMS, p.Elections)
}

// markdown is bench/results/footprint.md.
func markdown(rep *report) string {
	var b strings.Builder
	b.WriteString("# Edge footprint: one idle agent\n\n")
	fmt.Fprintf(&b, "%s Meteor %s. Written by `go run ./bench/footprint` (`make bench-footprint`).\n\n", rep.Machine.Measured(rep.Date), rep.Version)
	fmt.Fprintf(&b, "One agent process (`%s`), %d file resources, 3 servers each behind a UDP proxy applying the profile; idle window %s per profile, then %d changes %.0f s apart.\n\n",
		rep.Binary.Path, rep.Params.Resources, fmtSec(rep.Params.DurationSec), rep.Params.Pushes, rep.Params.PushGapSec)
	b.WriteString("| figure | measured | goal | met |\n|---|---|---|:---:|\n")
	for _, r := range rep.Summary {
		met := ""
		if r.Met != nil {
			met = map[bool]string{true: "yes", false: "**no**"}[*r.Met]
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s |\n", r.Figure, r.Meteor, r.Goal, met)
	}
	for _, p := range rep.Profiles {
		fmt.Fprintf(&b, "\n## %s\n\n", p.Profile)
		fmt.Fprintf(&b, "Converged %.1f s after the agent started; connected to %s (at the end: %s); idle window %.0f s; leader elections %d.\n\n",
			p.ConvergeSec, p.Server, p.ServerEnd, p.WindowSec, p.Elections)
		b.WriteString("| server | path | up datagrams | up payload bytes | down datagrams | down payload bytes | IP bytes a day | nft IP bytes a day |\n|---|---|---:|---:|---:|---:|---:|---:|\n")
		for _, pr := range p.Paths {
			role := "probes only"
			if pr.Connected {
				role = "session"
			}
			nft := "-"
			if pr.NFT != nil {
				nft = benchkit.Thousands(int(perDay(pr.NFT.UpBytes+pr.NFT.DownBytes, secs(p.WindowSec))))
			}
			fmt.Fprintf(&b, "| %s | %s | %d | %d | %d | %d | %s | %s |\n", pr.Server, role, pr.UpPackets, pr.UpBytes, pr.DownPackets, pr.DownBytes,
				benchkit.Thousands(int(pr.IPBytesPerDay)), nft)
		}
		fmt.Fprintf(&b, "\nRSS %s (peak %s), CPU %.2f s over the window (%.3f %% of one core). Pushes (ms): %s.\n",
			mib(p.RSSBytes), mib(p.HWMBytes), p.CPUSec, p.CPUPercent, msList(p.PushMS))
	}
	b.WriteString("\n## Notes\n\n")
	for _, n := range rep.Notes {
		fmt.Fprintf(&b, "- %s\n", n)
	}
	return b.String()
}

func msList(ms []float64) string {
	s := make([]string, len(ms))
	for i, v := range ms {
		s[i] = fmt.Sprintf("%.0f", v)
	}
	return strings.Join(s, ", ")
}

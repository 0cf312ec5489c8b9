package main

import (
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/meteor-edge/meteor/bench/internal/benchkit"
)

// report is everything a run found; it is written as sessions.json.
type report struct {
	Date      string           `json:"date"`
	Machine   benchkit.Machine `json:"machine"`
	Params    paramInfo        `json:"params"`
	Resync    *resyncResult    `json:"resync,omitempty"`
	Reconnect []*reconnectRow  `json:"reconnect,omitempty"`
	Memory    *memoryResult    `json:"memory,omitempty"`
	Storm     *stormResult     `json:"storm,omitempty"`
	Drain     *drainResult     `json:"drain,omitempty"`
	// Summary holds this benchmark's rows of the summary table: the
	// reconnect storm's (row 3 of the issue); the other parts have none.
	Summary  []benchkit.Row `json:"summary"`
	Verdicts []string       `json:"verdicts"`
	Notes    []string       `json:"notes"`
	// UDPBuffers is what the run did about the host's UDP buffer limits;
	// Elections the leader elections of each cluster (and the memory
	// part's dev server) over its life.
	UDPBuffers benchkit.UDPBufferSetup `json:"udp_buffers"`
	Elections  benchkit.ElectionLog    `json:"leader_elections"`
}

type paramInfo struct {
	Parts         []string `json:"parts"`
	Client        string   `json:"client"`
	Resources     int      `json:"resources"`
	BodyBytes     int      `json:"body_bytes"`
	Revisions     int      `json:"revisions"`
	Changed       int      `json:"changed"`
	Churn         string   `json:"churn"`
	Reconnects    int      `json:"reconnects"`
	OneWayDelayMs float64  `json:"one_way_delay_ms"`
	Agents        []int    `json:"agents"`
	Sockets       int      `json:"client_udp_sockets"`
	Concurrency   int      `json:"dials_in_flight"`
	SettleSec     float64  `json:"settle_s"`
	StormAgents   int      `json:"storm_agents"`
	StormSockets  int      `json:"storm_client_udp_sockets"`
	StormModes    []string `json:"storm_modes"`
	StormDetect   string   `json:"storm_detect"`
}

// memoryGoalKiB is the goal: an idle connected agent costs the server less
// than this much memory.
const memoryGoalKiB = 64

func verdictState(met bool) string {
	if met {
		return "MET"
	}
	return "NOT MET"
}

// resyncVerdict is the one-line answer for part 1's goal.
func resyncVerdict(r *resyncResult) string {
	a := r.Resync
	if a.Bodies == 0 {
		return "resync goal not evaluated: the resync carried no bodies"
	}
	return fmt.Sprintf("resync goal %s: (resync - header) / changed bodies = %.3f (goal <= %.1f); resync %d B = %d B bodies + %d B per resource + %d B header; replay of %d revisions = %.0fx the resync",
		verdictState(r.RatioExclHeader <= resyncGoalRatio), r.RatioExclHeader, resyncGoalRatio,
		a.Total, a.Bodies, a.PerResource, a.Header, r.Revisions, r.RatioReplay)
}

// reconnectVerdict sums part 2 up; it has no numeric goal.
func reconnectVerdict(rows []*reconnectRow) string {
	var parts []string
	for i := 0; i+1 < len(rows); i += 2 {
		z, f := rows[i], rows[i+1]
		parts = append(parts, fmt.Sprintf("%s: 0-RTT used on %.0f%% of %d reconnects, p50 to Welcome %.1f vs %.1f ms (full), to first Delta %.1f vs %.1f ms",
			z.Link, 100*z.Used0RTTFrac, z.N, z.WelcomeP50, f.WelcomeP50, z.DeltaP50, f.DeltaP50))
	}
	return "reconnect (no numeric goal): " + strings.Join(parts, "; ")
}

// memoryVerdict is the one-line answer for part 3's goal, at every level.
func memoryVerdict(m *memoryResult) string {
	if len(m.Levels) == 0 {
		return "memory goal not evaluated: no level measured"
	}
	met := true
	var parts []string
	for _, l := range m.Levels {
		met = met && l.RSSKiB < memoryGoalKiB && l.Failed == 0
		s := fmt.Sprintf("%d agents %.1f KiB/agent", l.Agents, l.RSSKiB)
		if l.Failed > 0 {
			s += fmt.Sprintf(" (%d failed to connect)", l.Failed)
		}
		parts = append(parts, s)
	}
	return fmt.Sprintf("memory goal %s: server RSS per idle agent %s (goal < %d KiB)", verdictState(met), strings.Join(parts, ", "), memoryGoalKiB)
}

// memorySummary is the row "server memory per idle session": the added
// VmRSS per idle session at the largest level (the live heap beside it),
// the one place the summary table takes the fact from.
func memorySummary(m *memoryResult) []benchkit.Row {
	if len(m.Levels) == 0 {
		return nil
	}
	l := m.Levels[len(m.Levels)-1]
	row := benchkit.Row{Bench: 3, Name: "sessions", Key: "sessions-memory",
		Figure: fmt.Sprintf("server memory per idle session (added VmRSS over %s idle sessions, one server)", benchkit.Thousands(l.Agents)),
		Meteor: fmt.Sprintf("%.1f KiB (live Go heap %.1f KiB)", l.RSSKiB, l.HeapKiB),
		Goal:   fmt.Sprintf("<= %d KiB", memoryGoalKiB), Met: benchkit.MetGoal(l.RSSKiB <= memoryGoalKiB && l.Failed == 0),
		Elections: new(l.Elections)}
	var note []string
	note = append(note, "`meteor server --dev` in its own process; each session: own certificate, Hello, Welcome, Pull, the first Delta, Ack, a full report acknowledged (the server holds the device converged), then idle; (VmRSS with the sessions - VmRSS before) / sessions, read once the Raft log had been quiet; the server also holds each device's replicated record; the live heap is the last GC cycle's (GODEBUG=gctrace=1)")
	if len(m.Levels) > 1 {
		f := m.Levels[0]
		note = append(note, fmt.Sprintf("at %s sessions %.1f KiB; marginal between the two levels %.1f KiB", benchkit.Thousands(f.Agents), f.RSSKiB, l.MarginalRSSKiB))
	}
	if l.Failed > 0 {
		note = append(note, fmt.Sprintf("%d of %d devices never got a session", l.Failed, l.Added))
	}
	if l.UDP != nil {
		note = append(note, "while connecting: "+l.UDP.String())
	}
	row.Note = strings.Join(note, "; ")
	return []benchkit.Row{row}
}

// The stdout table, printed part by part as results arrive.

func resyncBlock(w io.Writer, r *resyncResult) {
	a := r.Resync
	fmt.Fprintf(w, "\nResync: %d resources of %d-byte bodies, %d revisions, %s\n", r.Resources, r.BodyBytes, r.Revisions, r.ChurnDetail)
	fmt.Fprintf(w, "  %-44s %8d B  (%d upserts: %s)\n", "changed bodies", a.Bodies, a.Upserts, strings.Join(r.ResyncKeys, " "))
	fmt.Fprintf(w, "  %-44s %8d B  (%d frame; %d B header + %d B per resource; server counted %d B in %d frame)\n",
		"resync Delta (resume with inventory)", a.Total, a.Frames, a.Header, a.PerResource, r.ServerBytes, r.ServerFrames)
	fmt.Fprintf(w, "  %-44s %8.3f    (raw resync / bodies %.3f)\n", "(resync - header) / bodies", r.RatioExclHeader, r.RatioRaw)
	fmt.Fprintf(w, "  %-44s %8d B  (%d Deltas, %d upserts, %d B bodies)\n", "replay of every revision", r.Replay.Total, r.ReplayDeltas, r.Replay.Upserts, r.Replay.Bodies)
	fmt.Fprintf(w, "  %-44s %8.1f x\n", "replay / resync", r.RatioReplay)
	fmt.Fprintf(w, "  %-44s %8d B  (Hello + Pull, each with the %d-entry inventory; 0-RTT %v)\n", "resync uplink", r.Uplink, r.Resources, r.Used0RTT)
	fmt.Fprintf(w, "  %-44s %8d B  (%d upserts)\n", "resync by revision only (no inventory)", r.RevisionOnly.Total, r.RevisionOnly.Upserts)
	fmt.Fprintf(w, "  %-44s %8d B  (%d upserts)\n", "first sync of a new device", r.InitialSync.Total, r.InitialSync.Upserts)
}

func reconnectHeader(w io.Writer) {
	fmt.Fprintf(w, "\nReconnect after a link drop (resume the session; Hello + Pull pipelined)\n")
	fmt.Fprintf(w, "  %-12s %-17s %5s %9s %9s %9s %9s %7s %8s %5s\n", "link", "mode", "n", "welc p50", "welc p99", "delta p50", "delta p99", "0-RTT", "min RTT", "errs")
}

func reconnectLine(w io.Writer, r *reconnectRow) {
	fmt.Fprintf(w, "  %-12s %-17s %5d %9.2f %9.2f %9.2f %9.2f %6.0f%% %8.2f %5d\n",
		r.Link, r.Mode, r.N, r.WelcomeP50, r.WelcomeP99, r.DeltaP50, r.DeltaP99, 100*r.Used0RTTFrac, r.MinRTTms, r.Errors)
}

func memoryHeader(w io.Writer, m *memoryResult) {
	fmt.Fprintf(w, "\nServer memory per idle agent (meteor server --dev in its own process; %d client sockets, %d dials in flight)\n", m.Sockets, m.Concurrency)
	fmt.Fprintf(w, "  %6s %7s %7s %8s %8s %8s %8s %9s %9s %9s\n", "agents", "conn/s", "p99 ms", "cpu ms/c", "raft e/c", "RSS MiB", "heap MiB", "KiB/a RSS", "KiB/a heap", "marginal")
}

func memoryLine(w io.Writer, l *memoryLevel, base memory) {
	m := l.Memory
	heap := "-"
	if m.GCAgeSec >= 0 {
		heap = fmt.Sprint(m.HeapLiveMB)
	}
	if l.Agents == 0 {
		fmt.Fprintf(w, "  %6d %7s %7s %8s %8s %8.1f %8s %9s %9s %9s\n", 0, "-", "-", "-", "-", float64(m.RSSKiB)/1024, heap, "-", "-", "-")
		return
	}
	marginal := "-"
	if l.MarginalRSSKiB != 0 {
		marginal = fmt.Sprintf("%.1f", l.MarginalRSSKiB)
	}
	fmt.Fprintf(w, "  %6d %7.0f %7.0f %8.2f %8.2f %8.1f %8s %9.1f %9.1f %9s\n",
		l.Agents, l.ConnectsPerSec, l.ConnectP99ms, l.ServerCPUms, l.RaftEntries, float64(m.RSSKiB)/1024, heap, l.RSSKiB, l.HeapKiB, marginal)
}

// heapText shows the live heap of the last GC and how old it is.
func heapText(m memory) string {
	if m.GCAgeSec < 0 {
		return "n/a (no GC yet)"
	}
	return fmt.Sprintf("%d (%.0f s old)", m.HeapLiveMB, m.GCAgeSec)
}

func markdown(rep *report) string {
	var b strings.Builder
	p := rep.Params
	fmt.Fprintf(&b, "# Agent sessions: resync bytes, reconnect time, server memory per agent, reconnect storm\n\n")
	fmt.Fprintf(&b, "%s\n\n", rep.Machine.Measured(rep.Date))
	fmt.Fprintf(&b, "Devices are %s. Everything runs on 127.0.0.1.\n\n", p.Client)
	if r := rep.Resync; r != nil {
		a := r.Resync
		fmt.Fprintf(&b, "## Resync bytes\n\n")
		fmt.Fprintf(&b, "A device holding %d file resources (%d-byte bodies) converges and disconnects; %d intent revisions follow (%s); the device resumes its session (Hello and Pull with its inventory) and pulls. In-process dev server (`cluster.New`).\n\n",
			r.Resources, r.BodyBytes, r.Revisions, r.ChurnDetail)
		fmt.Fprintf(&b, "| figure | bytes | detail |\n|---|---:|---|\n")
		fmt.Fprintf(&b, "| changed bodies | %d | %d upserts: %s |\n", a.Bodies, a.Upserts, strings.Join(r.ResyncKeys, ", "))
		fmt.Fprintf(&b, "| resync Delta frames | %d | %d frame; server's AgentStats counted %d B in %d frame |\n", a.Total, a.Frames, r.ServerBytes, r.ServerFrames)
		fmt.Fprintf(&b, "| of which fixed header | %d | length prefix, type, base and target revisions, flags, list counts |\n", a.Header)
		fmt.Fprintf(&b, "| of which per resource | %d | key, 32-byte digest, revision and body length of each upsert |\n", a.PerResource)
		fmt.Fprintf(&b, "| replay of every revision | %d | %d Deltas, %d upserts, %d B of bodies |\n", r.Replay.Total, r.ReplayDeltas, r.Replay.Upserts, r.Replay.Bodies)
		fmt.Fprintf(&b, "| resync uplink (Hello + Pull) | %d | each carries the %d-entry inventory; 0-RTT: %v |\n", r.Uplink, r.Resources, r.Used0RTT)
		fmt.Fprintf(&b, "| resync by revision only (no inventory) | %d | %d upserts |\n", r.RevisionOnly.Total, r.RevisionOnly.Upserts)
		fmt.Fprintf(&b, "| first sync of a new device | %d | %d upserts |\n\n", r.InitialSync.Total, r.InitialSync.Upserts)
		fmt.Fprintf(&b, "(resync - header) / changed bodies = **%.3f** (raw resync / bodies %.3f); replay / resync = **%.1fx**.\n\n", r.RatioExclHeader, r.RatioRaw, r.RatioReplay)
	}
	if len(rep.Reconnect) > 0 {
		fmt.Fprintf(&b, "## Reconnect time\n\n")
		fmt.Fprintf(&b, "After the previous connection is dropped, the device dials at once and resumes its session with Hello and Pull written together (in 0-RTT data when it can). Times from the dial until the Welcome and until the first (complete) Delta were decoded; %d reconnects per row after %d unmeasured, the two modes alternating. The delayed rows add the one-way delay in both directions on the client's socket (chaos.PacketConn), the loopback rows go through the same socket wrapper with no fault.\n\n", p.Reconnects, reconnectWarmup)
		fmt.Fprintf(&b, "| link | mode | n | Welcome p50 ms | Welcome p99 ms | first Delta p50 ms | first Delta p99 ms | 0-RTT used | TLS resumed | 0-RTT refused | min RTT ms | errors |\n")
		fmt.Fprintf(&b, "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
		for _, r := range rep.Reconnect {
			fmt.Fprintf(&b, "| %s | %s | %d | %.2f | %.2f | %.2f | %.2f | %.0f%% | %d | %d | %.2f | %d |\n",
				r.Link, r.Mode, r.N, r.WelcomeP50, r.WelcomeP99, r.DeltaP50, r.DeltaP99, 100*r.Used0RTTFrac, r.TLSResumed, r.Rejected0RTT, r.MinRTTms, r.Errors)
		}
		fmt.Fprintln(&b)
	}
	if mr := rep.Memory; mr != nil {
		fmt.Fprintf(&b, "## Server memory per idle agent\n\n")
		fmt.Fprintf(&b, "`meteor server --dev` in its own process (GODEBUG=gctrace=1 for the live heap). Each device has its own certificate (%d issued in %.1f s) and opens one session (Hello with its empty inventory, Welcome, Pull, a %d-resource Delta, Ack, a full report of it applied, acknowledged once committed), then stays idle with keep-alives: the server holds every device converged. %d client UDP sockets, %d dials in flight. Memory is read once the Raft log has stopped growing and %.0f s more have passed.\n\n",
			slices.Max(p.Agents), mr.CertSec, p.Resources, mr.Sockets, mr.Concurrency, p.SettleSec)
		fmt.Fprintf(&b, "| agents | connects/s | connect p50 / p99 ms | server CPU ms/connect | Raft entries/connect | VmRSS MiB | RssAnon MiB | Go heap live MiB (GC age s) | stacks MiB | threads | KiB/agent RSS | KiB/agent anon | KiB/agent heap | marginal KiB/agent RSS |\n")
		fmt.Fprintf(&b, "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
		bm := mr.Baseline
		fmt.Fprintf(&b, "| 0 | | | | | %.1f | %.1f | %s | %d | %d | | | | |\n", float64(bm.RSSKiB)/1024, float64(bm.AnonKiB)/1024, heapText(bm), bm.StacksMB, bm.Threads)
		for _, l := range mr.Levels {
			mm := l.Memory
			marg := ""
			if l.MarginalRSSKiB != 0 {
				marg = fmt.Sprintf("%.1f", l.MarginalRSSKiB)
			}
			fmt.Fprintf(&b, "| %d | %.0f | %.0f / %.0f | %.2f | %.2f | %.1f | %.1f | %s | %d | %d | %.1f | %.1f | %.1f | %s |\n",
				l.Agents, l.ConnectsPerSec, l.ConnectP50ms, l.ConnectP99ms, l.ServerCPUms, l.RaftEntries,
				float64(mm.RSSKiB)/1024, float64(mm.AnonKiB)/1024, heapText(mm), mm.StacksMB, mm.Threads, l.RSSKiB, l.AnonKiB, l.HeapKiB, marg)
		}
		fmt.Fprintf(&b, "\nAt the end `GET /v1/devices` listed %d devices, %d of them connected (%.1f s).\n\n", mr.Listed, mr.ListedConnected, mr.ListSec)
	}
	if st := rep.Storm; st != nil {
		stormMarkdown(&b, st, p)
	}
	fmt.Fprintf(&b, "## Verdicts\n\n")
	for _, v := range rep.Verdicts {
		fmt.Fprintf(&b, "- %s\n", v)
	}
	fmt.Fprintf(&b, "\n## Notes\n\n")
	for _, n := range rep.Notes {
		fmt.Fprintf(&b, "- %s\n", n)
	}
	return b.String()
}

// writeResults writes sessions.json and sessions.md into dir.
func writeResults(dir string, rep *report) error {
	return benchkit.WriteResults(dir, "sessions", rep, markdown(rep))
}

package main

import (
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strings"

	"github.com/meteor-edge/meteor/bench/internal/benchkit"
)

// The summary table's row number and name for the storm.
const (
	stormBench = 3
	stormName  = "sessions"
)

// allResumed reports whether every device of the mode resumed.
func (m *stormMode) allResumed() bool { return m.NotOpened == 0 && m.Opened > 0 }

// timeText is the time until all resumed, or what happened instead.
func (m *stormMode) timeText() string {
	if m.allResumed() {
		return fmt.Sprintf("%.2f s", m.ResumedAllms/1000)
	}
	return fmt.Sprintf("not all: %d of %d", m.Opened, m.Opened+m.NotOpened)
}

// ratio returns full / zero formatted, or "" when either is missing.
func ratio(full, zero float64) string {
	if full <= 0 || zero <= 0 {
		return ""
	}
	return fmt.Sprintf("%.2fx (full / 0-RTT)", full/zero)
}

// stormSummary returns the summary table's rows for the storm: time until
// all resumed, and the survivors' CPU seconds, 0-RTT as Meteor's figure
// and full handshakes as the peer.
func stormSummary(r *stormResult) []benchkit.Row {
	z, f := r.mode(storm0RTT), r.mode(stormFull)
	n := r.Agents
	timeRow := benchkit.Row{Bench: stormBench, Name: stormName,
		Figure: fmt.Sprintf("time until all %s resumed after their server died", benchkit.Thousands(n))}
	cpuRow := benchkit.Row{Bench: stormBench, Name: stormName, Figure: "server CPU seconds for the storm"}
	var timeNotes, cpuNotes []string
	for _, m := range []*stormMode{z, f} {
		if m == nil {
			continue
		}
		timeNotes = append(timeNotes, fmt.Sprintf("%s: 50%% %.2f s, 99%% %.2f s, %d resumed the same session, %d resyncs, %d dial failures",
			m.Mode, m.Resumed50ms/1000, m.Resumed99ms/1000, m.Resumed, m.Resyncs, m.DialFailures))
		cpuNotes = append(cpuNotes, fmt.Sprintf("%s: %.1f s until the last resumed, devices' process %.1f s", m.Mode, m.ServerCPUs, m.ClientCPUs))
	}
	if z != nil {
		timeRow.Meteor = z.timeText()
		cpuRow.Meteor = fmt.Sprintf("%.1f s", z.ServerCPUSettleds)
		timeRow.Elections, cpuRow.Elections = new(z.Elections), new(z.Elections)
	}
	if f != nil {
		timeRow.Peer, timeRow.PeerName = f.timeText(), "full handshakes"
		cpuRow.Peer, cpuRow.PeerName = fmt.Sprintf("%.1f s", f.ServerCPUSettleds), "full handshakes"
		timeRow.PeerElections, cpuRow.PeerElections = new(f.Elections), new(f.Elections)
	}
	if z != nil && f != nil {
		if z.allResumed() && f.allResumed() {
			timeRow.Ratio = ratio(f.ResumedAllms, z.ResumedAllms)
		}
		cpuRow.Ratio = ratio(f.ServerCPUSettleds, z.ServerCPUSettleds)
	}
	detect := "every device gives up its connection at the kill (no detection delay)"
	if r.Detect == detectIdle {
		detect = "each device notices at its QUIC idle timeout, as the agent does"
	}
	timeRow.Note = fmt.Sprintf("SIGKILL of the follower all %s wire-level devices were on, 3 servers and the devices on one shared machine; %s; %s",
		benchkit.Thousands(n), detect, strings.Join(timeNotes, "; "))
	cpuRow.Note = "the two surviving servers, from the kill until every resumed session and Ack was committed through Raft; " + strings.Join(cpuNotes, "; ")
	return []benchkit.Row{timeRow, cpuRow}
}

// stormVerdict sums part 4 up; it has no numeric goal.
func stormVerdict(r *stormResult) string {
	var parts []string
	for _, m := range r.Modes {
		parts = append(parts, fmt.Sprintf("%s: all resumed %s (50%% %.2f s, 99%% %.2f s), %d of %d the same session, %d resyncs, survivors' CPU %.1f s",
			m.Mode, m.timeText(), m.Resumed50ms/1000, m.Resumed99ms/1000, m.Resumed, m.Opened+m.NotOpened, m.Resyncs, m.ServerCPUSettleds))
	}
	if z, f := r.mode(storm0RTT), r.mode(stormFull); z != nil && f != nil {
		if t := ratio(f.ResumedAllms, z.ResumedAllms); t != "" && z.allResumed() && f.allResumed() {
			parts = append(parts, "time "+t)
		}
		if c := ratio(f.ServerCPUSettleds, z.ServerCPUSettleds); c != "" {
			parts = append(parts, "server CPU "+c)
		}
	}
	return fmt.Sprintf("reconnect storm of %s devices (no numeric goal): %s", benchkit.Thousands(r.Agents), strings.Join(parts, "; "))
}

// stormNotes say how to read part 4.
func stormNotes(r *stormResult) []string {
	if r == nil {
		return nil
	}
	n := []string{
		"Storm: each mode runs on a fresh three-server cluster (`meteor server` processes, --bootstrap-expect 3, shared cluster secret); every device connects to one follower and converges, then that server gets SIGKILL. " +
			"The devices are wire-level clients in this process sharing " + fmt.Sprint(r.Sockets) + " UDP sockets, not package agent; they follow the agent's connection policy: the dead server is put in penalty, half prefer each survivor (equal RTTs on loopback) and try the other at once on failure, " +
			"a failed server is kept out for a jittered exponential backoff (500 ms to 30 s, as agent.DefaultBackoffMin/Max), an attempt is bounded by the agent's 10 s dial timeout, and tickets are dropped after 2n+1 failures in a row. " +
			"Each resumes with Hello (session ID, resume token, inventory) and Pull written at once, then the first Delta and its Ack.",
		"Storm: the two modes differ only in TLS: 0-RTT devices keep the session ticket the dead server gave them (servers share ticket keys) and dial with DialEarly; full-handshake devices have no session cache, so every dial is a full TLS 1.3 handshake with client certificate.",
		"Storm: the devices and the servers share the machine's CPUs, so the devices' own handshakes (their CPU is shown) slow the servers; on real fleets that work is spread over the devices.",
		"Storm: elections are those held from the kill until the Raft log settled, won or not: the growth of the highest Raft term the servers report on GET /v1/health.",
	}
	if r.Detect == detectKill {
		n = append(n, "Storm: devices give up their connection at the kill, all at once: the worst case. A real agent notices the loss when a keep-alive goes unanswered for 15 s (agent.Config.KeepAliveTimeout), so up to one keep-alive interval (25 s to 2 min, as its NAT allows) plus 15 s after the kill, which adds that delay and spreads a fleet's storm over the interval. The wire-level devices here detect it as agents of 1.2 did, by QUIC's idle timeout: 30 s after the keep-alive they send 10 s after the last packet received (-storm-detect idle measures it; devices that connected together time out together).")
	}
	for _, m := range r.Modes {
		if m.Elections > 0 {
			n = append(n, fmt.Sprintf("Storm, %s: the Raft leader (%s) stepped down during the storm and %d election(s) followed (leader afterwards: %s): with one server dead, the leader needs the other survivor's heartbeat answers within its lease, and the storm starved them of CPU. "+
				"Sessions are served meanwhile; recording them and their Acks waits for a leader (servers retry failed records in the background).",
				m.Mode, m.Leader, m.Elections, m.LeaderAfter))
		}
		if m.ServerUDPDrops > 0 || m.ClientUDPDrops > 0 {
			n = append(n, fmt.Sprintf("Storm, %s: the kernel dropped %d datagrams on the survivors' agent sockets and %d on the devices' sockets (full receive buffers; quic-go asks for 7 MB, this host allows net.core.rmem_max = %s bytes); each lost packet costs its device a retransmission timeout.",
				m.Mode, m.ServerUDPDrops, m.ClientUDPDrops, rmemMax()))
		}
		if m.SettleError != "" {
			n = append(n, fmt.Sprintf("Storm, %s: the Raft log had not settled 2 minutes after the storm (%s); the settled figures are up to then.", m.Mode, m.SettleError))
		}
		if m.InitialFailed > 0 {
			n = append(n, fmt.Sprintf("Storm, %s: %d of %d devices could not connect to %s before the kill and took no part; the figures are of the other %d.",
				m.Mode, m.InitialFailed, m.Agents, m.Victim, m.Agents-m.InitialFailed))
		}
		if m.ClosedAfter > 0 {
			n = append(n, fmt.Sprintf("Storm, %s: by the last reading of the records, the connections of %d devices that had resumed were closed again (the devices do not read after their first Delta, so they did not reconnect as an agent would); e.g. %s. Their records are left out of the check below.",
				m.Mode, m.ClosedAfter, strings.Join(m.ClosedReasons, "; ")))
		}
		switch {
		case m.RecordsSec > m.SettledSec+1.5:
			n = append(n, fmt.Sprintf("Storm, %s: the cluster recorded every device on the survivor it had resumed on %.1f s after the kill, %.1f s after the Raft log had first been quiet for %s: until then some records still named the dead server or a failed attempt's server (servers retry failed session records in the background, cluster/session.go).",
				m.Mode, m.RecordsSec, m.RecordsSec-m.SettledSec, stormQuiet))
		case m.RecordsSec == 0:
			n = append(n, fmt.Sprintf("Storm, %s: %s after the log settled, the cluster still recorded %d devices on the dead server %s, %d as disconnected and %d on the other survivor, although every one had resumed on a survivor and its connection was open as far as the device knew; e.g. %s.",
				m.Mode, stormRecordsWait, m.RecordedOnVictim, m.Victim, m.RecordedDisconnected, m.RecordedElsewhere, strings.Join(m.WrongRecords, "; ")))
			if probed := m.ProbeAnswered + m.ProbeClosed + m.ProbeSilent; probed > 0 {
				n = append(n, fmt.Sprintf("Storm, %s: each of those %d devices then sent a keep-alive as an agent's reset probe (a Ping padded to draw a stateless reset, asking for a Pong): %d got the Pong (their server holds the session: the record is wrong), %d had their connection closed (their server no longer held it: the record is right, and the device would have learnt so at its next keep-alive), %d neither within %s; e.g. %s.",
					m.Mode, probed, m.ProbeAnswered, m.ProbeClosed, m.ProbeSilent, stormProbeWait, strings.Join(m.ProbeResults, "; ")))
			}
		}
		if m.NewSession > 0 || m.Resyncs > 0 {
			n = append(n, fmt.Sprintf("Storm, %s: %d devices got a new session instead of their own and %d a first Delta with resources (a resync).", m.Mode, m.NewSession, m.Resyncs))
		}
		if m.NotOpened > 0 {
			n = append(n, fmt.Sprintf("Storm, %s: %d devices had not resumed when the storm's time bound ended; e.g. %s.", m.Mode, m.NotOpened, strings.Join(m.Errors, "; ")))
		}
	}
	return n
}

// The stdout table.

func stormHeader(w io.Writer, r *stormResult) {
	fmt.Fprintf(w, "\nReconnect storm: %d devices lose their server (SIGKILL of a follower of 3); detect: %s\n", r.Agents, r.Detect)
	fmt.Fprintf(w, "  %-17s %6s %7s %7s %7s %7s %6s %6s %7s %8s %6s %8s %8s %8s %5s\n",
		"mode", "agents", "50% s", "99% s", "100% s", "resumed", "new", "resync", "failed", "attempts", "0-RTT", "srv CPU", "settled", "cli CPU", "elect")
}

func stormLine(w io.Writer, m *stormMode) {
	all := "-"
	if m.allResumed() {
		all = fmt.Sprintf("%.2f", m.ResumedAllms/1000)
	}
	fmt.Fprintf(w, "  %-17s %6d %7.2f %7.2f %7s %7d %6d %6d %7d %8d %6d %8.1f %8.1f %8.1f %5d\n",
		m.Mode, m.Agents, m.Resumed50ms/1000, m.Resumed99ms/1000, all, m.Resumed, m.NewSession, m.Resyncs, m.NotOpened,
		m.Attempts, m.Used0RTT, m.ServerCPUs, m.ServerCPUSettleds, m.ClientCPUs, m.Elections)
}

func stormMarkdown(b *strings.Builder, r *stormResult, p paramInfo) {
	fmt.Fprintf(b, "## Reconnect storm\n\n")
	fmt.Fprintf(b, "%s devices, each with its own certificate, connect to one follower of a three-server cluster (`meteor server` processes) and converge on a %d-resource intent; that server then gets SIGKILL and every device resumes its session on one of the other two, with 0-RTT (the dead server's session ticket) or with full handshakes (no ticket cache), each mode on a fresh cluster. "+
		"Times are from the kill until the device decoded its Welcome and its first Delta; percentiles count every device, one that never resumed as the slowest. "+
		"Server CPU is the two survivors' together, from the kill until the last device resumed, and until the Raft log settled (every session and Ack committed).\n\n",
		benchkit.Thousands(r.Agents), p.Resources)
	fmt.Fprintf(b, "| mode | agents | initial connect s | devices with ticket | 50%% resumed s | 99%% resumed s | all resumed s | Welcome p50 / p99 s | same session | new session | resyncs | not resumed | attempts | dial failures | session failures | 0-RTT used | TLS resumed | 0-RTT refused | per survivor | survivors' CPU s to last | survivors' CPU s to settled | settled s | devices' CPU s | Raft entries | elections | closed after resuming | recorded on its server / on the other survivor / disconnected / on the dead server | all recorded on a survivor s | UDP drops: survivors / devices |\n")
	fmt.Fprintf(b, "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, m := range r.Modes {
		all := "—"
		if m.allResumed() {
			all = fmt.Sprintf("%.2f", m.ResumedAllms/1000)
		}
		var per []string
		for _, s := range slices.Sorted(maps.Keys(m.PerServer)) {
			per = append(per, fmt.Sprintf("%s %d", s, m.PerServer[s]))
		}
		fmt.Fprintf(b, "| %s | %d | %.1f | %d | %.2f | %.2f | %s | %.2f / %.2f | %d | %d | %d | %d | %d | %d | %d | %d | %d | %d | %s | %.1f | %.1f | %.1f | %.1f | %d | %d | %d | %d / %d / %d / %d | %s | %d / %d |\n",
			m.Mode, m.Agents, m.ConnectSec, m.WithTicket, m.Resumed50ms/1000, m.Resumed99ms/1000, all, m.Welcome50ms/1000, m.Welcome99ms/1000,
			m.Resumed, m.NewSession, m.Resyncs, m.NotOpened, m.Attempts, m.DialFailures, m.OpenFailures, m.Used0RTT, m.TLSResumed, m.Rejected0RTT,
			strings.Join(per, ", "), m.ServerCPUs, m.ServerCPUSettleds, m.SettledSec, m.ClientCPUs, m.RaftEntries, m.Elections, m.ClosedAfter, m.RecordedOnSurvivor, m.RecordedElsewhere, m.RecordedDisconnected, m.RecordedOnVictim, recordsText(m), m.ServerUDPDrops, m.ClientUDPDrops)
	}
	fmt.Fprintln(b)
	if z, f := r.mode(storm0RTT), r.mode(stormFull); z != nil && f != nil {
		if t := ratio(f.ResumedAllms, z.ResumedAllms); t != "" && z.allResumed() && f.allResumed() {
			fmt.Fprintf(b, "Time until all resumed: **%s**. ", t)
		}
		if c := ratio(f.ServerCPUSettleds, z.ServerCPUSettleds); c != "" {
			fmt.Fprintf(b, "Survivors' CPU seconds: **%s**", c)
			if c2 := ratio(f.ServerCPUs, z.ServerCPUs); c2 != "" {
				fmt.Fprintf(b, " (%s until the last resumed)", c2)
			}
			fmt.Fprintf(b, ".")
		}
		fmt.Fprintf(b, "\n\n")
	}
}

// rmemMax returns the host's net.core.rmem_max, or "unknown".
func rmemMax() string {
	b, err := os.ReadFile("/proc/sys/net/core/rmem_max")
	if err != nil {
		return "unknown"
	}
	return strings.TrimSpace(string(b))
}

// recordsText is the time until every device was recorded on a survivor.
func recordsText(m *stormMode) string {
	if m.RecordsSec == 0 {
		s := "not within " + stormRecordsWait.String()
		if probed := m.ProbeAnswered + m.ProbeClosed + m.ProbeSilent; probed > 0 {
			s += fmt.Sprintf(" (of those not, probed: %d held by their server, %d not, %d silent)", m.ProbeAnswered, m.ProbeClosed, m.ProbeSilent)
		}
		return s
	}
	return fmt.Sprintf("%.1f", m.RecordsSec)
}

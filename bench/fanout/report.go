package main

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/meteor-edge/meteor/bench/internal/benchkit"
)

// report is everything a run found; it is written as fanout.json.
type report struct {
	Date     string           `json:"date"`
	Machine  benchkit.Machine `json:"machine"`
	Versions versionInfo      `json:"versions"`
	Params   paramInfo        `json:"params"`
	// LossSkipped says why the loss rows were not measured, if they were
	// asked for and could not be.
	LossSkipped string         `json:"loss_skipped,omitempty"`
	Results     []*levelResult `json:"results"`
	Ratios      []ratio        `json:"ratios"`
	Notes       []string       `json:"notes"`
	Summary     []benchkit.Row `json:"summary"`
	// UDPBuffers says how the run sized the UDP sockets' buffers (Meteor).
	UDPBuffers *udpInfo `json:"udp_buffers,omitempty"`
	// Elections are the leader elections of the run's Meteor cluster
	// over its whole life.
	Elections benchkit.ElectionLog `json:"leader_elections"`
	// WallSec is the whole run's wall time.
	WallSec float64 `json:"wall_s"`
}

// udpInfo is the host's buffer limits during the run and what the
// servers' agent sockets and the devices' sockets got.
type udpInfo struct {
	Setup          benchkit.UDPBufferSetup `json:"setup"`
	Servers        string                  `json:"server_sockets,omitempty"`
	Devices        string                  `json:"device_sockets,omitempty"`
	ServersGranted bool                    `json:"server_sockets_granted"`
	DevicesGranted bool                    `json:"device_sockets_granted"`
	Error          string                  `json:"error,omitempty"`
}

// read reads what the sockets got.
func (u *udpInfo) read(ctx context.Context, servers, devices []int, log io.Writer) {
	bufs, err := benchkit.ReadUDPBuffers(ctx, append(append([]int(nil), servers...), devices...))
	if err != nil {
		u.Error = err.Error()
		fmt.Fprintf(log, "UDP buffers: %v\n", err)
		return
	}
	u.Servers, u.Devices = benchkit.BufferSummary(bufs, servers), benchkit.BufferSummary(bufs, devices)
	u.ServersGranted, u.DevicesGranted = allGranted(bufs, servers), allGranted(bufs, devices)
	fmt.Fprintf(log, "UDP buffers: servers' agent sockets %s; devices' sockets %s\n", u.Servers, u.Devices)
}

func allGranted(bufs map[int]benchkit.UDPBuffers, ports []int) bool {
	for _, p := range ports {
		if b, ok := bufs[p]; !ok || !b.Granted() {
			return false
		}
	}
	return len(ports) > 0
}

type versionInfo struct {
	Meteor           string `json:"meteor,omitempty"`
	Mosquitto        string `json:"mosquitto,omitempty"`
	MosquittoSkipped string `json:"mosquitto_skipped,omitempty"`
	MQTTClient       string `json:"mqtt_client"`
}

type paramInfo struct {
	Devices     int     `json:"devices"`
	Groups      int     `json:"groups"`
	Loss        []int   `json:"loss_pct"`
	BodyBytes   int     `json:"body_bytes"`
	Sockets     int     `json:"meteor_client_udp_sockets"`
	Concurrency int     `json:"dials_in_flight"`
	TimeoutSec  float64 `json:"timeout_s"`
	SettleSec   float64 `json:"settle_s"`
	// Changes is how many changes each system measured at each loss
	// level; each result is their median (medianChange).
	Changes int    `json:"changes"`
	NoFile  uint64 `json:"open_files_limit"`
}

// ratio compares Meteor with one Mosquitto system at one loss level:
// each is Meteor's time over the peer's at p99 (below 1: Meteor is
// faster). Reported compares the devices' ReportAcks with the
// collector's receipts, Durable the API's view with them.
type ratio struct {
	LossPct  int      `json:"loss_pct"`
	Peer     string   `json:"peer"`
	Applied  *float64 `json:"applied_p99_meteor_over_peer"`
	Reported *float64 `json:"reported_p99_meteor_over_peer"`
	Durable  *float64 `json:"durable_p99_meteor_over_peer"`
}

func div(a, b *float64) *float64 {
	if a == nil || b == nil || *b <= 0 {
		return nil
	}
	r := *a / *b
	return &r
}

// ratios pairs each loss level's Meteor row with each Mosquitto row.
func ratios(results []*levelResult) []ratio {
	var out []ratio
	for _, m := range results {
		if m.System != sysMeteor {
			continue
		}
		for _, q := range results {
			if q.System != sysMeteor && q.LossPct == m.LossPct {
				out = append(out, ratio{LossPct: m.LossPct, Peer: q.System,
					Applied: div(m.AppliedP99s, q.AppliedP99s), Reported: div(m.P99s, q.P99s), Durable: div(m.DurableP99s, q.P99s)})
			}
		}
	}
	return out
}

func fmtS(v *float64) string {
	if v == nil {
		return "not reached"
	}
	switch {
	case *v < 1:
		return fmt.Sprintf("%.0f ms", *v*1000)
	case *v < 10:
		return fmt.Sprintf("%.2f s", *v)
	}
	return fmt.Sprintf("%.1f s", *v)
}

func fmtX(v *float64) string {
	if v == nil {
		return "n/a"
	}
	return fmt.Sprintf("%.2f", *v)
}

func linkName(loss int) string {
	if loss == 0 {
		return "clean link"
	}
	return fmt.Sprintf("%d%% loss", loss)
}

// elections is the count of Elections, 0 where none was recorded.
func (r *levelResult) elections() int {
	if r.Elections == nil {
		return 0
	}
	return *r.Elections
}

// fmtCount formats a count that may not apply ("-").
func fmtCount(n *int) string {
	if n == nil {
		return "-"
	}
	return fmt.Sprint(*n)
}

// fmtDrops formats the datagrams dropped on the servers' and the devices'
// sockets ("-" where not counted).
func fmtDrops(d *benchkit.UDPDrops) string {
	if d == nil {
		return "-"
	}
	n := func(v int64) string {
		if v < 0 {
			return "?"
		}
		return fmt.Sprint(v)
	}
	return n(d.Servers) + "/" + n(d.Devices)
}

// resultHeader and resultRow print the stdout table one row at a time.
func resultHeader(w io.Writer) {
	fmt.Fprintf(w, "%-13s %-10s %7s %7s %9s %11s %11s %10s %10s %10s %11s %8s %8s %10s %9s %11s\n", "system", "link", "devices", "reached", "submit ms", "applied p50", "applied p99", "rep. p50", "rep. p99", "rep. p100", "durable p99", "srv cpu", "drv cpu", "reconnects", "elections", "udp drops")
}

func resultRow(w io.Writer, r *levelResult) {
	durable := "-"
	if r.System == sysMeteor {
		durable = fmtS(r.DurableP99s)
	}
	fmt.Fprintf(w, "%-13s %-10s %7d %7d %9.1f %11s %11s %10s %10s %10s %11s %7.1fs %7.1fs %10d %9s %11s\n", r.System, linkName(r.LossPct), r.Devices, r.Reached, r.SubmitMs,
		fmtS(r.AppliedP50s), fmtS(r.AppliedP99s), fmtS(r.P50s), fmtS(r.P99s), fmtS(r.P100s), durable, r.ServerCPUs, r.DriverCPUs, r.Reconnects, fmtCount(r.Elections), fmtDrops(r.UDP))
}

func printSummary(w io.Writer, rep *report) {
	if len(rep.Ratios) > 0 {
		fmt.Fprintf(w, "\n%-10s %-13s %20s %20s %20s\n", "link", "peer", "applied p99 ratio", "reported p99 ratio", "durable p99 ratio")
		for _, r := range rep.Ratios {
			fmt.Fprintf(w, "%-10s %-13s %20s %20s %20s\n", linkName(r.LossPct), r.Peer, fmtX(r.Applied), fmtX(r.Reported), fmtX(r.Durable))
		}
	}
	var verdicts []string
	for _, row := range rep.Summary {
		v := fmt.Sprintf("%s: Meteor %s", row.Figure, row.Meteor)
		if row.Peer != "" {
			v += fmt.Sprintf(", %s %s, ratio %s", row.PeerName, row.Peer, row.Ratio)
		}
		if row.Met != nil {
			v += fmt.Sprintf(" (goal %s: %s)", row.Goal, map[bool]string{true: "met", false: "NOT met"}[*row.Met])
		}
		verdicts = append(verdicts, v)
	}
	benchkit.PrintSummary(w, rep.Notes, verdicts)
	fmt.Fprintf(w, "wall time %.0f s\n", rep.WallSec)
}

// find returns the row of system at loss, or nil.
func find(results []*levelResult, system string, loss int) *levelResult {
	for _, r := range results {
		if r.System == system && r.LossPct == loss {
			return r
		}
	}
	return nil
}

func hasSystem(results []*levelResult, system string) bool {
	return slices.ContainsFunc(results, func(r *levelResult) bool { return r.System == system })
}

// The goals of the fan-out rows (on the clean link): Meteor's 99 %
// applied at most goalApplied times Mosquitto's with TLS and persistence,
// its 99 % reported and durable at most goalDurable times that
// Mosquitto's 99 % reported.
const (
	goalApplied = 1.0
	goalDurable = 2.0
)

// peerName names a Mosquitto system in the summary.
func peerName(system, version string) string {
	v := "Mosquitto"
	if version != "" {
		v += " " + version
	}
	if system == sysMosquittoTLS {
		return v + " with TLS and persistence"
	}
	return v + " (plaintext, no persistence)"
}

// summaryRows are the rows of the benchmark summary table: per loss
// level, 99 % applied and 99 % reported and durable, each against
// Mosquitto with TLS and persistence (plaintext Mosquitto if only it was
// measured); the goals apply to the clean link.
func summaryRows(rep *report) []benchkit.Row {
	var rows []benchkit.Row
	n := benchkit.Thousands(rep.Params.Devices)
	for _, loss := range rep.Params.Loss {
		m := find(rep.Results, sysMeteor, loss)
		tlsPeer, plain := find(rep.Results, sysMosquittoTLS, loss), find(rep.Results, sysMosquitto, loss)
		if m == nil && tlsPeer == nil && plain == nil {
			continue
		}
		peer, peerSys := tlsPeer, sysMosquittoTLS
		if peer == nil {
			peer, peerSys = plain, sysMosquitto
		}
		applied := benchkit.Row{Bench: 2, Name: "fanout", Figure: fmt.Sprintf("%s devices, 99 %% applied, %s", n, linkName(loss))}
		durable := benchkit.Row{Bench: 2, Name: "fanout", Figure: fmt.Sprintf("%s devices, 99 %% reported and durable, %s", n, linkName(loss))}
		if loss == 0 {
			applied.Key, applied.Goal = "fanout-applied", fmt.Sprintf("<= %.1fx Mosquitto with TLS and persistence", goalApplied)
			durable.Key, durable.Goal = "fanout-durable", fmt.Sprintf("<= %.1fx Mosquitto's 99 %% reported (TLS and persistence)", goalDurable)
		}
		var common []string
		if m != nil {
			applied.Meteor, durable.Meteor = fmtS(m.AppliedP99s), fmtS(m.DurableP99s)
			applied.Elections, durable.Elections = m.Elections, m.Elections
			common = append(common, fmt.Sprintf("Meteor servers used %.1f CPU-s for the change", m.ServerCPUs))
			if m.UDP != nil {
				common = append(common, m.UDP.String())
			}
			if m.elections() > 0 {
				common = append(common, fmt.Sprintf("%d Raft leader election(s) during the change", m.elections()))
			}
		} else {
			applied.Meteor, durable.Meteor = "not measured", "not measured"
		}
		if peer != nil {
			name := peerName(peerSys, rep.Versions.Mosquitto)
			applied.Peer, applied.PeerName = fmtS(peer.AppliedP99s), name
			durable.Peer, durable.PeerName = fmtS(peer.P99s), name
			common = append(common, fmt.Sprintf("the broker used %.1f CPU-s", peer.ServerCPUs))
		}
		if m != nil && peer != nil {
			ra, rd := div(m.AppliedP99s, peer.AppliedP99s), div(m.DurableP99s, peer.P99s)
			applied.Ratio, durable.Ratio = fmtX(ra), fmtX(rd)
			if loss == 0 && peerSys == sysMosquittoTLS {
				applied.Met = benchkit.MetGoal(ra != nil && *ra <= goalApplied)
				durable.Met = benchkit.MetGoal(rd != nil && *rd <= goalDurable)
			}
		}
		if rep.Params.Changes > 1 {
			common = append(common, othersNote(rep.Params.Changes, m, peer))
		}
		if loss == 0 && peerSys != sysMosquittoTLS {
			common = append(common, "the goal is against Mosquitto with TLS and persistence, which was not measured")
		}
		if plain != nil && peerSys == sysMosquittoTLS {
			var r []string
			if m != nil {
				r = append(r, fmt.Sprintf("ratios %s applied, %s reported", fmtX(div(m.AppliedP99s, plain.AppliedP99s)), fmtX(div(m.DurableP99s, plain.P99s))))
			}
			common = append(common, fmt.Sprintf("plaintext Mosquitto without persistence: 99 %% applied %s, reported %s%s", fmtS(plain.AppliedP99s), fmtS(plain.P99s), prefixed("; ", strings.Join(r, ""))))
		}
		if loss > 0 {
			common = append(common, fmt.Sprintf("nft drops %d%% of device-port packets each way", loss))
		}
		common = append(common, "one machine (2 CPUs) runs servers and every device; devices apply in zero time")
		applied.Note = "applied: the device took the change (Meteor: a complete Delta; Mosquitto: the retained message); " + strings.Join(common, "; ")
		dnote := "reported and durable: Meteor, the API (GET /v1/status on a follower) shows the device converged at the change's revision, its report committed through Raft"
		if m != nil {
			dnote += fmt.Sprintf(" (the devices held their ReportAcks: 99 %% at %s)", fmtS(m.P99s))
		}
		dnote += "; Mosquitto, the collector received the report"
		durable.Note = dnote + "; " + strings.Join(common, "; ")
		rows = append(rows, applied, durable)
	}
	if rep.LossSkipped != "" {
		rows = append(rows, benchkit.Row{Bench: 2, Name: "fanout", Figure: "99 % applied and reported, with packet loss",
			Meteor: "skipped", Note: rep.LossSkipped})
	}
	return rows
}

func prefixed(p, s string) string {
	if s == "" {
		return ""
	}
	return p + s
}

// notes say how to read the figures.
func notes(rep *report) []string {
	p := rep.Params
	n := []string{
		fmt.Sprintf("The machine is shared: load average %s at start, %s at end (1-minute load per row in the JSON). Servers, devices and the collector all run on it; the systems are measured one after the other, never at once.", rep.Machine.LoadAvgStart, rep.Machine.LoadAvgEnd),
		"Applied: the device received the new desired state and applied it (zero time on every side: nothing runs). Meteor: a complete Delta taken; Mosquitto: the retained message handled. " +
			"Reported (all systems): the device's report of it reached the control plane. Meteor: the device holds the server's ReportAck, sent only once the device's status transition is committed through Raft (owner server, three voters, fsync); Mosquitto: the collector subscribed to the report topics received the report (QoS 1). " +
			"Reported and durable (Meteor): the API shows it: blocking reads of GET /v1/status from a follower's own replica (?stale=true, so the leader is not asked; at most one every 50 ms; each costs that server a comparison of every device's desired state with its report) until its count of the intent's devices converged at the change's revision passes 50, 99 and 100 %. " +
			"Mosquitto with persistence writes its in-memory database every autosave_interval (Debian's default, 1800 s) and at exit, never before acknowledging a message, so its reported figure is the nearest it has to durable. " +
			"Times run from submitting the change (Meteor: the PUT is sent; Mosquitto: the first retained PUBLISH is sent), on this process's clock.",
		fmt.Sprintf("Loss: an nft table of the run's own drops packets at the input hook (each loopback packet passes it once) with numgen random, on the Meteor agent UDP ports and the Mosquitto device TCP port, in both directions; Raft, gossip, HTTP and the Mosquitto backend listener are not touched. Open files limit %d.", p.NoFile),
	}
	if hasSystem(rep.Results, sysMeteor) {
		n = append(n, fmt.Sprintf("Meteor: 3 `meteor server` processes (--bootstrap-expect 3, one agent UDP port each); %d wire-level agents in this process (bench/internal/wiredev: own certificate, real QUIC and TLS, the agent's protocol: Notify, Pull with inventory, Delta, Ack, Report, ReportAck), spread round-robin over the servers and sharing %d client UDP sockets. "+
			"One intent with one %d-byte file resource selects every device; the change is one PUT. A Notify that carries the change's Delta on the set the device holds (protocol 1.5) is taken as is, any other Notify makes the device pull; like the agent it also pulls at the server's pull interval, and sends a report the cluster did not acknowledge again after 1 s, doubling to 60 s. "+
			"Leader elections are those the cluster held during the change, won or not: the growth of the highest Raft term the servers report on GET /v1/health.", p.Devices, p.Sockets, p.BodyBytes))
		if u := rep.UDPBuffers; u != nil {
			n = append(n, fmt.Sprintf("UDP buffers: %s. The servers' agent sockets got %s, the devices' %s (ss -uam). Datagrams dropped by full receive buffers are counted on those sockets (/proc/net/udp) and on the host (/proc/net/snmp RcvbufErrors, which counts every process on it) during each change.", u.Setup.Note, orUnknown(u.Servers), orUnknown(u.Devices)))
		}
	}
	if hasSystem(rep.Results, sysMosquitto) || hasSystem(rep.Results, sysMosquittoTLS) {
		n = append(n, fmt.Sprintf("Mosquitto: %s as one child process per system, MQTT 3.1.1, no connection limit, unlimited queued and in-flight QoS 1 messages, TCP_NODELAY; %d clients (%s, clean session, QoS 1, each on its own TCP connection) subscribed to one retained desired-state topic per group (%d groups); each publishes its report to its own topic, and a collector on a second listener subscribes to them all. The change is %d retained QoS 1 publishes carrying the same %d bytes Meteor sends as the resource body. "+
			"mosquitto: plaintext, persistence off. mosquitto-tls: both listeners TLS (TLS 1.3) requiring a client certificate from the run's CA (every device, the publisher and the collector have their own, ECDSA P-256 like Meteor's), persistence on.",
			orDash(rep.Versions.Mosquitto), p.Devices, rep.Versions.MQTTClient, p.Groups, p.Groups, p.BodyBytes))
	}
	for _, r := range rep.Results {
		if r.Reached < r.Devices {
			n = append(n, fmt.Sprintf("%s, %s: only %d of %d devices reported back within %.0f s.", r.System, linkName(r.LossPct), r.Reached, r.Devices, p.TimeoutSec))
			if len(r.Unreported) > 0 {
				n = append(n, fmt.Sprintf("%s, %s: devices that did not report, with what each held at the end: %s.", r.System, linkName(r.LossPct), strings.Join(r.Unreported, "; ")))
			}
		}
		if r.elections() > 0 {
			n = append(n, fmt.Sprintf("%s, %s: the cluster held %d leader election(s) during the change (servers and devices share two cores). Writes in flight then fail; the session servers retry the reports they could not record, and the devices send unacknowledged reports again after 1 s doubling to 60 s.",
				r.System, linkName(r.LossPct), r.elections()))
		}
		if r.DurableError != "" {
			n = append(n, fmt.Sprintf("%s, %s: reading the fleet status failed at least once: %s", r.System, linkName(r.LossPct), r.DurableError))
		}
		if v := r.Server; v != nil {
			n = append(n, fmt.Sprintf("Meteor, %s: afterwards the cluster's own records (GET /v1/intents/%s/progress) showed %d of %d targeted devices acknowledged and %d converged at revision %d.",
				linkName(r.LossPct), intentName, v.Acknowledged, v.Targeted, v.Converged, v.Revision))
		}
		if r.RaftEntries != nil {
			n = append(n, fmt.Sprintf("Meteor, %s: the cluster committed %d Raft entries from the change's submission until the last device was durable (the intent, the owners' status batches, the session servers' session batches).",
				linkName(r.LossPct), *r.RaftEntries))
		}
		if r.NotifyDeltas+r.PulledDeltas > 0 {
			n = append(n, fmt.Sprintf("Meteor, %s: the devices took %d Deltas from the Notify itself and %d by pulling during the change.",
				linkName(r.LossPct), r.NotifyDeltas, r.PulledDeltas))
		}
	}
	if rep.LossSkipped != "" {
		n = append(n, "The loss rows were skipped: "+rep.LossSkipped)
	}
	if rep.Versions.MosquittoSkipped != "" {
		n = append(n, "Mosquitto was skipped: "+rep.Versions.MosquittoSkipped)
	}
	return n
}

func orUnknown(s string) string {
	if s == "" {
		return "unknown sizes"
	}
	return s
}

func orDash(s string) string {
	if s == "" {
		return "Mosquitto"
	}
	return "Mosquitto " + s
}

// writeResults writes fanout.json and fanout.md into dir.
func writeResults(dir string, rep *report) error {
	return benchkit.WriteResults(dir, "fanout", rep, markdown(rep))
}

func markdown(rep *report) string {
	var b strings.Builder
	p := rep.Params
	fmt.Fprintf(&b, "# Fan-out convergence: Meteor vs Mosquitto\n\n")
	fmt.Fprintf(&b, "%s\n\n", rep.Machine.Measured(rep.Date))
	mosq := orNA(rep.Versions.Mosquitto)
	if rep.Versions.MosquittoSkipped != "" {
		mosq = "skipped: " + rep.Versions.MosquittoSkipped
	}
	fmt.Fprintf(&b, "Meteor %s (3 servers) and Mosquitto %s (plaintext; TLS with persistence) on 127.0.0.1; %s devices in %d groups, one change to every device's desired state (%d-byte document), time until each share of the devices had applied it, reported it, and (Meteor) the API showed it durable. Whole run: %.0f s; Meteor's leader elections over its cluster's life: %d.\n\n",
		orNA(rep.Versions.Meteor), mosq, benchkit.Thousands(p.Devices), p.Groups, p.BodyBytes, rep.WallSec, rep.Elections.Total)
	fmt.Fprintf(&b, "| system | link | devices | reached | submit ms | applied p50 | applied p99 | reported p50 | reported p99 | reported p100 | durable p50 | durable p99 | durable p100 | server CPU s | driver CPU s | reconnects | leader elections | UDP drops servers/devices | packets seen / dropped | load1 |\n")
	fmt.Fprintf(&b, "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, r := range rep.Results {
		pk := ""
		if r.LossPct > 0 {
			pk = fmt.Sprintf("%d / %d", r.Packets, r.Dropped)
		}
		d50, d99, d100 := "-", "-", "-"
		if r.System == sysMeteor {
			d50, d99, d100 = fmtS(r.DurableP50s), fmtS(r.DurableP99s), fmtS(r.DurableP100s)
		}
		fmt.Fprintf(&b, "| %s | %s | %d | %d | %.1f | %s | %s | %s | %s | %s | %s | %s | %s | %.1f | %.1f | %d | %s | %s | %s | %.2f |\n", r.System, linkName(r.LossPct), r.Devices, r.Reached, r.SubmitMs,
			fmtS(r.AppliedP50s), fmtS(r.AppliedP99s), fmtS(r.P50s), fmtS(r.P99s), fmtS(r.P100s), d50, d99, d100, r.ServerCPUs, r.DriverCPUs, r.Reconnects, fmtCount(r.Elections), fmtDrops(r.UDP), pk, r.Load1)
	}
	if len(rep.Ratios) > 0 {
		fmt.Fprintf(&b, "\n| link | peer | Meteor/peer applied p99 | Meteor/peer reported p99 (ReportAck) | Meteor/peer reported and durable p99 (API) |\n|---|---|---:|---:|---:|\n")
		for _, r := range rep.Ratios {
			fmt.Fprintf(&b, "| %s | %s | %s | %s | %s |\n", linkName(r.LossPct), r.Peer, fmtX(r.Applied), fmtX(r.Reported), fmtX(r.Durable))
		}
	}
	fmt.Fprintf(&b, "\n## Summary\n\n| figure | Meteor | peer | ratio | goal | met | note |\n|---|---:|---:|---:|---|---|---|\n")
	for _, r := range rep.Summary {
		peer := r.Peer
		if r.PeerName != "" {
			peer = r.PeerName + ": " + r.Peer
		}
		met := ""
		if r.Met != nil {
			met = map[bool]string{true: "yes", false: "**no**"}[*r.Met]
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s | %s |\n", r.Figure, r.Meteor, peer, r.Ratio, r.Goal, met, r.Note)
	}
	fmt.Fprintf(&b, "\n## Notes\n\n")
	for _, n := range rep.Notes {
		fmt.Fprintf(&b, "- %s\n", n)
	}
	return b.String()
}

func orNA(s string) string {
	if s == "" {
		return "(not measured)"
	}
	return s
}

// othersNote says that a row is the median of its level's n changes and
// gives the other changes' figures.
func othersNote(n int, m, peer *levelResult) string {
	list := func(others []changeFigures, fig func(changeFigures) *float64) string {
		var out []string
		for _, o := range others {
			out = append(out, fmtS(fig(o)))
		}
		return strings.Join(out, ", ")
	}
	applied := func(o changeFigures) *float64 { return o.AppliedP99s }
	var parts []string
	if m != nil && len(m.Others) > 0 {
		parts = append(parts, fmt.Sprintf("Meteor's others: applied %s, reported and durable %s", list(m.Others, applied), list(m.Others, func(o changeFigures) *float64 { return o.DurableP99s })))
	}
	if peer != nil && len(peer.Others) > 0 {
		parts = append(parts, fmt.Sprintf("the peer's others: applied %s, reported %s", list(peer.Others, applied), list(peer.Others, func(o changeFigures) *float64 { return o.P99s })))
	}
	return fmt.Sprintf("each system's figure is the median of %d changes by 99 %% applied; %s", n, strings.Join(parts, "; "))
}

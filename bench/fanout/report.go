package main

import (
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
	// WallSec is the whole run's wall time.
	WallSec float64 `json:"wall_s"`
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
	NoFile      uint64  `json:"open_files_limit"`
}

// ratio compares Meteor with Mosquitto at one loss level: each is
// Meteor's time over Mosquitto's (below 1: Meteor is faster).
type ratio struct {
	LossPct int      `json:"loss_pct"`
	P50     *float64 `json:"p50_meteor_over_mosquitto"`
	P99     *float64 `json:"p99_meteor_over_mosquitto"`
	P100    *float64 `json:"p100_meteor_over_mosquitto"`
}

func div(a, b *float64) *float64 {
	if a == nil || b == nil || *b <= 0 {
		return nil
	}
	r := *a / *b
	return &r
}

// ratios pairs each loss level's Meteor and Mosquitto rows.
func ratios(results []*levelResult) []ratio {
	var out []ratio
	for _, m := range results {
		if m.System != sysMeteor {
			continue
		}
		for _, q := range results {
			if q.System == sysMosquitto && q.LossPct == m.LossPct {
				out = append(out, ratio{LossPct: m.LossPct, P50: div(m.P50s, q.P50s), P99: div(m.P99s, q.P99s), P100: div(m.P100s, q.P100s)})
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

// resultHeader and resultRow print the stdout table one row at a time.
func resultHeader(w io.Writer) {
	fmt.Fprintf(w, "%-9s %-10s %8s %8s %9s %11s %11s %10s %10s %10s %8s %8s %10s %9s\n", "system", "link", "devices", "reached", "submit ms", "applied p50", "applied p99", "p50", "p99", "p100", "srv cpu", "drv cpu", "reconnects", "elections")
}

func resultRow(w io.Writer, r *levelResult) {
	fmt.Fprintf(w, "%-9s %-10s %8d %8d %9.1f %11s %11s %10s %10s %10s %7.1fs %7.1fs %10d %9s\n", r.System, linkName(r.LossPct), r.Devices, r.Reached, r.SubmitMs,
		fmtS(r.AppliedP50s), fmtS(r.AppliedP99s), fmtS(r.P50s), fmtS(r.P99s), fmtS(r.P100s), r.ServerCPUs, r.DriverCPUs, r.Reconnects, fmtCount(r.Elections))
}

func printSummary(w io.Writer, rep *report) {
	if len(rep.Ratios) > 0 {
		fmt.Fprintf(w, "\n%-10s %18s %18s %18s\n", "link", "meteor/mosq p50", "meteor/mosq p99", "meteor/mosq p100")
		for _, r := range rep.Ratios {
			fmt.Fprintf(w, "%-10s %18s %18s %18s\n", linkName(r.LossPct), fmtX(r.P50), fmtX(r.P99), fmtX(r.P100))
		}
	}
	var verdicts []string
	for _, row := range rep.Summary {
		v := fmt.Sprintf("%s: Meteor %s", row.Figure, row.Meteor)
		if row.Peer != "" {
			v += fmt.Sprintf(", %s %s, ratio %s", row.PeerName, row.Peer, row.Ratio)
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

// summaryRows are the rows of the benchmark summary table: one per loss
// level measured.
func summaryRows(rep *report) []benchkit.Row {
	var rows []benchkit.Row
	for _, loss := range rep.Params.Loss {
		m, q := find(rep.Results, sysMeteor, loss), find(rep.Results, sysMosquitto, loss)
		if m == nil && q == nil {
			continue
		}
		row := benchkit.Row{
			Bench: 2, Name: "fanout",
			Figure: fmt.Sprintf("time to 99%% applied and reported, %s devices, %s", benchkit.Thousands(rep.Params.Devices), linkName(loss)),
		}
		var note []string
		if m != nil {
			row.Meteor = fmtS(m.P99s)
		} else {
			row.Meteor = "not measured"
		}
		if q != nil {
			row.Peer, row.PeerName = fmtS(q.P99s), "Mosquitto "+rep.Versions.Mosquitto
		} else if rep.Versions.MosquittoSkipped != "" {
			note = append(note, "Mosquitto skipped: "+rep.Versions.MosquittoSkipped)
		}
		if m != nil && q != nil {
			row.Ratio = fmtX(div(m.P99s, q.P99s))
		}
		note = append(note, "one machine (2 CPUs) runs servers and every device; devices apply in zero time")
		if m != nil && m.ServerCPUs > 0 {
			note = append(note, fmt.Sprintf("Meteor servers used %.1f CPU-s", m.ServerCPUs))
		}
		if m != nil {
			row.Elections = m.Elections
		}
		if m != nil && m.elections() > 0 {
			note = append(note, fmt.Sprintf("%d Raft leader election(s) during the change; unrecorded reports wait for the agents' 60 s report cadence", m.elections()))
		}
		if q != nil && q.ServerCPUs > 0 {
			note = append(note, fmt.Sprintf("the broker %.1f CPU-s", q.ServerCPUs))
		}
		if loss > 0 {
			note = append(note, fmt.Sprintf("nft drops %d%% of device-port packets each way", loss))
		}
		row.Note = strings.Join(note, "; ")
		rows = append(rows, row)
	}
	if rep.LossSkipped != "" {
		rows = append(rows, benchkit.Row{Bench: 2, Name: "fanout", Figure: "time to 99% applied and reported, with packet loss",
			Meteor: "skipped", Note: rep.LossSkipped})
	}
	return rows
}

// notes say how to read the figures.
func notes(rep *report) []string {
	p := rep.Params
	n := []string{
		fmt.Sprintf("The machine is shared: load average %s at start, %s at end (1-minute load per row in the JSON). Servers, devices and the collector all run on it; the two systems are measured one after the other, never at once.", rep.Machine.LoadAvgStart, rep.Machine.LoadAvgEnd),
		"Applied and reported back, on both sides: the device received the new desired state, applied it (zero time on both sides: nothing runs) and its report of it reached the control plane. " +
			"Meteor: the device holds the server's ReportAck, which is sent only once the device's status transition is committed through Raft (owner server, three voters, fsync). " +
			"Mosquitto: the collector subscribed to the report topics received the report (QoS 1; the broker does not persist it). " +
			"Times run from submitting the change (Meteor: the PUT is sent; Mosquitto: the first retained PUBLISH is sent), on this process's clock.",
		fmt.Sprintf("Loss: an nft table of the run's own drops packets at the input hook (each loopback packet passes it once) with numgen random, on the Meteor agent UDP ports and the Mosquitto device TCP port, in both directions; Raft, gossip, HTTP and the Mosquitto backend listener are not touched. Open files limit %d.", p.NoFile),
	}
	if hasSystem(rep.Results, sysMeteor) {
		n = append(n, fmt.Sprintf("Meteor: 3 `meteor server` processes (--bootstrap-expect 3, one agent UDP port each); %d wire-level agents in this process (own certificate, real QUIC and TLS, the agent's protocol: Notify, Pull with inventory, Delta, Ack, Report, ReportAck), spread round-robin over the servers and sharing %d client UDP sockets. "+
			"One intent with one %d-byte file resource selects every device; the change is one PUT. A Notify makes a device pull; like the agent it also pulls every 30 s (the server's pull interval) and sends a full report every 60 s, which is when a report the cluster did not acknowledge goes out again. "+
			"Leader elections are those the cluster held during the change, won or not: the growth of the highest Raft term the servers report on GET /v1/health.", p.Devices, p.Sockets, p.BodyBytes))
	}
	if hasSystem(rep.Results, sysMosquitto) {
		n = append(n, fmt.Sprintf("Mosquitto: %s as one child process, MQTT 3.1.1, persistence off, no connection limit, unlimited queued and in-flight QoS 1 messages, TCP_NODELAY; %d clients (%s, clean session, QoS 1, each on its own TCP connection) subscribed to one retained desired-state topic per group (%d groups); each publishes its report to its own topic, and a collector on a second listener subscribes to them all. The change is %d retained QoS 1 publishes carrying the same %d bytes Meteor sends as the resource body.",
			orDash(rep.Versions.Mosquitto), p.Devices, rep.Versions.MQTTClient, p.Groups, p.Groups, p.BodyBytes))
	}
	for _, r := range rep.Results {
		if r.Reached < r.Devices {
			n = append(n, fmt.Sprintf("%s, %s: only %d of %d devices reported back within %.0f s.", r.System, linkName(r.LossPct), r.Reached, r.Devices, p.TimeoutSec))
		}
		if r.elections() > 0 {
			n = append(n, fmt.Sprintf("%s, %s: the cluster held %d leader election(s) during the change (servers and devices share two cores; Raft runs with its default timeouts, no --raft-multiplier). Writes in flight then fail; the session servers do not acknowledge the reports they could not record, and the devices send them again with their next periodic report (60 s), so devices whose report fell in that window can wait up to a minute more.",
				r.System, linkName(r.LossPct), r.elections()))
		}
		if v := r.Server; v != nil {
			n = append(n, fmt.Sprintf("Meteor, %s: afterwards the cluster's own records (GET /v1/intents/%s/progress) showed %d of %d targeted devices acknowledged and %d converged at revision %d.",
				linkName(r.LossPct), intentName, v.Acknowledged, v.Targeted, v.Converged, v.Revision))
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
	fmt.Fprintf(&b, "Meteor %s (3 servers) and Mosquitto %s on 127.0.0.1; %s devices in %d groups, one change to every device's desired state (%d-byte document), time until each share of the devices had applied it and reported back. Whole run: %.0f s.\n\n",
		orNA(rep.Versions.Meteor), mosq, benchkit.Thousands(p.Devices), p.Groups, p.BodyBytes, rep.WallSec)
	fmt.Fprintf(&b, "| system | link | devices | reached | submit ms | applied p50 | applied p99 | reported p50 | reported p99 | reported p100 | server CPU s | driver CPU s | reconnects | leader elections | packets seen / dropped | load1 |\n")
	fmt.Fprintf(&b, "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, r := range rep.Results {
		pk := ""
		if r.LossPct > 0 {
			pk = fmt.Sprintf("%d / %d", r.Packets, r.Dropped)
		}
		fmt.Fprintf(&b, "| %s | %s | %d | %d | %.1f | %s | %s | %s | %s | %s | %.1f | %.1f | %d | %s | %s | %.2f |\n", r.System, linkName(r.LossPct), r.Devices, r.Reached, r.SubmitMs,
			fmtS(r.AppliedP50s), fmtS(r.AppliedP99s), fmtS(r.P50s), fmtS(r.P99s), fmtS(r.P100s), r.ServerCPUs, r.DriverCPUs, r.Reconnects, fmtCount(r.Elections), pk, r.Load1)
	}
	if len(rep.Ratios) > 0 {
		fmt.Fprintf(&b, "\n| link | Meteor/Mosquitto p50 | Meteor/Mosquitto p99 | Meteor/Mosquitto p100 |\n|---|---:|---:|---:|\n")
		for _, r := range rep.Ratios {
			fmt.Fprintf(&b, "| %s | %s | %s | %s |\n", linkName(r.LossPct), fmtX(r.P50), fmtX(r.P99), fmtX(r.P100))
		}
	}
	fmt.Fprintf(&b, "\n## Summary\n\n| figure | Meteor | peer | ratio | note |\n|---|---:|---:|---:|---|\n")
	for _, r := range rep.Summary {
		peer := r.Peer
		if r.PeerName != "" {
			peer = r.PeerName + ": " + r.Peer
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s |\n", r.Figure, r.Meteor, peer, r.Ratio, r.Note)
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

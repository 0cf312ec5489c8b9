package main

import (
	"fmt"
	"io"
	"strings"

	"github.com/meteor-edge/meteor/agent/sim"
	"github.com/meteor-edge/meteor/bench/internal/benchkit"
)

// Goals of the issue.
const (
	scaleGoalDevices = 100_000
	scaleGoalSec     = 60.0
)

// report is everything a run found; it is written as fleet.json.
type report struct {
	Date     string           `json:"date"`
	Machine  benchkit.Machine `json:"machine"`
	Params   paramInfo        `json:"params"`
	Scale    []*scaleLevel    `json:"scale,omitempty"`
	Retail   *retailResult    `json:"retail,omitempty"`
	Summary  []benchkit.Row   `json:"summary"`
	Verdicts []string         `json:"verdicts"`
	Notes    []string         `json:"notes"`
	// UDPBuffers is what the run did about the host's UDP buffer limits;
	// Elections the leader elections of each cluster over its life.
	UDPBuffers benchkit.UDPBufferSetup `json:"udp_buffers"`
	Elections  benchkit.ElectionLog    `json:"leader_elections"`
}

type paramInfo struct {
	Parts             []string `json:"parts"`
	Sizes             []int    `json:"sizes"`
	DevicesKind       string   `json:"scale_devices"`
	Dials             int      `json:"light_dials_in_flight"`
	Sockets           int      `json:"light_udp_sockets"`
	RampRate          int      `json:"ramp_devices_per_s"`
	PerWorker         int      `json:"devices_per_sim_process"`
	ConnectTimeoutSec float64  `json:"connect_timeout_s"`
	ChangeTimeoutSec  float64  `json:"change_timeout_s"`
	SampleEverySec    float64  `json:"sample_every_s"`
	RTTProbeSec       float64  `json:"agent_rtt_probe_s"`
	RaftMultiplier    int      `json:"raft_multiplier"`
	Seed              uint64   `json:"seed"`
	NoFile            uint64   `json:"rlimit_nofile"`
	MemTotalMiB       int64    `json:"mem_total_mib"`
	RetailDevices     int      `json:"retail_devices"`
	RetailTimeScale   float64  `json:"retail_time_scale"`
	RetailTimeoutSec  float64  `json:"retail_timeout_s"`
}

func verdictState(met bool) string {
	if met {
		return "MET"
	}
	return "NOT MET"
}

// largestHeld returns the largest level that held, or nil.
func (r *report) largestHeld() *scaleLevel {
	var best *scaleLevel
	for _, l := range r.Scale {
		if l.Held && (best == nil || l.Devices > best.Devices) {
			best = l
		}
	}
	return best
}

// firstFailed returns the level that did not hold, or nil.
func (r *report) firstFailed() *scaleLevel {
	for _, l := range r.Scale {
		if !l.Held {
			return l
		}
	}
	return nil
}

// finish fills the summary rows, verdicts and notes.
func (r *report) finish() {
	r.Summary, r.Verdicts, r.Notes = nil, nil, nil
	r.Notes = append(r.Notes, fmt.Sprintf("The machine is shared: load average %s at start, %s at end.", r.Machine.LoadAvgStart, r.Machine.LoadAvgEnd))
	r.Notes = append(r.Notes, "Leader elections are those the cluster held in the period named, won or not: the growth of the highest Raft term the servers report on GET /v1/health.")
	if len(r.Scale) > 0 {
		r.finishScale()
	}
	if r.Retail != nil {
		r.finishRetail()
	}
}

// Goals of the scale rows.
const connectGoalSec = 120.0

// largest returns the largest level run, held or not.
func (r *report) largest() *scaleLevel {
	var best *scaleLevel
	for _, l := range r.Scale {
		if best == nil || l.Devices > best.Devices {
			best = l
		}
	}
	return best
}

// limits says, from what level l measured, what bounds a fleet of the
// goal's size on this machine: CPU per connect (servers and simulator
// together, over the machine's cores) and memory (servers' added RSS per
// session and the simulator's per device).
func (r *report) limits(l *scaleLevel) string {
	var out []string
	if l.ConnectCPUms > 0 {
		perConnect := l.ConnectCPUms + l.SimConnectCPUms
		floor := float64(scaleGoalDevices) * perConnect / 1000 / float64(max(r.Machine.NProc, 1))
		out = append(out, fmt.Sprintf("CPU: connecting took the servers %.2f ms and the devices %.2f ms of CPU per device, so %s connects need at least %.0f s of this machine's %d cores",
			l.ConnectCPUms, l.SimConnectCPUms, benchkit.Thousands(scaleGoalDevices), floor, r.Machine.NProc))
	}
	if l.TotalKiBPerDevice > 0 {
		need := (l.TotalKiBPerDevice + l.SimKiBPerDevice) * scaleGoalDevices / (1 << 20)
		sim := fmt.Sprintf("the simulator %.0f KiB", l.SimKiBPerDevice)
		if l.Connected < l.Devices {
			sim += fmt.Sprintf(" (its RSS over the %s connected; the %s others' certificates and goroutines are in it too)", benchkit.Thousands(l.Connected), benchkit.Thousands(l.Devices-l.Connected))
		}
		out = append(out, fmt.Sprintf("memory: the servers added %.0f KiB of RSS per connected device (three servers together) and %s, so %s devices need about %.1f GiB beside the %.1f GiB the machine has (least MemAvailable during the level %.1f GiB)",
			l.TotalKiBPerDevice, sim, benchkit.Thousands(scaleGoalDevices), need, float64(r.Params.MemTotalMiB)/1024, l.MemAvailMinMiB/1024))
	}
	return strings.Join(out, "; ")
}

// secsOrNot is v in seconds, or "not reached".
func secsOrNot(v *float64) string {
	if v == nil {
		return "not reached"
	}
	return secs(v) + " s"
}

// dropsText says what was dropped, or "".
func dropsText(what string, d *benchkit.UDPDrops) string {
	if d == nil {
		return ""
	}
	return what + ": " + d.String()
}

func joinNonEmpty(sep string, parts ...string) string {
	var out []string
	for _, p := range parts {
		if p != "" {
			out = append(out, p)
		}
	}
	return strings.Join(out, sep)
}

func (r *report) finishScale() {
	best, failed, top := r.largestHeld(), r.firstFailed(), r.largest()
	kind := r.Params.DevicesKind
	conv := benchkit.Row{Bench: 4, Name: "fleet", Key: "fleet-converge", Figure: "largest fleet converging on one change (99 %)", Goal: "100,000 devices <= 60 s after the change"}
	met := false
	if best != nil {
		conv.Meteor = fmt.Sprintf("%s devices in %s s", benchkit.Thousands(best.Devices), secs(best.Change.P99))
		conv.Elections = new(best.Elections)
		met = best.Devices >= scaleGoalDevices && best.Change.P99 != nil && *best.Change.P99 <= scaleGoalSec
	} else {
		conv.Meteor = "none held"
	}
	conv.Met = benchkit.MetGoal(met)
	var notes []string
	if kind == kindLight {
		notes = append(notes, "light wire-level devices (bench/internal/wiredev) in one process beside the 3 servers; converged: the device's report of the change acknowledged, its status committed through Raft")
		if best != nil {
			notes = append(notes, fmt.Sprintf("99 %% had applied it after %s s", secs(best.ChangeApplied.P99)))
		}
	} else {
		notes = append(notes, "full agents (agent/sim) in simulator processes; converged as the agents see it")
	}
	if best != nil {
		notes = append(notes, dropsText("during the change", best.ChangeUDP))
	}
	if failed != nil {
		notes = append(notes, fmt.Sprintf("%s devices did not hold: %s", benchkit.Thousands(failed.Devices), failed.Failure))
	}
	if !met && top != nil {
		notes = append(notes, r.limits(top))
	}
	conv.Note = joinNonEmpty("; ", notes...)
	r.Summary = append(r.Summary, conv)

	if top != nil {
		connect := benchkit.Row{Bench: 4, Name: "fleet", Key: "fleet-connect", Figure: "connect 100,000 devices (every device in session)", Goal: "<= 120 s"}
		if top.ConnectSec != nil {
			connect.Meteor = fmt.Sprintf("%s devices in %s s", benchkit.Thousands(top.Devices), secs(top.ConnectSec))
		} else {
			connect.Meteor = fmt.Sprintf("%s of %s devices, not all", benchkit.Thousands(top.Connected), benchkit.Thousands(top.Devices))
		}
		connect.Met = benchkit.MetGoal(top.Devices >= scaleGoalDevices && top.ConnectSec != nil && *top.ConnectSec <= connectGoalSec)
		connect.Elections = new(top.ConnectElections)
		var cn []string
		if top.Connect.P50 != nil {
			cn = append(cn, fmt.Sprintf("each device's first session: 50 %% after %s, 99 %% after %s", secsOrNot(top.Connect.P50), secsOrNot(top.Connect.P99)))
		}
		if kind == kindLight {
			cn = append(cn, fmt.Sprintf("%s light devices dialling at once, %d dials in flight, over %d UDP sockets", benchkit.Thousands(top.Devices), r.Params.Dials, r.Params.Sockets))
		} else {
			cn = append(cn, fmt.Sprintf("agents started at %d a second", r.Params.RampRate))
		}
		if top.Failure != "" && top.ConnectSec == nil {
			cn = append(cn, "stopped: "+top.Failure)
		}
		cn = append(cn, dropsText("while connecting", top.ConnectUDP))
		if connect.Met != nil && !*connect.Met {
			cn = append(cn, r.limits(top))
		}
		connect.Note = joinNonEmpty("; ", cn...)
		r.Summary = append(r.Summary, connect)
	}

	v := fmt.Sprintf("scale goal %s: ", verdictState(met))
	if best != nil {
		v += fmt.Sprintf("largest fleet that held: %s devices, 99 %% converged %s s and 100 %% %s s after the commit (%d leader elections)", benchkit.Thousands(best.Devices), secs(best.Change.P99), secs(best.Change.P100), best.Elections)
	} else {
		v += "no fleet size held"
	}
	if failed != nil {
		v += fmt.Sprintf("; %s devices did not: %s", benchkit.Thousands(failed.Devices), failed.Failure)
	}
	r.Verdicts = append(r.Verdicts, v)
	if kind == kindLight {
		r.Notes = append(r.Notes,
			fmt.Sprintf("Scale: each size runs on a fresh 3-server cluster (`meteor server` processes, Raft on disk, --raft-multiplier %d). The fleet is light devices (bench/internal/wiredev) in this process: each with its own device certificate and session, a real QUIC connection and TLS 1.3 handshake, the agent's protocol, and a change applied in zero time; they share %d UDP sockets (one quic.Transport each), and device i is in region %s[i mod 3] and dials that region's server first. "+
				"Devices converge first on one intent written before the fleet starts; the change then gives every device a new value of its one resource. Converged: the device holds the ReportAck of its report of the change, which its server sends once the status is committed through Raft; times are from the write's answer.",
				r.Params.RaftMultiplier, r.Params.Sockets, strings.Join(sim.Regions(), "/")),
			"Scale: connect is from starting the devices (all dial at once, -dials in flight) until every one had a Welcome; servers' CPU per connect is their CPU time over that period per device connected, the simulator's likewise (this process, the devices' TLS handshakes included).")
	} else {
		r.Notes = append(r.Notes,
			"Scale: each size runs on a fresh 3-server cluster (`meteor server` processes, Raft on disk). The fleet is real agents (package agent via agent/sim, fiber link profile: 1 ms plus 2 ms to the device's own region's server and 40-100 ms to the others), each with its own device certificate, QUIC socket and fsynced bbolt journal, run by simulator processes on the same two cores. "+
				"Devices converge first on one intent written before the fleet starts; the change then gives every device a new value of its one sim resource (100 ms apply). Times are from the write's answer to the first sample (every -sample-every) in which the agent reports converged at the change's revision.",
			fmt.Sprintf("Scale: a simulator process runs at most %d devices: each holds two file descriptors (UDP socket, journal) and RLIMIT_NOFILE's hard limit here is %d, which an unprivileged process cannot raise; each process binds its devices to its own loopback address (127.0.1.k) so the fleet is not limited to one address's ephemeral ports.", r.Params.PerWorker, r.Params.NoFile))
	}
	r.Notes = append(r.Notes,
		"Scale: server memory per device is (VmRSS once every device converged on the first intent - VmRSS before the fleet started) / sessions the server holds; the total divides the three servers' added RSS by the devices connected. Every server also keeps every device in its replicated state, so a server's figure is not all per session; the row for memory per idle session is bench/sessions'.",
		"UDP buffers: "+r.UDPBuffers.Note+". Datagrams dropped by full receive buffers are counted on the servers' agent sockets and (light devices) the devices' sockets, and on the host, while connecting and during the change.")
}

func (r *report) finishRetail() {
	rt := r.Retail
	for i, c := range rt.Changes {
		row := benchkit.Row{Bench: 5, Name: "fleet", Figure: fmt.Sprintf("time to 99%% converged, change %d %s", i+1, changeTitle(c.Name))}
		switch {
		case c.All.P99 != nil:
			row.Meteor = secs(c.All.P99) + " s"
		case c.OfReachable.P99 != nil:
			row.Meteor = secs(c.OfReachable.P99) + " s (of reachable devices)"
		default:
			row.Meteor = fmt.Sprintf("not reached in %.0f s", c.WaitedSec)
		}
		row.Elections = new(c.Elections)
		row.Note = fmt.Sprintf("%d devices targeted, %d converged within %.0f s, %d reachable", c.Targeted, c.Converged, c.WaitedSec, c.Reachable)
		if c.All.P99 == nil && c.OfReachable.P99 != nil {
			row.Note += fmt.Sprintf("; the other %d were pop-up devices offline throughout (profile)", c.Targeted-c.Reachable)
		}
		r.Summary = append(r.Summary, row)
		r.Verdicts = append(r.Verdicts, fmt.Sprintf("retail %s (no numeric goal): %d/%d targeted converged; 99 %% after %s s (of reachable: %s s), 100 %% after %s s; servers counted %d/%d converged; %d leader elections",
			c.Name, c.Converged, c.Targeted, secs(c.All.P99), secs(c.OfReachable.P99), secs(c.All.P100), c.Server.Converged, c.Server.Targeted, c.Elections))
	}
	r.Notes = append(r.Notes, fmt.Sprintf("Retail: the %d-device retail mix (60 %% fiber stores, 30 %% cellular kiosks with 3 %% loss and an 8 s outage every 3 min, 10 %% pop-up sites offline about 30 min out of 50, half of it by power loss) at time scale %g, on the same kind of cluster. "+
		"Each change is written once the previous one reached every targeted device, or every reachable one and %s passed without a new convergence, or %.0f s passed. A device is reachable if it converged or had a session when the wait ended.", rt.Devices, rt.TimeScale, quietFor, r.Params.RetailTimeoutSec))
}

// changeTitle turns "change-1-network-policy" into "network policy".
func changeTitle(name string) string {
	f := strings.SplitN(name, "-", 3)
	if len(f) == 3 && f[0] == "change" {
		return strings.ReplaceAll(f[2], "-", " ")
	}
	return name
}

func scaleHeader(out io.Writer) {
	fmt.Fprintln(out, "\nScale: one change to every device (s after the commit)")
	fmt.Fprintln(out, "devices  kind   held  connect s  first s    50%    90%    99%   100%  srv ms/connect  KiB/device (servers)  sim KiB/device  elections (connect, change)  UDP drops (connect, change)  failure")
}

// dropPair formats the servers' and devices' drops of a period.
func dropPair(d *benchkit.UDPDrops) string {
	if d == nil {
		return "-"
	}
	return fmt.Sprintf("%d/%d", d.Servers, d.Devices)
}

// electionPair is the level's elections connecting and during the change,
// "?" for a count that is unknown.
func (l *scaleLevel) electionPair(sep string) string {
	if !l.ElectionsUnknown {
		return fmt.Sprintf("%d%s%d", l.ConnectElections, sep, l.Elections)
	}
	if l.ChangeRevision == 0 {
		return "?" + sep + "-" // not read after connecting; no change written
	}
	return fmt.Sprintf("%d%s?", l.ConnectElections, sep)
}

func scaleLine(out io.Writer, l *scaleLevel) {
	fmt.Fprintf(out, "%7d  %-5s  %4v  %9s  %7s  %5s  %5s  %5s  %5s  %14.2f  %20.1f  %14.1f  %27s  %27s  %s\n", l.Devices, l.Kind, l.Held,
		secs(l.ConnectSec), secs(l.ConvergeFirstSec), secs(l.Change.P50), secs(l.Change.P90), secs(l.Change.P99), secs(l.Change.P100),
		l.ConnectCPUms, l.TotalKiBPerDevice, l.SimKiBPerDevice, l.electionPair(", "),
		dropPair(l.ConnectUDP)+", "+dropPair(l.ChangeUDP), l.Failure)
}

// markdown renders the report as fleet.md.
func (r *report) markdown() string {
	var b strings.Builder
	fmt.Fprintf(&b, "# Fleet: scale and the retail scenario\n\n%s\n\n", r.Machine.Measured(r.Date))
	if len(r.Scale) > 0 {
		b.WriteString("## Scale: the largest fleet converging on one change\n\n")
		b.WriteString("| devices | kind | held | connected | connect s (all) | first session 50% / 99% s | converged on first intent s | change 50% s | 90% s | 99% s | 100% s | applied 99% s | servers' view converged | leader elections connecting / change | servers' CPU ms per connect | sim CPU ms per connect | server KiB/device (total) | sim RSS MiB | sim KiB/device | UDP drops connecting (servers/devices) | UDP drops change | min MemAvailable MiB | wall s | load at end | failure |\n")
		b.WriteString("|---:|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---|\n")
		for _, l := range r.Scale {
			fmt.Fprintf(&b, "| %d | %s | %v | %d | %s | %s / %s | %s | %s | %s | %s | %s | %s | %d/%d | %s | %.2f | %.2f | %.1f | %.0f | %.1f | %s | %s | %.0f | %.0f | %s | %s |\n",
				l.Devices, l.Kind, l.Held, l.Connected, secs(l.ConnectSec), secs(l.Connect.P50), secs(l.Connect.P99), secs(l.ConvergeFirstSec),
				secs(l.Change.P50), secs(l.Change.P90), secs(l.Change.P99), secs(l.Change.P100), secs(l.ChangeApplied.P99),
				l.ServerConverged, l.ServerTargeted, l.electionPair(" / "), l.ConnectCPUms, l.SimConnectCPUms, l.TotalKiBPerDevice, l.SimRSSMiB, l.SimKiBPerDevice,
				dropPair(l.ConnectUDP), dropPair(l.ChangeUDP), l.MemAvailMinMiB, l.WallSec, l.LoadAvg, l.Failure)
		}
		b.WriteString("\nPer server (memory once connected; CPU while connecting and during the change):\n\n")
		b.WriteString("| devices | server | sessions | VmRSS before MiB | VmRSS connected MiB | KiB/session | CPU s connecting | CPU s change |\n|---:|---|---:|---:|---:|---:|---:|---:|\n")
		for _, l := range r.Scale {
			for _, s := range l.Servers {
				fmt.Fprintf(&b, "| %d | %s | %d | %.1f | %.1f | %.1f | %.1f | %.1f |\n", l.Devices, s.ID, s.Sessions,
					float64(s.Before.RSSKiB)/1024, float64(s.Connected.RSSKiB)/1024, s.KiBPerSession, s.ConnectCPUSec, s.ChangeCPUSec)
			}
		}
		b.WriteString("\n")
	}
	if rt := r.Retail; rt != nil {
		fmt.Fprintf(&b, "## Retail: %d devices, three changes\n\n", rt.Devices)
		fmt.Fprintf(&b, "Links: %s. First change %.0f s after the fleet started, with %d devices connected.\n\n", linkList(rt.Links), rt.WarmupSec, rt.Connected)
		b.WriteString("| change | targeted | converged | reachable | 50% s | 90% s | 99% s | 100% s | 99% of reachable s | waited s | servers' view converged | leader elections |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
		for _, c := range rt.Changes {
			fmt.Fprintf(&b, "| %s | %d | %d | %d | %s | %s | %s | %s | %s | %.0f | %d/%d | %d |\n", c.Name, c.Targeted, c.Converged, c.Reachable,
				secs(c.All.P50), secs(c.All.P90), secs(c.All.P99), secs(c.All.P100), secs(c.OfReachable.P99), c.WaitedSec, c.Server.Converged, c.Server.Targeted, c.Elections)
		}
		b.WriteString("\nPer link profile:\n\n| change | link | targeted | converged | reachable | 50% s | 90% s | 99% s | 100% s |\n|---|---|---:|---:|---:|---:|---:|---:|---:|\n")
		for _, c := range rt.Changes {
			for _, name := range sortedKeys(c.Links) {
				l := c.Links[name]
				fmt.Fprintf(&b, "| %s | %s | %d | %d | %d | %s | %s | %s | %s |\n", c.Name, name, l.Targeted, l.Converged, l.Reachable,
					secs(l.Times.P50), secs(l.Times.P90), secs(l.Times.P99), secs(l.Times.P100))
			}
		}
		b.WriteString("\n")
	}
	b.WriteString("## Verdicts\n\n")
	for _, v := range r.Verdicts {
		fmt.Fprintf(&b, "- %s\n", v)
	}
	b.WriteString("\n## Notes\n\n")
	for _, n := range r.Notes {
		fmt.Fprintf(&b, "- %s\n", n)
	}
	return b.String()
}

func linkList(m map[string]int) string {
	var parts []string
	for _, k := range sortedKeys(m) {
		parts = append(parts, fmt.Sprintf("%s %d", k, m[k]))
	}
	return strings.Join(parts, ", ")
}

package main

import (
	"fmt"
	"io"
	"strings"

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
}

type paramInfo struct {
	Parts             []string `json:"parts"`
	Sizes             []int    `json:"sizes"`
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

func (r *report) finishScale() {
	best, failed := r.largestHeld(), r.firstFailed()
	row := benchkit.Row{Bench: 4, Name: "fleet", Figure: "largest fleet converged on one change (99 %)", Goal: "100,000 devices within 60 s"}
	met := false
	if best != nil {
		row.Meteor = fmt.Sprintf("%s devices in %s s", benchkit.Thousands(best.Devices), secs(best.Change.P99))
		row.Elections = new(best.Elections)
		met = best.Devices >= scaleGoalDevices && best.Change.P99 != nil && *best.Change.P99 <= scaleGoalSec
	} else {
		row.Meteor = "none held"
	}
	row.Met = benchkit.MetGoal(met)
	if failed != nil {
		row.Note = fmt.Sprintf("%s devices did not hold: %s", benchkit.Thousands(failed.Devices), failed.Failure)
	}
	r.Summary = append(r.Summary, row)
	if mem := best; mem != nil || failed != nil {
		if mem == nil {
			mem = failed
		}
		if mem.TotalKiBPerDevice > 0 {
			var per []string
			for _, s := range mem.Servers {
				per = append(per, fmt.Sprintf("%s %.0f KiB/session (%d)", s.ID, s.KiBPerSession, s.Sessions))
			}
			r.Summary = append(r.Summary, benchkit.Row{
				Bench: 4, Name: "fleet", Figure: fmt.Sprintf("server memory per device, %s devices on 3 servers", benchkit.Thousands(mem.Devices)),
				Meteor: fmt.Sprintf("%.0f KiB", mem.TotalKiBPerDevice),
				Note:   "added RSS of the three servers over the fleet; per server over the sessions it serves: " + strings.Join(per, ", "),
			})
		}
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
	r.Notes = append(r.Notes,
		"Scale: each size runs on a fresh 3-server cluster (`meteor server` processes, Raft on disk). The fleet is real agents (package agent via agent/sim, fiber link profile: 1 ms plus 2 ms to the device's own region's server and 40-100 ms to the others), each with its own device certificate, QUIC socket and fsynced bbolt journal, run by simulator processes on the same two cores. "+
			"Devices converge first on one intent written before the fleet starts; the change then gives every device a new value of its one sim resource (100 ms apply). Times are from the write's answer to the first sample (every -sample-every) in which the agent reports converged at the change's revision.",
		fmt.Sprintf("Scale: a simulator process runs at most %d devices: each holds two file descriptors (UDP socket, journal) and RLIMIT_NOFILE's hard limit here is %d, which an unprivileged process cannot raise; each process binds its devices to its own loopback address (127.0.1.k) so the fleet is not limited to one address's ephemeral ports.", r.Params.PerWorker, r.Params.NoFile),
		"Scale: server memory per device is (VmRSS once every device converged on the first intent - VmRSS before the fleet started) / sessions the server holds; the total row divides the three servers' added RSS by the fleet. Every server also keeps every device in its replicated state, so a server's figure is not all per session.")
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
	fmt.Fprintln(out, "\nScale: one change to every device (s after the commit; agents' view)")
	fmt.Fprintln(out, "devices  workers  held  connect s  first s    50%    90%    99%   100%  KiB/device (servers)  sim RSS MiB  elections (connect, change)  failure")
}

func scaleLine(out io.Writer, l *scaleLevel) {
	fmt.Fprintf(out, "%7d  %7d  %4v  %9s  %7s  %5s  %5s  %5s  %5s  %20.1f  %11.0f  %27s  %s\n", l.Devices, l.Workers, l.Held,
		secs(l.ConnectSec), secs(l.ConvergeFirstSec), secs(l.Change.P50), secs(l.Change.P90), secs(l.Change.P99), secs(l.Change.P100),
		l.TotalKiBPerDevice, l.SimRSSMiB, fmt.Sprintf("%d, %d", l.ConnectElections, l.Elections), l.Failure)
}

// markdown renders the report as fleet.md.
func (r *report) markdown() string {
	var b strings.Builder
	fmt.Fprintf(&b, "# Fleet: scale and the retail scenario\n\n%s\n\n", r.Machine.Measured(r.Date))
	if len(r.Scale) > 0 {
		b.WriteString("## Scale: the largest fleet converging on one change\n\n")
		b.WriteString("| devices | sim processes | held | connect s | converged on first intent s | change 50% s | 90% s | 99% s | 100% s | servers' view converged | leader elections connecting / change | server KiB/device (total) | sim RSS MiB | min MemAvailable MiB | wall s | load at end | failure |\n")
		b.WriteString("|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---|\n")
		for _, l := range r.Scale {
			fmt.Fprintf(&b, "| %d | %d | %v | %s | %s | %s | %s | %s | %s | %d/%d | %d / %d | %.1f | %.0f | %.0f | %.0f | %s | %s |\n",
				l.Devices, l.Workers, l.Held, secs(l.ConnectSec), secs(l.ConvergeFirstSec),
				secs(l.Change.P50), secs(l.Change.P90), secs(l.Change.P99), secs(l.Change.P100),
				l.ServerConverged, l.ServerTargeted, l.ConnectElections, l.Elections, l.TotalKiBPerDevice, l.SimRSSMiB, l.MemAvailMinMiB, l.WallSec, l.LoadAvg, l.Failure)
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

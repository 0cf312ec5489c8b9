package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/meteor-edge/meteor/chaos/hosts"
	"github.com/meteor-edge/meteor/chaos/scenario"
)

func newChaosCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "chaos",
		Short: "Run fault-injection scenarios against an in-process cluster and check the results",
		Long: `Run Meteor's chaos scenarios: an in-process cluster of real servers (Raft on
raft-boltdb files, gossip, HTTP on loopback) whose traffic goes through a seeded
fault-injecting network, under a concurrent intent workload. After each run the
history is checked for linearizability (porcupine), every acknowledged write for
presence on every server, revisions for never going backwards, and goroutines
for leaks. A failing run leaves a report folder. See docs/chaos.md.`,
	}
	var seed uint64
	var duration time.Duration
	var dir string
	run := &cobra.Command{
		Use:   "run SCENARIO",
		Short: "Run one scenario with one seed",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			sc, ok := scenario.ByName(args[0])
			if !ok {
				return fmt.Errorf("no scenario %q; there are: %s", args[0], scenarioNames())
			}
			rows, err := runScenarios(cmd, []scenario.Scenario{sc}, []uint64{seed}, duration, dir)
			printChaosTable(cmd.OutOrStdout(), rows)
			return err
		},
	}
	var seeds int
	var only string
	matrix := &cobra.Command{
		Use:   "matrix",
		Short: "Run every scenario with several seeds and print a table",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			scs := scenario.All()
			if only != "" {
				scs = nil
				for _, name := range strings.Split(only, ",") {
					sc, ok := scenario.ByName(name)
					if !ok {
						return fmt.Errorf("no scenario %q; there are: %s", name, scenarioNames())
					}
					scs = append(scs, sc)
				}
			}
			var ss []uint64
			for i := range seeds {
				ss = append(ss, seed+uint64(i))
			}
			rows, err := runScenarios(cmd, scs, ss, duration, dir)
			printChaosTable(cmd.OutOrStdout(), rows)
			return err
		},
	}
	for _, c := range []*cobra.Command{run, matrix} {
		c.Flags().Uint64Var(&seed, "seed", 1, "seed of the fault schedule (matrix: the first seed)")
		c.Flags().DurationVar(&duration, "duration", 10*time.Second, "how long the workload runs under faults, per run")
		c.Flags().StringVar(&dir, "dir", "", "where data dirs and failure reports go (default: a temporary dir, kept only for failures)")
	}
	matrix.Flags().IntVar(&seeds, "seeds", 3, "seeds per scenario")
	matrix.Flags().StringVar(&only, "scenarios", "", "comma-separated scenarios (default: all)")
	var targets string
	check := &cobra.Command{
		Use:   "check --servers H:P,...",
		Short: "Check a running cluster while you inject faults into it",
		Long: `Run the scenarios' workload (concurrent conditional and plain writes and
linearizable reads on a few intents named meteor-chaos-<seed>-<n>) against a
running cluster for --duration, while you inject faults by any means: kill
servers, cut links with firewall rules, docker network disconnect, pause
processes. Then wait for the servers to converge and check that the history is
linearizable and that every server holds the same revision of every intent.
The intents are deleted at the end; nothing else is touched. Exits non-zero,
naming the report folder, if a check failed.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if targets == "" {
				return fmt.Errorf("--servers: give the HTTP addresses of the cluster's servers")
			}
			base := dir
			if base == "" {
				base = "."
			}
			res, err := scenario.CheckDeployment(cmd.Context(), strings.Split(targets, ","), scenario.DeploymentOptions{
				Seed: seed, Duration: duration, Dir: base, Log: cmd.ErrOrStderr(), TLS: g.tlsConfig(), Token: g.token,
			})
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "ops checked %d (%d unknown outcome, %d certainly not applied), linearizability %s, reconverged in %s, violations %d\n",
				res.Ops, res.Unknown, res.Dropped, res.Linearizability, res.Reconverge.Round(time.Millisecond), len(res.Violations))
			for _, v := range res.Violations {
				fmt.Fprintf(cmd.OutOrStdout(), "  VIOLATION: %s\n", v)
			}
			if len(res.Violations) > 0 {
				return fmt.Errorf("violations found: report in %s", res.Report)
			}
			return nil
		},
	}
	check.Flags().StringVar(&targets, "servers", "", "comma-separated HTTP addresses of the cluster's servers")
	check.Flags().Uint64Var(&seed, "seed", 1, "seed of the clients' choices (and of the intents' names)")
	check.Flags().DurationVar(&duration, "duration", time.Minute, "how long the workload runs")
	check.Flags().StringVar(&dir, "dir", "", "where a failure report goes (default: the working dir)")
	cmd.AddCommand(run, matrix, check, newChaosAttackCmd(g), &cobra.Command{
		Use: "list", Short: "List the scenarios", Args: cobra.NoArgs,
		Run: func(cmd *cobra.Command, args []string) {
			for _, sc := range scenario.All() {
				fmt.Fprintf(cmd.OutOrStdout(), "%-20s %d servers  %s\n", sc.Name, sc.Servers, sc.Description)
			}
		},
	})
	return cmd
}

func scenarioNames() string {
	var names []string
	for _, sc := range scenario.All() {
		names = append(names, sc.Name)
	}
	return strings.Join(names, ", ")
}

// chaosRow aggregates the runs of one scenario.
type chaosRow struct {
	name               string
	seeds, faults, ops int
	violations         int
	reconverge         []time.Duration
	reports            []string
}

func runScenarios(cmd *cobra.Command, scs []scenario.Scenario, seeds []uint64, duration time.Duration, dir string) ([]chaosRow, error) {
	base := dir
	if base == "" {
		tmp, err := os.MkdirTemp("", "meteor-chaos-")
		if err != nil {
			return nil, err
		}
		base = tmp
	}
	var rows []chaosRow
	var failed bool
	for _, sc := range scs {
		row := chaosRow{name: sc.Name}
		for _, seed := range seeds {
			if cmd.Context().Err() != nil {
				return rows, cmd.Context().Err()
			}
			runDir := filepath.Join(base, fmt.Sprintf("%s-seed-%d", sc.Name, seed))
			fmt.Fprintf(cmd.ErrOrStderr(), "running %s with seed %d for %s...\n", sc.Name, seed, duration)
			res, err := scenario.Run(cmd.Context(), sc, scenario.Options{Seed: seed, Duration: duration, Dir: runDir, Log: io.Discard})
			if err != nil {
				return rows, fmt.Errorf("%s seed %d: %w", sc.Name, seed, err)
			}
			row.seeds++
			row.faults += res.Faults
			row.ops += res.Ops
			row.violations += len(res.Violations)
			row.reconverge = append(row.reconverge, res.Reconverge)
			if len(res.Violations) > 0 {
				failed = true
				row.reports = append(row.reports, res.Report)
				for _, v := range res.Violations {
					fmt.Fprintf(cmd.ErrOrStderr(), "  VIOLATION (%s seed %d): %s\n", sc.Name, seed, v)
				}
			} else {
				os.RemoveAll(runDir)
			}
		}
		rows = append(rows, row)
	}
	if dir == "" && !failed {
		os.RemoveAll(base)
	}
	if failed {
		return rows, errors.New("violations found: see the report folders above")
	}
	return rows, nil
}

func printChaosTable(w io.Writer, rows []chaosRow) {
	tw := table(w)
	fmt.Fprintln(tw, "SCENARIO\tSEEDS\tFAULTS\tOPS CHECKED\tVIOLATIONS\tRECONVERGE P50\tRECONVERGE MAX")
	for _, r := range rows {
		slices.Sort(r.reconverge)
		var p50, maxd time.Duration
		if n := len(r.reconverge); n > 0 {
			p50, maxd = r.reconverge[n/2], r.reconverge[n-1]
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%s\t%s\n", r.name, r.seeds, r.faults, r.ops, r.violations, p50.Round(time.Millisecond), maxd.Round(time.Millisecond))
	}
	tw.Flush()
	for _, r := range rows {
		for _, rep := range r.reports {
			fmt.Fprintf(w, "report: %s\n", rep)
		}
	}
}

func newChaosAttackCmd(g *globals) *cobra.Command {
	var (
		servers, containers, network, hostList, faultList, bounds, dir string
		seed                                                           uint64
		duration, gapMin, gapMax, holdMin, holdMax                     time.Duration
		planOnly                                                       bool
	)
	templates := map[hosts.Action]*string{}
	cmd := &cobra.Command{
		Use:   "attack --servers H:P,... (--docker C,... | --kill-cmd ... --start-cmd ...)",
		Short: "Inject a seeded fault plan into a running cluster and check it",
		Long: `Inject faults into a running cluster on a plan drawn from --seed, while the
workload of 'meteor chaos check' runs against it, then undo every fault and
check: the history is linearizable (porcupine), every acknowledged write is on
every server at its revision, every server holds the same replicated state at
the same Raft index, server revisions and devices' acknowledged revisions never
went backwards on one server process, and (with --device-bound) every device
converged within its class's bound.

Faults (--faults, default all the driver can do): isolate-leader,
isolate-follower, kill-leader, kill-follower, pause-leader, partition-minority
(the leader and followers up to a minority cut from the rest), cut-pair (two
servers cut from each other only). One at a time, each held --hold-min to
--hold-max after a gap of --gap-min to --gap-max; all undone by --duration.

Servers in Docker containers on this machine: --docker names the containers in
the order of --servers; kill/start, pause/unpause and network
disconnect/connect (keeping the address) act on them, and cuts are nftables
rules in a container's network namespace (nsenter from the host: needs root
and the nft binary here, nothing in the image).

Other deployments: give a shell command per action. {id}, {host} and {addr}
name the server acted on, {peer_id}, {peer_host}, {peer_addr} the other end of
a cut or mend. An action without a command is not used.

Every action is written to the fault log with the command it ran; a failing
run writes report-attack-<seed>/ under --dir (result.json, faults.jsonl,
history.json, plan.json, linearizability.html). The same --seed replays the
same plan; --plan-only prints it without touching anything.`,
		Example: `  meteor chaos attack --servers 172.20.0.11:8470,172.20.0.12:8470,172.20.0.13:8470 \
      --docker meteor-1,meteor-2,meteor-3 --seed 7 --duration 2m
  meteor chaos attack --servers 10.0.0.1:8470,10.0.1.1:8470,10.0.2.1:8470 --seed 7 \
      --kill-cmd 'ssh {host} sudo systemctl kill -s KILL meteor' \
      --start-cmd 'ssh {host} sudo systemctl start meteor' \
      --isolate-cmd 'ssh {host} sudo nft -f /etc/meteor/chaos-isolate.nft' \
      --heal-cmd 'ssh {host} sudo nft delete table inet meteor_chaos'`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			addrs := splitList(servers)
			if len(addrs) == 0 {
				return errors.New("--servers: give the HTTP addresses of the cluster's servers")
			}
			kinds, err := hosts.ParseFaults(faultList)
			if err != nil {
				return err
			}
			deviceBounds, err := parseBounds(bounds)
			if err != nil {
				return err
			}
			var driver hosts.Driver
			var described []hosts.Server
			if hl := splitList(hostList); len(hl) > 0 {
				if len(hl) != len(addrs) {
					return fmt.Errorf("--hosts: %d hosts for %d servers", len(hl), len(addrs))
				}
				for i := range hl {
					described = append(described, hosts.Server{Host: hl[i], Addr: addrs[i]})
				}
			}
			cmds := map[hosts.Action]string{}
			for a, t := range templates {
				if *t != "" {
					cmds[a] = *t
				}
			}
			switch cs := splitList(containers); {
			case len(cs) > 0 && len(cmds) > 0:
				return errors.New("give either --docker or command templates, not both")
			case len(cs) > 0:
				if len(cs) != len(addrs) {
					return fmt.Errorf("--docker: %d containers for %d servers", len(cs), len(addrs))
				}
				d, err := hosts.NewDocker(cmd.Context(), network, cs)
				if err != nil {
					return err
				}
				driver = d
				if described == nil {
					for i := range cs {
						described = append(described, hosts.Server{Host: cs[i], Addr: addrs[i]})
					}
				}
			case len(cmds) > 0:
				driver = &hosts.Commands{Templates: cmds}
			default:
				return errors.New("no way to inject faults: give --docker or command templates (--kill-cmd, ...); 'meteor chaos check' only observes")
			}
			pc := hosts.PlanConfig{Seed: seed, Duration: duration, Faults: kinds, GapMin: gapMin, GapMax: gapMax, HoldMin: holdMin, HoldMax: holdMax}
			if planOnly {
				plan, err := hosts.NewPlan(pc, driver)
				if err != nil {
					return err
				}
				fmt.Fprint(cmd.OutOrStdout(), plan)
				return nil
			}
			// Node IDs for the fault log and {id}, hosts for {host}.
			if described, err = scenario.DescribeServers(cmd.Context(), addrs, described, g.tlsConfig(), g.token); err != nil {
				return err
			}
			if c, ok := driver.(*hosts.Commands); ok {
				c.Servers = described
			}
			base := dir
			if base == "" {
				base = "."
			}
			res, err := scenario.RunDeployment(cmd.Context(), addrs, scenario.DeploymentOptions{
				Seed: seed, Duration: duration, Dir: base, Log: cmd.ErrOrStderr(), Name: "attack", TLS: g.tlsConfig(), Token: g.token,
				Driver: driver, Servers: described, Plan: pc, DeviceBounds: deviceBounds,
			})
			if err != nil {
				return err
			}
			row := chaosRow{name: "attack", seeds: 1, faults: res.Faults, ops: res.Ops, violations: len(res.Violations),
				reconverge: []time.Duration{res.Reconverge}}
			if res.Report != "" {
				row.reports = []string{res.Report}
			}
			for _, v := range res.Violations {
				fmt.Fprintf(cmd.ErrOrStderr(), "  VIOLATION: %s\n", v)
			}
			printChaosTable(cmd.OutOrStdout(), []chaosRow{row})
			fmt.Fprintf(cmd.OutOrStdout(), "seed %d; %d ops (%d unknown outcome, %d certainly not applied), linearizability %s",
				seed, res.Ops, res.Unknown, res.Dropped, res.Linearizability)
			if res.Index > 0 {
				fmt.Fprintf(cmd.OutOrStdout(), "; state agreed at index %d (%.12s)", res.Index, res.Digest)
			}
			if res.Devices > 0 {
				fmt.Fprintf(cmd.OutOrStdout(), "; %s converged %s after the faults were undone", nDevices(res.Devices), res.FleetConverge.Round(time.Millisecond))
			}
			fmt.Fprintln(cmd.OutOrStdout())
			if len(res.Violations) > 0 {
				return fmt.Errorf("violations found: report in %s", res.Report)
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&servers, "servers", "", "comma-separated HTTP addresses of the cluster's servers")
	f.StringVar(&containers, "docker", "", "comma-separated containers of the servers, in the order of --servers")
	f.StringVar(&network, "docker-network", "", "the Docker network to cut the containers from (default: their only network)")
	f.StringVar(&hostList, "hosts", "", "comma-separated hosts for {host}, in the order of --servers (default: the host of each address, or the container)")
	for _, a := range hosts.Actions() {
		templates[a] = new(string)
		f.StringVar(templates[a], string(a)+"-cmd", "", fmt.Sprintf("shell command that does %q to the server {id} at {host} ({addr})", a))
	}
	f.StringVar(&faultList, "faults", "", "comma-separated faults to draw from (default: every one the driver can inject)")
	f.Uint64Var(&seed, "seed", 1, "seed of the fault plan and the clients' choices (and of the intents' names)")
	f.DurationVar(&duration, "duration", time.Minute, "how long faults and workload run")
	f.DurationVar(&gapMin, "gap-min", time.Second, "shortest wait before each fault")
	f.DurationVar(&gapMax, "gap-max", 2*time.Second, "longest wait before each fault")
	f.DurationVar(&holdMin, "hold-min", 2*time.Second, "shortest time a fault is held")
	f.DurationVar(&holdMax, "hold-max", 4*time.Second, "longest time a fault is held")
	f.StringVar(&bounds, "device-bound", "", "require every device converged after the faults, per class (label link): e.g. fiber=20s,cellular=1m,*=2m")
	f.StringVar(&dir, "dir", "", "where a failure report goes (default: the working dir)")
	f.BoolVar(&planOnly, "plan-only", false, "print the fault plan the seed gives and exit")
	return cmd
}

func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// parseBounds parses class=duration pairs.
func parseBounds(s string) (map[string]time.Duration, error) {
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	out := map[string]time.Duration{}
	for _, p := range splitList(s) {
		class, d, ok := strings.Cut(p, "=")
		if !ok {
			return nil, fmt.Errorf("--device-bound %q: want class=duration", p)
		}
		v, err := time.ParseDuration(d)
		if err != nil {
			return nil, fmt.Errorf("--device-bound %q: %w", p, err)
		}
		out[class] = v
	}
	return out, nil
}

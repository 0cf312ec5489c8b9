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

	"github.com/meteor-edge/meteor/chaos/scenario"
)

func newChaosCmd() *cobra.Command {
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
				Seed: seed, Duration: duration, Dir: base, Log: cmd.ErrOrStderr(),
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
	cmd.AddCommand(run, matrix, check, &cobra.Command{
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

package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/meteor-edge/meteor/bench/internal/benchkit"
)

// config is the command line.
type config struct {
	duration time.Duration
	profiles []string
	pushes   int
	pushGap  time.Duration
	// warmupMax bounds the wait for the agent to learn its NAT binding.
	warmupMax time.Duration
	agentBin  string
	benchkit.Flags
}

func parseFlags(args []string, errOut io.Writer) (*config, error) {
	c := &config{}
	fs := benchkit.NewFlagSet("footprint", `Measures one idle agent (a real agent process) against a 3-server Meteor
cluster on loopback, once per link profile, each server reached through a
user-space UDP proxy that applies the profile and counts the bytes: bytes
a day, push latency, RSS, CPU and binary size, each against its goal, in
bench/results/footprint.{json,md}.`, errOut)
	fs.DurationVar(&c.duration, "duration", 10*time.Minute, "idle window per profile, from which the bytes a day are extrapolated")
	profiles := fs.String("profiles", linkFiber+","+linkCellular, "comma-separated link profiles ("+linkFiber+", "+linkCellular+")")
	fs.IntVar(&c.pushes, "pushes", 5, "intent changes timed after the idle window, per profile")
	fs.DurationVar(&c.pushGap, "push-gap", 3*time.Second, "time between two timed changes")
	fs.DurationVar(&c.warmupMax, "warmup-max", 30*time.Minute, "longest wait, per profile, for the agent to learn its NAT binding before the window")
	fs.StringVar(&c.agentBin, "agent-bin", "", "a standalone agent binary (such as bin/meteor-agent) taking `meteor agent`'s flags (default: the meteor binary's agent subcommand)")
	c.Register(fs, "PKI, data, server and agent logs")
	if err := c.Parse(fs, args, &c.agentBin); err != nil {
		return nil, err
	}
	var err error
	if c.profiles, err = benchkit.ParseChoices(*profiles, "profiles", linkFiber, linkCellular); err != nil {
		return nil, err
	}
	switch {
	case c.duration < 10*time.Second:
		return nil, errors.New("-duration: at least 10s (one keep-alive period)")
	case c.pushes < 1 || c.pushes > 100:
		return nil, errors.New("-pushes: between 1 and 100")
	case c.pushGap < 0:
		return nil, errors.New("-push-gap must not be negative")
	}
	return c, nil
}

func main() { benchkit.Main("bench-footprint", parseFlags, run) }

// run does the whole benchmark. Every process it starts is stopped, and
// the counter table deleted, before it returns, whatever happens.
func run(ctx context.Context, cfg *config, out, log io.Writer) (err error) {
	started := time.Now()
	sc, err := cfg.Start(ctx, "meteor-bench-footprint-", "PKI, data and logs", log)
	if err != nil {
		return err
	}
	defer sc.Finish(&err, 3*time.Second)
	os.Setenv("QUIC_GO_DISABLE_RECEIVE_BUFFER_WARNING", "true")

	rep := &report{
		Date:    time.Now().UTC().Format(time.RFC3339),
		Machine: benchkit.ReadMachine(),
		Params: paramInfo{
			DurationSec: cfg.duration.Seconds(), Profiles: cfg.profiles, Pushes: cfg.pushes,
			PushGapSec: cfg.pushGap.Seconds(), Resources: len(resourceIDs),
		},
	}
	meteorBin, err := cfg.Meteor(ctx, sc.Root, sc.Dir, log)
	if err != nil {
		return err
	}
	ag := agentCommand{bin: meteorBin, sub: []string{"agent"}}
	if cfg.agentBin != "" {
		ag = agentCommand{bin: cfg.agentBin}
	}
	if rep.Binary, err = inspectBinary(ag.bin); err != nil {
		return err
	}

	counters, skipped := openCounterTable(ctx)
	if counters == nil {
		rep.NFTSkipped = skipped
		fmt.Fprintf(log, "no nftables cross-check: %s\n", skipped)
	} else {
		defer func() {
			if derr := counters.Close(); derr != nil {
				fmt.Fprintf(log, "delete nft table %s: %v\n", counters.Name, derr)
			}
		}()
	}

	fmt.Fprintf(out, "Idle agent footprint, %s idle window per profile, %d CPUs, load average %s\n",
		cfg.duration, rep.Machine.NProc, rep.Machine.LoadAvgStart)
	fmt.Fprintf(out, "agent binary %s: %.1f MB, static %v\n", rep.Binary.Path, float64(rep.Binary.Bytes)/1e6, rep.Binary.Static)
	for i, name := range cfg.profiles {
		dir := filepath.Join(sc.Dir, name)
		res, version, err := runProfile(ctx, cfg, sc.Procs, meteorBin, ag, dir, name, uint64(i+1), counters, &rep.Elections, log)
		sc.Procs.StopAll(3 * time.Second)
		if err != nil {
			return fmt.Errorf("profile %s: %w", name, err)
		}
		rep.Version = version
		printProfile(out, res)
		rep.Profiles = append(rep.Profiles, res)
	}

	rep.Machine.LoadAvgEnd = benchkit.LoadAvg()
	rep.WallSec = time.Since(started).Seconds()
	rep.Notes = notes(rep)
	rep.Summary = summaryRows(rep)
	benchkit.PrintSummary(out, rep.Notes, verdicts(rep.Summary))
	if err := benchkit.WriteResults(cfg.OutDir, "footprint", rep, markdown(rep)); err != nil {
		return err
	}
	benchkit.ResultsLine(out, cfg.OutDir, "footprint")
	return nil
}

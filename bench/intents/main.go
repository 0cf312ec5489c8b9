package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"runtime/pprof"
	"slices"
	"time"

	"github.com/meteor-edge/meteor/bench/internal/benchkit"
)

// config is the command line.
type config struct {
	clients    []int
	warmup     time.Duration
	duration   time.Duration
	rounds     int
	keys       int
	docSize    int
	timeout    time.Duration
	etcdBin    string
	skipEtcd   bool
	install    bool
	cpuProfile string
	perfLeader bool
	leaderOnly bool
	benchkit.Flags
}

func parseFlags(args []string, errOut io.Writer) (*config, error) {
	c := &config{}
	fs := benchkit.NewFlagSet("intents", `Starts a 3-server Meteor cluster and a 3-member etcd cluster on loopback,
drives both with the same closed-loop HTTP write load, and writes
bench/results/intents.{json,md}.`, errOut)
	clients := fs.String("clients", "1,16,64", "comma-separated concurrency levels (closed-loop clients)")
	fs.DurationVar(&c.warmup, "warmup", 2*time.Second, "warm-up before each measured window")
	fs.DurationVar(&c.duration, "duration", 10*time.Second, "measured window per system, level and round")
	fs.IntVar(&c.rounds, "rounds", 3, "measured windows per system and level, the systems taking turns (Meteor then etcd, then etcd then Meteor, ...); a level's figures pool its windows")
	fs.IntVar(&c.keys, "keys", 10000, "distinct intent names (etcd keys) written, cyclically")
	fs.IntVar(&c.docSize, "doc-size", 512, "bytes of each intent document (etcd value)")
	fs.DurationVar(&c.timeout, "timeout", 10*time.Second, "per-request timeout")
	fs.StringVar(&c.etcdBin, "etcd-bin", "", "etcd binary (default: etcd on PATH or /usr/bin/etcd)")
	fs.BoolVar(&c.skipEtcd, "skip-etcd", false, "measure Meteor only")
	fs.BoolVar(&c.install, "install-etcd", true, "install Debian's etcd-server with bench/install-etcd.sh if etcd is missing (root only)")
	c.Register(fs, "data, server logs, profiles")
	fs.StringVar(&c.cpuProfile, "cpuprofile", "", "write a CPU profile of this driver (the load generator) to `file`")
	fs.BoolVar(&c.leaderOnly, "leader-only", false, "send every write to the leader found at start instead of round-robin over all servers (isolates forwarding)")
	fs.BoolVar(&c.perfLeader, "perf-leader", false, "record each system's leader with perf during the highest level (implies -keep; perturbs that level)")
	if err := c.Parse(fs, args, &c.etcdBin, &c.cpuProfile); err != nil {
		return nil, err
	}
	var err error
	if c.clients, err = benchkit.ParseLevels(*clients, "clients", 4096); err != nil {
		return nil, err
	}
	switch {
	case c.duration <= 0 || c.warmup < 0 || c.timeout <= 0:
		return nil, errors.New("-duration and -timeout must be positive, -warmup not negative")
	case c.rounds < 1:
		return nil, errors.New("-rounds must be at least 1")
	case c.keys < slices.Max(c.clients):
		return nil, fmt.Errorf("-keys %d: need at least as many keys as clients (%d)", c.keys, slices.Max(c.clients))
	case c.docSize <= docOverhead(keyName(0, c.keys)):
		// One byte of content at least, so that a key's versions differ.
		return nil, fmt.Errorf("-doc-size %d: the smallest document is %d bytes", c.docSize, docOverhead(keyName(0, c.keys))+1)
	case c.docSize > 512<<10:
		return nil, errors.New("-doc-size: at most 512 KiB (Meteor's document limit is 1 MiB)")
	}
	if c.perfLeader {
		c.Keep = true
	}
	return c, nil
}

func main() { benchkit.Main("bench-intents", parseFlags, run) }

// run does the whole benchmark. Every process it starts is stopped before
// it returns, whatever happens.
func run(ctx context.Context, cfg *config, out, log io.Writer) (err error) {
	sc, err := cfg.Start(ctx, "meteor-bench-intents-", "data, logs and profiles", log)
	if err != nil {
		return err
	}
	// The data is thrown away, so a member still shutting down gracefully
	// (etcd tries to hand its leadership over) after a few seconds is
	// killed.
	defer sc.Finish(&err, 3*time.Second)
	root, tmp, procs := sc.Root, sc.Dir, sc.Procs
	if cfg.cpuProfile != "" {
		f, err := os.Create(cfg.cpuProfile)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}

	maxClients := slices.Max(cfg.clients)
	hc := &http.Client{
		Timeout: cfg.timeout,
		Transport: &http.Transport{
			// Every client keeps one connection per server alive.
			MaxIdleConns:        0,
			MaxIdleConnsPerHost: maxClients + 8,
			IdleConnTimeout:     90 * time.Second,
			DisableCompression:  true,
		},
	}
	defer hc.CloseIdleConnections()

	rep := &report{
		Date:    time.Now().UTC().Format(time.RFC3339),
		Machine: benchkit.ReadMachine(),
		Leaders: map[string]any{},
		Params: paramInfo{
			Clients: cfg.clients, WarmupSec: cfg.warmup.Seconds(), DurationSec: cfg.duration.Seconds(), Rounds: cfg.rounds,
			Keys: cfg.keys, DocBytes: cfg.docSize, Servers: 3, Profiled: cfg.perfLeader,
		},
	}

	meteorBin, err := cfg.Meteor(ctx, root, tmp, log)
	if err != nil {
		return err
	}
	var etcdBin string
	if cfg.skipEtcd {
		rep.Versions.EtcdSkipped = "-skip-etcd"
	} else {
		var reason string
		etcdBin, reason, err = findEtcd(ctx, cfg.etcdBin, filepath.Join(root, "bench", "install-etcd.sh"), cfg.install)
		if err != nil {
			return err
		}
		if etcdBin == "" {
			rep.Versions.EtcdSkipped = reason
			fmt.Fprintf(log, "SKIPPING etcd: %s. Meteor's figures follow; there are no ratios.\n", reason)
		} else if rep.Versions.Etcd, err = etcdVersion(ctx, etcdBin); err != nil {
			return err
		}
	}

	fmt.Fprintln(log, "starting 3 Meteor servers")
	met, err := startMeteor(ctx, procs, meteorBin, filepath.Join(tmp, "meteor"))
	if err != nil {
		return err
	}
	rep.Versions.Meteor = met.version
	systems := []*system{met}
	var etcdPut string
	if etcdBin != "" {
		fmt.Fprintf(log, "starting 3 etcd %s members\n", rep.Versions.Etcd)
		ets, putPath, err := startEtcd(ctx, procs, hc, etcdBin, filepath.Join(tmp, "etcd"))
		if err != nil {
			return err
		}
		rep.Versions.EtcdGateway = putPath
		systems = append(systems, ets)
		etcdPut = putPath
	}
	workloads := map[string]*workload{}
	for _, s := range systems {
		leader, err := s.leader(ctx)
		if err != nil {
			return fmt.Errorf("%s: find the leader: %w", s.name, err)
		}
		rep.Leaders[s.name] = map[string]any{"at_start": leader, "pid": s.procOf(leader).PID()}
		fmt.Fprintf(log, "%s: leader %s (pid %d)\n", s.name, leader, s.procOf(leader).PID())
		bases := s.bases
		if cfg.leaderOnly {
			bases = []string{s.bases[slices.Index(s.ids, leader)]}
		}
		var w *workload
		if s.name == "meteor" {
			w, err = meteorWorkload(bases, cfg.keys, cfg.docSize)
		} else {
			w, err = etcdWorkload(bases, etcdPut, cfg.keys, cfg.docSize)
		}
		if err != nil {
			return err
		}
		workloads[s.name] = w
	}
	rep.Params.MeteorRequestBytes = len(workloads["meteor"].bodies[0][0])
	if w := workloads["etcd"]; w != nil {
		rep.Params.EtcdRequestBytes = len(w.bodies[0][0])
	}
	rep.Params.LeaderOnly = cfg.leaderOnly

	fmt.Fprintf(out, "Intent writes, %d-byte documents, %d rounds of %s per system and level, each after %s warm-up; load average %s\n",
		cfg.docSize, cfg.rounds, cfg.duration, cfg.warmup, benchkit.LoadAvg())
	rowHeader(out)
	for _, n := range cfg.clients {
		// The systems take turns level by level and round by round, in
		// alternating order (ABBA...), so a change in the machine's
		// background load or speed hits both alike.
		wins := map[string][]*window{}
		for round := range cfg.rounds {
			for _, s := range turnOrder(systems, round) {
				w, err := measureWindow(ctx, cfg, hc, workloads[s.name], s, n, round == 0 && n == maxClients, tmp, log)
				if err != nil {
					return fmt.Errorf("%s at %d clients, round %d: %w", s.name, n, round+1, err)
				}
				wins[s.name] = append(wins[s.name], w)
			}
		}
		for _, s := range systems {
			res := pool(s.name, n, wins[s.name])
			rep.Results = append(rep.Results, res)
			row(out, res)
		}
	}
	for _, s := range systems {
		if leader, err := s.leader(ctx); err == nil {
			rep.Leaders[s.name].(map[string]any)["at_end"] = leader
		}
	}
	rep.Elections.Record(ctx, "intents: meteor", met.mc)
	rep.Machine.LoadAvgEnd = benchkit.LoadAvg()
	rep.Ratios = ratios(rep.Results)
	rep.Verdict = verdict(rep.Ratios, rep.Results)
	if rep.Versions.EtcdSkipped != "" {
		rep.Verdict = "goal not evaluated: etcd was skipped (" + rep.Versions.EtcdSkipped + ")"
	}
	rep.Notes = notes(rep)
	rep.Summary = summaryRows(rep)
	printSummary(out, rep)
	if err := writeResults(cfg.OutDir, rep); err != nil {
		return err
	}
	benchkit.ResultsLine(out, cfg.OutDir, "intents")
	return nil
}

// turnOrder is the order the systems take their windows in a round: as
// given in even rounds, reversed in odd ones.
func turnOrder(systems []*system, round int) []*system {
	order := slices.Clone(systems)
	if round%2 == 1 {
		slices.Reverse(order)
	}
	return order
}

// measureWindow measures one window of s at n clients, with perf on s's
// leader if profile and -perf-leader ask for it.
func measureWindow(ctx context.Context, cfg *config, hc *http.Client, w *workload, s *system, n int, profile bool, tmp string, log io.Writer) (*window, error) {
	var rec *perfRecorder
	if cfg.perfLeader && profile {
		leader, err := s.leader(ctx)
		if err != nil {
			return nil, err
		}
		if rec, err = startPerf(tmp, s.name, s.procOf(leader).PID()); err != nil {
			return nil, err
		}
	}
	win, err := runWindow(ctx, hc, w, s, levelParams{clients: n, warmup: cfg.warmup, duration: cfg.duration})
	if rec != nil {
		summary, perr := rec.stop(context.WithoutCancel(ctx))
		if perr != nil {
			fmt.Fprintf(log, "%s: profile: %v\n", s.name, perr)
		} else {
			fmt.Fprintf(log, "%s leader profile: %s (perf report -i %s)\n", s.name, summary, rec.data)
		}
	}
	return win, err
}

// notes say how to read the figures.
func notes(rep *report) []string {
	p := rep.Params
	spread := "Each client sends one write at a time and spreads its writes round-robin over the three servers of a system. " +
		"A Meteor follower forwards a write to the leader over HTTP (a second HTTP hop for two writes in three); " +
		"an etcd follower forwards the proposal to the leader internally over its peer connection."
	if p.LeaderOnly {
		spread = "Each client sends one write at a time, every write to the server that led at the start (-leader-only): no follower forwarding unless leadership moved."
	}
	n := []string{
		spread,
		fmt.Sprintf("Meteor receives PUT /v1/intents/{name} with the %d-byte intent document (JSON). ", p.DocBytes) +
			fmt.Sprintf("etcd receives POST %s through its gRPC-JSON gateway with the same document bytes as the value of key %s{name}, base64-encoded as the gateway requires (%d-byte body). ", rep.Versions.EtcdGateway, etcdKeyPrefix, p.EtcdRequestBytes) +
			"Both systems are driven over HTTP/1.1 with keep-alive connections from one client.",
		"Both systems sync to disk before acknowledging: Meteor through raft-boltdb, etcd with its default WAL fsync (no --unsafe-no-fsync).",
		fmt.Sprintf("Each client writes only its own keys, cycling through %d names in all; overwrites are the common case once the key space is full. Each write of a key sends a document that differs from the one its last write sent (%d versions in turn): Meteor applies a document equal to the stored one as a no-op, etcd does not.", p.Keys, docVersions),
		fmt.Sprintf("Both clusters run throughout on the same machine as the load generator. At each level the systems take turns, %d measured windows of %.0f s each, in alternating order (Meteor then etcd, then etcd then Meteor, ...), so that the machine's changes of speed hit both alike; a level's row pools its system's windows: writes/s over their summed length, percentiles over all their writes (round_writes_per_s in the JSON gives each window's). ", p.Rounds, p.DurationSec) +
			"Server CPU ms/write is the CPU time of all three servers in the windows divided by the writes they completed.",
		"Leader elections are those held in the window, won or not: the growth of the highest Raft term the servers report (Meteor: GET /v1/health; etcd: its maintenance status).",
		fmt.Sprintf("The machine is shared: load average %s at start, %s at end (1-minute load per row in the JSON).", rep.Machine.LoadAvgStart, rep.Machine.LoadAvgEnd),
	}
	if p.Profiled {
		n = append(n, "The leaders were sampled with perf during the first round of the highest level, which perturbs that level's figures.")
	}
	if rep.Versions.EtcdSkipped != "" {
		n = append(n, "etcd was skipped: "+rep.Versions.EtcdSkipped)
	}
	return n
}

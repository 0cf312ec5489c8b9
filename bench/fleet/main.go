package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"time"

	"github.com/meteor-edge/meteor/agent"
	"github.com/meteor-edge/meteor/bench/internal/benchkit"
	"github.com/meteor-edge/meteor/cluster/api"
)

// The parts a run can do.
const (
	partScale  = "scale"
	partRetail = "retail"
)

// apiStale reads from the server asked, without a round to the leader.
var apiStale = api.ReadOptions{Stale: true}

// config is the command line.
type config struct {
	parts          []string
	sizes          []int
	devicesKind    string
	dials          int
	sockets        int
	rampRate       int
	perWorker      int
	connectTimeout time.Duration
	changeTimeout  time.Duration
	sampleEvery    time.Duration
	rttProbe       time.Duration
	settle         time.Duration
	raftMultiplier int
	seed           uint64

	retailDevices   int
	retailTimeScale float64
	retailTimeout   time.Duration
	retailWarmup    time.Duration
	changesDir      string

	simDir      string
	memProfile  string
	memFloorMiB int64

	name string
	benchkit.Flags
}

func (c *config) has(part string) bool { return slices.Contains(c.parts, part) }

func parseFlags(args []string, errOut io.Writer) (*config, error) {
	c := &config{}
	fs := benchkit.NewFlagSet("fleet", `Runs simulated fleets of real agents against a 3-server Meteor cluster on
loopback: the largest fleet that converges on one change (scale), and the
1,200-device retail fleet taking its three changes (retail). Writes
bench/results/fleet.{json,md}.`, errOut)
	parts := fs.String("parts", "scale,retail", "comma-separated parts to run: scale, retail")
	sizes := fs.String("sizes", "10000,25000,50000,100000", "scale: fleet sizes, run in order until one does not hold")
	fs.StringVar(&c.devicesKind, "scale-devices", kindLight, `scale: "light" (wire-level devices in this process, bench/internal/wiredev) or "agent" (full agents in simulator processes, agent/sim)`)
	fs.IntVar(&c.dials, "dials", 256, "scale, light devices: dials in flight (handshake until the Welcome)")
	fs.IntVar(&c.sockets, "sockets", 64, "scale, light devices: UDP sockets (quic.Transports) the devices share")
	fs.IntVar(&c.rampRate, "ramp-rate", 400, "scale, agents: devices started per second, over all workers")
	fs.IntVar(&c.perWorker, "per-worker", maxPerWorker, "scale, agents: devices per simulator process")
	fs.DurationVar(&c.connectTimeout, "connect-timeout", 5*time.Minute, "scale: bound on connecting and converging on the first intent (agents: on top of the ramp's own time)")
	fs.DurationVar(&c.changeTimeout, "change-timeout", 2*time.Minute, "scale: bound on the change reaching every device (99 % must be reached within it for a size to hold)")
	fs.DurationVar(&c.sampleEvery, "sample-every", time.Second, "scale: how often the simulator samples each agent's status (the precision of the times)")
	fs.DurationVar(&c.rttProbe, "rtt-probe", agent.DefaultRTTProbeInterval, "scale: the agents' RTT re-probe interval (negative: off)")
	fs.DurationVar(&c.settle, "settle", 3*time.Second, "wait before reading the servers' memory")
	fs.IntVar(&c.raftMultiplier, "raft-multiplier", 3, "the servers' --raft-multiplier (Raft timeouts on a loaded 2-core host)")
	fs.Uint64Var(&c.seed, "seed", 1, "seed of the simulated fleets")
	fs.IntVar(&c.retailDevices, "retail-devices", 0, "retail: fleet size (0: the retail mix's 1,200)")
	fs.Float64Var(&c.retailTimeScale, "retail-time-scale", 1, "retail: multiply the links' outage and offline periods")
	fs.DurationVar(&c.retailTimeout, "retail-timeout", 3*time.Minute, "retail: the most each change is given before the next is applied")
	fs.DurationVar(&c.retailWarmup, "retail-warmup", 0, "retail: wait after the fleet connected before the first change (0: until every reachable device has a session, at most 2 min)")
	fs.StringVar(&c.changesDir, "changes", "", "retail: directory of the changes (default: docs/examples/retail in the module)")
	fs.StringVar(&c.simDir, "sim-dir", defaultSimDir(), "where the simulated devices' journals go (a tmpfs keeps one disk's fsyncs out of the figures)")
	fs.StringVar(&c.name, "name", "fleet", "stem of the results files")
	fs.Int64Var(&c.memFloorMiB, "mem-floor", 1536, "stop a level when the machine's MemAvailable falls below this many MiB (the level is reported as stopped, with what it reached)")
	fs.StringVar(&c.memProfile, "memprofile", "", "scale, light devices: write a heap profile of this process (the devices) to `file` once each level has connected")
	c.Register(fs, "PKI, data, logs")
	c.RegisterUDP(fs)
	if err := c.Parse(fs, args, &c.changesDir, &c.simDir, &c.memProfile); err != nil {
		return nil, err
	}
	var err error
	if c.parts, err = benchkit.ParseChoices(*parts, "parts", partScale, partRetail); err != nil {
		return nil, err
	}
	if c.sizes, err = benchkit.ParseLevels(*sizes, "sizes", 1_000_000); err != nil {
		return nil, err
	}
	switch {
	case c.rampRate < 1 || c.perWorker < 1 || c.dials < 1 || c.sockets < 1:
		return nil, errors.New("-ramp-rate, -per-worker, -dials and -sockets must be positive")
	case c.devicesKind != kindLight && c.devicesKind != kindAgent:
		return nil, fmt.Errorf("-scale-devices %q: light or agent", c.devicesKind)
	case c.connectTimeout <= 0 || c.changeTimeout <= 0 || c.retailTimeout <= 0 || c.sampleEvery <= 0:
		return nil, errors.New("timeouts and -sample-every must be positive")
	case c.memFloorMiB < 0:
		return nil, errors.New("-mem-floor must not be negative")
	case c.settle < 0 || c.retailWarmup < 0:
		return nil, errors.New("-settle and -retail-warmup must not be negative")
	case c.raftMultiplier < 1 || c.raftMultiplier > 10:
		return nil, errors.New("-raft-multiplier: between 1 and 10")
	case c.retailDevices < 0 || c.retailTimeScale <= 0:
		return nil, errors.New("-retail-devices must not be negative, -retail-time-scale must be positive")
	}
	return c, nil
}

func main() {
	if os.Getenv(workerEnv) == "1" {
		os.Exit(workerMain(os.Args[1:]))
	}
	benchkit.Main("bench-fleet", parseFlags, run)
}

// defaultSimDir is /dev/shm if it is a directory, else the temporary
// directory.
func defaultSimDir() string {
	if fi, err := os.Stat("/dev/shm"); err == nil && fi.IsDir() {
		return "/dev/shm"
	}
	return os.TempDir()
}

// raiseNoFile raises the soft RLIMIT_NOFILE to the hard limit; the
// workers inherit it.
func raiseNoFile() (uint64, error) {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return 0, err
	}
	lim.Cur = lim.Max
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return 0, err
	}
	return lim.Max, nil
}

// run does the whole benchmark. Every process it starts is stopped before
// it returns, whatever happens.
func run(ctx context.Context, cfg *config, out, log io.Writer) (err error) {
	// Created first, so that it is removed only once the workers using it
	// have been stopped.
	simTmp, err := os.MkdirTemp(cfg.simDir, "meteor-bench-fleet-devices-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(simTmp)
	sc, err := cfg.Start(ctx, "meteor-bench-fleet-", "PKI, data and logs", log)
	if err != nil {
		return err
	}
	defer sc.Finish(&err, 5*time.Second)
	root, tmp, procs := sc.Root, sc.Dir, sc.Procs
	if cfg.changesDir == "" && cfg.has(partRetail) {
		if root == "" {
			return errors.New("-changes is required outside the module")
		}
		cfg.changesDir = filepath.Join(root, "docs", "examples", "retail")
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	nofile, err := raiseNoFile()
	if err != nil {
		return fmt.Errorf("raise RLIMIT_NOFILE: %w", err)
	}

	rep := &report{
		Date:    time.Now().UTC().Format(time.RFC3339),
		Machine: benchkit.ReadMachine(),
		Params: paramInfo{
			Parts: cfg.parts, Sizes: cfg.sizes, DevicesKind: cfg.devicesKind, Dials: cfg.dials, Sockets: cfg.sockets, RampRate: cfg.rampRate, PerWorker: cfg.perWorker,
			ConnectTimeoutSec: cfg.connectTimeout.Seconds(), ChangeTimeoutSec: cfg.changeTimeout.Seconds(),
			SampleEverySec: cfg.sampleEvery.Seconds(), RTTProbeSec: cfg.rttProbe.Seconds(), RaftMultiplier: cfg.raftMultiplier,
			Seed: cfg.seed, NoFile: nofile, MemTotalMiB: memTotalKiB() >> 10,
			RetailDevices: cfg.retailDevices, RetailTimeScale: cfg.retailTimeScale, RetailTimeoutSec: cfg.retailTimeout.Seconds(),
		},
	}
	fmt.Fprintf(out, "Simulated fleets on a %d-server Meteor cluster, %d CPUs, load average %s\n", serverCount, rep.Machine.NProc, rep.Machine.LoadAvgStart)
	rep.UDPBuffers = sc.UDPBuffers(cfg.RaiseUDP)

	bin, err := cfg.Meteor(ctx, root, tmp, log)
	if err != nil {
		return err
	}
	pkiDir := filepath.Join(tmp, "pki")
	// Each cluster issues its servers' certificates here as it starts.
	if err := benchkit.InitMeteorCA(ctx, bin, pkiDir); err != nil {
		return err
	}

	if cfg.has(partRetail) {
		retailHeader(out)
		rep.Retail, err = runRetail(ctx, cfg, procs, bin, self, pkiDir, filepath.Join(tmp, "retail"), filepath.Join(simTmp, "retail"), &rep.Elections, out, log)
		procs.StopAll(5 * time.Second)
		if err != nil {
			return fmt.Errorf("retail: %w", err)
		}
	}
	if cfg.has(partScale) {
		scaleHeader(out)
		rep.Scale, err = runScale(ctx, cfg, procs, bin, self, pkiDir, filepath.Join(tmp, "scale"), filepath.Join(simTmp, "scale"), &rep.Elections, out, log)
		procs.StopAll(5 * time.Second)
		if err != nil {
			return fmt.Errorf("scale: %w", err)
		}
	}

	rep.Machine.LoadAvgEnd = benchkit.LoadAvg()
	rep.finish()
	benchkit.PrintSummary(out, rep.Notes, rep.Verdicts)
	if err := benchkit.WriteResults(cfg.OutDir, cfg.name, rep, rep.markdown()); err != nil {
		return err
	}
	benchkit.ResultsLine(out, cfg.OutDir, cfg.name)
	return nil
}

// memTotalKiB returns MemTotal from /proc/meminfo, or -1.
func memTotalKiB() int64 {
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return -1
	}
	v, err := statusField(b, "MemTotal")
	if err != nil {
		return -1
	}
	return v
}

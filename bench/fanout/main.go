package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/meteor-edge/meteor/bench/internal/benchkit"
)

// The systems a run can measure.
const (
	sysMeteor = "meteor"
	// sysMosquitto is Mosquitto in plaintext without persistence,
	// sysMosquittoTLS with mutual TLS (a certificate per device) and
	// persistence on: the peer of the goals.
	sysMosquitto    = "mosquitto"
	sysMosquittoTLS = "mosquitto-tls"
)

// mqttSystems are the Mosquitto systems, in the order they run.
var mqttSystems = []string{sysMosquitto, sysMosquittoTLS}

// config is the command line.
type config struct {
	devices      int
	groups       int
	loss         []int // percent, sorted, 0 first when present
	systems      []string
	bodySize     int
	sockets      int
	concurrency  int
	timeout      time.Duration
	settle       time.Duration
	changes      int // measured per system and loss level; the median is its row
	mosquittoBin string
	install      bool
	benchkit.Flags
}

func (c *config) has(system string) bool { return slices.Contains(c.systems, system) }

// hasMQTT reports whether a Mosquitto system is to be measured.
func (c *config) hasMQTT() bool { return c.has(sysMosquitto) || c.has(sysMosquittoTLS) }

func parseFlags(args []string, errOut io.Writer) (*config, error) {
	c := &config{}
	fs := benchkit.NewFlagSet("fanout", `Times one desired-state change reaching a fleet of simulated devices
(applied and reported back) on a 3-server Meteor cluster and on Mosquitto,
on loopback, clean and with packet loss, and writes
bench/results/fanout.{json,md}.`, errOut)
	fs.IntVar(&c.devices, "devices", 10000, "simulated devices on each system")
	fs.IntVar(&c.groups, "groups", 10, "device groups (Mosquitto: one retained desired-state topic per group; Meteor: a group label)")
	loss := fs.String("loss", "0,5", "comma-separated packet loss levels in percent, each applied to both directions (levels above 0 need root and nft)")
	systems := fs.String("systems", "meteor,mosquitto,mosquitto-tls", "comma-separated systems to measure: meteor, mosquitto (plaintext, no persistence), mosquitto-tls (mutual TLS, persistence on)")
	fs.IntVar(&c.bodySize, "body-size", 256, "bytes of the desired-state document each device receives (Meteor resource body, MQTT payload)")
	fs.IntVar(&c.sockets, "sockets", 8, "client UDP sockets (quic.Transports) the Meteor devices share")
	fs.IntVar(&c.concurrency, "dial-concurrency", 64, "devices connecting at once")
	fs.DurationVar(&c.timeout, "timeout", 3*time.Minute, "bound on each measured change, and on connecting the fleet")
	fs.DurationVar(&c.settle, "settle", 3*time.Second, "quiet time before each measured change")
	fs.IntVar(&c.changes, "changes", 3, "changes measured per system and loss level, one after the other on the same fleet; each row is the median change by 99 % applied, the others in its notes")
	fs.StringVar(&c.mosquittoBin, "mosquitto-bin", "", "mosquitto binary (default: mosquitto on PATH or /usr/sbin/mosquitto)")
	fs.BoolVar(&c.install, "install-mosquitto", true, "install Debian's mosquitto with bench/install-mosquitto.sh if it is missing (root only)")
	c.Register(fs, "PKI, data, server logs, broker config")
	c.RegisterUDP(fs)
	if err := c.Parse(fs, args, &c.mosquittoBin); err != nil {
		return nil, err
	}
	for f := range strings.SplitSeq(*loss, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 0 || n > 50 {
			return nil, fmt.Errorf("-loss %q: %q is not a percentage between 0 and 50", *loss, f)
		}
		c.loss = append(c.loss, n)
	}
	slices.Sort(c.loss)
	c.loss = slices.Compact(c.loss)
	var err error
	if c.systems, err = benchkit.ParseChoices(*systems, "systems", sysMeteor, sysMosquitto, sysMosquittoTLS); err != nil {
		return nil, err
	}
	switch {
	case c.devices < 1 || c.devices > 100000:
		return nil, errors.New("-devices: between 1 and 100000")
	case c.groups < 1 || c.groups > c.devices:
		return nil, fmt.Errorf("-groups %d: between 1 and -devices (%d)", c.groups, c.devices)
	case c.bodySize < minBodySize || c.bodySize > 64<<10:
		return nil, fmt.Errorf("-body-size %d: between %d and 65536", c.bodySize, minBodySize)
	case c.sockets < 1 || c.concurrency < 1:
		return nil, errors.New("-sockets and -dial-concurrency must be positive")
	case c.timeout <= 0 || c.settle < 0:
		return nil, errors.New("-timeout must be positive, -settle not negative")
	case c.changes < 1 || c.changes > 9:
		return nil, errors.New("-changes: between 1 and 9")
	}
	return c, nil
}

func main() { benchkit.Main("bench-fanout", parseFlags, run) }

// run does the whole benchmark. Every process it starts is stopped, and
// the loss table deleted, before it returns, whatever happens.
func run(ctx context.Context, cfg *config, out, log io.Writer) (err error) {
	started := time.Now()
	sc, err := cfg.Start(ctx, "meteor-bench-fanout-", "PKI, data, logs and broker config", log)
	if err != nil {
		return err
	}
	defer sc.Finish(&err, 3*time.Second)
	root, tmp, procs := sc.Root, sc.Dir, sc.Procs

	rep := &report{
		Date:     time.Now().UTC().Format(time.RFC3339),
		Machine:  benchkit.ReadMachine(),
		Versions: versionInfo{MQTTClient: pahoVersion()},
		Params: paramInfo{
			Devices: cfg.devices, Groups: cfg.groups, Loss: cfg.loss, BodyBytes: cfg.bodySize,
			Sockets: cfg.sockets, Concurrency: cfg.concurrency, TimeoutSec: cfg.timeout.Seconds(), SettleSec: cfg.settle.Seconds(), Changes: cfg.changes,
		},
	}
	// Children inherit the limit: the broker needs a descriptor per
	// device as much as this process does.
	rep.Params.NoFile, err = raiseNoFile()
	if err != nil {
		return err
	}
	if need := uint64(cfg.devices) + 512; rep.Params.NoFile < need && cfg.hasMQTT() {
		return fmt.Errorf("open files limit %d is below the %d that %d MQTT devices need (raise the hard limit: ulimit -Hn)", rep.Params.NoFile, need, cfg.devices)
	}
	fmt.Fprintf(out, "Fan-out convergence, %d devices in %d groups, %d CPUs, load average %s, open files limit %d\n",
		cfg.devices, cfg.groups, rep.Machine.NProc, rep.Machine.LoadAvgStart, rep.Params.NoFile)

	var lossy *lossTable
	if slices.ContainsFunc(cfg.loss, func(l int) bool { return l > 0 }) {
		lossy, rep.LossSkipped = openLossTable(ctx)
		if lossy == nil {
			fmt.Fprintf(log, "SKIPPING the loss rows: %s\n", rep.LossSkipped)
		} else {
			defer func() {
				if derr := lossy.Close(); derr != nil {
					fmt.Fprintf(log, "delete nft table %s: %v\n", lossy.Name, derr)
				}
			}()
		}
	}
	levels := slices.DeleteFunc(slices.Clone(cfg.loss), func(l int) bool { return l > 0 && lossy == nil })

	if cfg.has(sysMeteor) {
		setup := sc.UDPBuffers(cfg.RaiseUDP)
		rep.UDPBuffers = &udpInfo{Setup: setup}
	}
	resultHeader(out)
	if cfg.has(sysMeteor) {
		bin, err := cfg.Meteor(ctx, root, tmp, log)
		if err != nil {
			return err
		}
		res, version, err := runMeteor(ctx, cfg, procs, bin, filepath.Join(tmp, "meteor"), lossy, levels, rep, out, log)
		procs.StopAll(3 * time.Second)
		if err != nil {
			return fmt.Errorf("meteor: %w", err)
		}
		rep.Versions.Meteor = version
		rep.Results = append(rep.Results, res...)
	}
	if cfg.hasMQTT() {
		bin, reason, err := findMosquitto(ctx, cfg.mosquittoBin, filepath.Join(root, "bench", "install-mosquitto.sh"), cfg.install, log)
		if err != nil {
			return err
		}
		if bin == "" {
			rep.Versions.MosquittoSkipped = reason
			fmt.Fprintf(log, "SKIPPING Mosquitto: %s. Meteor's figures follow; there are no ratios.\n", reason)
		} else if rep.Versions.Mosquitto, err = mosquittoVersion(ctx, bin); err != nil {
			return err
		}
		for _, system := range mqttSystems {
			if bin == "" || !cfg.has(system) {
				continue
			}
			res, err := runMosquitto(ctx, cfg, procs, bin, filepath.Join(tmp, system), system, lossy, levels, out, log)
			procs.StopAll(3 * time.Second)
			if err != nil {
				return fmt.Errorf("%s: %w", system, err)
			}
			rep.Results = append(rep.Results, res...)
		}
	}

	rep.Machine.LoadAvgEnd = benchkit.LoadAvg()
	rep.WallSec = time.Since(started).Seconds()
	rep.Ratios = ratios(rep.Results)
	rep.Notes = notes(rep)
	rep.Summary = summaryRows(rep)
	printSummary(out, rep)
	if err := writeResults(cfg.OutDir, rep); err != nil {
		return err
	}
	benchkit.ResultsLine(out, cfg.OutDir, "fanout")
	return nil
}

// raiseNoFile raises this process's soft limit on open files to its hard
// limit and returns the new soft limit.
func raiseNoFile() (uint64, error) {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return 0, fmt.Errorf("read the open files limit: %w", err)
	}
	if lim.Cur < lim.Max {
		lim.Cur = lim.Max
		if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
			return 0, fmt.Errorf("raise the open files limit to %d: %w", lim.Max, err)
		}
	}
	return lim.Cur, nil
}

// pahoPath is the MQTT client library the devices use.
const pahoPath = "github.com/eclipse/paho.mqtt.golang"

// pahoVersion names the MQTT client library with its version from the
// build information.
func pahoVersion() string {
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, d := range bi.Deps {
			if d.Path == pahoPath {
				return pahoPath + " " + d.Version
			}
		}
	}
	return pahoPath
}

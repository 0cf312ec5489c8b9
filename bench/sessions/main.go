package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"time"

	"github.com/meteor-edge/meteor/bench/internal/benchkit"
)

// The parts a run can do.
const (
	partResync    = "resync"
	partReconnect = "reconnect"
	partMemory    = "memory"
	partStorm     = "storm"
	partDrain     = "drain"
)

// config is the command line.
type config struct {
	parts       []string
	resources   int
	bodySize    int
	revisions   int
	changed     int
	churn       string
	reconnects  int
	delay       time.Duration
	agents      []int
	concurrency int
	sockets     int
	settle      time.Duration
	profiles    string // where the memory part writes the server's profiles; "": none
	timeout     time.Duration
	// The reconnect storm (part 4).
	stormAgents  int
	stormSockets int
	stormModes   []string
	stormDetect  string
	stormTimeout time.Duration
	// The graceful shutdown (part 5).
	drainAgents  int
	drainServer  string
	drainTimeout time.Duration
	benchkit.Flags
}

func (c *config) has(part string) bool { return slices.Contains(c.parts, part) }

func parseFlags(args []string, errOut io.Writer) (*config, error) {
	c := &config{}
	fs := benchkit.NewFlagSet("sessions", `Measures resync bytes, reconnect time and server memory per idle agent
against a single dev server on loopback, and a reconnect storm on a
three-server cluster, and writes
bench/results/sessions.{json,md}.`, errOut)
	parts := fs.String("parts", "resync,reconnect,memory,storm,drain", "comma-separated parts to run")
	fs.IntVar(&c.resources, "resources", 50, "file resources of the intent every device holds")
	fs.IntVar(&c.bodySize, "body-size", 300, "bytes of each resource body as sent to agents")
	fs.IntVar(&c.revisions, "revisions", 100, "intent revisions made while the resync device is offline")
	fs.IntVar(&c.changed, "changed", 3, "resources the revisions change")
	fs.StringVar(&c.churn, "churn", "same", `"same": every revision changes all -changed resources; "rotate": each revision changes one of them in turn`)
	fs.IntVar(&c.reconnects, "reconnects", 200, "measured reconnects per link and mode")
	fs.DurationVar(&c.delay, "delay", 25*time.Millisecond, "one-way delay injected in each direction on the client socket for the delayed reconnect rows")
	agents := fs.String("agents", "1000,10000", "comma-separated numbers of idle agents to measure memory at")
	fs.IntVar(&c.concurrency, "dial-concurrency", 64, "sessions being opened at once while connecting idle agents")
	fs.IntVar(&c.sockets, "sockets", 8, "client UDP sockets (quic.Transports) the idle agents share")
	fs.StringVar(&c.profiles, "profiles", "", "directory to write the server's heap and goroutine profiles into at each memory level (heap-N.pb.gz, goroutine-N.pb.gz, and heap-N.txt, whose runtime.MemStats lines split the RSS into live heap, heap in use, goroutine stacks and the rest; the server runs with --enable-debug)")
	fs.DurationVar(&c.settle, "settle", 30*time.Second, "wait after the server's Raft log stops growing before reading its memory (an idle server's collector gives back its connecting spell's headroom within about 20 s)")
	fs.DurationVar(&c.timeout, "timeout", 30*time.Second, "bound on each dial and each awaited frame")
	fs.IntVar(&c.stormAgents, "storm-agents", 10000, "devices that lose their server at once in the reconnect storm")
	fs.IntVar(&c.stormSockets, "storm-sockets", 64, "client UDP sockets (quic.Transports) the storm's devices share")
	modes := fs.String("storm-modes", "0rtt,full", `comma-separated ways the storm's devices reconnect: "0rtt" (session tickets kept) and "full" (no ticket cache)`)
	fs.StringVar(&c.stormDetect, "storm-detect", detectKill, `when the storm's devices give up their connection: "kill" (all at the SIGKILL) or "idle" (at their QUIC idle timeout, as the agent notices)`)
	fs.DurationVar(&c.stormTimeout, "storm-timeout", 5*time.Minute, "bound on the storm after the kill, in each mode")
	fs.IntVar(&c.drainAgents, "drain-agents", 1000, "devices on the server stopped with SIGTERM in the graceful shutdown")
	fs.StringVar(&c.drainServer, "drain-server", "leader", `which server gets SIGTERM: "leader" or "follower"`)
	fs.DurationVar(&c.drainTimeout, "drain-timeout", 2*time.Minute, "bound on the graceful shutdown: a server still running then gets SIGQUIT (its goroutines go to its log)")
	c.Register(fs, "PKI, data, server logs")
	c.RegisterUDP(fs)
	if err := c.Parse(fs, args); err != nil {
		return nil, err
	}
	var err error
	if c.parts, err = benchkit.ParseChoices(*parts, "parts", partResync, partReconnect, partMemory, partStorm, partDrain); err != nil {
		return nil, err
	}
	if c.stormModes, err = benchkit.ParseChoices(*modes, "storm-modes", storm0RTT, stormFull); err != nil {
		return nil, err
	}
	if c.agents, err = benchkit.ParseLevels(*agents, "agents", 100000); err != nil {
		return nil, err
	}
	switch {
	case c.resources < 1 || c.resources > 1000:
		return nil, errors.New("-resources: between 1 and 1000")
	case c.changed < 1 || c.changed > c.resources:
		return nil, fmt.Errorf("-changed %d: between 1 and -resources (%d)", c.changed, c.resources)
	case c.churn != "same" && c.churn != "rotate":
		return nil, fmt.Errorf("-churn %q: same or rotate", c.churn)
	case c.revisions < 1 || c.reconnects < 1:
		return nil, errors.New("-revisions and -reconnects must be positive")
	case c.delay < 0 || c.settle < 0 || c.timeout <= 0:
		return nil, errors.New("-delay and -settle must not be negative, -timeout must be positive")
	case c.concurrency < 1 || c.sockets < 1 || c.stormSockets < 1:
		return nil, errors.New("-dial-concurrency, -sockets and -storm-sockets must be positive")
	case c.bodySize > 64<<10:
		return nil, errors.New("-body-size: at most 64 KiB")
	case c.stormAgents < 1 || c.stormAgents > 100000:
		return nil, errors.New("-storm-agents: between 1 and 100000")
	case c.stormDetect != detectKill && c.stormDetect != detectIdle:
		return nil, fmt.Errorf("-storm-detect %q: kill or idle", c.stormDetect)
	case c.stormTimeout <= 0:
		return nil, errors.New("-storm-timeout must be positive")
	case c.drainAgents < 1 || c.drainAgents > 100000 || c.drainTimeout <= 0:
		return nil, errors.New("-drain-agents: between 1 and 100000; -drain-timeout positive")
	case c.drainServer != "leader" && c.drainServer != "follower":
		return nil, fmt.Errorf("-drain-server %q: leader or follower", c.drainServer)
	}
	return c, nil
}

func main() { benchkit.Main("bench-sessions", parseFlags, run) }

// run does the whole benchmark. Every process and server it starts is
// stopped before it returns, whatever happens.
func run(ctx context.Context, cfg *config, out, log io.Writer) (err error) {
	sc, err := cfg.Start(ctx, "meteor-bench-sessions-", "PKI, data and logs", log)
	if err != nil {
		return err
	}
	defer sc.Finish(&err, 3*time.Second)
	root, tmp, procs := sc.Root, sc.Dir, sc.Procs

	rep := &report{
		Summary: []benchkit.Row{},
		Date:    time.Now().UTC().Format(time.RFC3339),
		Machine: benchkit.ReadMachine(),
		Params: paramInfo{
			Parts:     cfg.parts,
			Client:    "wire-level clients written with package wire (Hello, Pull, Ack and Report as the agent sends them; every frame counted with wire.FrameLen), not package agent",
			Resources: cfg.resources, BodyBytes: cfg.bodySize, Revisions: cfg.revisions, Changed: cfg.changed, Churn: cfg.churn,
			Reconnects: cfg.reconnects, OneWayDelayMs: benchkit.MS(cfg.delay),
			Agents: cfg.agents, Sockets: cfg.sockets, Concurrency: cfg.concurrency, SettleSec: cfg.settle.Seconds(),
			StormAgents: cfg.stormAgents, StormSockets: cfg.stormSockets, StormModes: cfg.stormModes, StormDetect: cfg.stormDetect,
		},
	}
	fmt.Fprintf(out, "Agent sessions on Meteor servers, %d CPUs, load average %s\n", rep.Machine.NProc, rep.Machine.LoadAvgStart)
	rep.UDPBuffers = sc.UDPBuffers(cfg.RaiseUDP)

	bin, err := cfg.Meteor(ctx, root, tmp, log)
	if err != nil {
		return err
	}
	p, err := makePKI(ctx, bin, filepath.Join(tmp, "pki"))
	if err != nil {
		return err
	}

	if cfg.has(partResync) || cfg.has(partReconnect) {
		fmt.Fprintln(log, "starting an in-process dev server")
		srv, stopSrv, err := startInProcess(ctx, p, filepath.Join(tmp, "inproc"))
		if err != nil {
			return err
		}
		err = func() error {
			if cfg.has(partResync) {
				if rep.Resync, err = runResync(ctx, cfg, srv, p, log); err != nil {
					return fmt.Errorf("resync: %w", err)
				}
				resyncBlock(out, rep.Resync)
			}
			if cfg.has(partReconnect) {
				reconnectHeader(out)
				if rep.Reconnect, err = runReconnect(ctx, cfg, srv, p, out, log); err != nil {
					return fmt.Errorf("reconnect: %w", err)
				}
			}
			return nil
		}()
		if serr := stopSrv(); serr != nil && err == nil {
			fmt.Fprintf(log, "in-process server shutdown: %v\n", serr)
		}
		if err != nil {
			return err
		}
	}
	if cfg.has(partMemory) {
		rep.Memory, err = runMemory(ctx, cfg, procs, bin, p, filepath.Join(tmp, "memory"), &rep.Elections, out, log)
		procs.StopAll(3 * time.Second)
		if err != nil {
			return fmt.Errorf("memory: %w", err)
		}
	}
	if cfg.has(partStorm) {
		if rep.Storm, err = runStorm(ctx, cfg, bin, p, filepath.Join(tmp, "storm"), &rep.Elections, out, log); err != nil {
			return fmt.Errorf("storm: %w", err)
		}
	}

	if cfg.has(partDrain) {
		if rep.Drain, err = runDrain(ctx, cfg, bin, p, filepath.Join(tmp, "drain"), out, log); err != nil {
			return fmt.Errorf("drain: %w", err)
		}
	}

	rep.Machine.LoadAvgEnd = benchkit.LoadAvg()
	if rep.Resync != nil {
		rep.Verdicts = append(rep.Verdicts, resyncVerdict(rep.Resync))
	}
	if len(rep.Reconnect) > 0 {
		rep.Verdicts = append(rep.Verdicts, reconnectVerdict(rep.Reconnect))
	}
	if rep.Memory != nil {
		rep.Verdicts = append(rep.Verdicts, memoryVerdict(rep.Memory))
		rep.Summary = append(rep.Summary, memorySummary(rep.Memory)...)
	}
	if rep.Storm != nil {
		rep.Verdicts = append(rep.Verdicts, stormVerdict(rep.Storm))
		rep.Summary = append(rep.Summary, stormSummary(rep.Storm)...)
	}
	if rep.Drain != nil {
		rep.Verdicts = append(rep.Verdicts, drainVerdict(rep.Drain))
	}
	rep.Notes = append(append(notes(rep), stormNotes(rep.Storm)...), drainNotes(rep.Drain)...)
	benchkit.PrintSummary(out, rep.Notes, rep.Verdicts)
	if err := writeResults(cfg.OutDir, rep); err != nil {
		return err
	}
	benchkit.ResultsLine(out, cfg.OutDir, "sessions")
	return nil
}

// notes say how to read the figures, and what they show where the
// server's behaviour explains a figure.
func notes(rep *report) []string {
	var n []string
	n = append(n, fmt.Sprintf("The machine is shared: load average %s at start, %s at end.", rep.Machine.LoadAvgStart, rep.Machine.LoadAvgEnd))
	if r := rep.Resync; r != nil {
		n = append(n,
			"Resync: the bytes are Delta frames on the control stream (length prefix, type byte, payload), counted by the client with wire.FrameLen and by the server's AgentStats; QUIC packet and TLS overhead is not included. "+
				"The replay is measured: a second device stays connected and pulls (with its inventory) after every revision, so each Delta it receives is exactly that revision's change.")
		if r.Resync.Upserts > 0 {
			n = append(n, fmt.Sprintf("Resync: each upsert carries %d B besides its body (key, 32-byte digest, revision, body length), %.0f%% of a %d-byte body; the digest alone is %.0f%%.",
				r.Resync.PerResource/r.Resync.Upserts, 100*float64(r.Resync.PerResource)/float64(r.Resync.Bodies), r.BodyBytes, 100*32*float64(r.Resync.Upserts)/float64(r.Resync.Bodies)))
		}
		if r.Uplink > r.Resync.Total {
			n = append(n, fmt.Sprintf("Resync: the device sent %d B up (Hello and Pull each carry the whole %d-entry inventory) to receive %d B down.", r.Uplink, r.Resources, r.Resync.Total))
		}
		if r.RevisionOnly.Upserts > r.Resync.Upserts {
			n = append(n, fmt.Sprintf("Resync by revision only: a device that resumes without its inventory (the agent does so when its inventory does not fit in a frame) was sent %d of %d resources (%d B), not the change: "+
				"the server diffs a Pull without inventory against the session's stored inventory, which is empty after a Hello without one, not against the state at known-revision as docs/wire.md §7.2 says.",
				r.RevisionOnly.Upserts, r.Resources, r.RevisionOnly.Total))
		}
	}
	if len(rep.Reconnect) > 0 {
		n = append(n,
			"Reconnect: the client closes the old connection (CONNECTION_CLOSE) and dials at once; detecting a real drop (up to the 30 s idle timeout) is not included. Both modes resume the Meteor session (session ID and resume token) and write Hello and Pull at once; only TLS differs (a kept session cache and DialEarly vs a fresh TLS configuration without a cache).")
		for i := 0; i+1 < len(rep.Reconnect); i += 2 {
			z, f := rep.Reconnect[i], rep.Reconnect[i+1]
			if z.OneWayDelayMs == 0 || z.MinRTTms <= 0 {
				continue
			}
			if z.DeltaP50-z.WelcomeP50 > z.MinRTTms/2 && f.DeltaP50-z.DeltaP50 < z.MinRTTms/2 {
				n = append(n, fmt.Sprintf("Reconnect at %s: with 0-RTT the Welcome arrives after %.1f RTTs but the first Delta only after %.1f, no sooner than with a full handshake (%.1f): "+
					"the server answers an early Hello in 0.5-RTT, but reads the pipelined Pull only once the handshake has completed and the session has been committed through Raft (cluster/session.go, run).",
					z.Link, z.WelcomeP50/z.MinRTTms, z.DeltaP50/z.MinRTTms, f.DeltaP50/z.MinRTTms))
			}
		}
	}
	if m := rep.Memory; m != nil {
		n = append(n,
			"Memory: VmRSS counts what the Go runtime holds from the OS (the live heap, garbage not yet collected up to GOGC's goal, freed pages not yet returned, goroutine stacks); the live heap is the last GC cycle's (gctrace, MiB resolution) and may predate the reading by the age shown; the baseline's is taken as 0 before the first GC (which runs at 4 MiB). "+
				"Per-agent figures are (reading - baseline) / agents connected; the marginal figure compares two levels and so leaves out one-time costs.",
			"Memory: the connect rate includes each session's Raft commits on a single node with fsync, and the devices' own TLS handshakes in this process on the same CPUs.")
		if k := len(m.Levels); k >= 2 && m.Levels[0].ServerCPUms > 0 {
			a, b := m.Levels[0], m.Levels[k-1]
			if b.ServerCPUms > 1.2*a.ServerCPUms {
				n = append(n, fmt.Sprintf("Memory: server CPU per connect grew from %.2f ms (first %d) to %.2f ms (up to %d): every new device takes a cluster revision, and on every revision the server's notify loop recomputes the desired state and its fingerprint of every connected session (cluster/agents.go, notifyLoop), so a connect costs O(sessions).",
					a.ServerCPUms, a.Agents, b.ServerCPUms, b.Agents))
			}
		}
	}
	return n
}

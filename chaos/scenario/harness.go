package scenario

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/memberlist"
	"github.com/hashicorp/raft"

	"github.com/meteor-edge/meteor/chaos"
	"github.com/meteor-edge/meteor/cluster"
	"github.com/meteor-edge/meteor/scheduler"
)

// HarnessConfig configures a Harness.
type HarnessConfig struct {
	// Servers is the cluster size (3 or 5).
	Servers int
	// Dir holds one data dir per server.
	Dir string
	// Seed seeds the chaos.Network (its drop rates).
	Seed uint64
	// Faults receives every fault; nil means a new log (see Harness.Faults).
	Faults *chaos.FaultLog
	// Log receives the servers' and the network's logs; nil discards them.
	Log io.Writer
	// LogLevel is the servers' log level; 0 means Warn.
	LogLevel hclog.Level
	// Agents makes every server serve device agents over QUIC on
	// loopback, with certificates from a CA of the harness's own (CA).
	Agents bool
}

// Harness is an in-process cluster of real servers on loopback (a
// cluster.Local), every server's Raft and gossip traffic going through one
// chaos.Network and every server's wall clock skewable. It is safe for
// concurrent use.
type Harness struct {
	*cluster.Local
	cfg    HarnessConfig
	net    *chaos.Network
	faults *chaos.FaultLog
	logger hclog.Logger
	clocks []*chaos.SkewedClock
}

// NewHarness starts cfg.Servers servers, which bootstrap a cluster
// together, and waits for a leader.
func NewHarness(ctx context.Context, cfg HarnessConfig) (*Harness, error) {
	if cfg.Faults == nil {
		cfg.Faults = chaos.NewFaultLog()
	}
	if cfg.Log == nil {
		cfg.Log = io.Discard
	}
	if cfg.LogLevel == hclog.NoLevel {
		cfg.LogLevel = hclog.Warn
	}
	// The harness and the network log every fault at Info, whatever the
	// servers' level.
	logger := hclog.New(&hclog.LoggerOptions{Name: "chaos", Level: min(cfg.LogLevel, hclog.Info), Output: cfg.Log})
	h := &Harness{
		cfg:    cfg,
		faults: cfg.Faults,
		logger: logger,
		net:    chaos.NewNetwork(cfg.Seed, cfg.Faults, chaos.WithLogger(logger)),
	}
	opts := cluster.LocalOptions{
		Servers: cfg.Servers,
		Dir:     cfg.Dir,
		Agents:  cfg.Agents,
		Logger: func(id string) hclog.Logger {
			return hclog.New(&hclog.LoggerOptions{Name: id, Level: cfg.LogLevel, Output: cfg.Log})
		},
		Configure: h.configure,
	}
	if cfg.Agents {
		opts.ClusterSecret = []byte(fmt.Sprintf("meteor-chaos-harness-%016x", cfg.Seed))
	}
	l, err := cluster.StartLocal(ctx, opts)
	if err != nil {
		return nil, errors.Join(fmt.Errorf("harness: %w", err), h.net.Close())
	}
	h.Local = l
	return h, nil
}

// configure sets server i's timings for chaos: the log compacted often, so
// that a follower kept behind must be sent a snapshot; every revision
// kept, for the lost-write check; traffic through the network; a skewable
// clock.
func (h *Harness) configure(i int, c *cluster.Config) {
	c.FSM.HistoryLimit = 100000 // keep every revision: the lost-write check reads them all
	c.ApplyTimeout = 3 * time.Second
	c.TrailingLogs = 64
	c.SnapshotThreshold = 256
	c.SnapshotInterval = 500 * time.Millisecond
	c.RaftLayer = func(id string, ln net.Listener) raft.StreamLayer { return h.net.StreamLayer(id, ln) }
	c.GossipTransport = func(id string, t memberlist.NodeAwareTransport) memberlist.NodeAwareTransport {
		return h.net.MemberlistTransport(id, t)
	}
	for len(h.clocks) <= i {
		h.clocks = append(h.clocks, chaos.NewSkewedClock(nil, 0))
	}
	c.Now = h.clocks[i].Now
	if h.cfg.Agents {
		c.Classes = agentClasses()
		c.StatusEvalInterval = 250 * time.Millisecond
		c.AgentIdleTimeout = 3 * time.Second
		c.PullInterval = 2 * time.Second
		// Key epochs of ten minutes: a clock skewed by minutes crosses
		// an epoch boundary in some runs, which tokens and tickets must
		// survive.
		c.TicketPeriod = 10 * time.Minute
	}
}

// agentClasses are the classes of a harness with agents: a device silent
// for 5 s is unreachable and one making no progress for 20 s is stuck, so
// that a run of seconds sees (or must not see) both; the agents, which
// take the classes from the servers, pull every 2 s and report fully
// every second.
func agentClasses() map[string]scheduler.Class {
	classes := scheduler.DefaultClasses()
	for name, cl := range classes {
		cl.PullInterval, cl.RetryJitter = 2*time.Second, 0
		cl.ReportInterval = time.Second
		cl.UnreachableAfter = 5 * time.Second
		cl.ProgressDeadline = 20 * time.Second
		cl.RetryBase, cl.RetryMax = 200*time.Millisecond, 2*time.Second
		classes[name] = cl
	}
	return classes
}

// Skew sets server i's wall clock to run d ahead of the machine's (behind
// if negative): what it stamps on writes, device sessions and statuses,
// and the epoch of its token and ticket keys. Raft's and memberlist's
// timers are durations and are not affected, as on a real host.
func (h *Harness) Skew(i int, d time.Duration) {
	prev := h.clocks[i].Skew()
	h.clocks[i].SetSkew(d)
	if d != prev {
		h.faults.Record(KindClockSkew, h.ID(i), "", fmt.Sprintf("wall clock %+v (was %+v)", d, prev))
		h.logger.Info("fault", "kind", KindClockSkew, "server", h.ID(i), "skew", d)
	}
}

// Network returns the partition table every server's traffic crosses.
func (h *Harness) Network() *chaos.Network { return h.net }

// Faults returns the log every fault is recorded in.
func (h *Harness) Faults() *chaos.FaultLog { return h.faults }

// MaxTerm returns the highest Raft term any running server reports
// (cluster.Local.Term); its growth over a period counts the elections held
// in it. It is 0 if no server answers.
func (h *Harness) MaxTerm(ctx context.Context) uint64 {
	term, _ := h.Term(ctx)
	return term
}

// Kill stops server i abruptly, without leaving the cluster, like a crash:
// its data dir keeps whatever was fsynced.
func (h *Harness) Kill(i int) error {
	if h.Server(i) == nil {
		return fmt.Errorf("harness: kill %s: not running", h.ID(i))
	}
	h.faults.Record(KindCrash, h.ID(i), "", "killed (shutdown without leave)")
	h.logger.Info("fault", "kind", KindCrash, "server", h.ID(i))
	if err := h.Stop(i); err != nil {
		return fmt.Errorf("harness: kill: %w", err)
	}
	return nil
}

// Restart starts server i again with its data dir and addresses, joining
// the running servers.
func (h *Harness) Restart(i int) error {
	if h.Server(i) != nil {
		return fmt.Errorf("harness: restart %s: already running", h.ID(i))
	}
	h.faults.Record(KindRestart, h.ID(i), "", "restarted from its data dir")
	h.logger.Info("fault", "kind", KindRestart, "server", h.ID(i))
	if _, err := h.Local.Restart(i); err != nil {
		return fmt.Errorf("harness: %w", err)
	}
	return nil
}

// Close stops every server and closes the network's connections. It waits
// for the servers' goroutines.
func (h *Harness) Close() error {
	return errors.Join(h.Local.Close(), h.net.Close())
}

package scenario

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"path/filepath"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/memberlist"
	"github.com/hashicorp/raft"

	"github.com/meteor-edge/meteor/chaos"
	"github.com/meteor-edge/meteor/cluster"
	"github.com/meteor-edge/meteor/cluster/api"
	"github.com/meteor-edge/meteor/cluster/pki"
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

// Harness is an in-process cluster of real servers on loopback, every
// server's Raft and gossip traffic going through one chaos.Network. It is
// safe for concurrent use.
type Harness struct {
	cfg     HarnessConfig
	net     *chaos.Network
	faults  *chaos.FaultLog
	logger  hclog.Logger
	configs []cluster.Config // addresses resolved after the first start
	clocks  []*chaos.SkewedClock
	ca      *pki.CA // with Agents

	mu      sync.Mutex
	servers []*cluster.Server // guarded by mu; nil while a server is down
}

// NewHarness starts cfg.Servers servers, which bootstrap a cluster
// together, and waits for a leader.
func NewHarness(ctx context.Context, cfg HarnessConfig) (*Harness, error) {
	if cfg.Servers < 1 || cfg.Servers > 7 {
		return nil, fmt.Errorf("harness: %d servers, want 1 to 7", cfg.Servers)
	}
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
	var secret []byte
	if cfg.Agents {
		ca, err := pki.NewCA("meteor chaos harness", 24*time.Hour)
		if err != nil {
			return nil, fmt.Errorf("harness: %w", err)
		}
		h.ca, secret = ca, []byte(fmt.Sprintf("meteor-chaos-harness-%016x", cfg.Seed))
	}
	for i := range cfg.Servers {
		c := h.serverConfig(fmt.Sprintf("s%d", i+1))
		clock := chaos.NewSkewedClock(nil, 0)
		h.clocks = append(h.clocks, clock)
		c.Now = clock.Now
		if cfg.Agents {
			cert, err := h.ca.IssueServer(c.NodeID, []string{"127.0.0.1"})
			if err != nil {
				h.Close()
				return nil, fmt.Errorf("harness: %w", err)
			}
			c.AgentAddr = "127.0.0.1:0"
			c.AgentTLS = &cluster.AgentTLS{ClientCAs: h.ca.Pool(), Certificate: cert}
			c.ClusterSecret = secret
			c.Classes = agentClasses()
			c.StatusEvalInterval = 250 * time.Millisecond
			c.AgentIdleTimeout = 3 * time.Second
			c.PullInterval = 2 * time.Second
			// Key epochs of ten minutes: a clock skewed by minutes crosses
			// an epoch boundary in some runs, which tokens and tickets
			// must survive.
			c.TicketPeriod = 10 * time.Minute
		}
		c.BootstrapExpect = cfg.Servers
		if i > 0 {
			c.Join = []string{h.servers[0].GossipAddr()}
		}
		s, err := cluster.New(c)
		if err != nil {
			h.Close()
			return nil, fmt.Errorf("harness: start %s: %w", c.NodeID, err)
		}
		c.HTTPAddr, c.RaftAddr, c.GossipAddr = s.HTTPAddr(), s.RaftAddr(), s.GossipAddr()
		if cfg.Agents {
			c.AgentAddr = s.AgentAddr()
		}
		h.configs = append(h.configs, c)
		h.servers = append(h.servers, s)
	}
	if _, err := h.Leader(ctx); err != nil {
		h.Close()
		return nil, err
	}
	return h, nil
}

// serverConfig returns a config with loopback ports and timings tightened
// so that elections and failure detection take well under a second, with
// headroom for -race on a busy machine.
func (h *Harness) serverConfig(id string) cluster.Config {
	c := cluster.DefaultConfig()
	c.NodeID = id
	c.Region = "eu"
	c.DataDir = filepath.Join(h.cfg.Dir, id)
	c.HTTPAddr, c.RaftAddr, c.GossipAddr = "127.0.0.1:0", "127.0.0.1:0", "127.0.0.1:0"
	c.FSM.HistoryLimit = 100000 // keep every revision: the lost-write check reads them all
	c.ApplyTimeout = 3 * time.Second
	// Compact the log often, so that a follower kept behind must be sent a
	// snapshot (the follower-behind-compaction scenario).
	c.TrailingLogs = 64
	c.SnapshotThreshold = 256
	c.SnapshotInterval = 500 * time.Millisecond
	c.Logger = hclog.New(&hclog.LoggerOptions{Name: id, Level: h.cfg.LogLevel, Output: h.cfg.Log})
	cluster.LoopbackTimings(&c)
	c.RaftLayer = func(id string, ln net.Listener) raft.StreamLayer { return h.net.StreamLayer(id, ln) }
	c.GossipTransport = func(id string, t memberlist.NodeAwareTransport) memberlist.NodeAwareTransport {
		return h.net.MemberlistTransport(id, t)
	}
	return c
}

// agentClasses are the status classes of a harness with agents: a device
// silent for 5 s is unreachable and one making no progress for 20 s is
// stuck, so that a run of seconds sees (or must not see) both.
func agentClasses() map[string]scheduler.Class {
	classes := scheduler.DefaultClasses()
	for name, cl := range classes {
		cl.ReportEvery = time.Second
		cl.UnreachableAfter = 5 * time.Second
		cl.ProgressDeadline = 20 * time.Second
		cl.RetryBase, cl.RetryMax = 200*time.Millisecond, 2*time.Second
		classes[name] = cl
	}
	return classes
}

// CA returns the CA that issued the servers' certificates and issues the
// devices' (nil without Agents).
func (h *Harness) CA() *pki.CA { return h.ca }

// AgentAddrs returns every server's agent address (the same across
// restarts), or nil without Agents.
func (h *Harness) AgentAddrs() []string {
	if h.ca == nil {
		return nil
	}
	out := make([]string, len(h.configs))
	for i, c := range h.configs {
		out[i] = c.AgentAddr
	}
	return out
}

// Skew sets server i's wall clock to run d ahead of the machine's (behind
// if negative): what it stamps on writes, device sessions and statuses,
// and the epoch of its token and ticket keys. Raft's and memberlist's
// timers are durations and are not affected, as on a real host.
func (h *Harness) Skew(i int, d time.Duration) {
	prev := h.clocks[i].Skew()
	h.clocks[i].SetSkew(d)
	if d != prev {
		h.faults.Record(KindClockSkew, h.configs[i].NodeID, "", fmt.Sprintf("wall clock %+v (was %+v)", d, prev))
		h.logger.Info("fault", "kind", KindClockSkew, "server", h.configs[i].NodeID, "skew", d)
	}
}

// Network returns the partition table every server's traffic crosses.
func (h *Harness) Network() *chaos.Network { return h.net }

// Faults returns the log every fault is recorded in.
func (h *Harness) Faults() *chaos.FaultLog { return h.faults }

// Size returns the number of servers, running or not.
func (h *Harness) Size() int { return len(h.configs) }

// ID returns server i's node ID.
func (h *Harness) ID(i int) string { return h.configs[i].NodeID }

// HTTPAddr returns server i's HTTP address (the same across restarts).
func (h *Harness) HTTPAddr(i int) string { return h.configs[i].HTTPAddr }

// MaxTerm returns the highest Raft term any running server reports
// (api.HighestTerm); its growth over a period counts the elections held
// in it. It is 0 if no server answers.
func (h *Harness) MaxTerm(ctx context.Context) uint64 {
	var addrs []string
	for _, i := range h.Alive() {
		addrs = append(addrs, h.HTTPAddr(i))
	}
	term, _, _ := api.HighestTerm(ctx, addrs)
	return term
}

// Servers returns the servers by index, nil for those that are down.
func (h *Harness) Servers() []*cluster.Server {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]*cluster.Server(nil), h.servers...)
}

// Alive returns the indexes of the running servers.
func (h *Harness) Alive() []int {
	var out []int
	for i, s := range h.Servers() {
		if s != nil {
			out = append(out, i)
		}
	}
	return out
}

// Index returns the index of the server with the given ID, or -1.
func (h *Harness) Index(id string) int {
	for i, c := range h.configs {
		if c.NodeID == id {
			return i
		}
	}
	return -1
}

// Leader waits until exactly one running server leads, every running
// server agrees, and the leader serves linearizable reads, and returns its
// index. It gives up when ctx ends.
func (h *Harness) Leader(ctx context.Context) (int, error) {
	var last error
	for {
		i, err := h.leaderOnce(ctx)
		if err == nil {
			return i, nil
		}
		last = err
		select {
		case <-ctx.Done():
			return -1, fmt.Errorf("harness: no leader: %w (last: %v)", ctx.Err(), last)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

func (h *Harness) leaderOnce(ctx context.Context) (int, error) {
	servers := h.Servers()
	leader := -1
	for i, s := range servers {
		if s != nil && s.IsLeader() {
			if leader >= 0 {
				return -1, fmt.Errorf("two leaders: %s and %s", servers[leader].ID(), s.ID())
			}
			leader = i
		}
	}
	if leader < 0 {
		return -1, errors.New("no leader")
	}
	for _, s := range servers {
		if s == nil {
			continue
		}
		if _, id := s.Raft().LeaderWithID(); string(id) != servers[leader].ID() {
			return -1, fmt.Errorf("%s thinks the leader is %q, not %s", s.ID(), id, servers[leader].ID())
		}
	}
	rctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	if err := servers[leader].ConsistentRead(rctx); err != nil {
		return -1, fmt.Errorf("leader %s: %w", servers[leader].ID(), err)
	}
	return leader, nil
}

// CurrentLeader returns the index of a running server that believes it
// leads, without waiting, or -1.
func (h *Harness) CurrentLeader() int {
	for i, s := range h.Servers() {
		if s != nil && s.IsLeader() {
			return i
		}
	}
	return -1
}

// Kill stops server i abruptly, without leaving the cluster, like a crash:
// its data dir keeps whatever was fsynced.
func (h *Harness) Kill(i int) error {
	h.mu.Lock()
	s := h.servers[i]
	h.servers[i] = nil
	h.mu.Unlock()
	if s == nil {
		return fmt.Errorf("harness: kill %s: not running", h.configs[i].NodeID)
	}
	h.faults.Record(KindCrash, h.configs[i].NodeID, "", "killed (shutdown without leave)")
	h.logger.Info("fault", "kind", KindCrash, "server", h.configs[i].NodeID)
	if err := s.Shutdown(); err != nil {
		return fmt.Errorf("harness: kill %s: %w", h.configs[i].NodeID, err)
	}
	return nil
}

// Restart starts server i again with its data dir and addresses, joining
// the running servers.
func (h *Harness) Restart(i int) error {
	c := h.configs[i]
	c.BootstrapExpect = 0
	c.Join = nil
	for j, s := range h.Servers() {
		if s != nil && j != i {
			c.Join = append(c.Join, s.GossipAddr())
		}
	}
	h.mu.Lock()
	running := h.servers[i] != nil
	h.mu.Unlock()
	if running {
		return fmt.Errorf("harness: restart %s: already running", c.NodeID)
	}
	h.faults.Record(KindRestart, c.NodeID, "", "restarted from its data dir")
	h.logger.Info("fault", "kind", KindRestart, "server", c.NodeID)
	s, err := cluster.New(c)
	if err != nil {
		return fmt.Errorf("harness: restart %s: %w", c.NodeID, err)
	}
	h.mu.Lock()
	h.servers[i] = s
	h.mu.Unlock()
	return nil
}

// Close stops every server and closes the network's connections. It waits
// for the servers' goroutines.
func (h *Harness) Close() error {
	h.mu.Lock()
	servers := h.servers
	h.servers = make([]*cluster.Server, len(servers))
	h.mu.Unlock()
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
	)
	for _, s := range servers {
		if s == nil {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := s.Shutdown(); err != nil {
				mu.Lock()
				errs = append(errs, fmt.Errorf("shutdown %s: %w", s.ID(), err))
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	errs = append(errs, h.net.Close())
	return errors.Join(errs...)
}

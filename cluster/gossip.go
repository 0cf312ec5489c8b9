package cluster

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/memberlist"
)

// nodeMeta is what a server tells the others about itself through gossip.
// It must stay under memberlist.MetaMaxSize (512 bytes) encoded.
type nodeMeta struct {
	ID              string `json:"id"`
	Region          string `json:"region"`
	RaftAddr        string `json:"raft"`
	HTTPAddr        string `json:"http"`
	AgentAddr       string `json:"agent,omitempty"`
	BootstrapExpect int    `json:"expect,omitempty"`
	Version         string `json:"version"`
	// WireMinor is the minor of the agent protocol the server speaks
	// (wire.ProtocolMinor): the reports it is forwarded must not use a
	// later one. Servers from before the field say nothing (0), and speak
	// 1.1.
	WireMinor uint16 `json:"wire_minor,omitempty"`
	// Features is the feature level of the server's state machine
	// (fsm.FeatureLevel): the leader proposes no command of a higher
	// level (features.go). Servers from before the field say nothing
	// (0), and run level 1.
	Features uint16 `json:"features,omitempty"`
	// PeerAPI is the level of the server-to-server API the server serves:
	// from peerAPIBatch on it takes forwarded commands in batches
	// (forwardbatch.go), from peerAPIReportBatch forwarded reports too
	// (reportbatch.go), and from peerAPISessionOwner it takes a device's
	// session server for its owner (ownership.go). Servers from before
	// the field say nothing (0).
	PeerAPI uint16 `json:"peer_api,omitempty"`
	// Leaving is set just before a graceful leave, so that others can
	// tell a server that left from one that failed: memberlist's leave
	// notification does not say which.
	Leaving bool `json:"leaving,omitempty"`
	// Draining is set when the server is about to stop for a while
	// (Server.Drain): others send it no agents and take over its devices.
	Draining bool `json:"draining,omitempty"`
}

// member is a gossip member that is a Meteor server.
type member struct {
	nodeMeta
	GossipAddr string
	State      memberlist.NodeStateType
}

func stateName(s memberlist.NodeStateType) string {
	switch s {
	case memberlist.StateAlive:
		return "alive"
	case memberlist.StateSuspect:
		return "suspect"
	case memberlist.StateDead:
		return "failed"
	case memberlist.StateLeft:
		return "left"
	}
	return "unknown"
}

// gossipDelegate serves the node's metadata; it carries no user messages.
type gossipDelegate struct {
	mu   sync.Mutex
	meta nodeMeta // guarded by mu
}

func (d *gossipDelegate) NodeMeta(limit int) []byte {
	d.mu.Lock()
	defer d.mu.Unlock()
	b, _ := json.Marshal(d.meta)
	return b
}

func (d *gossipDelegate) setLeaving() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.meta.Leaving = true
}

func (d *gossipDelegate) NotifyMsg([]byte)                           {}
func (d *gossipDelegate) GetBroadcasts(overhead, limit int) [][]byte { return nil }
func (d *gossipDelegate) LocalState(join bool) []byte                { return nil }
func (d *gossipDelegate) MergeRemoteState(buf []byte, join bool)     {}

// eventDelegate keeps this server's table of the cluster's servers, and
// turns membership changes into a wake-up for the membership reconciler
// (a leader worker) and the bootstrap loop. Both are level-based: they
// re-read the table, so a dropped wake-up loses nothing.
//
// memberlist calls the Notify methods with its node lock held, so the
// nodes are copied here; memberlist.Members would hand out pointers that
// memberlist keeps mutating. It also remembers servers that failed or left,
// which memberlist.Members leaves out.
type eventDelegate struct {
	chs []chan struct{}

	mu    sync.Mutex
	table map[string]member // guarded by mu; by node name
}

// members returns the Meteor servers gossip knows, this one included:
// alive ones, and those that failed or left.
func (e *eventDelegate) members() []member {
	e.mu.Lock()
	defer e.mu.Unlock()
	out := make([]member, 0, len(e.table))
	for _, m := range e.table {
		out = append(out, m)
	}
	return out
}

func (e *eventDelegate) set(n *memberlist.Node, state memberlist.NodeStateType) {
	m, ok := toMember(n)
	if !ok {
		return
	}
	m.State = state
	if state == memberlist.StateDead && m.Leaving {
		m.State = memberlist.StateLeft
	}
	e.mu.Lock()
	e.table[n.Name] = m
	e.mu.Unlock()
	e.poke()
}

func (e *eventDelegate) poke() {
	for _, ch := range e.chs {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
}
func (e *eventDelegate) NotifyJoin(n *memberlist.Node)   { e.set(n, memberlist.StateAlive) }
func (e *eventDelegate) NotifyUpdate(n *memberlist.Node) { e.set(n, memberlist.StateAlive) }

// NotifyLeave does not say whether the node failed or left on purpose; a
// server sets Leaving in its metadata before leaving, so set tells them
// apart.
func (e *eventDelegate) NotifyLeave(n *memberlist.Node) { e.set(n, memberlist.StateDead) }

func toMember(n *memberlist.Node) (member, bool) {
	var m nodeMeta
	if err := json.Unmarshal(n.Meta, &m); err != nil || m.ID == "" {
		return member{}, false
	}
	return member{nodeMeta: m, GossipAddr: n.Address(), State: n.State}, true
}

// membership is the gossip side of a server: memberlist and its keyring
// (keyring.go), the table of the cluster's servers (eventDelegate),
// joining Config.Join and rejoining failed servers, and device ownership
// over the alive servers (ownership.go). Run owns joinLoop and reconnectLoop; memberlist's own
// goroutines deliver events to the table until shutdown.
type membership struct {
	logger            hclog.Logger
	clock             Clock
	self              string
	join              []string
	reconnectInterval time.Duration

	ml     *memberlist.Memberlist
	events *eventDelegate
	meta   *gossipDelegate
	addr   string // the bound gossip address
	// keyring holds the gossip encryption keys (keyring.go); nil when
	// gossip is not encrypted.
	keyring *keyring
}

// startGossip starts memberlist with this server's metadata; gossip
// events wake the channels in wake.
func startGossip(cfg *Config, logger hclog.Logger, clock Clock, meta nodeMeta, wake ...chan struct{}) (*membership, error) {
	host, portStr, err := net.SplitHostPort(cfg.GossipAddr)
	if err != nil {
		return nil, fmt.Errorf("gossip addr: %w", err)
	}
	port, _ := strconv.Atoi(portStr)
	g := &membership{
		logger: logger, clock: clock, self: cfg.NodeID, join: cfg.Join, reconnectInterval: cfg.ReconnectInterval,
		meta:   &gossipDelegate{meta: meta},
		events: &eventDelegate{chs: wake, table: map[string]member{}},
	}
	if meta := g.meta.NodeMeta(0); len(meta) > memberlist.MetaMaxSize-32 {
		return nil, fmt.Errorf("gossip metadata is %d bytes, over memberlist's limit of %d: shorten the node ID or region", len(meta), memberlist.MetaMaxSize)
	}
	mc := memberlist.DefaultLANConfig()
	mc.Name = cfg.NodeID
	mc.BindAddr, mc.BindPort = host, port
	mc.AdvertiseAddr, mc.AdvertisePort = host, port
	mc.Delegate = g.meta
	mc.Events = g.events
	stdLog := logger.StandardLogger(&hclog.StandardLoggerOptions{InferLevels: true})
	mc.Logger = stdLog
	if g.keyring, err = openKeyring(cfg.DataDir, cfg.GossipKey, logger); err != nil {
		return nil, err
	}
	if g.keyring != nil {
		mc.Keyring = g.keyring.ring
	}
	if cfg.GossipTuning != nil {
		cfg.GossipTuning(mc)
	}
	// Build the transport here so port 0 works (memberlist binds TCP and
	// UDP on one port) and so tests can wrap it for fault injection.
	nt, err := memberlist.NewNetTransport(&memberlist.NetTransportConfig{BindAddrs: []string{host}, BindPort: port, Logger: stdLog})
	// With port 0 the TCP port is chosen first and UDP must get the same
	// number, which another process's UDP socket may hold: choose again.
	for try := 0; err != nil && port == 0 && try < 10 && strings.Contains(err.Error(), "address already in use"); try++ {
		nt, err = memberlist.NewNetTransport(&memberlist.NetTransportConfig{BindAddrs: []string{host}, BindPort: port, Logger: stdLog})
	}
	if err != nil {
		return nil, fmt.Errorf("gossip listen on %s: %w", cfg.GossipAddr, err)
	}
	mc.BindPort = nt.GetAutoBindPort()
	mc.AdvertisePort = mc.BindPort
	var t memberlist.NodeAwareTransport = nt
	if cfg.GossipTransport != nil {
		t = cfg.GossipTransport(cfg.NodeID, nt)
	}
	mc.Transport = t
	g.ml, err = memberlist.Create(mc)
	if err != nil {
		nt.Shutdown()
		return nil, fmt.Errorf("start gossip on %s: %w", cfg.GossipAddr, err)
	}
	g.addr = net.JoinHostPort(host, strconv.Itoa(int(g.ml.LocalNode().Port)))
	return g, nil
}

// Run joins the cluster and rejoins failed servers until ctx ends.
func (g *membership) Run(ctx context.Context) error {
	runAll(func() { g.joinLoop(ctx) }, func() { g.reconnectLoop(ctx) })
	return nil
}

// leave announces that this server leaves for good (the leader's
// membership reconciler then removes it instead of adding it back), then
// leaves gossip.
func (g *membership) leave(timeout time.Duration) {
	g.meta.setLeaving()
	if err := g.ml.UpdateNode(timeout); err != nil {
		g.logger.Warn("announce leaving", "error", err)
	}
	if err := g.ml.Leave(timeout); err != nil {
		g.logger.Warn("gossip leave", "error", err)
	}
}

// shutdown stops memberlist.
func (g *membership) shutdown() error { return g.ml.Shutdown() }

// members returns the Meteor servers gossip knows (eventDelegate.members).
func (g *membership) members() []member { return g.events.members() }

// members returns the Meteor servers gossip knows (eventDelegate.members).
func (s *Server) members() []member { return s.gossip.members() }

// memberByID finds a server by node ID.
func (g *membership) memberByID(id string) (member, bool) {
	for _, m := range g.members() {
		if m.ID == id {
			return m, true
		}
	}
	return member{}, false
}

// joinLoop joins the servers in Config.Join, retrying until one answers
// or ctx ends.
func (g *membership) joinLoop(ctx context.Context) {
	if len(g.join) == 0 {
		return
	}
	backoff := 200 * time.Millisecond
	for {
		n, err := g.ml.Join(g.join)
		if n > 0 {
			g.logger.Info("joined cluster", "contacted", n)
			return
		}
		g.logger.Warn("join failed, retrying", "addrs", g.join, "error", err, "retry_in", backoff)
		if !sleep(g.clock, backoff, ctx.Done()) {
			return
		}
		backoff = min(backoff*2, 10*time.Second)
	}
}

// reconnectLoop tries to rejoin failed servers now and then. memberlist
// stops gossiping with a node some time after declaring it dead, so two
// sides of a healed partition may never merge on their own; a server that
// restarted with a join list finds its way back anyway, but one on the
// other side of a partition needs this.
func (g *membership) reconnectLoop(ctx context.Context) {
	ticker := g.clock.NewTicker(g.reconnectInterval)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-ticker.C():
		}
		var addrs []string
		for _, m := range g.members() {
			if m.State == memberlist.StateDead && !m.Leaving && m.ID != g.self {
				addrs = append(addrs, m.GossipAddr)
			}
		}
		if len(addrs) == 0 {
			continue
		}
		if n, err := g.ml.Join(addrs); n > 0 {
			g.logger.Info("rejoined failed servers", "contacted", n)
		} else {
			g.logger.Debug("reconnect to failed servers", "addrs", addrs, "error", err)
		}
	}
}

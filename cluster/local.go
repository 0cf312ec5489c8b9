package cluster

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/meteor-edge/meteor/cluster/api"
	"github.com/meteor-edge/meteor/cluster/pki"
	"github.com/meteor-edge/meteor/fsm/acl"
)

// LocalOptions configures a Local cluster.
type LocalOptions struct {
	// Servers is the cluster size, 1 to 7; they bootstrap together
	// (Config.BootstrapExpect).
	Servers int
	// Dir holds one data dir per server, named by its node ID.
	Dir string
	// IDPrefix names the servers: IDPrefix1, IDPrefix2, ...; "" means "s".
	IDPrefix string
	// Regions are the servers' regions, assigned in turn; nil means "eu"
	// for all.
	Regions []string
	// BasePort, if set, fixes the ports: server i listens on BasePort+10i
	// (HTTP), +1 (Raft), +2 (gossip) and +3 (agents, UDP). 0 lets the
	// system choose free ports, which restarts then keep.
	BasePort int
	// ProductionTimings keeps DefaultConfig's Raft and gossip timings;
	// otherwise the servers run with LoopbackTimings.
	ProductionTimings bool
	// Agents makes every server serve device agents over QUIC on
	// loopback, with a certificate from CA and ClusterSecret.
	Agents bool
	// CA issues the servers' certificates, with which they run Raft over
	// mutual TLS (Config.PeerTLS) and serve agents; nil means a new CA
	// (see Local.CA). ClusterSecret is the shared secret with Agents; nil
	// means a random one.
	CA            *pki.CA
	ClusterSecret []byte
	// ACL turns on token authentication of the HTTP API (Config.ACL),
	// with a first admin token (Local.AdminToken) that Client uses.
	ACL bool
	// Logger returns the logger of the server with the given node ID; nil
	// discards the logs.
	Logger func(nodeID string) hclog.Logger
	// Configure, if set, has the last word on server i's configuration,
	// at its first start (fault layers, clocks, status timings, ...).
	// Restarts reuse the configuration with the addresses then bound.
	Configure func(i int, c *Config)
}

// Local is a cluster of real servers in this process, on loopback: Raft on
// raft-boltdb files, gossip and the HTTP API on real sockets. Tests, chaos
// scenarios and 'meteor dev' build their clusters with it. It is safe for
// concurrent use.
type Local struct {
	opts      LocalOptions
	ca        *pki.CA
	secret    []byte
	gossipKey []byte
	configs   []Config  // addresses resolved after each server's first start
	admin     acl.Token // the first admin token, with ACL
	hc        *http.Client

	// starting serializes Add and Restart, so that two calls never pick
	// the same index or start one server twice.
	starting sync.Mutex
	mu       sync.Mutex
	servers  []*Server // guarded by mu; nil while a server is down
}

// StartLocal starts opts.Servers servers, which form a cluster together,
// and waits until it has a leader that serves linearizable reads. On error
// every server started is shut down.
func StartLocal(ctx context.Context, opts LocalOptions) (*Local, error) {
	if opts.Servers < 1 || opts.Servers > 7 {
		return nil, fmt.Errorf("local cluster: %d servers, want 1 to 7", opts.Servers)
	}
	if opts.Dir == "" {
		return nil, errors.New("local cluster: no data dir")
	}
	if opts.IDPrefix == "" {
		opts.IDPrefix = "s"
	}
	l := &Local{opts: opts, ca: opts.CA, secret: opts.ClusterSecret, gossipKey: make([]byte, 32)}
	rand.Read(l.gossipKey)
	if l.ca == nil {
		ca, err := pki.NewCA("meteor local cluster", 24*time.Hour)
		if err != nil {
			return nil, fmt.Errorf("local cluster: %w", err)
		}
		l.ca = ca
	}
	l.hc = &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{
		TLSClientConfig: l.TLSConfig(), MaxIdleConnsPerHost: 64, IdleConnTimeout: 30 * time.Second}}
	if opts.ACL {
		tok, err := acl.Generate(rand.Reader)
		if err != nil {
			return nil, fmt.Errorf("local cluster: %w", err)
		}
		l.admin = tok
	}
	if opts.Agents || opts.ACL {
		if l.secret == nil {
			l.secret = make([]byte, 32)
			rand.Read(l.secret)
		}
	}
	for range opts.Servers {
		if _, err := l.Add(); err != nil {
			return nil, errors.Join(err, l.Close())
		}
	}
	if _, err := l.Leader(ctx); err != nil {
		return nil, errors.Join(err, l.Close())
	}
	if opts.ACL {
		if err := l.waitAdminToken(ctx); err != nil {
			return nil, errors.Join(err, l.Close())
		}
	}
	return l, nil
}

// waitAdminToken waits until every server's replica holds the first
// admin token, which the leader creates once it leads.
func (l *Local) waitAdminToken(ctx context.Context) error {
	hash := acl.HashSecret(l.admin.Secret)
	for {
		missing := ""
		for _, s := range l.Servers() {
			if _, err := s.State().Read().TokenBySecretHash(nil, hash); err != nil {
				missing = s.ID()
				break
			}
		}
		if missing == "" {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("local cluster: the first admin token has not reached %s: %w", missing, ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// config returns the configuration of a new server with index i.
func (l *Local) config(i int) (Config, error) {
	c := DefaultConfig()
	c.NodeID = l.opts.IDPrefix + strconv.Itoa(i+1)
	c.Region = "eu"
	if r := l.opts.Regions; len(r) > 0 {
		c.Region = r[i%len(r)]
	}
	c.DataDir = filepath.Join(l.opts.Dir, c.NodeID)
	port := func(off int) string {
		if l.opts.BasePort == 0 {
			return "127.0.0.1:0"
		}
		return net.JoinHostPort("127.0.0.1", strconv.Itoa(l.opts.BasePort+10*i+off))
	}
	c.HTTPAddr, c.RaftAddr, c.GossipAddr = port(0), port(1), port(2)
	cert, err := l.ca.IssueServer(c.NodeID, []string{"127.0.0.1"})
	if err != nil {
		return c, err
	}
	c.PeerTLS = &PeerTLS{CAs: l.ca.Pool(), Certificate: cert}
	c.GossipKey = l.gossipKey
	if l.opts.Agents {
		c.AgentAddr = port(3)
		c.AgentTLS = &AgentTLS{ClientCAs: l.ca.Pool(), Certificate: cert}
	}
	c.ClusterSecret = l.secret
	if l.opts.ACL {
		c.ACL = &ACLConfig{BootstrapTokenHash: acl.HashSecret(l.admin.Secret)}
	}
	c.Logger = hclog.NewNullLogger()
	if l.opts.Logger != nil {
		c.Logger = l.opts.Logger(c.NodeID)
	}
	// In-process clusters enroll no devices: they select by the labels
	// devices report. A test of the production rule turns it off in
	// Configure.
	c.TrustReportedLabels = true
	if !l.opts.ProductionTimings {
		LoopbackTimings(&c)
	}
	if i < l.opts.Servers {
		c.BootstrapExpect = l.opts.Servers
	}
	c.Join = l.gossipAddrs(-1)
	if l.opts.Configure != nil {
		l.opts.Configure(i, &c)
	}
	return c, nil
}

// Add starts one more server, which joins the running ones; StartLocal
// starts the first ones with it. It returns the new server's index.
func (l *Local) Add() (int, error) {
	l.starting.Lock()
	defer l.starting.Unlock()
	l.mu.Lock()
	i := len(l.configs)
	l.mu.Unlock()
	c, err := l.config(i)
	if err != nil {
		return -1, fmt.Errorf("local cluster: configure server %d: %w", i+1, err)
	}
	s, err := New(c)
	if err != nil {
		return -1, fmt.Errorf("local cluster: start %s: %w", c.NodeID, err)
	}
	c.HTTPAddr, c.RaftAddr, c.GossipAddr, c.AgentAddr = s.HTTPAddr(), s.RaftAddr(), s.GossipAddr(), s.AgentAddr()
	c.BootstrapExpect, c.Dev = 0, false // a restart joins the others
	l.mu.Lock()
	defer l.mu.Unlock()
	l.configs = append(l.configs, c)
	l.servers = append(l.servers, s)
	return i, nil
}

// gossipAddrs returns the gossip addresses of the running servers other
// than server skip.
func (l *Local) gossipAddrs(skip int) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for j, s := range l.servers {
		if s != nil && j != skip {
			out = append(out, s.GossipAddr())
		}
	}
	return out
}

// Stop shuts server i down without leaving the cluster, as a crash or
// kill -9 would leave it: its data dir keeps whatever was fsynced.
func (l *Local) Stop(i int) error {
	l.mu.Lock()
	s := l.servers[i]
	l.servers[i] = nil
	l.mu.Unlock()
	if s == nil {
		return fmt.Errorf("local cluster: stop %s: not running", l.ID(i))
	}
	if err := s.Shutdown(); err != nil {
		return fmt.Errorf("local cluster: stop %s: %w", l.ID(i), err)
	}
	return nil
}

// Detach takes server i out of the cluster's view without stopping it,
// and returns it: the caller owns it from then on (it may leave, or keep
// running with its Raft node shut down). Restart can start the server
// again once the caller has shut it down.
func (l *Local) Detach(i int) *Server {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := l.servers[i]
	l.servers[i] = nil
	return s
}

// Restart starts server i again from its data dir, with its addresses,
// joining the running servers.
func (l *Local) Restart(i int) (*Server, error) { return l.RestartWith(i, nil) }

// RestartWith is Restart with change applied to server i's configuration
// first, for this start and the later ones (an upgrade: another
// Config.FeatureLevel or Config.WireMinor).
func (l *Local) RestartWith(i int, change func(*Config)) (*Server, error) {
	l.starting.Lock()
	defer l.starting.Unlock()
	l.mu.Lock()
	running := l.servers[i] != nil
	if change != nil && !running {
		change(&l.configs[i])
	}
	c := l.configs[i]
	l.mu.Unlock()
	if running {
		return nil, fmt.Errorf("local cluster: restart %s: already running", c.NodeID)
	}
	c.Join = l.gossipAddrs(i)
	s, err := New(c)
	if err != nil {
		return nil, fmt.Errorf("local cluster: restart %s: %w", c.NodeID, err)
	}
	l.mu.Lock()
	l.servers[i] = s
	l.mu.Unlock()
	return s, nil
}

// Close shuts every running server down, in parallel, and waits for them.
func (l *Local) Close() error {
	l.mu.Lock()
	servers := l.servers
	l.servers = make([]*Server, len(servers))
	l.mu.Unlock()
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
	)
	for _, s := range servers {
		if s == nil {
			continue
		}
		wg.Go(func() {
			if err := s.Shutdown(); err != nil {
				mu.Lock()
				errs = append(errs, fmt.Errorf("shutdown %s: %w", s.ID(), err))
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	l.hc.CloseIdleConnections()
	return errors.Join(errs...)
}

// Size returns the number of servers, running or not.
func (l *Local) Size() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.configs)
}

// Config returns server i's configuration, with the addresses it bound.
func (l *Local) Config(i int) Config {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.configs[i]
}

// ID returns server i's node ID.
func (l *Local) ID(i int) string { return l.Config(i).NodeID }

// HTTPAddr returns server i's HTTP address (the same across restarts).
func (l *Local) HTTPAddr(i int) string { return l.Config(i).HTTPAddr }

// HTTPURL returns the base URL of server i's HTTP API, which speaks TLS.
func (l *Local) HTTPURL(i int) string { return "https://" + l.HTTPAddr(i) }

// HTTPClient returns the HTTP client that trusts the servers' certificates
// (OperatorTLS of the cluster CA), shared by every Client.
func (l *Local) HTTPClient() *http.Client { return l.hc }

// TLSConfig returns the TLS configuration of an operator's client of the
// cluster (OperatorTLS of its CA).
func (l *Local) TLSConfig() *tls.Config { return OperatorTLS(l.ca.Pool()) }

// AdminToken returns the secret of the first admin token, with
// LocalOptions.ACL; "" without.
func (l *Local) AdminToken() string { return l.admin.Secret }

// Client returns an API client for server i, trusting the cluster CA and
// sending the admin token with ACL.
func (l *Local) Client(i int) *api.Client {
	c := api.NewClient(l.HTTPURL(i), l.hc)
	c.Token = l.admin.Secret
	return c
}

// Index returns the index of the server with the given node ID, or -1.
func (l *Local) Index(id string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	for i, c := range l.configs {
		if c.NodeID == id {
			return i
		}
	}
	return -1
}

// Server returns server i, or nil while it is down.
func (l *Local) Server(i int) *Server {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.servers[i]
}

// Servers returns the servers by index, nil for those that are down.
func (l *Local) Servers() []*Server {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]*Server(nil), l.servers...)
}

// Alive returns the indexes of the running servers.
func (l *Local) Alive() []int {
	var out []int
	for i, s := range l.Servers() {
		if s != nil {
			out = append(out, i)
		}
	}
	return out
}

// CA returns the CA that issued the servers' certificates, and issues
// devices'.
func (l *Local) CA() *pki.CA { return l.ca }

// GossipKey returns the key the servers encrypt gossip with.
func (l *Local) GossipKey() []byte { return l.gossipKey }

// AgentAddrs returns every server's agent address (the same across
// restarts), or nil without Agents.
func (l *Local) AgentAddrs() []string {
	if !l.opts.Agents {
		return nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make([]string, len(l.configs))
	for i, c := range l.configs {
		out[i] = c.AgentAddr
	}
	return out
}

// Term returns the highest Raft term any running server reports
// (api.HighestTerm) and the leader that server knows; its growth over a
// period counts the elections held in it. It is 0 if no server answers.
func (l *Local) Term(ctx context.Context) (uint64, string) {
	var clients []*api.Client
	for _, i := range l.Alive() {
		clients = append(clients, l.Client(i))
	}
	term, leader, _ := api.HighestTerm(ctx, clients)
	return term, leader
}

// Leader waits until exactly one running server leads, every running
// server agrees, and the leader serves linearizable reads, and returns its
// index. It gives up when ctx ends.
func (l *Local) Leader(ctx context.Context) (int, error) {
	var last error
	for {
		i, err := l.leaderOnce(ctx)
		if err == nil {
			return i, nil
		}
		last = err
		select {
		case <-ctx.Done():
			return -1, fmt.Errorf("local cluster: no leader: %w (last: %v)", ctx.Err(), last)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

func (l *Local) leaderOnce(ctx context.Context) (int, error) {
	servers := l.Servers()
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
	// The leader raises the active feature level as soon as every
	// server runs it (levelRaiser): wait for that too, so that what
	// follows sees the features of the running servers.
	level := uint16(0)
	for _, s := range servers {
		if s != nil && (level == 0 || s.config.featureLevel() < level) {
			level = s.config.featureLevel()
		}
	}
	if active := servers[leader].fsm.Read().ActiveLevel(); active < level {
		return -1, fmt.Errorf("leader %s: feature level %d active, the servers run %d", servers[leader].ID(), active, level)
	}
	return leader, nil
}

// CurrentLeader returns the index of a running server that believes it
// leads, without waiting, or -1.
func (l *Local) CurrentLeader() int {
	for i, s := range l.Servers() {
		if s != nil && s.IsLeader() {
			return i
		}
	}
	return -1
}

package benchkit

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/meteor-edge/meteor/cluster"
	"github.com/meteor-edge/meteor/cluster/api"
	"github.com/meteor-edge/meteor/cluster/pki"
)

// MeteorOptions say what StartMeteor starts. The zero value, with Bin and
// Dir set, is three servers meteor-1 … meteor-3 in region eu, forming a
// cluster through --bootstrap-expect, without agents.
type MeteorOptions struct {
	Bin string // the meteor binary
	// Dir holds server ID's data in Dir/ID and its log in Dir/ID.log; it
	// is created if need be, and is every server's working directory.
	Dir string
	// IDs name the servers (and their certificates); nil means
	// MeteorIDs("meteor", 3).
	IDs []string
	// Dev starts one server with --dev instead of a cluster (IDs must
	// then name one server).
	Dev bool
	// Regions: server i is in Regions[i%len(Regions)]; nil means "eu".
	Regions []string
	// Agents has every server serve agents on a UDP port of its own
	// (MeteorServer.AgentAddr); it needs PKI.
	Agents bool
	// PKI is a directory made by InitMeteorCA: the servers use its CA,
	// its cluster secret and their own certificates, issued there by
	// StartMeteor unless present. "" means no certificates, and a fresh
	// cluster secret in Dir.
	PKI string
	// ExtraArgs, if not nil, returns more `meteor server` flags for
	// server i.
	ExtraArgs func(i int) []string
	// Env is added to the servers' environment.
	Env []string
	// StartTimeout bounds the wait for each server to be healthy and know
	// the leader; 0 means a minute.
	StartTimeout time.Duration
}

// MeteorIDs returns the server IDs prefix-1 … prefix-n.
func MeteorIDs(prefix string, n int) []string {
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("%s-%d", prefix, i+1)
	}
	return ids
}

// MeteorCluster is the `meteor server` processes StartMeteor started.
// Methods that take server indices idx read all servers if none are
// given.
type MeteorCluster struct {
	Servers []*MeteorServer // in the order of MeteorOptions.IDs
	Version string          // the version the servers report
	// term0 is the highest Raft term once every server knew the leader.
	term0 uint64
}

// MeteorServer is one `meteor server` process.
type MeteorServer struct {
	ID        string
	Proc      *Proc
	API       *api.Client // its HTTP API, through a client of its own
	HTTPAddr  string      // host:port
	AgentAddr string      // host:port of the agent endpoint (UDP); "" without Agents
	AgentPort int
}

// StartMeteor starts the servers of o in g on free loopback ports and
// waits until every one is healthy and knows the leader. The servers run
// until g stops them.
func StartMeteor(ctx context.Context, g *Group, o MeteorOptions) (*MeteorCluster, error) {
	ids := o.IDs
	if ids == nil {
		ids = MeteorIDs("meteor", 3)
	}
	n := len(ids)
	switch {
	case n == 0:
		return nil, errors.New("start meteor: no servers")
	case o.Dev && n != 1:
		return nil, fmt.Errorf("start meteor: --dev is one server, not %d", n)
	case o.Agents && o.PKI == "":
		return nil, errors.New("start meteor: agents need a PKI")
	}
	regions := o.Regions
	if len(regions) == 0 {
		regions = []string{"eu"}
	}
	timeout := o.StartTimeout
	if timeout == 0 {
		timeout = time.Minute
	}
	if err := os.MkdirAll(o.Dir, 0o700); err != nil {
		return nil, err
	}
	secretFile := filepath.Join(o.PKI, "cluster.secret")
	if o.PKI == "" {
		secretFile = filepath.Join(o.Dir, "cluster.secret")
		if err := writeClusterSecret(secretFile); err != nil {
			return nil, err
		}
	} else {
		for _, id := range ids {
			if _, err := os.Stat(MeteorCertFile(o.PKI, id)); err == nil {
				continue
			}
			if err := IssueMeteorServer(ctx, o.Bin, o.PKI, id); err != nil {
				return nil, err
			}
		}
	}
	// One call, so the ports are distinct: HTTP, Raft, gossip and agents
	// per server; gossip and agents need UDP.
	ports, err := FreePorts(4*n, true)
	if err != nil {
		return nil, err
	}
	gossip := func(i int) string { return Loopback(ports[4*i+2]) }
	// Servers with their certificates encrypt gossip: one key for all.
	gk := make([]byte, 32)
	rand.Read(gk)
	gossipKey := base64.StdEncoding.EncodeToString(gk)
	c := &MeteorCluster{}
	// With a PKI every server has its certificate, and its HTTP API
	// speaks TLS.
	scheme, tr := "http://", &http.Transport{MaxIdleConnsPerHost: 4}
	if o.PKI != "" {
		caPEM, err := os.ReadFile(MeteorCAFile(o.PKI))
		if err != nil {
			return nil, err
		}
		pool, err := pki.PoolFromPEM(caPEM)
		if err != nil {
			return nil, err
		}
		scheme, tr.TLSClientConfig = "https://", cluster.OperatorTLS(pool)
	}
	hc := &http.Client{Timeout: 2 * time.Minute, Transport: tr}
	for i, id := range ids {
		s := &MeteorServer{ID: id, HTTPAddr: Loopback(ports[4*i])}
		args := []string{
			"server", "--node-id", id, "--region", regions[i%len(regions)],
			"--data-dir", filepath.Join(o.Dir, id),
			"--http-addr", s.HTTPAddr, "--raft-addr", Loopback(ports[4*i+1]), "--gossip-addr", gossip(i),
			"--cluster-secret-file", secretFile,
		}
		if o.Dev {
			args = append(args, "--dev")
		} else {
			var join []string
			for j := range n {
				if j != i {
					join = append(join, gossip(j))
				}
			}
			args = append(args, "--join", strings.Join(join, ","), "--bootstrap-expect", strconv.Itoa(n))
		}
		if o.Agents {
			s.AgentAddr, s.AgentPort = Loopback(ports[4*i+3]), ports[4*i+3]
			// Benchmark devices are not enrolled: their labels select.
			args = append(args, "--agent-addr", s.AgentAddr, "--trust-reported-labels")
		}
		if o.PKI != "" {
			args = append(args, "--ca-file", MeteorCAFile(o.PKI), "--cert-file", MeteorCertFile(o.PKI, id), "--key-file", MeteorKeyFile(o.PKI, id), "--encrypt", gossipKey)
		} else if !o.Dev {
			args = append(args, "--insecure-plaintext")
		}
		if o.ExtraArgs != nil {
			args = append(args, o.ExtraArgs(i)...)
		}
		if s.Proc, err = g.Start(id, o.Bin, args, o.Env, o.Dir, filepath.Join(o.Dir, id+".log")); err != nil {
			return nil, err
		}
		s.API = api.NewClient(scheme+s.HTTPAddr, hc)
		c.Servers = append(c.Servers, s)
	}
	for _, s := range c.Servers {
		err := WaitFor(ctx, timeout, 100*time.Millisecond, s.Proc, func(ctx context.Context) error {
			h, err := s.API.Health(ctx)
			if err != nil {
				return err
			}
			if !h.Healthy || h.Leader == "" {
				return fmt.Errorf("not healthy: %s", h.Message)
			}
			c.Version = h.Version
			return nil
		})
		if err != nil {
			return nil, fmt.Errorf("meteor server %s: %w", s.ID, err)
		}
	}
	if c.term0, err = c.RaftTerm(ctx); err != nil {
		return nil, fmt.Errorf("read the Raft term: %w", err)
	}
	return c, nil
}

// writeClusterSecret writes a fresh cluster secret (it signs the commands
// followers forward to the leader) to path.
func writeClusterSecret(path string) error {
	secret := make([]byte, 32)
	if _, err := rand.Read(secret); err != nil {
		return err
	}
	return os.WriteFile(path, []byte(base64.StdEncoding.EncodeToString(secret)+"\n"), 0o600)
}

// pick returns the servers idx, or all of them if idx is empty.
func (c *MeteorCluster) pick(idx []int) []*MeteorServer {
	if len(idx) == 0 {
		return c.Servers
	}
	out := make([]*MeteorServer, len(idx))
	for k, i := range idx {
		out[k] = c.Servers[i]
	}
	return out
}

// IDs returns the server IDs, in server order.
func (c *MeteorCluster) IDs() []string {
	out := make([]string, len(c.Servers))
	for i, s := range c.Servers {
		out[i] = s.ID
	}
	return out
}

// Index returns the index of server id, or -1.
func (c *MeteorCluster) Index(id string) int {
	for i, s := range c.Servers {
		if s.ID == id {
			return i
		}
	}
	return -1
}

// URLs returns the base URLs ("http://host:port") of the servers' HTTP
// APIs.
func (c *MeteorCluster) URLs(idx ...int) []string {
	var out []string
	for _, s := range c.pick(idx) {
		out = append(out, s.API.Addr())
	}
	return out
}

// AgentAddrs returns the servers' agent endpoints.
func (c *MeteorCluster) AgentAddrs(idx ...int) []string {
	var out []string
	for _, s := range c.pick(idx) {
		out = append(out, s.AgentAddr)
	}
	return out
}

// AgentPorts returns the UDP ports the servers serve agents on.
func (c *MeteorCluster) AgentPorts(idx ...int) []int {
	var out []int
	for _, s := range c.pick(idx) {
		out = append(out, s.AgentPort)
	}
	return out
}

// Leader returns the index of the server every live server names as
// leader; a leader whose process has exited is none.
func (c *MeteorCluster) Leader(ctx context.Context) (int, error) {
	var leader string
	for _, s := range c.Servers {
		if s.Proc.Exited() {
			continue
		}
		h, err := s.API.Health(ctx)
		if err != nil {
			return -1, fmt.Errorf("health of %s: %w", s.ID, err)
		}
		if h.Leader == "" || (leader != "" && h.Leader != leader) {
			return -1, fmt.Errorf("no agreed leader (%s says %q, others %q)", s.ID, h.Leader, leader)
		}
		leader = h.Leader
	}
	i := c.Index(leader)
	switch {
	case i < 0:
		return -1, fmt.Errorf("leader %q is not one of %v", leader, c.IDs())
	case c.Servers[i].Proc.Exited():
		return -1, fmt.Errorf("the servers still name %s, which has exited, as leader", leader)
	}
	return i, nil
}

// WaitLeader waits up to a minute until the live servers agree on a
// leader and returns its index.
func (c *MeteorCluster) WaitLeader(ctx context.Context) (int, error) {
	idx := -1
	err := WaitFor(ctx, time.Minute, 100*time.Millisecond, nil, func(ctx context.Context) error {
		var err error
		idx, err = c.Leader(ctx)
		return err
	})
	return idx, err
}

// RaftTerm returns the highest Raft term of the servers that answer (a
// killed one does not): the elections held in a period are its growth
// (Elections).
func (c *MeteorCluster) RaftTerm(ctx context.Context) (uint64, error) {
	return RaftTerm(ctx, c.clients())
}

// CommitIndex returns the highest Raft commit index of the servers that
// answer (api.HighestCommitIndex): the entries committed in a period are
// its growth.
func (c *MeteorCluster) CommitIndex(ctx context.Context) (uint64, error) {
	return api.HighestCommitIndex(ctx, c.clients())
}

// clients returns the API clients of every server, stopped ones included.
func (c *MeteorCluster) clients() []*api.Client {
	clients := make([]*api.Client, len(c.Servers))
	for i, s := range c.Servers {
		clients[i] = s.API
	}
	return clients
}

// ElectionsSince returns the elections held since the highest Raft term
// was start.
func (c *MeteorCluster) ElectionsSince(ctx context.Context, start uint64) (int, error) {
	end, err := c.RaftTerm(ctx)
	if err != nil {
		return 0, err
	}
	return Elections(start, end), nil
}

// ElectionsSinceStart returns the elections held since StartMeteor
// returned.
func (c *MeteorCluster) ElectionsSinceStart(ctx context.Context) (int, error) {
	return c.ElectionsSince(ctx, c.term0)
}

// CPUTime sums the CPU time the servers idx have used so far.
func (c *MeteorCluster) CPUTime(idx ...int) (time.Duration, error) {
	var sum time.Duration
	var errs []error
	for _, s := range c.pick(idx) {
		d, err := s.Proc.CPUTime()
		if err != nil {
			errs = append(errs, fmt.Errorf("CPU time of %s: %w", s.ID, err))
		}
		sum += d
	}
	return sum, errors.Join(errs...)
}

// Kill sends SIGKILL to server i's process group.
func (c *MeteorCluster) Kill(i int) error { return c.Servers[i].Proc.Kill() }

// Exited returns an error naming the first server process that exited.
func (c *MeteorCluster) Exited() error {
	for _, s := range c.Servers {
		if s.Proc.Exited() {
			return fmt.Errorf("%s exited (%v); last log lines:\n%s", s.ID, s.Proc.Err(), s.Proc.LogTail(20))
		}
	}
	return nil
}

// WaitRevision waits up to 30 s for each of the servers idx to have
// applied revision rev to its replica.
func (c *MeteorCluster) WaitRevision(ctx context.Context, rev uint64, idx ...int) error {
	for _, s := range c.pick(idx) {
		err := WaitFor(ctx, 30*time.Second, 20*time.Millisecond, s.Proc, func(ctx context.Context) error {
			h, err := s.API.Health(ctx)
			if err != nil {
				return err
			}
			if h.Revision < rev {
				return fmt.Errorf("at revision %d, want %d", h.Revision, rev)
			}
			return nil
		})
		if err != nil {
			return fmt.Errorf("meteor server %s: %w", s.ID, err)
		}
	}
	return nil
}

// ErrNotSettled is wrapped by Settle's error when the Raft log has not
// settled in time.
var ErrNotSettled = errors.New("Raft log not settled")

// Settle waits until the live servers agree on a leader, each has applied
// its whole Raft log, and the highest last index has not moved for quiet,
// at most limit (then the error wraps ErrNotSettled). Errors while there
// is no leader (an election) are retried. It returns the highest last
// index.
func (c *MeteorCluster) Settle(ctx context.Context, quiet, limit time.Duration) (uint64, error) {
	const poll = 250 * time.Millisecond
	deadline := time.Now().Add(limit)
	var last uint64
	stable := 0
	var lastErr error
	for time.Duration(stable)*poll < quiet {
		if time.Now().After(deadline) {
			return 0, fmt.Errorf("%w after %s: %v", ErrNotSettled, limit, lastErr)
		}
		top, err := c.IndexIfSteady(ctx)
		switch {
		case err != nil:
			stable, lastErr = 0, err
		case top == last:
			stable++
		default:
			stable, last, lastErr = 0, top, fmt.Errorf("last index still moving (%d)", top)
		}
		if err := Sleep(ctx, poll); err != nil {
			return 0, err
		}
	}
	return last, nil
}

// Rest waits until the Raft log has stopped growing for a second (session
// records, acks and status transitions are committed after the devices
// see their answers), going on after a minute if it still grows, then for
// extra. It returns the time it took.
func (c *MeteorCluster) Rest(ctx context.Context, extra time.Duration) (time.Duration, error) {
	start := time.Now()
	if _, err := c.Settle(ctx, time.Second, time.Minute); err != nil && !errors.Is(err, ErrNotSettled) {
		return 0, err
	}
	if err := Sleep(ctx, extra); err != nil {
		return 0, err
	}
	return time.Since(start), nil
}

// IndexIfSteady returns the highest last index of the live servers if they
// agree on a leader and have applied their whole logs.
func (c *MeteorCluster) IndexIfSteady(ctx context.Context) (uint64, error) {
	var top uint64
	leader := ""
	for _, s := range c.Servers {
		if s.Proc.Exited() {
			continue
		}
		h, err := s.API.Health(ctx)
		if err != nil {
			return 0, fmt.Errorf("health of %s: %w", s.ID, err)
		}
		if h.Leader == "" || (leader != "" && h.Leader != leader) {
			return 0, fmt.Errorf("no agreed leader (%s says %q)", s.ID, h.Leader)
		}
		if h.AppliedIndex != h.LastIndex {
			return 0, fmt.Errorf("%s applied %d of %d", s.ID, h.AppliedIndex, h.LastIndex)
		}
		leader, top = h.Leader, max(top, h.LastIndex)
	}
	return top, nil
}

// Sleep waits for d or until ctx ends.
func Sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

package cluster

import (
	"context"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"

	"github.com/meteor-edge/meteor/cluster/api"
	"github.com/meteor-edge/meteor/fsm"
	"github.com/meteor-edge/meteor/fsm/intent"
)

// testCluster is an in-process cluster of real servers: Raft on
// raft-boltdb files in t.TempDir(), TCP and gossip on loopback.
type testCluster struct {
	t       testing.TB
	servers []*Server // nil while a server is stopped
	configs []Config
	tune    func(*Config)
}

// testConfig returns a server config with loopback ports and timings
// tightened so elections and failure detection take well under a second,
// with headroom for -race on a busy machine.
func testConfig(t testing.TB, id string) Config {
	cfg := DefaultConfig()
	cfg.NodeID = id
	cfg.Region = "eu"
	cfg.DataDir = filepath.Join(t.TempDir(), id)
	cfg.HTTPAddr, cfg.RaftAddr, cfg.GossipAddr = "127.0.0.1:0", "127.0.0.1:0", "127.0.0.1:0"
	cfg.ApplyTimeout = 5 * time.Second
	cfg.Logger = hclog.New(&hclog.LoggerOptions{Name: id, Level: hclog.Warn, Output: testWriter{t}})
	LoopbackTimings(&cfg)
	return cfg
}

// testWriter routes logs to t.Log, and drops them once the test is over.
type testWriter struct{ t testing.TB }

var testDone sync.Map

func (w testWriter) Write(p []byte) (int, error) {
	if _, done := testDone.Load(w.t); !done {
		w.t.Helper()
		w.t.Log(string(p))
	}
	return len(p), nil
}

func newTestCluster(t testing.TB, n int, tune func(*Config)) *testCluster {
	t.Helper()
	c := &testCluster{t: t, tune: tune}
	t.Cleanup(func() {
		c.shutdownAll()
		testDone.Store(t, true)
	})
	for i := range n {
		cfg := testConfig(t, fmt.Sprintf("s%d", i+1))
		cfg.BootstrapExpect = n
		if i > 0 {
			cfg.Join = []string{c.servers[0].GossipAddr()}
		}
		if tune != nil {
			tune(&cfg)
		}
		c.start(cfg)
	}
	c.waitLeader()
	return c
}

// start starts a server and records its bound addresses so a restart
// reuses them.
func (c *testCluster) start(cfg Config) *Server {
	c.t.Helper()
	s, err := New(cfg)
	if err != nil {
		c.t.Fatalf("start %s: %v", cfg.NodeID, err)
	}
	cfg.HTTPAddr, cfg.RaftAddr, cfg.GossipAddr = s.HTTPAddr(), s.RaftAddr(), s.GossipAddr()
	for i, have := range c.configs {
		if have.NodeID == cfg.NodeID {
			c.configs[i], c.servers[i] = cfg, s
			return s
		}
	}
	c.configs = append(c.configs, cfg)
	c.servers = append(c.servers, s)
	return s
}

// add starts a new server that joins the running cluster.
func (c *testCluster) add(id string) *Server {
	c.t.Helper()
	cfg := testConfig(c.t, id)
	cfg.Join = []string{c.alive()[0].GossipAddr()}
	if c.tune != nil {
		c.tune(&cfg)
	}
	return c.start(cfg)
}

// kill stops server i abruptly (no leave), like a crash or kill -9: the
// data dir keeps whatever was fsynced.
func (c *testCluster) kill(i int) {
	c.t.Helper()
	if err := c.servers[i].Shutdown(); err != nil {
		c.t.Logf("shutdown %s: %v", c.configs[i].NodeID, err)
	}
	c.servers[i] = nil
}

// restart starts server i again from its data dir and addresses.
func (c *testCluster) restart(i int) *Server {
	c.t.Helper()
	cfg := c.configs[i]
	cfg.BootstrapExpect = 0
	if a := c.alive(); len(a) > 0 {
		cfg.Join = []string{a[0].GossipAddr()}
	}
	return c.start(cfg)
}

func (c *testCluster) alive() []*Server {
	var out []*Server
	for _, s := range c.servers {
		if s != nil {
			out = append(out, s)
		}
	}
	return out
}

func (c *testCluster) shutdownAll() {
	var wg sync.WaitGroup
	for i, s := range c.servers {
		if s == nil {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			s.Shutdown()
		}()
		c.servers[i] = nil
	}
	wg.Wait()
}

// waitLeader waits until exactly one alive server leads and every alive
// server agrees on it, and returns it.
func (c *testCluster) waitLeader() *Server {
	c.t.Helper()
	var leader *Server
	waitFor(c.t, 20*time.Second, func() error {
		leader = nil
		for _, s := range c.alive() {
			if s.IsLeader() {
				if leader != nil {
					return fmt.Errorf("two leaders: %s and %s", leader.ID(), s.ID())
				}
				leader = s
			}
		}
		if leader == nil {
			return fmt.Errorf("no leader")
		}
		for _, s := range c.alive() {
			if _, id := s.raft.LeaderWithID(); string(id) != leader.ID() {
				return fmt.Errorf("%s thinks the leader is %q, not %s", s.ID(), id, leader.ID())
			}
		}
		if !leader.readyForReads.Load() {
			return fmt.Errorf("leader %s not ready for reads", leader.ID())
		}
		return nil
	})
	return leader
}

func (c *testCluster) follower() *Server {
	c.t.Helper()
	leader := c.waitLeader()
	for _, s := range c.alive() {
		if s != leader {
			return s
		}
	}
	c.t.Fatal("no follower")
	return nil
}

func (c *testCluster) index(s *Server) int {
	for i, have := range c.servers {
		if have == s {
			return i
		}
	}
	c.t.Fatalf("server %s not in cluster", s.ID())
	return -1
}

// waitConverged waits until every alive server has applied the same log
// and holds the same state, and returns that state's hash.
func (c *testCluster) waitConverged() string {
	c.t.Helper()
	var hash string
	waitFor(c.t, 20*time.Second, func() error {
		leader := c.waitLeader()
		want := leader.raft.LastIndex()
		hash = ""
		for _, s := range c.alive() {
			if got := s.raft.AppliedIndex(); got < want {
				return fmt.Errorf("%s applied %d of %d", s.ID(), got, want)
			}
			h, err := s.State().Hash()
			if err != nil {
				return err
			}
			if hash != "" && h != hash {
				return fmt.Errorf("%s has a different state", s.ID())
			}
			hash = h
		}
		return nil
	})
	return hash
}

func (c *testCluster) voters() []string {
	c.t.Helper()
	f := c.waitLeader().raft.GetConfiguration()
	if err := f.Error(); err != nil {
		c.t.Fatal(err)
	}
	var ids []string
	for _, s := range f.Configuration().Servers {
		if s.Suffrage == raft.Voter {
			ids = append(ids, string(s.ID))
		}
	}
	return ids
}

// waitFor retries check until it returns nil or the deadline passes. It
// polls: the conditions are about other goroutines and processes.
func waitFor(t testing.TB, limit time.Duration, check func() error) {
	t.Helper()
	deadline := time.Now().Add(limit)
	var err error
	for time.Now().Before(deadline) {
		if err = check(); err == nil {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("condition not met after %s: %v", limit, err)
}

func client(s *Server) *api.Client { return api.NewClient(s.HTTPAddr(), nil) }

func simpleIntent(name, value string) *intent.Intent {
	return &intent.Intent{
		Name:     name,
		Selector: map[string]string{"region": "eu"},
		Resources: []intent.Resource{{
			ID: "motd", Type: "file", Spec: map[string]any{"path": "/etc/motd", "content": value},
		}},
	}
}

func putDoc(t testing.TB, in *intent.Intent) []byte {
	t.Helper()
	b, err := in.Canonical()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// propose writes an intent through the leader's Go API, retrying on
// whichever server leads if leadership moves (the writes tests make this
// way are idempotent).
func (c *testCluster) propose(in *intent.Intent) fsm.ApplyResult {
	c.t.Helper()
	var res fsm.ApplyResult
	waitFor(c.t, 20*time.Second, func() error {
		var err error
		res, _, err = c.waitLeader().Propose(context.Background(), fsm.PutIntentType, &fsm.PutIntentRequest{Intent: in, Time: time.Now().UnixNano()})
		if err == nil {
			err = res.Err
		}
		return err
	})
	return res
}

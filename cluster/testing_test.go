package cluster

import (
	"context"
	"fmt"
	"net/http"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"

	"github.com/meteor-edge/meteor/cluster/api"
	"github.com/meteor-edge/meteor/fsm"
	"github.com/meteor-edge/meteor/fsm/intent"
	"github.com/meteor-edge/meteor/scheduler"

	"github.com/meteor-edge/meteor/chaos/chaostest"
)

// testCluster is a Local cluster with helpers that fail the test: Raft on
// raft-boltdb files in t.TempDir(), TCP and gossip on loopback.
type testCluster struct {
	*Local
	t testing.TB
}

// testConfig returns the config of a server on its own, with loopback
// ports and LoopbackTimings, logging to t.
func testConfig(t testing.TB, id string) Config {
	cfg := DefaultConfig()
	cfg.NodeID = id
	cfg.Region = "eu"
	cfg.DataDir = filepath.Join(t.TempDir(), id)
	cfg.HTTPAddr, cfg.RaftAddr, cfg.GossipAddr = "127.0.0.1:0", "127.0.0.1:0", "127.0.0.1:0"
	cfg.ApplyTimeout = 5 * time.Second
	cfg.Logger = testLogger(t, id)
	LoopbackTimings(&cfg)
	return cfg
}

// testAgentClasses are the built-in classes at the cadences the tests'
// agents run at (startAgent): servers push their classes to agents of
// protocol 1.4, whose own cadences they replace.
func testAgentClasses() scheduler.Classes {
	classes := scheduler.DefaultClasses()
	for name, cl := range classes {
		cl.PullInterval, cl.ProbeInterval, cl.ReportInterval = 2*time.Second, time.Second, time.Second
		cl.RetryBase, cl.RetryMax, cl.RetryJitter = 50*time.Millisecond, 500*time.Millisecond, 0
		classes[name] = cl
	}
	return classes
}

func testLogger(t testing.TB, id string) hclog.Logger {
	return chaostest.Logger(t, id, hclog.Warn)
}

// newTestCluster starts n servers s1...sn; tune, if set, adjusts each
// server's config.
func newTestCluster(t testing.TB, n int, tune func(*Config)) *testCluster {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	l, err := StartLocal(ctx, LocalOptions{
		Servers: n,
		Dir:     t.TempDir(),
		Logger:  func(id string) hclog.Logger { return testLogger(t, id) },
		Configure: func(_ int, cfg *Config) {
			cfg.ApplyTimeout = 5 * time.Second
			cfg.Classes = testAgentClasses()
			if tune != nil {
				tune(cfg)
			}
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	c := &testCluster{Local: l, t: t}
	t.Cleanup(func() {
		if err := l.Close(); err != nil {
			t.Logf("close: %v", err)
		}
	})
	return c
}

// add starts a new server that joins the running cluster.
func (c *testCluster) add() *Server {
	c.t.Helper()
	i, err := c.Add()
	if err != nil {
		c.t.Fatal(err)
	}
	return c.Server(i)
}

// kill stops server i abruptly (no leave), like a crash or kill -9: the
// data dir keeps whatever was fsynced.
func (c *testCluster) kill(i int) {
	c.t.Helper()
	if err := c.Stop(i); err != nil {
		c.t.Logf("kill: %v", err)
	}
}

// restart starts server i again from its data dir and addresses.
func (c *testCluster) restart(i int) *Server {
	c.t.Helper()
	s, err := c.Restart(i)
	if err != nil {
		c.t.Fatal(err)
	}
	return s
}

func (c *testCluster) alive() []*Server {
	var out []*Server
	for _, s := range c.Servers() {
		if s != nil {
			out = append(out, s)
		}
	}
	return out
}

// waitLeader waits until exactly one alive server leads, every alive
// server agrees on it and it serves linearizable reads, and returns it.
func (c *testCluster) waitLeader() *Server {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	i, err := c.Leader(ctx)
	if err != nil {
		c.t.Fatal(err)
	}
	return c.Server(i)
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
	for i, have := range c.Servers() {
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

// waitCaughtUp waits until every live server has applied every entry
// committed by now. Unlike waitConverged it does not chase a log
// that writes keep extending: with a write every few milliseconds a
// follower is, at any instant, often one entry behind, and on a busy
// host it may be at every poll.
func (c *testCluster) waitCaughtUp() {
	c.t.Helper()
	c.waitLeader()
	// The highest commit index any server knows: every entry committed by
	// now is at or below it, even one committed by a leader that has
	// since been deposed (whose last index may be behind its successor's).
	var want uint64
	for _, s := range c.alive() {
		want = max(want, s.raft.CommitIndex())
	}
	waitFor(c.t, 20*time.Second, func() error {
		for _, s := range c.alive() {
			if got := s.raft.AppliedIndex(); got < want {
				return fmt.Errorf("%s applied %d of %d", s.ID(), got, want)
			}
		}
		return nil
	})
}

func (c *testCluster) voters() []string {
	c.t.Helper()
	return votersOf(c.t, c.waitLeader())
}

// votersOf lists the voters of s's Raft configuration.
func votersOf(t testing.TB, s *Server) []string {
	t.Helper()
	f := s.raft.GetConfiguration()
	if err := f.Error(); err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, srv := range f.Configuration().Servers {
		if srv.Suffrage == raft.Voter {
			ids = append(ids, string(srv.ID))
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

// client returns an API client for s that trusts its cluster's CA.
func client(s *Server) *api.Client { return api.NewClient(s.HTTPURL(), operatorClient(s)) }

// operatorClients holds one HTTP client per cluster CA (operatorClient).
var operatorClients sync.Map // *x509.CertPool -> *http.Client

// operatorClient returns an HTTP client that trusts the servers of s's
// cluster as an operator's would (OperatorTLS), presenting no
// certificate; the default client for a server without TLS.
func operatorClient(s *Server) *http.Client {
	if s.config.PeerTLS == nil {
		return http.DefaultClient
	}
	pool := s.config.PeerTLS.CAs
	hc, _ := operatorClients.LoadOrStore(pool, &http.Client{Timeout: 30 * time.Second,
		Transport: &http.Transport{TLSClientConfig: OperatorTLS(pool), IdleConnTimeout: 10 * time.Second}})
	return hc.(*http.Client)
}

// internalGet sends GET path to server to as server from would: over its
// mutual TLS, naming itself, signed with the cluster secret.
func internalGet(t testing.TB, from, to *Server, path string) *http.Response {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, to.HTTPURL()+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set(headerForwarded, from.ID())
	if err := from.peers.signForwarded(req, fsm.Actor{}, time.Now()); err != nil {
		t.Fatal(err)
	}
	resp, err := from.peers.hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

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

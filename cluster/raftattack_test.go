package cluster

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"

	"github.com/meteor-edge/meteor/cluster/api"
	"github.com/meteor-edge/meteor/cluster/pki"
	"github.com/meteor-edge/meteor/fsm"
)

// foreignLayer dials with a TLS client certificate of another CA (or
// none): what an attacker on the network can present.
type foreignLayer struct {
	net.Listener
	conf *tls.Config // nil: plain TCP
}

func (l foreignLayer) Dial(addr raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	c, err := net.DialTimeout("tcp", string(addr), timeout)
	if err != nil || l.conf == nil {
		return c, err
	}
	tc := tls.Client(c, l.conf)
	tc.SetDeadline(time.Now().Add(timeout))
	if err := tc.Handshake(); err != nil {
		c.Close()
		return nil, err
	}
	tc.SetDeadline(time.Time{})
	return tc, nil
}

// TestRaftRefusesForgedLeader sends a follower the AppendEntries of a
// made-up leader with a higher term, and the leader a term+1 RequestVote
// meant to depose it, over plain TCP and over TLS with another CA's
// server certificate. Every attempt must fail, and no server's term,
// leader or log may change.
func TestRaftRefusesForgedLeader(t *testing.T) {
	c := newTestCluster(t, 3, nil)
	c.propose(simpleIntent("motd", "v1"))
	hash := c.waitConverged()
	leader := c.waitLeader()
	follower := c.follower()
	term := leader.raft.CurrentTerm()
	index := leader.raft.LastIndex()

	foreign, err := pki.NewCA("attacker CA", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	evil, err := foreign.IssueServer("evil", []string{"127.0.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	for name, conf := range map[string]*tls.Config{
		"plain TCP":  nil,
		"another CA": {Certificates: []tls.Certificate{evil}, InsecureSkipVerify: true, MinVersion: tls.VersionTLS13},
	} {
		t.Run(name, func(t *testing.T) {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			tr := raft.NewNetworkTransportWithConfig(&raft.NetworkTransportConfig{
				Stream: foreignLayer{ln, conf}, MaxPool: 1, Timeout: 2 * time.Second,
				Logger: hclog.NewNullLogger(),
			})
			defer tr.Close()
			defer tr.CloseStreams()

			entry, err := fsm.Encode(fsm.PutIntentType, &fsm.PutIntentRequest{Intent: simpleIntent("evil", "/bin/sh"), Time: time.Now().UnixNano()})
			if err != nil {
				t.Fatal(err)
			}
			ae := &raft.AppendEntriesRequest{
				RPCHeader:    raft.RPCHeader{ProtocolVersion: raft.ProtocolVersionMax, ID: []byte("evil"), Addr: []byte(ln.Addr().String())},
				Term:         term + 1,
				PrevLogEntry: index, PrevLogTerm: term,
				Entries:           []*raft.Log{{Index: index + 1, Term: term + 1, Type: raft.LogCommand, Data: entry}},
				LeaderCommitIndex: index + 1,
			}
			var aeResp raft.AppendEntriesResponse
			if err := tr.AppendEntries(raft.ServerID(follower.ID()), raft.ServerAddress(follower.RaftAddr()), ae, &aeResp); err == nil {
				t.Errorf("the follower answered a forged AppendEntries: %+v", aeResp)
			}
			rv := &raft.RequestVoteRequest{
				RPCHeader: raft.RPCHeader{ProtocolVersion: raft.ProtocolVersionMax, ID: []byte("evil"), Addr: []byte(ln.Addr().String())},
				Term:      term + 1, LastLogIndex: index + 10, LastLogTerm: term,
			}
			var rvResp raft.RequestVoteResponse
			if err := tr.RequestVote(raft.ServerID(leader.ID()), raft.ServerAddress(leader.RaftAddr()), rv, &rvResp); err == nil {
				t.Errorf("the leader answered a forged RequestVote: %+v", rvResp)
			}
		})
	}

	// Nothing moved: the same leader in the same term, no entry from the
	// attacker, the same state everywhere.
	if got := c.waitLeader(); got != leader {
		t.Errorf("leader is %s, was %s", got.ID(), leader.ID())
	}
	for _, s := range c.alive() {
		if got := s.raft.CurrentTerm(); got != term {
			t.Errorf("%s: term %d, was %d", s.ID(), got, term)
		}
		if _, err := s.State().Read().Intent(nil, "evil"); !errors.Is(err, fsm.ErrNotFound) {
			t.Errorf("%s holds the forged intent", s.ID())
		}
	}
	if got := c.waitConverged(); got != hash {
		t.Error("the state changed")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := client(leader).ListIntents(ctx, api.ReadOptions{}); err != nil {
		t.Fatal(fmt.Errorf("the cluster serves no reads after the attack: %w", err))
	}
}

// TestRogueGossipMemberIsNotAddedToRaft: a server that got into gossip
// (with the gossip key) but holds another CA's certificate, or the
// cluster CA's certificate of another node ID than it announces, is not
// made a voter; a genuine server joining after it is.
func TestRogueGossipMemberIsNotAddedToRaft(t *testing.T) {
	c := newTestCluster(t, 3, nil)
	foreign, err := pki.NewCA("attacker CA", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	other, err := c.CA().IssueServer("s2", []string{"127.0.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	evil, err := foreign.IssueServer("rogue-1", []string{"127.0.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	rogues := map[string]*PeerTLS{
		"rogue-1": {CAs: foreign.Pool(), Certificate: evil}, // another CA
		"rogue-2": {CAs: c.CA().Pool(), Certificate: other}, // s2's certificate
	}
	for id, peer := range rogues {
		cfg := testConfig(t, id)
		cfg.Join = []string{c.Server(0).GossipAddr()}
		cfg.GossipKey = c.GossipKey()
		cfg.PeerTLS = peer
		s, err := New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Shutdown() })
	}
	leader := c.waitLeader()
	waitFor(t, 20*time.Second, func() error {
		alive := 0
		for _, m := range leader.members() {
			if _, rogue := rogues[m.ID]; rogue && m.State == 0 { // memberlist.StateAlive
				alive++
			}
		}
		if alive < len(rogues) {
			return fmt.Errorf("the leader's gossip sees %d of %d rogues", alive, len(rogues))
		}
		return nil
	})
	// A genuine server joins after them: once it is a voter, the leader's
	// reconcile loop has considered the rogues too.
	c.add()
	waitFor(t, 20*time.Second, func() error {
		if v := c.voters(); len(v) != 4 {
			return fmt.Errorf("voters %v", v)
		}
		return nil
	})
	for _, v := range c.voters() {
		if _, rogue := rogues[v]; rogue {
			t.Errorf("rogue %s was made a voter", v)
		}
	}
}

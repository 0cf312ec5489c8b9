package chaos

import (
	"bytes"
	"encoding/gob"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
)

// listFSM records applied commands in order. A command applied again (a
// client retrying after losing track of a leader) changes nothing.
type listFSM struct {
	mu      sync.Mutex
	applied []string
}

func (f *listFSM) Apply(l *raft.Log) any {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !slices.Contains(f.applied, string(l.Data)) {
		f.applied = append(f.applied, string(l.Data))
	}
	return nil
}

func (f *listFSM) Snapshot() (raft.FSMSnapshot, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return listSnapshot(slices.Clone(f.applied)), nil
}

func (f *listFSM) Restore(rc io.ReadCloser) error {
	defer rc.Close()
	var list []string
	if err := gob.NewDecoder(rc).Decode(&list); err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.applied = list
	return nil
}

func (f *listFSM) list() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.applied)
}

type listSnapshot []string

func (s listSnapshot) Persist(sink raft.SnapshotSink) error {
	var buf bytes.Buffer
	if err := gob.NewEncoder(&buf).Encode([]string(s)); err != nil {
		sink.Cancel()
		return err
	}
	if _, err := sink.Write(buf.Bytes()); err != nil {
		sink.Cancel()
		return err
	}
	return sink.Close()
}

func (listSnapshot) Release() {}

type raftNode struct {
	id    string
	raft  *raft.Raft
	fsm   *listFSM
	trans *raft.NetworkTransport
}

// startRaftCluster starts and bootstraps one Raft node per ID, all talking
// through network, with test-sized timeouts. Cleanup shuts them down.
func startRaftCluster(t *testing.T, network *Network, ids ...string) []*raftNode {
	t.Helper()
	logger := testLogger(t, "raft", hclog.Error)
	var nodes []*raftNode
	var servers []raft.Server
	for _, id := range ids {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		trans := raft.NewNetworkTransportWithConfig(&raft.NetworkTransportConfig{
			Stream:                network.StreamLayer(id, ln),
			ServerAddressProvider: network,
			MaxPool:               3,
			Timeout:               time.Second,
			Logger:                logger.Named(id),
		})
		nodes = append(nodes, &raftNode{id: id, fsm: &listFSM{}, trans: trans})
		servers = append(servers, raft.Server{ID: raft.ServerID(id), Address: trans.LocalAddr()})
	}
	t.Cleanup(func() {
		for _, n := range nodes {
			if n.raft != nil {
				if err := n.raft.Shutdown().Error(); err != nil {
					t.Errorf("shutdown %s: %v", n.id, err)
				}
			}
			n.trans.Close()
		}
		network.Close()
	})
	for _, n := range nodes {
		conf := raft.DefaultConfig()
		conf.LocalID = raft.ServerID(n.id)
		conf.HeartbeatTimeout = 300 * time.Millisecond
		conf.ElectionTimeout = 300 * time.Millisecond
		conf.LeaderLeaseTimeout = 100 * time.Millisecond
		conf.CommitTimeout = 10 * time.Millisecond
		conf.Logger = logger.Named(n.id)
		store := raft.NewInmemStore()
		r, err := raft.NewRaft(conf, n.fsm, store, store, raft.NewInmemSnapshotStore(), n.trans)
		if err != nil {
			t.Fatalf("raft %s: %v", n.id, err)
		}
		n.raft = r
		if err := r.BootstrapCluster(raft.Configuration{Servers: servers}).Error(); err != nil {
			t.Fatalf("bootstrap %s: %v", n.id, err)
		}
	}
	return nodes
}

// leaderOf waits until exactly one of nodes is leader and every node in
// nodes names it, and returns it.
func leaderOf(t *testing.T, network *Network, nodes []*raftNode, timeout time.Duration) *raftNode {
	t.Helper()
	var leader *raftNode
	waitFor(t, timeout, fmt.Sprintf("one leader agreed by %d nodes (network: %s)", len(nodes), network), func() bool {
		leader = nil
		for _, n := range nodes {
			if n.raft.State() == raft.Leader {
				if leader != nil {
					return false
				}
				leader = n
			}
		}
		if leader == nil {
			return false
		}
		for _, n := range nodes {
			if _, id := n.raft.LeaderWithID(); string(id) != leader.id {
				return false
			}
		}
		return true
	})
	return leader
}

// apply commits cmd through whichever of nodes leads, retrying while
// leadership moves (a loaded machine makes short timeouts fire).
func apply(t *testing.T, network *Network, nodes []*raftNode, cmd string) *raftNode {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		leader := leaderOf(t, network, nodes, time.Until(deadline))
		err := leader.raft.Apply([]byte(cmd), 2*time.Second).Error()
		switch {
		case err == nil:
			return leader
		case time.Now().After(deadline):
			t.Fatalf("apply %q: %v", cmd, err)
		case errors.Is(err, raft.ErrNotLeader), errors.Is(err, raft.ErrLeadershipLost),
			errors.Is(err, raft.ErrEnqueueTimeout):
			t.Logf("apply %q on %s: %v; retrying", cmd, leader.id, err)
		default:
			t.Fatalf("apply %q on %s: %v", cmd, leader.id, err)
		}
	}
}

func without(nodes []*raftNode, skip *raftNode) []*raftNode {
	var out []*raftNode
	for _, n := range nodes {
		if n != skip {
			out = append(out, n)
		}
	}
	return out
}

func TestRaftPartitionedLeaderLosesLeadership(t *testing.T) {
	log := NewFaultLog()
	network := NewNetwork(1, log, WithLogger(testLogger(t, "network", hclog.Warn)))
	nodes := startRaftCluster(t, network, "s1", "s2", "s3")

	old := apply(t, network, nodes, "before")

	network.Isolate(old.id)
	majority := without(nodes, old)
	leader := leaderOf(t, network, majority, 10*time.Second)
	if leader == old {
		t.Fatal("isolated node leads the majority")
	}
	waitFor(t, 5*time.Second, "isolated leader to step down", func() bool {
		return old.raft.State() != raft.Leader
	})
	apply(t, network, majority, "during")
	if got := old.fsm.list(); slices.Contains(got, "during") {
		t.Fatalf("isolated %s applied %v", old.id, got)
	}
	if log.Count(KindCut) == 0 {
		t.Fatalf("no traffic was cut: %s", log)
	}

	network.Heal()
	apply(t, network, nodes, "after")
	want := []string{"before", "during", "after"}
	waitFor(t, 10*time.Second, "all FSMs to agree", func() bool {
		for _, n := range nodes {
			if !slices.Equal(n.fsm.list(), want) {
				return false
			}
		}
		return true
	})
}

// streamPair returns two stream layers of network, "a" and "b".
func streamPair(t *testing.T, network *Network) (a, b raft.StreamLayer) {
	t.Helper()
	for _, id := range []string{"a", "b"} {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		s := network.StreamLayer(id, ln)
		t.Cleanup(func() { s.Close() })
		if id == "a" {
			a = s
		} else {
			b = s
		}
	}
	t.Cleanup(func() { network.Close() })
	return a, b
}

// connect dials from to to and returns both ends.
func connect(t *testing.T, from, to raft.StreamLayer) (dialed, accepted net.Conn) {
	t.Helper()
	dialed, err := from.Dial(raft.ServerAddress(to.Addr().String()), time.Second)
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	accepted, err = to.Accept()
	if err != nil {
		t.Fatalf("accept: %v", err)
	}
	return dialed, accepted
}

func roundTrip(t *testing.T, w, r net.Conn, msg string) {
	t.Helper()
	if _, err := w.Write([]byte(msg)); err != nil {
		t.Fatalf("write %q: %v", msg, err)
	}
	buf := make([]byte, len(msg))
	r.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.ReadFull(r, buf); err != nil || string(buf) != msg {
		t.Fatalf("read %q: %q, %v", msg, buf, err)
	}
}

func TestNetworkPartitionCutsConnectionsAndDials(t *testing.T) {
	network := NewNetwork(1, nil)
	a, b := streamPair(t, network)
	ab, ba := connect(t, a, b)
	roundTrip(t, ab, ba, "hello")
	roundTrip(t, ba, ab, "world")

	// A reader blocked when the partition starts is woken by the closure.
	readErr := make(chan error, 1)
	go func() {
		_, err := ba.Read(make([]byte, 1))
		readErr <- err
	}()
	network.Partition([]string{"a"}, []string{"b"})
	if err := <-readErr; err == nil {
		t.Fatal("read across a new partition succeeded")
	}
	if _, err := ab.Write([]byte("x")); !errors.Is(err, ErrPartitioned) {
		t.Fatalf("write across partition: %v, want ErrPartitioned", err)
	}
	if _, err := a.Dial(raft.ServerAddress(b.Addr().String()), time.Second); !errors.Is(err, ErrPartitioned) {
		t.Fatalf("dial across partition: %v, want ErrPartitioned", err)
	}
	if network.Reachable("a", "b") || network.Reachable("b", "a") {
		t.Fatal("Reachable across a partition")
	}

	// Unlisted nodes share a group: "c" is with neither a nor b here, but
	// Partition([]string{"a"}) puts b with every other node.
	network.Partition([]string{"a"})
	if network.Reachable("a", "b") || !network.Reachable("b", "c") {
		t.Fatalf("Partition([a]) table: %s", network)
	}

	network.Heal()
	ab, ba = connect(t, a, b)
	roundTrip(t, ab, ba, "healed")
}

func TestNetworkCutOneWay(t *testing.T) {
	network := NewNetwork(1, nil)
	a, b := streamPair(t, network)
	network.CutOneWay("a", "b")

	if _, err := a.Dial(raft.ServerAddress(b.Addr().String()), time.Second); !errors.Is(err, ErrPartitioned) {
		t.Fatalf("a dialing b across a->b cut: %v, want ErrPartitioned", err)
	}
	// b can still call a: the request arrives, the response fails.
	ba, ab := connect(t, b, a)
	roundTrip(t, ba, ab, "request")
	if _, err := ab.Write([]byte("response")); !errors.Is(err, ErrPartitioned) {
		t.Fatalf("a responding across a->b cut: %v, want ErrPartitioned", err)
	}
	ba.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := ba.Read(make([]byte, 1)); err == nil {
		t.Fatal("b read a response across a->b cut")
	}
}

func TestNetworkDelayAndDropRate(t *testing.T) {
	log := NewFaultLog()
	network := NewNetwork(1, log)
	a, b := streamPair(t, network)
	ab, ba := connect(t, a, b)

	const delay = 50 * time.Millisecond
	network.SetDelay("a", "b", delay)
	start := time.Now()
	roundTrip(t, ab, ba, "slow")
	if el := time.Since(start); el < delay {
		t.Fatalf("delayed write arrived after %v, want at least %v", el, delay)
	}
	roundTrip(t, ba, ab, "fast reverse") // b->a is not delayed (not asserted: timing)
	network.SetDelay("a", "b", 0)
	roundTrip(t, ab, ba, "in order after the delay is removed")

	network.SetDropRate("a", "b", 1)
	if _, err := ab.Write([]byte("x")); !errors.Is(err, ErrDropped) {
		t.Fatalf("write at drop rate 1: %v, want ErrDropped", err)
	}
	if _, err := a.Dial(raft.ServerAddress(b.Addr().String()), time.Second); !errors.Is(err, ErrDropped) {
		t.Fatalf("dial at drop rate 1: %v, want ErrDropped", err)
	}
	network.SetDropRate("a", "b", 0)
	ab, ba = connect(t, a, b)
	roundTrip(t, ab, ba, "ok")
	if log.Count(KindDelay) == 0 || log.Count(KindDrop) != 2 {
		t.Fatalf("fault counts: %s", log)
	}
}

func TestStreamLayerSkipsConnectionsWithoutPreamble(t *testing.T) {
	network := NewNetwork(1, nil, WithDialTimeout(200*time.Millisecond))
	a, b := streamPair(t, network)
	raw, err := net.Dial("tcp", b.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	if _, err := raw.Write([]byte("GET / HTTP/1.0\r\n\r\n")); err != nil {
		t.Fatal(err)
	}
	silent, err := net.Dial("tcp", b.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	// Neither blocks a well-behaved dialer.
	ab, ba := connect(t, a, b)
	roundTrip(t, ab, ba, "ok")
	if id, ok := network.Node(b.Addr().String()); !ok || id != "b" {
		t.Fatalf("Node(%s) = %q, %v", b.Addr(), id, ok)
	}
	if addr, err := network.ServerAddr("b"); err != nil || string(addr) != b.Addr().String() {
		t.Fatalf("ServerAddr(b) = %q, %v", addr, err)
	}
}

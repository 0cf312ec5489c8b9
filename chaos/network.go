package chaos

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
)

var (
	// ErrPartitioned is returned (wrapped) by dials, reads and writes across
	// a cut link of a Network.
	ErrPartitioned = errors.New("chaos: link partitioned")
	// ErrDropped is returned (wrapped) by a dial or write that a drop rate
	// discarded; the connection is closed with it.
	ErrDropped = errors.New("chaos: message dropped")
)

// Network is the partition table of one in-process cluster. The Raft stream
// layers and memberlist transports it creates consult it on every dial,
// read, write and datagram, so a test can partition, isolate, cut one way,
// slow down or thin out the links between nodes and heal them again.
//
// Nodes are named by ID (the Raft server ID, and the memberlist node name).
// Each stream layer and transport registers its listening address under its
// node's ID, so either end of every connection and datagram can be named.
// Traffic to or from an address no one registered is never faulted.
//
// Links are directed: "a→b" is what a sends to b. Partitions and isolation
// cut both directions; CutOneWay, SetDelay and SetDropRate act on one.
// Changing the table closes open connections whose link is now cut in
// either direction, so blocked readers notice at once.
type Network struct {
	seed        uint64
	log         *FaultLog
	logger      hclog.Logger
	dialTimeout time.Duration

	mu       sync.Mutex
	addrNode map[string]string      // guarded by mu; listening address → node
	raftAddr map[string]string      // guarded by mu; node → Raft address
	group    map[string]int         // guarded by mu; node → partition group, nil if none
	isolated map[string]bool        // guarded by mu
	cut      map[link]bool          // guarded by mu; one-way cuts
	delay    map[link]time.Duration // guarded by mu
	drop     map[link]float64       // guarded by mu
	rngs     map[link]*rand.Rand    // guarded by mu; per-link random streams
	conns    map[*netConn]struct{}  // guarded by mu; open connections
}

// link is a directed pair of nodes.
type link struct{ from, to string }

func (l link) String() string { return l.from + "->" + l.to }

// NewNetwork returns a fully connected network. seed drives drop rates;
// log (nil to discard) receives every fault and every table change.
func NewNetwork(seed uint64, log *FaultLog, opts ...Option) *Network {
	o := buildOptions(opts)
	return &Network{
		seed:        seed,
		log:         log,
		logger:      o.logger.Named("chaos-network"),
		dialTimeout: o.dialTimeout,
		addrNode:    make(map[string]string),
		raftAddr:    make(map[string]string),
		isolated:    make(map[string]bool),
		cut:         make(map[link]bool),
		delay:       make(map[link]time.Duration),
		drop:        make(map[link]float64),
		rngs:        make(map[link]*rand.Rand),
		conns:       make(map[*netConn]struct{}),
	}
}

// Register names the node listening on addr. Stream layers and memberlist
// transports register themselves; call it for other listeners.
func (n *Network) Register(nodeID, addr string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.addrNode[addr] = nodeID
}

// Node returns the node registered for addr.
func (n *Network) Node(addr string) (string, bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	id, ok := n.addrNode[addr]
	return id, ok
}

func (n *Network) nodeOf(addr string) string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.addrNode[addr]
}

// Partition splits the nodes into groups that cannot reach each other.
// Nodes in no group form one more group together, so Partition([]string{"a"})
// separates a from everyone else and Partition(g1, g2) with g1 and g2
// covering all nodes splits the cluster in two. A node listed twice belongs
// to the last group naming it. Partition replaces any previous partition;
// isolation, one-way cuts, delays and drop rates stay.
func (n *Network) Partition(groups ...[]string) {
	n.change(fmt.Sprintf("partition %v", groups), func() {
		n.group = make(map[string]int)
		for i, g := range groups {
			for _, id := range g {
				n.group[id] = i + 1 // unlisted nodes are group 0
			}
		}
	})
}

// Isolate cuts the given nodes off from every other node, in both
// directions, until Heal.
func (n *Network) Isolate(ids ...string) {
	n.change(fmt.Sprintf("isolate %v", ids), func() {
		for _, id := range ids {
			n.isolated[id] = true
		}
	})
}

// CutOneWay stops everything from sends to to, while to's bytes still reach
// from. For TCP request/response traffic this means:
//   - from cannot dial to (a connection would carry from's requests);
//   - on any connection, a write by from to to fails and closes the
//     connection (requests on connections from dialed, responses on
//     connections to dialed);
//   - to can dial from, and from receives to's requests, but from's
//     responses fail as above, so to sees its calls fail.
//
// In Raft terms, CutOneWay(leader, f) starves f of heartbeats (f starts
// elections) while f's vote requests still reach the leader; memberlist
// datagrams from→to are dropped.
func (n *Network) CutOneWay(from, to string) {
	n.change(fmt.Sprintf("cut %s->%s", from, to), func() {
		n.cut[link{from, to}] = true
	})
}

// SetDelay adds d of latency to everything from writes to to (0 removes
// it). Bytes are delivered in order by a per-connection goroutine, so
// writers are not blocked by the delay; memberlist datagrams are delayed
// the same way. The delay applies to data, not to connection setup.
func (n *Network) SetDelay(from, to string, d time.Duration) {
	n.change(fmt.Sprintf("delay %s->%s %v", from, to, d), func() {
		if d <= 0 {
			delete(n.delay, link{from, to})
		} else {
			n.delay[link{from, to}] = d
		}
	})
}

// SetDropRate makes each dial and write from from to to fail with
// probability p (0 removes it). A TCP stream cannot lose bytes and stay
// usable, so a dropped write closes its connection, which is what Raft sees
// when a lossy link times out an RPC; memberlist datagrams are simply lost.
func (n *Network) SetDropRate(from, to string, p float64) {
	n.change(fmt.Sprintf("drop %s->%s %v", from, to, p), func() {
		if p <= 0 {
			delete(n.drop, link{from, to})
		} else {
			n.drop[link{from, to}] = min(p, 1)
		}
	})
}

// Heal removes every partition, isolation, one-way cut, delay and drop rate.
func (n *Network) Heal() {
	n.change("heal", func() {
		n.group = nil
		clear(n.isolated)
		clear(n.cut)
		clear(n.delay)
		clear(n.drop)
	})
}

// Reachable reports whether from's messages currently reach to.
func (n *Network) Reachable(from, to string) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.reachableLocked(from, to)
}

// Close closes every connection the network's layers opened or accepted
// (NetworkTransport.Close does not close its pooled and accepted ones).
func (n *Network) Close() error {
	n.mu.Lock()
	conns := make([]*netConn, 0, len(n.conns))
	for c := range n.conns {
		conns = append(conns, c)
	}
	n.mu.Unlock()
	for _, c := range conns {
		c.Close()
	}
	return nil
}

// change applies a table update, logs it and closes connections it cuts.
func (n *Network) change(detail string, update func()) {
	n.mu.Lock()
	update()
	n.log.Record(KindPartition, "", "", detail)
	var cut []*netConn
	for c := range n.conns {
		if !n.reachableLocked(c.local, c.remote) || !n.reachableLocked(c.remote, c.local) {
			cut = append(cut, c)
		}
	}
	n.mu.Unlock()
	n.logger.Info("network changed", "change", detail, "closing", len(cut))
	for _, c := range cut {
		n.log.Record(KindCut, c.local, c.remote, c.kind+" connection closed")
		c.Close()
	}
}

func (n *Network) reachableLocked(from, to string) bool {
	if from == "" || to == "" || from == to {
		return true
	}
	if n.isolated[from] || n.isolated[to] {
		return false
	}
	if n.group != nil && n.group[from] != n.group[to] {
		return false
	}
	return !n.cut[link{from, to}]
}

// send decides the fate of a message (a dial, a write, a datagram) from
// from to to: an error if it must fail, else the delay to add (which the
// caller logs if it applies it).
func (n *Network) send(from, to, what string) (time.Duration, error) {
	if from == "" || to == "" || from == to {
		return 0, nil
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	l := link{from, to}
	if !n.reachableLocked(from, to) {
		n.log.Record(KindCut, from, to, what)
		return 0, fmt.Errorf("%s %s: %w", what, l, ErrPartitioned)
	}
	if p := n.drop[l]; p > 0 {
		rng, ok := n.rngs[l]
		if !ok {
			rng = rand.New(rand.NewPCG(n.seed, streamOf(l)))
			n.rngs[l] = rng
		}
		if rng.Float64() < p {
			n.log.Record(KindDrop, from, to, what)
			return 0, fmt.Errorf("%s %s: %w", what, l, ErrDropped)
		}
	}
	return n.delay[l], nil
}

// recv checks that from's bytes may still be read by to.
func (n *Network) recv(from, to, what string) error {
	if from == "" || to == "" || from == to {
		return nil
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if !n.reachableLocked(from, to) {
		n.log.Record(KindCut, from, to, what)
		return fmt.Errorf("%s %s->%s: %w", what, from, to, ErrPartitioned)
	}
	return nil
}

// streamOf numbers a link's random stream by its node names, which (unlike
// ports) are the same in every run.
func streamOf(l link) uint64 {
	var h uint64 = 14695981039346656037
	for _, b := range []byte(l.from + "\x00" + l.to) {
		h ^= uint64(b)
		h *= 1099511628211
	}
	return h
}

func (n *Network) track(c *netConn) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.conns[c] = struct{}{}
}

func (n *Network) untrack(c *netConn) {
	n.mu.Lock()
	defer n.mu.Unlock()
	delete(n.conns, c)
}

// String describes the current table, for test failure messages.
func (n *Network) String() string {
	n.mu.Lock()
	defer n.mu.Unlock()
	var parts []string
	if n.group != nil {
		parts = append(parts, fmt.Sprintf("groups=%v", n.group))
	}
	var iso []string
	for id := range n.isolated {
		iso = append(iso, id)
	}
	if len(iso) > 0 {
		slices.Sort(iso)
		parts = append(parts, fmt.Sprintf("isolated=%v", iso))
	}
	for l := range n.cut {
		parts = append(parts, "cut "+l.String())
	}
	for l, d := range n.delay {
		parts = append(parts, fmt.Sprintf("delay %s %v", l, d))
	}
	for l, p := range n.drop {
		parts = append(parts, fmt.Sprintf("drop %s %v", l, p))
	}
	if len(parts) == 0 {
		return "healed"
	}
	slices.Sort(parts)
	return strings.Join(parts, " ")
}

package chaos

import (
	"fmt"
	"log"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/memberlist"

	"github.com/meteor-edge/meteor/chaos/chaostest"
)

// startMemberlist starts a gossip node named id on loopback, talking through
// network, with timings tightened so a cut node is declared dead within a few
// seconds. They are not tighter than that: a probe answered 25 ms late on a
// busy host (the race detector, other test binaries beside it) made the two
// connected nodes declare each other dead too. Push/pull runs so that a node
// falsely declared dead learns it and refutes, as it would in a cluster.
func startMemberlist(t *testing.T, network *Network, id string) *memberlist.Memberlist {
	t.Helper()
	out := chaostest.NewWriter(t)
	logger := log.New(out, id+" ", 0)
	nt, err := memberlist.NewNetTransport(&memberlist.NetTransportConfig{
		BindAddrs: []string{"127.0.0.1"},
		BindPort:  0,
		Logger:    logger,
	})
	if err != nil {
		t.Fatalf("transport %s: %v", id, err)
	}
	conf := memberlist.DefaultLocalConfig()
	conf.Name = id
	conf.Transport = network.MemberlistTransport(id, nt)
	conf.Logger = logger
	conf.ProbeInterval = 200 * time.Millisecond
	conf.ProbeTimeout = 150 * time.Millisecond
	conf.SuspicionMult = 3
	conf.SuspicionMaxTimeoutMult = 2
	conf.GossipInterval = 20 * time.Millisecond
	conf.GossipToTheDeadTime = 2 * time.Second
	conf.PushPullInterval = time.Second
	conf.TCPTimeout = time.Second
	conf.DeadNodeReclaimTime = time.Nanosecond
	m, err := memberlist.Create(conf)
	if err != nil {
		nt.Shutdown()
		t.Fatalf("memberlist %s: %v", id, err)
	}
	t.Cleanup(func() {
		if err := m.Shutdown(); err != nil {
			t.Errorf("shutdown %s: %v", id, err)
		}
	})
	return m
}

// alive returns the names m considers alive or suspect, i.e. not dead.
func alive(m *memberlist.Memberlist) map[string]bool {
	out := map[string]bool{}
	for _, n := range m.Members() {
		out[n.Name] = true
	}
	return out
}

// memberlistWait bounds each wait of the gossip tests. It is a bound for a
// stuck test, not a timing claim: a cut node is declared dead in about
// two seconds on a quiet host.
const memberlistWait = 60 * time.Second

func TestMemberlistIsolatedNodeIsDeclaredDeadAndRejoins(t *testing.T) {
	flog := NewFaultLog()
	network := NewNetwork(1, flog, WithLogger(testLogger(t, "network", hclog.Warn)))
	defer network.Close()
	ids := []string{"m1", "m2", "m3"}
	var ms []*memberlist.Memberlist
	for _, id := range ids {
		ms = append(ms, startMemberlist(t, network, id))
	}
	addr := ms[0].LocalNode().FullAddress().Addr
	for _, m := range ms[1:] {
		if _, err := m.Join([]string{addr}); err != nil {
			t.Fatalf("join: %v", err)
		}
	}
	sees := func(m *memberlist.Memberlist, want ...string) bool {
		got := alive(m)
		if len(got) != len(want) {
			return false
		}
		for _, w := range want {
			if !got[w] {
				return false
			}
		}
		return true
	}
	for i, m := range ms {
		waitFor(t, memberlistWait, fmt.Sprintf("%s to see all three", ids[i]), func() bool { return sees(m, ids...) })
	}

	network.Isolate("m3")
	waitFor(t, memberlistWait, "m1 and m2 to declare m3 dead", func() bool {
		return sees(ms[0], "m1", "m2") && sees(ms[1], "m1", "m2")
	})
	waitFor(t, memberlistWait, "m3 to declare the others dead", func() bool { return sees(ms[2], "m3") })
	if flog.Count(KindCut) == 0 {
		t.Fatalf("no gossip was cut: %s", flog)
	}

	network.Heal()
	// After a partition heals memberlist does not merge by itself once
	// everyone gave up on the other side; the node rejoins, as the cluster
	// layer does on a timer.
	var lastJoin time.Time
	waitFor(t, memberlistWait, "m3 to rejoin", func() bool {
		if time.Since(lastJoin) > 100*time.Millisecond {
			lastJoin = time.Now()
			if _, err := ms[2].Join([]string{addr}); err != nil {
				return false
			}
		}
		for _, m := range ms {
			if !sees(m, ids...) {
				return false
			}
		}
		return true
	})
}

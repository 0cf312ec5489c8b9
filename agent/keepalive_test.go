package agent

import (
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/meteor-edge/meteor/agent/driver"
	"github.com/meteor-edge/meteor/agent/journal"
	"github.com/meteor-edge/meteor/wire"
)

// TestBindingLearner runs the learner's search against NATs that keep a
// binding for a given silence, the test outcomes decided by that alone.
func TestBindingLearner(t *testing.T) {
	const min, max = 25 * time.Second, 4 * time.Minute
	for _, tc := range []struct {
		binding   time.Duration // 0: none (the path never forgets)
		maxTests  int
		wantAbove time.Duration // the learned interval is above this
	}{
		{binding: 0, maxTests: 1, wantAbove: 200 * time.Second},
		{binding: 5 * time.Minute, maxTests: 1, wantAbove: 200 * time.Second},
		// Each failure is tried twice before it counts.
		{binding: 2 * time.Minute, maxTests: 10, wantAbove: 95 * time.Second},
		{binding: 60 * time.Second, maxTests: 10, wantAbove: 40 * time.Second},
		// Below min: not learned, the interval stays at min.
		{binding: 20 * time.Second, maxTests: 12, wantAbove: 0},
	} {
		t.Run(tc.binding.String(), func(t *testing.T) {
			b := newBindingLearner(min, max)
			now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
			tests := 0
			for silence := b.next(now); silence > 0; silence = b.next(now) {
				if tests++; tests > tc.maxTests {
					t.Fatalf("still testing after %d tests (verified %v, failed %v)", tc.maxTests, b.safe, b.failed)
				}
				if tc.binding == 0 || silence < tc.binding {
					b.passed(silence, now)
				} else {
					b.lost(silence, now)
				}
				now = now.Add(10 * time.Minute)
			}
			iv := b.interval()
			if tc.binding > 0 && iv >= tc.binding && iv != min {
				t.Errorf("interval %v at or past the binding %v", iv, tc.binding)
			}
			if iv <= tc.wantAbove || iv < min || iv > max {
				t.Errorf("interval %v: want above %v, within [%v, %v]", iv, tc.wantAbove, min, max)
			}
			if b.tests != tests {
				t.Errorf("tests = %d, want %d", b.tests, tests)
			}
		})
	}

	t.Run("retest after a day", func(t *testing.T) {
		b := newBindingLearner(min, max)
		now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
		b.lost(b.next(now), now)
		b.lost(b.next(now), now)
		for s := b.next(now); s > 0; s = b.next(now) {
			if s < 2*time.Minute {
				b.passed(s, now)
			} else {
				b.lost(s, now)
			}
		}
		if s := b.next(now.Add(retestAfter - time.Second)); s != 0 {
			t.Fatalf("a failed silence retried after %v", retestAfter-time.Second)
		}
		// A day later the verified silence is tested again first, then the
		// failed ones.
		later := now.Add(retestAfter)
		verified := b.safe
		if s := b.next(later); s != verified {
			t.Fatalf("after %v the next test is %v, want the verified %v again", retestAfter, s, verified)
		}
		b.passed(verified, later)
		if s := b.next(later); s != max {
			t.Fatalf("then %v, want %v", s, max)
		}
	})

	t.Run("restored, then verified again", func(t *testing.T) {
		now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
		b := newBindingLearner(min, max)
		b.restore(journal.NATBinding{Verified: 100 * time.Second, Failed: 130 * time.Second, FailedAt: now, Tests: 4})
		if b.interval() != 90*time.Second || b.tests != 4 {
			t.Fatalf("restored: interval %v, tests %d", b.interval(), b.tests)
		}
		// The restored silence is tested first, before the search goes on.
		if s := b.next(now); s != 100*time.Second {
			t.Fatalf("first test after a restore: %v, want the restored 100s", s)
		}
		b.passed(100*time.Second, now)
		if s := b.next(now); s != 115*time.Second {
			t.Fatalf("after verifying it: next %v, want 115s (bisecting to the failed 130s)", s)
		}
		b.passed(115*time.Second, now)
		// 15 s from the failed silence is still worth a test (an eighth of
		// the verified one), 7.5 s is not.
		if s := b.next(now); s != 122500*time.Millisecond {
			t.Fatalf("after 115s: next %v, want 122.5s", s)
		}
		b.passed(122500*time.Millisecond, now)
		if s := b.next(now.Add(retestAfter - time.Second)); s != 0 {
			t.Fatalf("settled, yet testing %v", s)
		}
		if s := b.next(now.Add(retestAfter)); s != 122500*time.Millisecond {
			t.Fatalf("a day later: %v, want the verified 122.5s tested again", s)
		}
		// Restored past this run's cap: capped.
		c := newBindingLearner(min, max)
		c.restore(journal.NATBinding{Verified: time.Hour})
		if c.safe != max {
			t.Fatalf("restored an hour with a %v cap: %v", max, c.safe)
		}
	})

	t.Run("a lost echo on a lossy path", func(t *testing.T) {
		// A 2-minute NAT behind loss: the test of 72.5 s loses its echo
		// once, the retry passes, and the search goes on above it.
		b := newBindingLearner(min, max)
		now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
		b.passed(60*time.Second, now)
		if counted := b.lost(72500*time.Millisecond, now); counted || b.failed != 0 {
			t.Fatalf("one failure counted (%v): failed %v", counted, b.failed)
		}
		if s := b.next(now); s != 72500*time.Millisecond {
			t.Fatalf("next %v, want 72.5s tried again", s)
		}
		b.passed(72500*time.Millisecond, now)
		if s := b.next(now); s != max {
			t.Fatalf("after the retry passed: next %v, want %v", s, max)
		}
		if counted := b.lost(max, now); counted {
			t.Fatal("a first failure of the cap counted")
		}
		if counted := b.lost(max, now); !counted || b.failed != max {
			t.Fatalf("the second failure of %v: counted %v, failed %v", max, counted, b.failed)
		}
	})

	t.Run("a verified silence that fails later", func(t *testing.T) {
		b := newBindingLearner(min, max)
		now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
		b.passed(max, now)
		b.lost(max, now) // a new NAT on the path
		if b.safe != max || b.next(now) != max {
			t.Fatalf("after one failure: verified %v, next test %v; want %v tried again", b.safe, b.next(now), max)
		}
		b.lost(max, now)
		if b.safe >= max || b.interval() >= max {
			t.Fatalf("verified %v, interval %v after the silence %v failed", b.safe, b.interval(), max)
		}
		if s := b.next(now); s == 0 || s >= max {
			t.Fatalf("next test %v, want one below %v", s, max)
		}
	})
}

// natConn is a NAT in front of the agent's socket: a binding lives
// binding after the last datagram the agent sent, and datagrams that come
// in once it has lapsed are dropped, until the agent sends again (a NAT
// that keeps the port when it maps anew).
type natConn struct {
	net.PacketConn
	binding time.Duration

	mu      sync.Mutex
	lastOut time.Time // guarded by mu
	armed   bool      // guarded by mu; count drops only once armed
	dropped atomic.Int64
	counted atomic.Int64 // drops while armed
}

func (c *natConn) WriteTo(p []byte, addr net.Addr) (int, error) {
	c.mu.Lock()
	c.lastOut = time.Now()
	c.mu.Unlock()
	return c.PacketConn.WriteTo(p, addr)
}

func (c *natConn) ReadFrom(p []byte) (int, net.Addr, error) {
	for {
		n, addr, err := c.PacketConn.ReadFrom(p)
		if err != nil {
			return n, addr, err
		}
		c.mu.Lock()
		lapsed := !c.lastOut.IsZero() && time.Since(c.lastOut) > c.binding
		armed := c.armed
		c.mu.Unlock()
		if !lapsed {
			return n, addr, nil
		}
		c.dropped.Add(1)
		if armed {
			c.counted.Add(1)
		}
	}
}

func (c *natConn) arm() {
	c.mu.Lock()
	c.armed = true
	c.mu.Unlock()
}

// TestKeepAliveLearnsNATBinding runs an agent behind a NAT that forgets a
// binding after 1.5 s of silence: the agent's binding tests find a
// keep-alive interval inside it and announce it to the server in its
// Pings; from then on nothing the server sends is lost at the NAT, and a
// push arrives at once.
func TestKeepAliveLearnsNATBinding(t *testing.T) {
	const binding = 1500 * time.Millisecond
	c := newTestCluster(t)
	srv := c.startServer("s1")
	cfg := c.agentConfig(t, "pos-1", srv)
	cfg.QUIC = wire.ClientQUICConfig() // QUIC's own keep-alives at its default, minutes apart
	cfg.KeepAliveMin, cfg.KeepAliveMax, cfg.KeepAliveTimeout = 250*time.Millisecond, 4*time.Second, 5*time.Second
	var nat *natConn
	cfg.ListenPacket = func() (net.PacketConn, error) {
		pc, err := net.ListenPacket("udp", "127.0.0.1:0")
		nat = &natConn{PacketConn: pc, binding: binding}
		return nat, err
	}
	a := startAgent(t, cfg)

	waitFor(t, 90*time.Second, "the binding tests to settle", func() bool {
		st := a.Status()
		return st.Connected && st.NATBindingTests > 0 && st.NATBindingSettled
	})
	st := a.Status()
	t.Logf("verified %v, failed %v, interval %v after %d tests", st.NATBindingVerified, st.NATBindingFailed, st.KeepAliveInterval, st.NATBindingTests)
	if st.NATBindingVerified >= binding || st.KeepAliveInterval >= binding || st.KeepAliveInterval < cfg.KeepAliveMin {
		t.Fatalf("learned verified %v, interval %v; the NAT forgets after %v", st.NATBindingVerified, st.KeepAliveInterval, binding)
	}
	if st.NATBindingFailed != 0 && st.NATBindingFailed <= st.NATBindingVerified {
		t.Fatalf("failed silence %v not above the verified %v", st.NATBindingFailed, st.NATBindingVerified)
	}
	if nat.dropped.Load() == 0 {
		t.Errorf("the NAT dropped nothing: the tests did not reach past the binding")
	}

	// From now on the path stays open: idle for a few intervals, then a
	// push, with nothing dropped at the NAT.
	nat.arm()
	pings := len(c.pingsSeen())
	c.wait(t, 10*st.KeepAliveInterval+10*time.Second, "three more keep-alives", func() bool { return len(c.pingsSeen()) >= pings+3 })
	c.setDesired(1, upsert(t, "pos", 1, fileRes("motd", "/etc/motd", "hello\n")))
	c.wait(t, 10*time.Second, "the ack of revision 1", func() bool {
		_, acks, _ := c.snapshot()
		return len(acks) > 0 && acks[len(acks)-1] >= 1
	})
	if n := nat.counted.Load(); n != 0 {
		t.Errorf("the NAT dropped %d datagrams after the learning settled", n)
	}
	seen := c.pingsSeen()
	if last := seen[len(seen)-1]; last.Interval != st.KeepAliveInterval || last.EchoAfter != 0 {
		t.Errorf("last Ping announced %v (echo %v), want the learned %v", last.Interval, last.EchoAfter, st.KeepAliveInterval)
	}
}

func (c *testCluster) pingsSeen() []*wire.Ping {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]*wire.Ping(nil), c.pings...)
}

// TestKeepAliveNoticesADeadServer: a server that stops answering (its
// host gone: no close, no reset) is noticed within one keep-alive
// interval and KeepAliveTimeout, and the agent moves to another server.
func TestKeepAliveNoticesADeadServer(t *testing.T) {
	c := newTestCluster(t)
	s1, s2 := c.startServer("s1"), c.startServer("s2")
	cfg := c.agentConfig(t, "pos-1", s1, s2)
	cfg.QUIC = wire.ClientQUICConfig() // no QUIC keep-alives to speak of
	cfg.KeepAliveMin, cfg.KeepAliveMax, cfg.KeepAliveTimeout = 500*time.Millisecond, 500*time.Millisecond, time.Second
	var blackhole atomic.Value // the address whose datagrams vanish
	blackhole.Store("")
	cfg.ListenPacket = func() (net.PacketConn, error) {
		pc, err := net.ListenPacket("udp", "127.0.0.1:0")
		return &dropFrom{PacketConn: pc, from: &blackhole}, err
	}
	a := startAgent(t, cfg)
	waitFor(t, waitLong, "a session", func() bool { return a.Status().Connected })
	first := a.Status().Server
	blackhole.Store(first)
	cut := time.Now()
	waitFor(t, waitLong, "a session on the other server", func() bool {
		st := a.Status()
		return st.Connected && st.Server != first
	})
	t.Logf("moved from %s after %v", first, time.Since(cut).Round(time.Millisecond))
}

// dropFrom drops the datagrams that come from one address.
type dropFrom struct {
	net.PacketConn
	from *atomic.Value
}

func (c *dropFrom) ReadFrom(p []byte) (int, net.Addr, error) {
	for {
		n, addr, err := c.PacketConn.ReadFrom(p)
		if err != nil || addr.String() != c.from.Load().(string) {
			return n, addr, err
		}
	}
}

// TestKeepAliveNoticesADeadServerDuringALargeWrite: the server's host
// vanishes (no close, no reset) just as the agent has a report larger
// than QUIC's congestion window to send. The write must not hold the
// session until QUIC's idle timeout (20 minutes here, the production
// value): the agent moves to the other server about KeepAliveTimeout
// after the server fell silent, as an idle one does
// (TestKeepAliveNoticesADeadServer).
func TestKeepAliveNoticesADeadServerDuringALargeWrite(t *testing.T) {
	c := newTestCluster(t)
	s1, s2 := c.startServer("s1"), c.startServer("s2")
	cfg := c.agentConfig(t, "pos-1", s1, s2)
	cfg.QUIC = wire.ClientQUICConfig() // the production idle timeout
	cfg.KeepAliveMin, cfg.KeepAliveMax, cfg.KeepAliveTimeout = 500*time.Millisecond, 500*time.Millisecond, 2*time.Second
	cfg.ReportResendMin, cfg.ReportResendMax = 50*time.Millisecond, time.Minute
	cfg.ProbeInterval = 200 * time.Millisecond
	sim := driver.NewSimDevice(1)
	reg, err := driver.NewRegistry(driver.Config{Root: cfg.Root, Sim: sim})
	if err != nil {
		t.Fatal(err)
	}
	cfg.Drivers = reg
	var blackhole atomic.Value // the address whose datagrams vanish
	blackhole.Store("")
	cfg.ListenPacket = func() (net.PacketConn, error) {
		pc, err := net.ListenPacket("udp", "127.0.0.1:0")
		return &dropFrom{PacketConn: pc, from: &blackhole}, err
	}
	const n = 300
	var ups []wire.Upsert
	for i := range n {
		id := fmt.Sprintf("r%03d", i)
		ups = append(ups, upsert(t, "pos", 1, simRes(id, "v1", nil)))
		if err := sim.SetEffective(id, "v1"); err != nil {
			t.Fatal(err)
		}
	}
	c.setDesired(1, ups...)
	a := startAgent(t, cfg)
	waitFor(t, waitLong, "converged, its report acknowledged", func() bool {
		st := a.Status()
		return st.Connected && len(st.Resources) == n && st.State == StateConverged && st.PendingReports == 0
	})
	first := a.Status().Server
	blackhole.Store(first)
	// Every probe now finds another effective state: a report of about
	// 300 KB, far more than the congestion window, follows.
	long := strings.Repeat("x", 900)
	for i := range n {
		if err := sim.SetEffective(fmt.Sprintf("r%03d", i), long); err != nil {
			t.Fatal(err)
		}
	}
	cut := time.Now()
	// A bound: the move takes a few KeepAliveTimeouts; a write held
	// until QUIC's idle timeout would take 20 minutes.
	waitFor(t, 60*time.Second, "a session on the other server", func() bool {
		st := a.Status()
		return st.Connected && st.Server != first
	})
	t.Logf("moved from %s after %v", first, time.Since(cut).Round(time.Millisecond))
}

// TestAgentStopsWhileAResumedHandshakeHangs: the agent's server falls
// silent, and the agent dials it again with its ticket, so the dial
// returns before the handshake (0-RTT) and the handshake then hangs. The
// agent must stop when told, not when the handshake gives up (2 minutes
// here); race builds wait for the handshake before opening the control
// stream, and that wait held the stop.
func TestAgentStopsWhileAResumedHandshakeHangs(t *testing.T) {
	c := newTestCluster(t)
	s1 := c.startServer("s1")
	cfg := c.agentConfig(t, "pos-1", s1)
	cfg.QUIC = wire.ClientQUICConfig()
	cfg.QUIC.HandshakeIdleTimeout = 2 * time.Minute
	cfg.DialTimeout = 2 * time.Minute
	cfg.KeepAliveMin, cfg.KeepAliveMax, cfg.KeepAliveTimeout = 250*time.Millisecond, 250*time.Millisecond, time.Second
	var silent atomic.Value // the address whose datagrams vanish
	silent.Store("")
	var redials atomic.Int32 // long-header datagrams sent to it since
	cfg.ListenPacket = func() (net.PacketConn, error) {
		pc, err := net.ListenPacket("udp", "127.0.0.1:0")
		return &countLongTo{dropFrom: dropFrom{PacketConn: pc, from: &silent}, long: &redials}, err
	}
	a, stop := runAgent(t, cfg)
	waitFor(t, waitLong, "a session", func() bool { return a.Status().Connected })
	silent.Store(a.Status().Server)
	waitFor(t, waitLong, "a dial of the silent server after the session ended", func() bool {
		return !a.Status().Connected && redials.Load() > 0
	})

	stopped := make(chan struct{})
	go func() {
		stop()
		close(stopped)
	}()
	select {
	case <-stopped:
	case <-time.After(30 * time.Second):
		t.Fatal("the agent did not stop within 30 s of being told, while a handshake hung")
	}
}

// countLongTo counts the long-header QUIC datagrams (Initial, 0-RTT,
// Handshake: a connection being opened) sent to the address dropFrom
// drops, from the moment it is set.
type countLongTo struct {
	dropFrom
	long *atomic.Int32
}

func (c *countLongTo) WriteTo(p []byte, addr net.Addr) (int, error) {
	if len(p) > 0 && p[0]&0x80 != 0 && addr.String() == c.from.Load().(string) {
		c.long.Add(1)
	}
	return c.dropFrom.WriteTo(p, addr)
}

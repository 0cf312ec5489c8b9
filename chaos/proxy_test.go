package chaos

import (
	"context"
	"errors"
	"io"
	"net"
	"os"
	"sync"
	"testing"
	"time"
)

// udpEcho echoes every datagram back to its sender until the test ends.
func udpEcho(t *testing.T) net.Addr {
	t.Helper()
	return udpTaggedEcho(t, "")
}

// udpTaggedEcho is udpEcho answering with tag before each datagram.
func udpTaggedEcho(t *testing.T, tag string) net.Addr {
	t.Helper()
	c := listenUDP(t)
	done := make(chan struct{})
	go func() {
		defer close(done)
		buf := make([]byte, maxDatagram)
		for {
			n, from, err := c.ReadFrom(buf)
			if err != nil {
				return
			}
			c.WriteTo(append([]byte(tag), buf[:n]...), from)
		}
	}()
	t.Cleanup(func() {
		c.Close()
		<-done
	})
	return c.LocalAddr()
}

// runProxy runs p in the background; cleanup stops it and checks Run's
// result.
func runProxy(t *testing.T, run func(context.Context) error) context.CancelFunc {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-errc; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	return cancel
}

// dialProxy returns a UDP socket connected to p, closed at cleanup.
func dialProxy(t *testing.T, p *UDPProxy) *net.UDPConn {
	t.Helper()
	client, err := net.DialUDP("udp", nil, p.Addr().(*net.UDPAddr))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Close() })
	return client
}

// echoOnce writes msg through c to the proxy and reads the reply within d.
func echoOnce(c *net.UDPConn, msg string, d time.Duration) (string, error) {
	if _, err := c.Write([]byte(msg)); err != nil {
		return "", err
	}
	c.SetReadDeadline(time.Now().Add(d))
	buf := make([]byte, 1500)
	n, err := c.Read(buf)
	return string(buf[:n]), err
}

func TestUDPProxyForwardsPartitionsAndExpires(t *testing.T) {
	log := NewFaultLog()
	p, err := NewUDPProxy("127.0.0.1:0", udpEcho(t).String(), LinkProfile{Delay: time.Millisecond}, 1, log,
		WithIdleTimeout(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	runProxy(t, p.Run)

	client := dialProxy(t, p)
	if got, err := echoOnce(client, "ping", 5*time.Second); err != nil || got != "ping" {
		t.Fatalf("echo through proxy: %q, %v", got, err)
	}
	if p.Sessions() != 1 {
		t.Fatalf("sessions = %d, want 1", p.Sessions())
	}
	if st := p.Stats(); st.Out.Delayed != 1 || st.In.Delayed != 1 {
		t.Fatalf("a DirDefault profile must delay both ways: %+v", st)
	}

	p.Partition(true)
	if _, err := echoOnce(client, "lost", 100*time.Millisecond); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("echo through a partitioned proxy: %v, want a timeout", err)
	}
	p.Partition(false)
	if got, err := echoOnce(client, "back", 5*time.Second); err != nil || got != "back" {
		t.Fatalf("echo after partition: %q, %v", got, err)
	}
	if log.Count(KindCut) != 1 {
		t.Fatalf("fault counts: %s", log)
	}

	if err := p.SetProfile(LinkProfile{Loss: 1, Dir: DirIn}); err != nil {
		t.Fatal(err)
	}
	if _, err := echoOnce(client, "one way", 100*time.Millisecond); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("echo with replies lost: %v, want a timeout", err)
	}
	if st := p.Stats(); st.In.Dropped != 1 || st.Out.Dropped != 1 {
		t.Fatalf("stats = %+v, want one drop each way (partition out, loss in)", st)
	}

	waitFor(t, 5*time.Second, "idle session to expire", func() bool { return p.Sessions() == 0 })
}

// TestUDPProxyRetarget: after Retarget, a client's datagrams reach the
// new target, and the old target's session is gone.
func TestUDPProxyRetarget(t *testing.T) {
	p, err := NewUDPProxy("127.0.0.1:0", udpTaggedEcho(t, "a:").String(), LinkProfile{}, 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	runProxy(t, p.Run)
	client := dialProxy(t, p)
	if got, err := echoOnce(client, "one", 5*time.Second); err != nil || got != "a:one" {
		t.Fatalf("echo before retarget: %q, %v", got, err)
	}
	if err := p.Retarget(udpTaggedEcho(t, "b:").String()); err != nil {
		t.Fatal(err)
	}
	if p.Sessions() != 0 {
		t.Fatalf("sessions after retarget = %d, want 0", p.Sessions())
	}
	if got, err := echoOnce(client, "two", 5*time.Second); err != nil || got != "b:two" {
		t.Fatalf("echo after retarget: %q, %v", got, err)
	}
	if err := p.Retarget("not an address"); err == nil {
		t.Fatal("retarget to a bad address: no error")
	}
}

func TestUDPProxyCloseBeforeRun(t *testing.T) {
	p, err := NewUDPProxy("127.0.0.1:0", "127.0.0.1:9", LinkProfile{}, 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if err := p.Run(context.Background()); !errors.Is(err, ErrClosed) {
		t.Fatalf("Run after Close: %v, want ErrClosed", err)
	}
	if _, err := NewUDPProxy("127.0.0.1:0", "127.0.0.1:9", LinkProfile{Loss: -1}, 1, nil); err == nil {
		t.Fatal("NewUDPProxy accepted Loss -1")
	}
}

// tcpEcho echoes every connection until the test ends.
func tcpEcho(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	conns := map[net.Conn]bool{}
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns[c] = true
			mu.Unlock()
			wg.Go(func() {
				io.Copy(c, c)
				c.Close()
			})
		}
	})
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	return ln.Addr().String()
}

func tcpRoundTrip(c net.Conn, msg string) (string, error) {
	if _, err := c.Write([]byte(msg)); err != nil {
		return "", err
	}
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	buf := make([]byte, len(msg))
	n, err := io.ReadFull(c, buf)
	return string(buf[:n]), err
}

func TestTCPProxyDelayAndPartition(t *testing.T) {
	log := NewFaultLog()
	const delay = 25 * time.Millisecond
	p, err := NewTCPProxy("127.0.0.1:0", tcpEcho(t), TCPProfile{Delay: delay}, 1, log)
	if err != nil {
		t.Fatal(err)
	}
	runProxy(t, p.Run)

	c, err := net.Dial("tcp", p.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	start := time.Now()
	if got, err := tcpRoundTrip(c, "hello"); err != nil || got != "hello" {
		t.Fatalf("round trip: %q, %v", got, err)
	}
	if el := time.Since(start); el < 2*delay {
		t.Fatalf("round trip took %v, want at least %v", el, 2*delay)
	}
	if err := p.SetProfile(TCPProfile{}); err != nil {
		t.Fatal(err)
	}

	// Half-close travels through: the echo server sees EOF and closes.
	c2, err := net.Dial("tcp", p.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	c2.Write([]byte("bye"))
	c2.(*net.TCPConn).CloseWrite()
	c2.SetReadDeadline(time.Now().Add(5 * time.Second))
	if all, err := io.ReadAll(c2); err != nil || string(all) != "bye" {
		t.Fatalf("after half-close read %q, %v", all, err)
	}

	p.Partition(true)
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Read(make([]byte, 1)); err == nil {
		t.Fatal("read on a connection cut by a partition succeeded")
	}
	c3, err := net.Dial("tcp", p.Addr().String())
	if err == nil {
		c3.SetReadDeadline(time.Now().Add(5 * time.Second))
		if _, err := c3.Read(make([]byte, 1)); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("connection during partition: read %v, want reset or EOF", err)
		}
		c3.Close()
	}
	waitFor(t, 5*time.Second, "cut connections to be gone", func() bool { return p.Conns() == 0 })

	p.Partition(false)
	c4, err := net.Dial("tcp", p.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c4.Close()
	if got, err := tcpRoundTrip(c4, "healed"); err != nil || got != "healed" {
		t.Fatalf("round trip after heal: %q, %v", got, err)
	}
	if log.Count(KindCut) < 2 || log.Count(KindDelay) == 0 {
		t.Fatalf("fault counts: %s", log)
	}
}

func TestTCPProxyCloseStopsRunWithLongDelay(t *testing.T) {
	p, err := NewTCPProxy("127.0.0.1:0", tcpEcho(t), TCPProfile{Delay: time.Hour}, 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	errc := make(chan error, 1)
	go func() { errc <- p.Run(context.Background()) }()
	c, err := net.Dial("tcp", p.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	// More than the in-flight limit: the proxy's reader blocks on the
	// delayed writer, and the client may block in Write.
	wrote := make(chan struct{})
	go func() {
		defer close(wrote)
		c.Write(make([]byte, 4*tcpBufferLimit))
	}()
	waitFor(t, 5*time.Second, "connection to be proxied", func() bool { return p.Conns() == 1 })
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if err := <-errc; err != nil {
		t.Fatalf("Run: %v", err)
	}
	c.Close()
	<-wrote
}

// TestUDPProxyNATBinding: a binding lapses once the client has been silent
// for the binding time (the target's datagrams do not refresh it); the
// target's datagrams are then dropped, and the client's next datagram
// opens a new binding, seen by the target at a new address.
func TestUDPProxyNATBinding(t *testing.T) {
	target := listenUDP(t)
	clock := NewSkewedClock(RealClock{}, 0)
	p, err := NewUDPProxy("127.0.0.1:0", target.LocalAddr().String(), LinkProfile{}, 1, nil,
		WithNATBinding(time.Minute), WithClock(clock), WithIdleTimeout(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	runProxy(t, p.Run)
	client := dialProxy(t, p)

	// recv reads one datagram at the target and returns its source.
	recv := func(want string) net.Addr {
		t.Helper()
		buf := make([]byte, 1500)
		target.SetReadDeadline(time.Now().Add(5 * time.Second))
		n, from, err := target.ReadFrom(buf)
		if err != nil || string(buf[:n]) != want {
			t.Fatalf("target read %q, %v; want %q", buf[:n], err, want)
		}
		return from
	}
	// reply sends from the target to addr and reports whether the client
	// got it within d.
	reply := func(addr net.Addr, msg string, d time.Duration) bool {
		t.Helper()
		if _, err := target.WriteTo([]byte(msg), addr); err != nil {
			t.Fatal(err)
		}
		client.SetReadDeadline(time.Now().Add(d))
		buf := make([]byte, 1500)
		n, err := client.Read(buf)
		if err != nil {
			return false
		}
		if string(buf[:n]) != msg {
			t.Fatalf("client read %q, want %q", buf[:n], msg)
		}
		return true
	}

	if _, err := client.Write([]byte("one")); err != nil {
		t.Fatal(err)
	}
	first := recv("one")
	if !reply(first, "to one", 5*time.Second) {
		t.Fatal("a reply inside the binding was lost")
	}
	clock.AddSkew(50 * time.Second)
	if !reply(first, "inbound does not refresh", 5*time.Second) {
		t.Fatal("a reply 50 s into a 1 min binding was lost")
	}
	clock.AddSkew(11 * time.Second) // 61 s since the client last sent
	if reply(first, "lapsed", 200*time.Millisecond) {
		t.Fatal("a reply to a lapsed binding arrived")
	}
	if st := p.NAT(); st.Dropped != 1 || st.DroppedBytes != int64(len("lapsed")) || st.Rebinds != 0 {
		t.Fatalf("NAT stats %+v, want one drop and no rebind", st)
	}

	if _, err := client.Write([]byte("two")); err != nil {
		t.Fatal(err)
	}
	second := recv("two")
	if second.String() == first.String() {
		t.Fatalf("the new binding has the old address %v", first)
	}
	if !reply(second, "to two", 5*time.Second) {
		t.Fatal("a reply to the new binding was lost")
	}
	if reply(first, "old binding", 200*time.Millisecond) {
		t.Fatal("a datagram to the old binding arrived")
	}
	if st := p.NAT(); st.Rebinds != 1 {
		t.Fatalf("NAT stats %+v, want one rebind", st)
	}
}

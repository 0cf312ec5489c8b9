package main

import (
	"context"
	"net"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quic-go/quic-go"

	"github.com/meteor-edge/meteor/bench/internal/wiredev"
)

// relay forwards one client's datagrams to a target it can switch, and the
// target's back: to the client, the server behind it changes without its
// address changing, as when a server restarts without its connections.
type relay struct {
	front  *net.UDPConn // the client's side
	back   *net.UDPConn // towards the target
	target atomic.Pointer[net.UDPAddr]
	client atomic.Pointer[net.UDPAddr]
	wg     sync.WaitGroup
}

func newRelay(t *testing.T, target string) *relay {
	t.Helper()
	listen := func() *net.UDPConn {
		c, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	r := &relay{front: listen(), back: listen()}
	r.retarget(t, target)
	r.wg.Go(func() {
		buf := make([]byte, 65536)
		for {
			n, from, err := r.front.ReadFromUDP(buf)
			if err != nil {
				return
			}
			r.client.Store(from)
			r.back.WriteToUDP(buf[:n], r.target.Load())
		}
	})
	r.wg.Go(func() {
		buf := make([]byte, 65536)
		for {
			n, _, err := r.back.ReadFromUDP(buf)
			if err != nil {
				return
			}
			if c := r.client.Load(); c != nil {
				r.front.WriteToUDP(buf[:n], c)
			}
		}
	})
	t.Cleanup(func() {
		r.front.Close()
		r.back.Close()
		r.wg.Wait()
	})
	return r
}

func (r *relay) retarget(t *testing.T, target string) {
	t.Helper()
	a, err := net.ResolveUDPAddr("udp", target)
	if err != nil {
		t.Fatal(err)
	}
	r.target.Store(a)
}

// TestProbeSessionTellsHeldFromForgotten: the storm's probe of a device
// whose record looks wrong gets a Pong while its server holds the session,
// and closes the connection (a stateless reset) once the server behind
// the device's address no longer knows the connection, as after a server
// ended the session at its idle timeout.
func TestProbeSessionTellsHeldFromForgotten(t *testing.T) {
	bin := meteorForTest(t, "builds the meteor binary for the PKI")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dir := t.TempDir()
	p, err := makePKI(ctx, bin, filepath.Join(dir, "pki"))
	if err != nil {
		t.Fatal(err)
	}
	// Two servers with the cluster's secret, so the same stateless reset
	// key: the second stands for the first once it has forgotten.
	var agentAddrs []string
	for _, name := range []string{"a", "b"} {
		srv, stop, err := startInProcess(ctx, p, filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { stop() })
		agentAddrs = append(agentAddrs, srv.AgentAddr())
	}
	r := newRelay(t, agentAddrs[0])

	certs, err := p.issueDevices([]string{"probe-1"})
	if err != nil {
		t.Fatal(err)
	}
	d := wiredev.NewDevice("probe-1", certs[0], fleetLabels)
	udp, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	tr := &quic.Transport{Conn: udp}
	defer tr.Close()
	dctx, dcancel := context.WithTimeout(ctx, 30*time.Second)
	conn, err := tr.Dial(dctx, r.front.LocalAddr(), d.TLSConfig(p.pool, nil), deviceQUIC())
	dcancel()
	if err != nil {
		t.Fatal(err)
	}
	defer conn.CloseWithError(0, "")
	o, err := openSession(ctx, d, conn, openOpts{inventory: true, start: time.Now(), timeout: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	sd := &stormDev{d: d, conn: conn, sess: o.s}

	if res, why := probeSession(ctx, sd, 30*time.Second); res != probeAnswered {
		t.Fatalf("probe of a session its server holds: outcome %d (%s), want answered", res, why)
	}
	r.retarget(t, agentAddrs[1])
	if res, why := probeSession(ctx, sd, 30*time.Second); res != probeClosed {
		t.Fatalf("probe of a connection the server behind its address does not know: outcome %d (%s), want closed", res, why)
	} else {
		t.Logf("forgotten: %s", why)
	}
}

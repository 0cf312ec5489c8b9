package main

import (
	"context"
	"net"
	"path/filepath"
	"testing"
	"time"

	"github.com/quic-go/quic-go"

	"github.com/meteor-edge/meteor/bench/internal/wiredev"
	"github.com/meteor-edge/meteor/chaos"
)

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
	// The device reaches the servers through a proxy that can move to the
	// other one: to the device, the server at its address forgets.
	proxy, err := chaos.NewUDPProxy("127.0.0.1:0", agentAddrs[0], chaos.LinkProfile{}, 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	pctx, pcancel := context.WithCancel(ctx)
	proxyDone := make(chan error, 1)
	go func() { proxyDone <- proxy.Run(pctx) }()
	defer func() {
		pcancel()
		if err := <-proxyDone; err != nil {
			t.Errorf("proxy: %v", err)
		}
	}()

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
	conn, err := tr.Dial(dctx, proxy.Addr(), d.TLSConfig(p.pool, nil), deviceQUIC())
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
	if err := proxy.Retarget(agentAddrs[1]); err != nil {
		t.Fatal(err)
	}
	if res, why := probeSession(ctx, sd, 30*time.Second); res != probeClosed {
		t.Fatalf("probe of a connection the server behind its address does not know: outcome %d (%s), want closed", res, why)
	} else {
		t.Logf("forgotten: %s", why)
	}
}

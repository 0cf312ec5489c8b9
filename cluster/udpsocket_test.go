package cluster

import (
	"bytes"
	"context"
	"io"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quic-go/quic-go"
	"golang.org/x/net/ipv4"

	"github.com/meteor-edge/meteor/cluster/pki"
	"github.com/meteor-edge/meteor/wire"
)

// TestAgentSocketWritesWithoutAllocating compares a datagram written
// through agentSocket with one written by net.UDPConn.WriteMsgUDP, on an
// IPv4 socket and on a dual-stack one, to an IPv4 address held in 4 and in
// 16 bytes: each arrives, and only the standard library's write allocates.
func TestAgentSocketWritesWithoutAllocating(t *testing.T) {
	for _, bind := range []string{"127.0.0.1:0", ":0"} {
		udp, err := net.ListenPacket("udp", bind)
		if err != nil {
			t.Fatal(err)
		}
		defer udp.Close()
		s := agentSocket(udp.(*net.UDPConn)).(*udpSocket)
		for _, ip := range []net.IP{net.IPv4(127, 0, 0, 1).To4(), net.IPv4(127, 0, 0, 1)} {
			recv, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
			if err != nil {
				t.Fatal(err)
			}
			defer recv.Close()
			dst := &net.UDPAddr{IP: ip, Port: recv.LocalAddr().(*net.UDPAddr).Port}
			msg := []byte("datagram " + bind + " " + dst.String())
			if _, _, err := s.WriteMsgUDP(msg, nil, dst); err != nil {
				t.Fatalf("bound to %s, to %v (%d bytes): %v", bind, ip, len(ip), err)
			}
			buf := make([]byte, 100)
			recv.SetReadDeadline(time.Now().Add(10 * time.Second))
			n, from, err := recv.ReadFrom(buf)
			if err != nil || !bytes.Equal(buf[:n], msg) {
				t.Fatalf("bound to %s, to %v: read %q, %v; want %q", bind, ip, buf[:n], err, msg)
			}
			if got, want := from.(*net.UDPAddr).Port, udp.LocalAddr().(*net.UDPAddr).Port; got != want {
				t.Errorf("bound to %s: the datagram came from port %d, want %d", bind, got, want)
			}
			ours := testing.AllocsPerRun(200, func() { s.WriteMsgUDP(msg, nil, dst) })
			std := testing.AllocsPerRun(200, func() { s.UDPConn.WriteMsgUDP(msg, nil, dst) })
			if ours != 0 || std == 0 {
				t.Errorf("bound to %s, to %v: %v allocations a write through agentSocket, %v through WriteMsgUDP; want 0 and more", bind, ip, ours, std)
			}
		}
		if _, _, err := s.WriteMsgUDP([]byte("x"), nil, nil); err == nil {
			t.Errorf("bound to %s: a write without an address on an unconnected socket succeeded", bind)
		}
	}
}

// countingSocket counts the calls quic-go makes of the socket's batched
// read and its write.
type countingSocket struct {
	*udpSocket
	reads, writes atomic.Int64
}

func (c *countingSocket) WriteMsgUDP(b, oob []byte, addr *net.UDPAddr) (int, int, error) {
	c.writes.Add(1)
	return c.udpSocket.WriteMsgUDP(b, oob, addr)
}

func (c *countingSocket) ReadBatch(ms []ipv4.Message, flags int) (int, error) {
	c.reads.Add(1)
	return c.udpSocket.ReadBatch(ms, flags)
}

// TestAgentSocketUnderQUIC runs a QUIC server on an agentSocket, bound to
// 127.0.0.1 and to the unspecified address (where quic-go also asks for
// each datagram's destination and writes its source), and checks that a
// client exchanges data with it and that quic-go read and wrote the socket
// through agentSocket's methods, not through a fallback of its own.
func TestAgentSocketUnderQUIC(t *testing.T) {
	t.Setenv("QUIC_GO_DISABLE_RECEIVE_BUFFER_WARNING", "true")
	ca, err := pki.NewCA("test", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	srvCert, err := ca.IssueServer("s1", []string{"127.0.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	devCert, err := ca.IssueDevice("dev-1")
	if err != nil {
		t.Fatal(err)
	}
	for _, bind := range []string{"127.0.0.1:0", ":0"} {
		t.Run(bind, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			udp, err := net.ListenPacket("udp", bind)
			if err != nil {
				t.Fatal(err)
			}
			defer udp.Close()
			sock := &countingSocket{udpSocket: agentSocket(udp.(*net.UDPConn)).(*udpSocket)}
			tr := &quic.Transport{Conn: sock}
			defer tr.Close()
			ln, err := tr.Listen(wire.ServerTLSConfig(ca.Pool(), srvCert, nil), wire.ServerQUICConfig())
			if err != nil {
				t.Fatal(err)
			}
			echoed := make(chan error, 1)
			go func() {
				conn, err := ln.Accept(ctx)
				if err != nil {
					echoed <- err
					return
				}
				str, err := conn.AcceptStream(ctx)
				if err == nil {
					_, err = io.Copy(str, str)
					str.Close()
				}
				echoed <- err
			}()

			port := udp.LocalAddr().(*net.UDPAddr).Port
			addr := &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: port}
			conn, err := quic.DialAddr(ctx, addr.String(), wire.ClientTLSConfig(ca.Pool(), devCert, ""), wire.ClientQUICConfig())
			if err != nil {
				t.Fatal(err)
			}
			defer conn.CloseWithError(wire.CloseNormal, "")
			str, err := conn.OpenStreamSync(ctx)
			if err != nil {
				t.Fatal(err)
			}
			want := bytes.Repeat([]byte("meteor "), 2000) // several packets each way
			if _, err := str.Write(want); err != nil {
				t.Fatal(err)
			}
			str.Close()
			got, err := io.ReadAll(str)
			if err != nil || !bytes.Equal(got, want) {
				t.Fatalf("echo: %d bytes, %v; want the %d sent", len(got), err, len(want))
			}
			if err := <-echoed; err != nil {
				t.Fatalf("server: %v", err)
			}
			if sock.reads.Load() == 0 || sock.writes.Load() == 0 {
				t.Errorf("quic-go called ReadBatch %d times and WriteMsgUDP %d times; want both", sock.reads.Load(), sock.writes.Load())
			}
		})
	}
}

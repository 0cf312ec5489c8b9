package cluster

import (
	"net"
	"net/netip"

	"golang.org/x/net/ipv4"
)

// agentSocket returns the agents' UDP socket c as the server's QUIC
// transport is given it (quic.Transport.Conn). quic-go reads and writes it
// as it does a *net.UDPConn (batched reads, GSO, ECN and packet info), but
// each datagram is written without an allocation: quic-go writes through
// WriteMsgUDP, for which the standard library allocates a socket address
// on the heap for every datagram (net.ipToSockaddr), while
// WriteMsgUDPAddrPort builds it on the stack. A server writes a datagram
// for every packet of every session: that allocation was 2.9 % of the
// servers' CPU in a fan-out to 10,000 devices, the collector's work for it
// included (docs/performance.md, "Per device").
func agentSocket(c *net.UDPConn) net.PacketConn {
	return &udpSocket{UDPConn: c, batch: ipv4.NewPacketConn(c)}
}

// udpSocket is a *net.UDPConn whose WriteMsgUDP does not allocate.
type udpSocket struct {
	*net.UDPConn
	// batch reads as quic-go reads a *net.UDPConn (recvmmsg). quic-go
	// builds it itself only for a *net.UDPConn; for any other type it
	// takes the socket's own ReadBatch.
	batch *ipv4.PacketConn
}

// WriteMsgUDP writes b to addr with the control messages oob, as
// net.UDPConn.WriteMsgUDP does.
func (s *udpSocket) WriteMsgUDP(b, oob []byte, addr *net.UDPAddr) (n, oobn int, err error) {
	ap := addr.AddrPort() // not valid for nil: a connected socket's peer
	if ap.IsValid() {
		// An IPv4 address held in 16 bytes (net.IPv4 makes those) goes to
		// an IPv4 socket too, as with WriteMsgUDP.
		ap = netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
	}
	return s.UDPConn.WriteMsgUDPAddrPort(b, oob, ap)
}

// ReadBatch reads up to len(ms) datagrams at once (quic-go's batchConn).
func (s *udpSocket) ReadBatch(ms []ipv4.Message, flags int) (int, error) {
	return s.batch.ReadBatch(ms, flags)
}

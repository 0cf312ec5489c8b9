package wiredev

import (
	"net"

	"github.com/quic-go/quic-go"

	"github.com/meteor-edge/meteor/wire"
)

// Sockets are UDP sockets on 127.0.0.1, one quic.Transport each, that
// devices share: a device needs no socket (nor file descriptor) of its
// own, and quic-go sizes each socket's buffers as it recommends (as far
// as the host's limits allow; see benchkit.RaiseUDPBufferMax).
type Sockets struct {
	pcs []*net.UDPConn
	trs []*quic.Transport
}

// OpenSockets opens n sockets.
func OpenSockets(n int) (*Sockets, error) {
	s := &Sockets{}
	for range n {
		pc, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
		if err != nil {
			s.Close()
			return nil, err
		}
		s.pcs = append(s.pcs, pc)
		s.trs = append(s.trs, wire.NewSharedTransport(pc))
	}
	return s, nil
}

// Transport returns the transport device i uses: socket i mod n.
func (s *Sockets) Transport(i int) *quic.Transport { return s.trs[i%len(s.trs)] }

// Ports returns the sockets' local ports.
func (s *Sockets) Ports() []int {
	out := make([]int, len(s.pcs))
	for i, pc := range s.pcs {
		out[i] = pc.LocalAddr().(*net.UDPAddr).Port
	}
	return out
}

// Close closes the transports and the sockets (their connections first).
func (s *Sockets) Close() {
	for _, tr := range s.trs {
		tr.Close()
	}
	for _, pc := range s.pcs {
		pc.Close()
	}
}

package chaos

import (
	"fmt"
	"net"
	"strconv"
	"sync"
	"time"

	"github.com/hashicorp/memberlist"
)

// memberlistTransport is a memberlist.NodeAwareTransport whose gossip obeys
// a Network.
type memberlistTransport struct {
	n     *Network
	id    string
	inner memberlist.NodeAwareTransport

	packets chan *memberlist.Packet
	acc     *acceptor
	sched   *scheduler // delayed datagrams
	done    chan struct{}
	wg      sync.WaitGroup // pumps
	once    sync.Once
}

var _ memberlist.NodeAwareTransport = (*memberlistTransport)(nil)

// MemberlistTransport wraps inner (typically a *memberlist.NetTransport) as
// node nodeID, which must also be the memberlist node name
// (memberlist.Config.Name). The node's advertised address is registered
// under nodeID when memberlist asks for it (FinalAdvertiseAddr).
//
// Datagrams to a peer across a cut link are dropped, as are datagrams from
// one (identified by their source address); delays and drop rates of the
// sending link apply to datagrams. Streams carry a preamble naming the
// dialer, like Raft connections: dials across a cut link fail, and accepted
// streams are refused if their link is cut. Streams then obey the table
// on every Read and Write.
func (n *Network) MemberlistTransport(nodeID string, inner memberlist.NodeAwareTransport) memberlist.NodeAwareTransport {
	t := &memberlistTransport{
		n:       n,
		id:      nodeID,
		inner:   inner,
		packets: make(chan *memberlist.Packet),
		acc:     newAcceptor(n, "memberlist", nodeID),
		done:    make(chan struct{}),
	}
	t.sched = newScheduler(DefaultMaxQueue, func(p *packet) { _ = p.out(p.data, p.addr) })
	// Register the bind address now if the transport can tell it without
	// configuration (a NetTransport bound to a specific IP can).
	if ip, port, err := inner.FinalAdvertiseAddr("", 0); err == nil {
		n.Register(nodeID, net.JoinHostPort(ip.String(), strconv.Itoa(port)))
	}
	t.wg.Go(t.pumpPackets)
	t.wg.Go(t.pumpStreams)
	return t
}

// FinalAdvertiseAddr asks the wrapped transport and registers the result.
func (t *memberlistTransport) FinalAdvertiseAddr(ip string, port int) (net.IP, int, error) {
	aip, aport, err := t.inner.FinalAdvertiseAddr(ip, port)
	if err != nil {
		return nil, 0, err
	}
	t.n.Register(t.id, net.JoinHostPort(aip.String(), strconv.Itoa(aport)))
	return aip, aport, nil
}

// WriteTo sends a datagram to addr unless the link is cut.
func (t *memberlistTransport) WriteTo(b []byte, addr string) (time.Time, error) {
	return t.WriteToAddress(b, memberlist.Address{Addr: addr})
}

// WriteToAddress sends a datagram to a unless the link is cut or the drop
// rate discards it; a delayed datagram is sent later from another goroutine.
// Like UDP, a lost datagram is no error.
func (t *memberlistTransport) WriteToAddress(b []byte, a memberlist.Address) (time.Time, error) {
	to := a.Name
	if to == "" {
		to = t.n.nodeOf(a.Addr)
	}
	d, err := t.n.send(t.id, to, "gossip packet")
	if err != nil {
		return time.Now(), nil
	}
	if d == 0 {
		return t.inner.WriteToAddress(b, a)
	}
	t.n.log.Record(KindDelay, t.id, to, fmt.Sprintf("gossip packet %d bytes %v", len(b), d))
	p := &packet{
		data: append([]byte(nil), b...),
		out: func(b []byte, _ net.Addr) error {
			_, err := t.inner.WriteToAddress(b, a)
			return err
		},
	}
	if err := t.sched.push(time.Now().Add(d), p); err == errSchedFull {
		t.n.log.Record(KindOverflow, t.id, to, "gossip packet, delay queue full")
	}
	return time.Now(), nil
}

// PacketCh returns the datagrams that crossed open links.
func (t *memberlistTransport) PacketCh() <-chan *memberlist.Packet { return t.packets }

func (t *memberlistTransport) pumpPackets() {
	in := t.inner.PacketCh()
	for {
		select {
		case p := <-in:
			from := ""
			if p.From != nil {
				from = t.n.nodeOf(p.From.String())
			}
			if err := t.n.recv(from, t.id, "gossip packet"); err != nil {
				continue
			}
			select {
			case t.packets <- p:
			case <-t.done:
				return
			}
		case <-t.done:
			return
		}
	}
}

// DialTimeout opens a stream to addr unless the link is cut.
func (t *memberlistTransport) DialTimeout(addr string, timeout time.Duration) (net.Conn, error) {
	return t.DialAddressTimeout(memberlist.Address{Addr: addr}, timeout)
}

// DialAddressTimeout opens a stream to a unless the link is cut.
func (t *memberlistTransport) DialAddressTimeout(a memberlist.Address, timeout time.Duration) (net.Conn, error) {
	return t.n.dial("memberlist", t.id, a.Name, a.Addr, func() (net.Conn, error) {
		return t.inner.DialAddressTimeout(a, timeout)
	})
}

// StreamCh returns streams whose preamble was read and whose link is open.
func (t *memberlistTransport) StreamCh() <-chan net.Conn { return t.acc.out }

func (t *memberlistTransport) pumpStreams() {
	in := t.inner.StreamCh()
	for {
		select {
		case c := <-in:
			t.acc.handle(c)
		case <-t.done:
			return
		}
	}
}

// Shutdown shuts the wrapped transport down, then stops the pumps, pending
// handshakes and delayed datagrams.
func (t *memberlistTransport) Shutdown() error {
	var err error
	t.once.Do(func() {
		// The pumps keep draining while the wrapped transport's listeners
		// stop, so they never block on a full channel.
		err = t.inner.Shutdown()
		close(t.done)
		t.wg.Wait()
		t.acc.close()
		t.sched.close()
	})
	if err != nil {
		return fmt.Errorf("chaos: memberlist transport %s shutdown: %w", t.id, err)
	}
	return nil
}

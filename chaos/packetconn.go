package chaos

import (
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"time"
)

// maxDatagram is the largest UDP payload.
const maxDatagram = 64 << 10

// PacketConn is a net.PacketConn that injects the faults of a [LinkProfile]
// into the datagrams it writes (and, with Dir DirIn or DirBoth, reads).
//
// It can be handed to quic-go as quic.Transport.Conn. It deliberately does
// not implement quic-go's OOBCapablePacketConn nor SyscallConn: either would
// let quic-go read and write the socket directly (recvmmsg/sendmsg with GSO)
// and bypass the faults. quic-go therefore uses its plain path (ReadFrom and
// WriteTo, one datagram per call, no GSO, no ECN, no DF bit, so no path MTU
// discovery). SetReadBuffer and SetWriteBuffer pass through to the wrapped
// socket, so quic-go sizes its buffers without warnings.
//
// Reads go through a queue: a goroutine reads the wrapped socket, applies
// inbound faults and queues datagrams for ReadFrom (at most DefaultMaxQueue,
// see WithMaxQueue; beyond that datagrams are dropped as KindOverflow). Read
// deadlines apply to that queue; write deadlines pass through to the wrapped
// socket. Delayed datagrams are delivered by a scheduler goroutine, so
// WriteTo never blocks on a fault. Close closes the wrapped socket, discards
// datagrams still in flight and waits for both goroutines.
type PacketConn struct {
	inner net.PacketConn
	eng   *engine
	local string
	max   int

	closed     chan struct{}
	closeOnce  sync.Once
	closeErr   error
	readerDone chan struct{}

	rmu       sync.Mutex
	rq        []inbound     // guarded by rmu; rq[rhead:] are queued
	rhead     int           // guarded by rmu
	rsig      chan struct{} // guarded by rmu; closed and replaced when read state changes
	rdeadline time.Time     // guarded by rmu
	rerr      error         // guarded by rmu; sticky error of the wrapped socket
}

type inbound struct {
	data []byte
	addr net.Addr
}

var _ net.PacketConn = (*PacketConn)(nil)

// NewPacketConn wraps inner, which the returned PacketConn owns and closes.
// seed selects the random faults; log (nil to discard) receives every fault.
// It panics if p is invalid (see LinkProfile.Validate), as profiles are
// written by the programmer.
func NewPacketConn(inner net.PacketConn, p LinkProfile, seed uint64, log *FaultLog, opts ...Option) *PacketConn {
	if err := p.Validate(); err != nil {
		panic(err)
	}
	o := buildOptions(opts)
	local := inner.LocalAddr().String()
	o.logger = o.logger.Named("chaos-packetconn").With("local", local)
	c := &PacketConn{
		inner:      inner,
		eng:        newEngine(p, DirOut, seed, log, o),
		local:      local,
		max:        o.maxQueue,
		closed:     make(chan struct{}),
		readerDone: make(chan struct{}),
		rsig:       make(chan struct{}),
	}
	go c.readLoop()
	return c
}

// SetProfile replaces the profile for destinations without their own.
func (c *PacketConn) SetProfile(p LinkProfile) error { return c.eng.setProfile(p) }

// Profile returns the profile for destinations without their own.
func (c *PacketConn) Profile() LinkProfile { return c.eng.profile() }

// SetPeerProfile sets the profile for datagrams to (and, depending on its
// Dir, from) addr, matched by addr.String(). One agent socket can so see
// 5 ms to one server and 120 ms to another.
func (c *PacketConn) SetPeerProfile(addr net.Addr, p LinkProfile) error {
	return c.eng.setPeerProfile(addr.String(), p)
}

// ClearPeerProfile makes addr use the default profile again.
func (c *PacketConn) ClearPeerProfile(addr net.Addr) { c.eng.clearPeerProfile(addr.String()) }

// Blackhole drops every datagram, in both directions and whatever the
// profile, for d from now (extending a running blackhole, never shortening
// it).
func (c *PacketConn) Blackhole(d time.Duration) { c.eng.blackholeFor(d, c.local) }

// SetBlackhole turns an indefinite blackhole on or off; off also ends a
// timed Blackhole.
func (c *PacketConn) SetBlackhole(on bool) { c.eng.setBlackhole(on, c.local) }

// Stats returns the packet and byte counters of both directions.
func (c *PacketConn) Stats() Stats { return c.eng.snapshot() }

// Inner returns the wrapped socket.
func (c *PacketConn) Inner() net.PacketConn { return c.inner }

// WriteTo sends b to addr through the faults of addr's profile. A dropped
// datagram is reported as written, as UDP would.
func (c *PacketConn) WriteTo(b []byte, addr net.Addr) (int, error) {
	select {
	case <-c.closed:
		return 0, c.opError("write", addr, net.ErrClosed)
	default:
	}
	if addr == nil {
		return c.inner.WriteTo(b, addr) // let the socket report the missing address
	}
	key := addr.String()
	if err := c.eng.handle(route{dir: DirOut, key: key, from: c.local, to: key}, b, addr, c.writeInner, false); err != nil {
		return 0, err
	}
	return len(b), nil
}

func (c *PacketConn) writeInner(b []byte, addr net.Addr) error {
	_, err := c.inner.WriteTo(b, addr)
	return err
}

// ReadFrom returns the next datagram that survived the inbound faults.
func (c *PacketConn) ReadFrom(b []byte) (int, net.Addr, error) {
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for {
		c.rmu.Lock()
		select {
		case <-c.closed:
			c.rmu.Unlock()
			return 0, nil, c.opError("read", nil, net.ErrClosed)
		default:
		}
		if c.rhead < len(c.rq) {
			in := c.rq[c.rhead]
			c.rq[c.rhead] = inbound{}
			c.rhead++
			if c.rhead == len(c.rq) {
				c.rq, c.rhead = c.rq[:0], 0
			} else if c.rhead >= 64 && c.rhead*2 >= len(c.rq) {
				n := copy(c.rq, c.rq[c.rhead:])
				clear(c.rq[n:])
				c.rq, c.rhead = c.rq[:n], 0
			}
			c.rmu.Unlock()
			return copy(b, in.data), in.addr, nil
		}
		if c.rerr != nil {
			err := c.rerr
			c.rmu.Unlock()
			return 0, nil, err
		}
		deadline, sig := c.rdeadline, c.rsig
		c.rmu.Unlock()

		var expired <-chan time.Time
		if !deadline.IsZero() {
			wait := time.Until(deadline)
			if wait <= 0 {
				return 0, nil, c.opError("read", nil, os.ErrDeadlineExceeded)
			}
			if timer == nil {
				timer = time.NewTimer(wait)
			} else {
				timer.Reset(wait)
			}
			expired = timer.C
		}
		select {
		case <-sig:
		case <-expired:
		case <-c.closed:
		}
	}
}

// readLoop moves datagrams from the wrapped socket through the inbound
// faults into the read queue.
func (c *PacketConn) readLoop() {
	defer close(c.readerDone)
	buf := make([]byte, maxDatagram)
	for {
		n, addr, err := c.inner.ReadFrom(buf)
		if err != nil {
			select {
			case <-c.closed:
				return
			default:
			}
			if ne, ok := errors.AsType[net.Error](err); ok && ne.Timeout() {
				continue // someone set a deadline on the wrapped socket
			}
			c.rmu.Lock()
			c.rerr = err
			c.signalLocked()
			c.rmu.Unlock()
			return
		}
		data := append([]byte(nil), buf[:n]...)
		key := addr.String()
		_ = c.eng.handle(route{dir: DirIn, key: key, from: key, to: c.local}, data, addr, c.enqueue, true)
	}
}

// enqueue makes a datagram available to ReadFrom.
func (c *PacketConn) enqueue(b []byte, addr net.Addr) error {
	c.rmu.Lock()
	defer c.rmu.Unlock()
	if len(c.rq)-c.rhead >= c.max {
		c.eng.log.Record(KindOverflow, addr.String(), c.local, fmt.Sprintf("%d bytes, read queue full", len(b)))
		return errDropped
	}
	c.rq = append(c.rq, inbound{data: b, addr: addr})
	c.signalLocked()
	return nil
}

func (c *PacketConn) signalLocked() {
	close(c.rsig)
	c.rsig = make(chan struct{})
}

// Close closes the wrapped socket, discards datagrams in flight and waits
// for the PacketConn's goroutines to exit.
func (c *PacketConn) Close() error {
	c.closeOnce.Do(func() {
		close(c.closed)
		if err := c.inner.Close(); err != nil {
			c.closeErr = fmt.Errorf("chaos: close %s: %w", c.local, err)
		}
		<-c.readerDone
		c.eng.close()
	})
	return c.closeErr
}

// LocalAddr returns the wrapped socket's address.
func (c *PacketConn) LocalAddr() net.Addr { return c.inner.LocalAddr() }

// SetDeadline sets both the read and the write deadline.
func (c *PacketConn) SetDeadline(t time.Time) error {
	if err := c.SetReadDeadline(t); err != nil {
		return err
	}
	return c.SetWriteDeadline(t)
}

// SetReadDeadline bounds ReadFrom calls, including ones already blocked.
func (c *PacketConn) SetReadDeadline(t time.Time) error {
	c.rmu.Lock()
	defer c.rmu.Unlock()
	select {
	case <-c.closed:
		return c.opError("set", nil, net.ErrClosed)
	default:
	}
	c.rdeadline = t
	c.signalLocked()
	return nil
}

// SetWriteDeadline passes through to the wrapped socket; it also bounds the
// delivery of delayed datagrams, which then fail and are counted as errors.
func (c *PacketConn) SetWriteDeadline(t time.Time) error { return c.inner.SetWriteDeadline(t) }

// SetReadBuffer sets the wrapped socket's receive buffer, if it has one.
func (c *PacketConn) SetReadBuffer(n int) error {
	s, ok := c.inner.(interface{ SetReadBuffer(int) error })
	if !ok {
		return fmt.Errorf("chaos: %T has no receive buffer to set", c.inner)
	}
	return s.SetReadBuffer(n)
}

// SetWriteBuffer sets the wrapped socket's send buffer, if it has one.
func (c *PacketConn) SetWriteBuffer(n int) error {
	s, ok := c.inner.(interface{ SetWriteBuffer(int) error })
	if !ok {
		return fmt.Errorf("chaos: %T has no send buffer to set", c.inner)
	}
	return s.SetWriteBuffer(n)
}

func (c *PacketConn) opError(op string, addr net.Addr, err error) error {
	la := c.inner.LocalAddr()
	return &net.OpError{Op: op, Net: la.Network(), Source: la, Addr: addr, Err: err}
}

package chaos

import (
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// A connection through a Network starts with a preamble naming the dialing
// node, so the accepting side knows which link it belongs to:
// "mchx", one length byte, the node ID.
const preambleMagic = "mchx"

func writePreamble(c net.Conn, id string, timeout time.Duration) error {
	if len(id) > 255 {
		return fmt.Errorf("chaos: node ID %q longer than 255 bytes", id)
	}
	buf := make([]byte, 0, len(preambleMagic)+1+len(id))
	buf = append(buf, preambleMagic...)
	buf = append(buf, byte(len(id)))
	buf = append(buf, id...)
	if err := c.SetWriteDeadline(time.Now().Add(timeout)); err != nil {
		return fmt.Errorf("chaos: write preamble: %w", err)
	}
	if _, err := c.Write(buf); err != nil {
		return fmt.Errorf("chaos: write preamble: %w", err)
	}
	if err := c.SetWriteDeadline(time.Time{}); err != nil {
		return fmt.Errorf("chaos: write preamble: %w", err)
	}
	return nil
}

func readPreamble(c net.Conn, timeout time.Duration) (string, error) {
	if err := c.SetReadDeadline(time.Now().Add(timeout)); err != nil {
		return "", fmt.Errorf("chaos: read preamble: %w", err)
	}
	head := make([]byte, len(preambleMagic)+1)
	if _, err := io.ReadFull(c, head); err != nil {
		return "", fmt.Errorf("chaos: read preamble: %w", err)
	}
	if string(head[:len(preambleMagic)]) != preambleMagic {
		return "", fmt.Errorf("chaos: read preamble: bad magic %q (peer not dialing through a chaos.Network?)", head[:len(preambleMagic)])
	}
	id := make([]byte, head[len(preambleMagic)])
	if _, err := io.ReadFull(c, id); err != nil {
		return "", fmt.Errorf("chaos: read preamble: %w", err)
	}
	if err := c.SetReadDeadline(time.Time{}); err != nil {
		return "", fmt.Errorf("chaos: read preamble: %w", err)
	}
	return string(id), nil
}

// netConn is a connection between two nodes of a Network. Every Read and
// Write consults the partition table; a cut link fails the call and closes
// the connection.
type netConn struct {
	net.Conn
	n             *Network
	local, remote string
	kind          string // "raft" or "memberlist", for the fault log

	wmu    sync.Mutex                    // serialises writes
	dw     atomic.Pointer[delayedWriter] // set under wmu on the first delayed write
	closed atomic.Bool
	once   sync.Once
	err    error
}

// wrap registers c as a connection from local to remote (node IDs).
func (n *Network) wrap(c net.Conn, kind, local, remote string) *netConn {
	nc := &netConn{Conn: c, n: n, local: local, remote: remote, kind: kind}
	n.track(nc)
	return nc
}

func (c *netConn) Read(b []byte) (int, error) {
	what := c.kind + " read"
	if err := c.n.recv(c.remote, c.local, what); err != nil {
		c.Close()
		return 0, err
	}
	nr, err := c.Conn.Read(b)
	if nr > 0 {
		// The link may have been cut while the read was blocked.
		if rerr := c.n.recv(c.remote, c.local, what); rerr != nil {
			c.Close()
			return 0, rerr
		}
	}
	return nr, err
}

func (c *netConn) Write(b []byte) (int, error) {
	what := c.kind + " write"
	d, err := c.n.send(c.local, c.remote, what)
	if err != nil {
		c.Close()
		return 0, err
	}
	c.wmu.Lock()
	defer c.wmu.Unlock()
	dw := c.dw.Load()
	if dw == nil && d == 0 {
		return c.Conn.Write(b)
	}
	if dw == nil {
		// From now on every write goes through the delayed writer, so
		// bytes keep their order when the delay changes.
		dw = newDelayedWriter(c.Conn, tcpBufferLimit, func(error) { c.Conn.Close() }, func() {})
		c.dw.Store(dw)
		if c.closed.Load() {
			dw.stop()
			return 0, net.ErrClosed
		}
	}
	if d > 0 {
		c.n.log.Record(KindDelay, c.local, c.remote, fmt.Sprintf("%s %d bytes %v", what, len(b), d))
	}
	if err := dw.write(b, time.Now().Add(d)); err != nil {
		return 0, fmt.Errorf("chaos: %s %s->%s: %w", what, c.local, c.remote, err)
	}
	return len(b), nil
}

// Close closes the connection, discarding bytes still delayed.
func (c *netConn) Close() error {
	c.once.Do(func() {
		c.closed.Store(true)
		c.n.untrack(c)
		c.err = c.Conn.Close()
		if dw := c.dw.Load(); dw != nil {
			dw.stop()
		}
	})
	return c.err
}

// dial opens a connection from local to the node at addr (remote, if
// known, else looked up), failing fast across a cut link.
func (n *Network) dial(kind, local, remote, addr string, dial func() (net.Conn, error)) (net.Conn, error) {
	if remote == "" {
		remote = n.nodeOf(addr)
	}
	if _, err := n.send(local, remote, kind+" dial"); err != nil {
		return nil, err
	}
	c, err := dial()
	if err != nil {
		return nil, fmt.Errorf("chaos: %s dial %s: %w", kind, addr, err)
	}
	if err := writePreamble(c, local, n.dialTimeout); err != nil {
		c.Close()
		return nil, fmt.Errorf("chaos: %s dial %s: %w", kind, addr, err)
	}
	return n.wrap(c, kind, local, remote), nil
}

// acceptor turns raw accepted connections into netConns: it reads each
// preamble on its own goroutine, so a slow dialer delays no one else.
type acceptor struct {
	n     *Network
	local string
	kind  string
	out   chan net.Conn
	done  chan struct{}

	mu      sync.Mutex
	closed  bool                  // guarded by mu
	pending map[net.Conn]struct{} // guarded by mu; preambles being read
	wg      sync.WaitGroup
}

func newAcceptor(n *Network, kind, local string) *acceptor {
	return &acceptor{
		n: n, kind: kind, local: local,
		out:     make(chan net.Conn),
		done:    make(chan struct{}),
		pending: make(map[net.Conn]struct{}),
	}
}

// handle starts the preamble exchange of an accepted connection.
func (a *acceptor) handle(c net.Conn) {
	a.mu.Lock()
	if a.closed {
		a.mu.Unlock()
		c.Close()
		return
	}
	a.pending[c] = struct{}{}
	a.wg.Add(1)
	a.mu.Unlock()
	go func() {
		defer a.wg.Done()
		remote, err := readPreamble(c, a.n.dialTimeout)
		a.mu.Lock()
		delete(a.pending, c)
		a.mu.Unlock()
		if err != nil {
			a.n.logger.Debug("dropping connection", "kind", a.kind, "server", a.local, "remote", c.RemoteAddr(), "error", err)
			c.Close()
			return
		}
		if err := a.n.recv(remote, a.local, a.kind+" accept"); err != nil {
			resetConn(c)
			return
		}
		nc := a.n.wrap(c, a.kind, a.local, remote)
		select {
		case a.out <- nc:
		case <-a.done:
			nc.Close()
		}
	}()
}

// close fails pending preamble reads and waits for their goroutines.
func (a *acceptor) close() {
	a.mu.Lock()
	if a.closed {
		a.mu.Unlock()
		return
	}
	a.closed = true
	close(a.done)
	for c := range a.pending {
		c.Close()
	}
	a.mu.Unlock()
	a.wg.Wait()
}

// isClosedErr reports whether err means a listener or connection was closed.
func isClosedErr(err error) bool { return errors.Is(err, net.ErrClosed) }

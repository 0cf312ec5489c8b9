package chaos

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// UDPProxy forwards datagrams between clients and one target through the
// faults of a LinkProfile. Each client address gets a session: its own
// socket towards the target, so the target sees one peer per client, and
// replies go back to that client. Sessions silent in both directions for
// the idle timeout (WithIdleTimeout) are closed. WithNATBinding makes the
// proxy forget a session sooner, as a NAT forgets a binding. Retarget
// moves the proxy to another target, as when a server is replaced behind
// an address that stays the same.
//
// A profile with Dir DirDefault or DirBoth applies in both directions; DirOut
// only client→target, DirIn only target→client.
type UDPProxy struct {
	conn   *net.UDPConn
	target *net.UDPAddr // guarded by mu
	name   string
	eng    *engine
	o      options
	life   lifecycle

	mu       sync.Mutex
	sessions map[string]*udpSession // guarded by mu; by client address
	wg       sync.WaitGroup         // session reader goroutines

	natDropped, natDroppedBytes, natRebinds atomic.Int64
}

type udpSession struct {
	client  *net.UDPAddr
	key     string
	target  *net.UDPAddr // the proxy's target when the session opened
	up      *net.UDPConn // connected to target
	last    atomic.Int64 // unix nanoseconds of the last datagram either way
	lastOut atomic.Int64 // unix nanoseconds of the last datagram from the client
}

// NATStats are what a proxy's NAT binding (WithNATBinding) did: datagrams
// from the target dropped at a lapsed binding, and bindings made anew.
type NATStats struct {
	Dropped, DroppedBytes, Rebinds int64
}

// NAT returns the NAT counters.
func (p *UDPProxy) NAT() NATStats {
	return NATStats{Dropped: p.natDropped.Load(), DroppedBytes: p.natDroppedBytes.Load(), Rebinds: p.natRebinds.Load()}
}

// lapsed reports whether s's NAT binding has lapsed at now, on the
// proxy's clock (WithClock).
func (p *UDPProxy) lapsed(s *udpSession, now int64) bool {
	return p.o.natBinding > 0 && now-s.lastOut.Load() > int64(p.o.natBinding)
}

// NewUDPProxy listens on listen (host:port, port 0 for any) and will forward
// to target once Run is called. seed selects the random faults; log (nil to
// discard) receives every fault.
func NewUDPProxy(listen, target string, p LinkProfile, seed uint64, log *FaultLog, opts ...Option) (*UDPProxy, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	taddr, err := net.ResolveUDPAddr("udp", target)
	if err != nil {
		return nil, fmt.Errorf("chaos: udp proxy target %q: %w", target, err)
	}
	laddr, err := net.ResolveUDPAddr("udp", listen)
	if err != nil {
		return nil, fmt.Errorf("chaos: udp proxy listen %q: %w", listen, err)
	}
	conn, err := net.ListenUDP("udp", laddr)
	if err != nil {
		return nil, fmt.Errorf("chaos: udp proxy listen %q: %w", listen, err)
	}
	o := buildOptions(opts)
	name := conn.LocalAddr().String()
	o.logger = o.logger.Named("chaos-udpproxy").With("listen", name, "target", target)
	return &UDPProxy{
		conn:     conn,
		target:   taddr,
		name:     name,
		eng:      newEngine(p, DirBoth, seed, log, o),
		o:        o,
		life:     newLifecycle(),
		sessions: make(map[string]*udpSession),
	}, nil
}

// Addr returns the address clients send to.
func (p *UDPProxy) Addr() net.Addr { return p.conn.LocalAddr() }

// SetProfile replaces the fault profile.
func (p *UDPProxy) SetProfile(lp LinkProfile) error { return p.eng.setProfile(lp) }

// Profile returns the fault profile.
func (p *UDPProxy) Profile() LinkProfile { return p.eng.profile() }

// Partition drops every datagram in both directions while on.
func (p *UDPProxy) Partition(on bool) {
	p.mu.Lock()
	target := p.target.String()
	p.mu.Unlock()
	p.eng.setCut(on, p.name, target)
}

// Retarget forwards to target from now on. Every session is closed, so
// each client's next datagram opens one towards the new target; replies
// the old target sends after that are not delivered.
func (p *UDPProxy) Retarget(target string) error {
	taddr, err := net.ResolveUDPAddr("udp", target)
	if err != nil {
		return fmt.Errorf("chaos: udp proxy target %q: %w", target, err)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.target = taddr
	for k, s := range p.sessions {
		s.up.Close()
		delete(p.sessions, k)
	}
	p.o.logger.Debug("retargeted", "target", target)
	return nil
}

// Stats returns the counters: Out is client→target, In target→client.
func (p *UDPProxy) Stats() Stats { return p.eng.snapshot() }

// Sessions returns the number of live client sessions.
func (p *UDPProxy) Sessions() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.sessions)
}

// Run forwards datagrams until ctx ends or Close is called, then closes the
// proxy and returns once all its goroutines have exited. It returns nil
// after a requested stop and an error if the listening socket failed.
func (p *UDPProxy) Run(ctx context.Context) error {
	if err := p.life.begin(); err != nil {
		return err
	}
	defer p.life.end()

	readErr := make(chan error, 1)
	var loops sync.WaitGroup
	loops.Go(func() { readErr <- p.readLoop() })
	loops.Go(p.expireLoop)

	var err error
	select {
	case <-ctx.Done():
	case <-p.life.closing:
	case err = <-readErr:
		err = fmt.Errorf("chaos: udp proxy %s: %w", p.name, err)
	}
	p.life.close()
	p.shutdown()
	loops.Wait()
	return err
}

// Close stops the proxy and waits for Run to return.
func (p *UDPProxy) Close() error {
	running, first := p.life.close()
	if running {
		<-p.life.stopped
	} else if first {
		p.shutdown()
	}
	return nil
}

// shutdown closes every socket, waits for the session readers and stops
// delayed delivery.
func (p *UDPProxy) shutdown() {
	p.conn.Close()
	p.mu.Lock()
	for k, s := range p.sessions {
		s.up.Close()
		delete(p.sessions, k)
	}
	p.mu.Unlock()
	p.wg.Wait()
	p.eng.close()
}

func (p *UDPProxy) readLoop() error {
	buf := make([]byte, maxDatagram)
	for {
		n, client, err := p.conn.ReadFromUDP(buf)
		if err != nil {
			select {
			case <-p.life.closing:
				return nil
			default:
			}
			if errors.Is(err, net.ErrClosed) {
				return nil
			}
			return err
		}
		s, err := p.session(client)
		if err != nil {
			p.o.logger.Warn("cannot open session", "client", client, "error", err)
			continue
		}
		s.last.Store(time.Now().UnixNano())
		s.lastOut.Store(p.o.clock.Now().UnixNano())
		data := append([]byte(nil), buf[:n]...)
		r := route{dir: DirOut, key: s.key, from: s.key, to: s.target.String()}
		_ = p.eng.handle(r, data, s.target, s.writeUp, true)
	}
}

// session returns the client's session, opening it on first contact.
func (p *UDPProxy) session(client *net.UDPAddr) (*udpSession, error) {
	key := client.String()
	p.mu.Lock()
	defer p.mu.Unlock()
	if s, ok := p.sessions[key]; ok {
		if !p.lapsed(s, p.o.clock.Now().UnixNano()) {
			return s, nil
		}
		// A new binding, from a new port.
		s.up.Close()
		delete(p.sessions, key)
		p.natRebinds.Add(1)
		p.o.logger.Debug("NAT binding lapsed; binding anew", "client", key)
	}
	select {
	case <-p.life.closing:
		return nil, ErrClosed
	default:
	}
	up, err := net.DialUDP("udp", nil, p.target)
	if err != nil {
		return nil, fmt.Errorf("dial target %s: %w", p.target, err)
	}
	s := &udpSession{client: client, key: key, target: p.target, up: up}
	s.last.Store(time.Now().UnixNano())
	s.lastOut.Store(p.o.clock.Now().UnixNano())
	p.sessions[key] = s
	p.wg.Go(func() { p.sessionLoop(s) })
	p.o.logger.Debug("session opened", "client", key)
	return s, nil
}

func (s *udpSession) writeUp(b []byte, _ net.Addr) error {
	_, err := s.up.Write(b)
	return err
}

func (p *UDPProxy) writeDown(b []byte, addr net.Addr) error {
	_, err := p.conn.WriteTo(b, addr)
	return err
}

// sessionLoop forwards the target's replies to the client until the
// session's socket is closed.
func (p *UDPProxy) sessionLoop(s *udpSession) {
	buf := make([]byte, maxDatagram)
	r := route{dir: DirIn, key: s.key, from: s.target.String(), to: s.key}
	for {
		n, err := s.up.Read(buf)
		if err != nil {
			if !errors.Is(err, net.ErrClosed) {
				// ECONNREFUSED after an ICMP port unreachable is transient:
				// the target may come back.
				if errors.Is(err, syscall.ECONNREFUSED) {
					continue
				}
				p.o.logger.Debug("session read failed", "client", s.key, "error", err)
			}
			return
		}
		if p.lapsed(s, p.o.clock.Now().UnixNano()) {
			p.natDropped.Add(1)
			p.natDroppedBytes.Add(int64(n))
			continue
		}
		s.last.Store(time.Now().UnixNano())
		data := append([]byte(nil), buf[:n]...)
		_ = p.eng.handle(r, data, s.client, p.writeDown, true)
	}
}

// expireLoop closes sessions idle for longer than the idle timeout.
func (p *UDPProxy) expireLoop() {
	every := max(p.o.idleTimeout/4, time.Millisecond)
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		select {
		case <-p.life.closing:
			return
		case now := <-tick.C:
			cutoff := now.Add(-p.o.idleTimeout).UnixNano()
			p.mu.Lock()
			for k, s := range p.sessions {
				if s.last.Load() < cutoff {
					s.up.Close()
					delete(p.sessions, k)
					p.o.logger.Debug("session expired", "client", k)
				}
			}
			p.mu.Unlock()
		}
	}
}

package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/quic-go/quic-go"

	"github.com/meteor-edge/meteor/bench/internal/wiredev"
	"github.com/meteor-edge/meteor/wire"
)

// deviceQUIC is the QUIC configuration of the benchmark's devices: an
// agent's, but with QUIC's idle timeout and keep-alives of protocol 1.2
// (30 s, every 10 s), since these devices send no Pings of their own and
// notice a dead server only by that timeout.
func deviceQUIC() *quic.Config {
	q := wire.ClientQUICConfig()
	q.MaxIdleTimeout, q.KeepAlivePeriod = wire.LegacyIdleTimeout, 10*time.Second
	return q
}

// session is one connection's control stream, with its traffic counted.
type session struct {
	conn    *quic.Conn
	str     *quic.Stream
	r       *wire.Reader
	w       *wire.Writer
	timeout time.Duration
	rx, tx  traffic
}

func openStream(conn *quic.Conn, timeout time.Duration) (*session, error) {
	str, err := conn.OpenStream()
	if err != nil {
		return nil, err
	}
	return &session{conn: conn, str: str, r: wire.NewReader(str), w: wire.NewWriter(str), timeout: timeout}, nil
}

func (s *session) send(m wire.Message) error {
	if err := s.w.Write(m); err != nil {
		return fmt.Errorf("send %s: %w", m.Type(), wire.FromQUICError(err))
	}
	s.tx.add(m)
	return nil
}

// recv reads the next frame that is not a push (Notify, ReportAck).
// Reject and GoAway are errors.
func (s *session) recv() (wire.Message, error) {
	for {
		if err := s.str.SetReadDeadline(time.Now().Add(s.timeout)); err != nil {
			return nil, err
		}
		m, err := s.r.Read()
		if err != nil {
			return nil, fmt.Errorf("receive: %w", wire.FromQUICError(err))
		}
		s.rx.add(m)
		switch m := m.(type) {
		case *wire.Notify, *wire.ReportAck, *wire.Settings:
			continue
		case *wire.Reject:
			return nil, fmt.Errorf("Reject %s: %s", m.Code, m.Reason)
		case *wire.GoAway:
			return nil, fmt.Errorf("GoAway %s: %s", m.Code, m.Reason)
		}
		return m, nil
	}
}

// recvDelta reads the frames of one Delta until the one marked complete.
func (s *session) recvDelta() ([]*wire.Delta, error) {
	var frames []*wire.Delta
	for {
		m, err := s.recv()
		if err != nil {
			return nil, err
		}
		d, ok := m.(*wire.Delta)
		if !ok {
			return nil, fmt.Errorf("got %s, want Delta", m.Type())
		}
		frames = append(frames, d)
		if d.Complete {
			return frames, nil
		}
	}
}

// waitFor reads until a frame of type T arrives, skipping pushes.
func waitFor[T wire.Message](s *session) (T, error) {
	var zero T
	m, err := s.recv()
	if err != nil {
		return zero, err
	}
	v, ok := m.(T)
	if !ok {
		return zero, fmt.Errorf("got %s, want %T", m.Type(), zero)
	}
	return v, nil
}

// openOpts says how a device opens a session on a new connection.
type openOpts struct {
	// inventory sends the applied set in Hello and Pull, as the agent
	// does; without it the device resumes by revision only.
	inventory bool
	// pipeline writes Pull right after Hello (in 0-RTT data when the
	// connection allows it) instead of after the Welcome.
	pipeline bool
	// start is the instant times are measured from.
	start   time.Time
	timeout time.Duration
}

// opened is what opening a session produced.
type opened struct {
	s       *session
	welcome *wire.Welcome
	delta   []*wire.Delta
	// welcomeAt and deltaAt are the times from start until the Welcome
	// and the complete first Delta were decoded.
	welcomeAt, deltaAt time.Duration
	// rejected0RTT is set when the server refused the early data and the
	// Hello was sent again after the handshake (docs/wire.md §4).
	rejected0RTT bool
	used0RTT     bool
	tlsResumed   bool
}

// openSession runs the start of d's session on conn, a connection just
// dialled: Hello (and Pull), Welcome, the first complete Delta and its
// Ack.
func openSession(ctx context.Context, d *wiredev.Device, conn *quic.Conn, o openOpts) (*opened, error) {
	res := &opened{}
	s, err := startSession(d, conn, o)
	if err == nil {
		res.welcome, err = waitFor[*wire.Welcome](s)
	}
	if err != nil && errors.Is(err, quic.Err0RTTRejected) {
		res.rejected0RTT = true
		hctx, cancel := context.WithTimeout(ctx, o.timeout)
		conn, err = conn.NextConnection(hctx)
		cancel()
		if err != nil {
			return nil, fmt.Errorf("handshake after refused 0-RTT: %w", err)
		}
		if s, err = startSession(d, conn, o); err == nil {
			res.welcome, err = waitFor[*wire.Welcome](s)
		}
	}
	if err != nil {
		return nil, err
	}
	res.s = s
	res.welcomeAt = time.Since(o.start)
	d.Welcomed(res.welcome)
	if res.welcome.Minor >= wire.MinorKeepAlive {
		// These devices leave keep-alives to QUIC (wire.KeepAlivePeriod);
		// announce a silence the server will not cut them off for.
		if err := s.send(&wire.Ping{Seq: 1, Interval: time.Hour}); err != nil {
			return nil, err
		}
	}
	if !o.pipeline {
		if err := s.send(d.Pull(o.inventory)); err != nil {
			return nil, err
		}
	}
	if res.delta, err = s.recvDelta(); err != nil {
		return nil, err
	}
	res.deltaAt = time.Since(o.start)
	cs := s.conn.ConnectionState()
	res.used0RTT, res.tlsResumed = cs.Used0RTT, cs.TLS.DidResume
	if rev := d.Take(res.delta); rev != 0 {
		if err := s.send(&wire.Ack{Revision: rev}); err != nil {
			return nil, err
		}
	}
	return res, nil
}

// startSession opens the control stream and writes d's Hello, and Pull
// if pipelined.
func startSession(d *wiredev.Device, conn *quic.Conn, o openOpts) (*session, error) {
	s, err := openStream(conn, o.timeout)
	if err != nil {
		return nil, err
	}
	h := d.Hello(o.inventory)
	h.Early = !wire.HandshakeDone(conn)
	if err := s.send(h); err != nil {
		return nil, err
	}
	if o.pipeline {
		if err := s.send(d.Pull(o.inventory)); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// ticketCache is a TLS client session cache that counts the tickets it
// receives, so that a run can wait for a connection's ticket before
// dropping it. Like the agent's, it ignores Put(nil): crypto/tls deletes
// the ticket after any failed handshake.
type ticketCache struct {
	mu    sync.Mutex // guards inner
	inner tls.ClientSessionCache
	puts  atomic.Int64
	put   chan struct{} // signalled (without blocking) on every Put
}

func newTicketCache() *ticketCache {
	return &ticketCache{inner: tls.NewLRUClientSessionCache(4), put: make(chan struct{}, 1)}
}

func (c *ticketCache) Get(key string) (*tls.ClientSessionState, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.inner.Get(key)
}

func (c *ticketCache) Put(key string, cs *tls.ClientSessionState) {
	if cs != nil {
		c.mu.Lock()
		c.inner.Put(key, cs)
		c.mu.Unlock()
		c.puts.Add(1)
		select {
		case c.put <- struct{}{}:
		default:
		}
	}
}

// reset drops every ticket, as the agent does when every server keeps
// failing (agent/conn.go, penalize).
func (c *ticketCache) reset() {
	c.mu.Lock()
	c.inner = tls.NewLRUClientSessionCache(4)
	c.mu.Unlock()
}

// waitReportAck reads until a ReportAck covering seq arrives, skipping
// Notify.
func (s *session) waitReportAck(seq uint64) error {
	for {
		if err := s.str.SetReadDeadline(time.Now().Add(s.timeout)); err != nil {
			return err
		}
		m, err := s.r.Read()
		if err != nil {
			return fmt.Errorf("receive: %w", wire.FromQUICError(err))
		}
		s.rx.add(m)
		switch m := m.(type) {
		case *wire.ReportAck:
			if m.Seq >= seq {
				return nil
			}
		case *wire.Notify, *wire.Settings:
		default:
			return fmt.Errorf("got %s, want ReportAck", m.Type())
		}
	}
}

// waitTicket waits until cache holds more than have tickets, for up to
// limit; it reports whether one arrived.
func waitTicket(cache *ticketCache, have int64, limit time.Duration) bool {
	timeout := time.NewTimer(limit)
	defer timeout.Stop()
	for cache.puts.Load() <= have {
		select {
		case <-cache.put:
		case <-timeout.C:
			return cache.puts.Load() > have
		}
	}
	return true
}

package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"math/rand/v2"
	"net"
	"time"

	"github.com/quic-go/quic-go"

	"github.com/meteor-edge/meteor/agent"
	"github.com/meteor-edge/meteor/bench/internal/wiredev"
	"github.com/meteor-edge/meteor/wire"
)

// The agent's connection policy, which the storm's devices follow: a
// connection attempt (dial, or Hello to Welcome) is bounded by the agent's
// default DialTimeout, and a server that fails is kept out for a jittered
// exponential backoff of its consecutive failures between these bounds
// (agent/conn.go, penalize).
const (
	stormDialTimeout = wire.HandshakeIdleTimeout
	stormBackoffMin  = agent.DefaultBackoffMin
	stormBackoffMax  = agent.DefaultBackoffMax
)

// backoff is the agent's exponential backoff: lo doubled for each failure
// after the first, at most hi (agent/reconcile.go).
func backoff(lo, hi time.Duration, n int) time.Duration {
	d := lo
	for i := 1; i < n && d < hi; i++ {
		d *= 2
	}
	return min(d, hi)
}

// jittered draws the agent's jitter: a duration in [d/2, d].
func jittered(rng *rand.Rand, d time.Duration) time.Duration {
	return d/2 + time.Duration(rng.Int64N(int64(d/2)+1))
}

// stormTarget is a server a storm device may connect to.
type stormTarget struct {
	id   string
	addr *net.UDPAddr
}

// stormDev is one device of the storm: connected to the server that will
// die, then reconnecting as the agent does.
type stormDev struct {
	d  *wiredev.Device
	tr *quic.Transport
	// tlsConf is kept across connections (with cache, for 0-RTT); nil
	// means a fresh configuration without a session cache at every dial.
	tlsConf *tls.Config
	cache   *ticketCache
	pool    *x509.CertPool
	conn    *quic.Conn // the session's current connection
	sess    *session   // its control stream
	rng     *rand.Rand
}

// stormOutcome is what one device went through in the storm. Times are
// since the kill.
type stormOutcome struct {
	detected       time.Duration // when it gave up its old connection
	welcome, delta time.Duration // Welcome and complete first Delta
	server         string        // where it resumed
	ok             bool          // it got a Welcome and a first Delta
	resumed        bool          // the Welcome carried its old session ID
	resync         bool          // the first Delta carried resources
	attempts       int
	dialFailures   int // dial or handshake failed or timed out
	openFailures   int // connected, but no Welcome and Delta
	ticketsDropped int // times every server failed in a row and the ticket was dropped
	used0RTT       bool
	tlsResumed     bool
	rejected0RTT   bool
	firstErr       error // the first failure, if any
	err            error // the last failure
}

// serverState is the agent's view of one server: consecutive failures and
// the end of its penalty.
type serverState struct {
	failures int
	until    time.Time
}

// storm reconnects the device after its server died at t0: it gives up
// the old connection (at once with detectKill, at the idle timeout with
// detectIdle), then tries targets in order, each failure putting that
// server in penalty, until a session is open or ctx ends. The dead server
// is last in targets and starts in penalty, as the agent puts the server
// whose session ended there.
func (sd *stormDev) storm(ctx context.Context, t0 time.Time, detect string, targets []stormTarget) stormOutcome {
	var out stormOutcome
	old := sd.conn
	if detect == detectIdle {
		select {
		case <-old.Context().Done():
		case <-ctx.Done():
			out.err = ctx.Err()
			return out
		}
	}
	out.detected = time.Since(t0)
	// Closing waits for the connection's run loop; a dead server's
	// connection needs no goodbye, so do not wait for it.
	go old.CloseWithError(wire.CloseNormal, "server lost")
	sd.reconnect(ctx, t0, targets, &out)
	return out
}

// reconnect resumes the device's session on one of targets, tried in
// order as the agent does: each failure puts that server in penalty, and
// the last target (the server the session was on) starts in penalty. It
// records the attempts in out.
func (sd *stormDev) reconnect(ctx context.Context, t0 time.Time, targets []stormTarget, out *stormOutcome) {
	oldSession := sd.d.Session

	st := make([]serverState, len(targets))
	dead := len(targets) - 1
	st[dead] = serverState{failures: 1, until: time.Now().Add(jittered(sd.rng, backoff(stormBackoffMin, stormBackoffMax, 1)))}
	failedInRow := 1
	for ctx.Err() == nil {
		now := time.Now()
		var cands []int
		var earliest time.Time
		for i := range targets {
			if now.Before(st[i].until) {
				if earliest.IsZero() || st[i].until.Before(earliest) {
					earliest = st[i].until
				}
				continue
			}
			cands = append(cands, i)
		}
		if len(cands) == 0 {
			select {
			case <-ctx.Done():
			case <-time.After(time.Until(earliest)):
			}
			continue
		}
		for _, i := range cands {
			if ctx.Err() != nil {
				break
			}
			out.attempts++
			err := sd.attempt(ctx, t0, targets[i], oldSession, out)
			if err == nil {
				return
			}
			out.err = fmt.Errorf("%s: %w", targets[i].id, err)
			if out.firstErr == nil {
				out.firstErr = out.err
			}
			st[i].failures++
			st[i].until = time.Now().Add(jittered(sd.rng, backoff(stormBackoffMin, stormBackoffMax, st[i].failures)))
			if failedInRow++; failedInRow >= 2*len(targets)+1 && sd.cache != nil {
				sd.cache.reset()
				out.ticketsDropped++
				failedInRow = 0
			}
		}
	}
	if out.err == nil {
		out.err = ctx.Err()
	}
}

// attempt dials target and resumes the session: Hello with the resume
// token and the inventory, Pull pipelined, the Welcome, the first Delta
// and its Ack, as the agent does.
func (sd *stormDev) attempt(ctx context.Context, t0 time.Time, target stormTarget, oldSession wire.SessionID, out *stormOutcome) error {
	tlsConf := sd.tlsConf
	if tlsConf == nil {
		tlsConf = sd.d.TLSConfig(sd.pool, nil)
	}
	dctx, cancel := context.WithTimeout(ctx, stormDialTimeout)
	conn, err := sd.tr.DialEarly(dctx, target.addr, tlsConf, deviceQUIC())
	cancel()
	if err != nil {
		out.dialFailures++
		return fmt.Errorf("dial: %w", err)
	}
	timeout := stormDialTimeout
	if !wire.HandshakeDone(conn) {
		// As the agent: DialEarly returned before the handshake, so the
		// Welcome's wait covers it too, which a full handshake's dial
		// bounded on its own.
		timeout += stormDialTimeout
	}
	o, err := openSession(ctx, sd.d, conn, openOpts{inventory: true, pipeline: true, start: t0, timeout: timeout})
	if err != nil {
		// With 0-RTT, DialEarly returns before the handshake completes:
		// a handshake that never completed is a failed dial too.
		if wire.HandshakeDone(conn) {
			out.openFailures++
		} else {
			out.dialFailures++
		}
		conn.CloseWithError(wire.CloseNormal, "")
		return err
	}
	sd.conn, sd.sess = o.s.conn, o.s
	out.ok, out.server = true, target.id
	out.welcome, out.delta = o.welcomeAt, o.deltaAt
	out.resumed = !oldSession.IsZero() && o.welcome.SessionID == oldSession
	out.resync = accountDelta(o.delta).Upserts > 0
	out.used0RTT, out.tlsResumed, out.rejected0RTT = o.used0RTT, o.tlsResumed, o.rejected0RTT
	return nil
}

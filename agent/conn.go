package agent

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/quic-go/quic-go"

	"github.com/meteor-edge/meteor/wire"
)

// connManager keeps the agent connected to the nearest server it can
// reach, one session at a time:
//
//   - with no RTT known (at start) it races handshakes to every server and
//     keeps the first to complete, recording the others' RTTs as they
//     finish;
//   - afterwards it dials the best candidate directly with DialEarly, so a
//     reconnect resumes TLS and sends Hello and Pull in 0-RTT;
//   - while connected it re-measures every server with a short resumed
//     handshake (no stream) and moves only under hysteresis; the rounds
//     start RTTProbeInterval apart and back off (doubling, up to
//     RTTProbeMaxInterval) while no server looks nearer, and come back to
//     RTTProbeInterval when one does or when the session's own RTT grows
//     clearly (read from the connection: no traffic), so a device whose
//     server stays healthy costs almost nothing;
//   - a server that fails, refuses (Reject) or sends the agent away
//     (GoAway) is put in penalty for a jittered exponential backoff (or its
//     retry-after) and the next candidate is tried at once; redirects are
//     tried first.
//
// All dials share one quic.Transport over the agent's socket and one TLS
// config, whose session cache makes a ticket from any server usable with
// every other (they share ticket keys and the server name).
type connManager struct {
	a       *Agent
	cfg     *Config
	log     hclog.Logger
	tr      *quic.Transport
	tlsConf *tls.Config
	tickets *ticketCache
	hyst    hysteresis

	bg sync.WaitGroup // race losers finishing in the background

	mu        sync.Mutex
	order     []string               // configured servers; guarded by mu
	info      map[string]*serverInfo // guarded by mu
	redirects []string               // tried first on the next connect; guarded by mu
	preferred string                 // a nearer server to move to; guarded by mu
	streak    map[string]int         // hysteresis counters; guarded by mu
	failed    int                    // attempts failed since the last Welcome; guarded by mu
	rng       *rand.Rand             // jitter; guarded by mu
}

// serverInfo is what the agent knows of one server address.
type serverInfo struct {
	rtt          time.Duration // last measured; 0: unknown
	measuredAt   time.Time     // when rtt was measured
	failures     int           // consecutive failures, for backoff
	penaltyUntil time.Time     // not tried before this
}

func newConnManager(a *Agent, tr *quic.Transport) *connManager {
	cfg := &a.cfg
	tlsConf := wire.ClientTLSConfig(cfg.RootCAs, cfg.Certificate, wire.ClusterServerName)
	tickets := newTicketCache()
	tlsConf.ClientSessionCache = tickets
	cm := &connManager{
		a: a, cfg: cfg, log: a.log.Named("conn"), tr: tr,
		tlsConf: tlsConf, tickets: tickets,
		hyst:   hysteresis{Ratio: cfg.SwitchRatio, Margin: cfg.SwitchMargin, Probes: cfg.SwitchProbes},
		info:   map[string]*serverInfo{},
		streak: map[string]int{},
		rng:    rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 0x6d6574656f72)),
	}
	for _, s := range cfg.Servers {
		if _, ok := cm.info[s]; !ok {
			cm.order = append(cm.order, s)
			cm.info[s] = &serverInfo{}
		}
	}
	return cm
}

// run connects, runs a session, and reconnects, until ctx ends.
func (cm *connManager) run(ctx context.Context) {
	defer cm.bg.Wait()
	for ctx.Err() == nil {
		conn, addr, err := cm.connect(ctx)
		if err != nil {
			return // ctx ended
		}
		sctx, cancel := context.WithCancel(ctx)
		switchCh := make(chan string, 1)
		var probes sync.WaitGroup
		probes.Go(func() { cm.probeLoop(sctx, conn, addr, switchCh) })
		end := cm.a.runSession(ctx, conn, addr, switchCh)
		cancel()
		probes.Wait()
		cm.a.st.update(func(s *Status) { s.Connected, s.Server, s.ServerID = false, "", "" })
		if ctx.Err() != nil {
			return
		}
		cm.ended(addr, end)
	}
}

// ended updates the server table after a session on addr ended.
func (cm *connManager) ended(addr string, end sessionEnd) {
	log := cm.log.With("server_addr", addr)
	if end.established {
		cm.mu.Lock()
		cm.info[addr].failures, cm.failed = 0, 0
		cm.mu.Unlock()
	}
	switch {
	case end.switchTo != "":
		log.Info("moving to a nearer server", "nearer_addr", end.switchTo)
		cm.mu.Lock()
		cm.preferred = end.switchTo
		clear(cm.streak)
		cm.mu.Unlock()
		cm.a.st.update(func(s *Status) { s.Switches++ })
		return
	case end.refusal != nil:
		cm.refused(addr, end.refusal, end.goAway)
		return
	}
	err := end.err
	switch {
	case errors.Is(err, wire.ErrSessionUnknown):
		cm.forgetSession(log, err)
		return
	case errors.Is(err, wire.ErrUnauthorized), errors.Is(err, wire.ErrVersionUnsupported):
		log.Error("server refuses this device", "error", err)
		cm.penalize(addr, cm.cfg.BackoffMax)
		return
	}
	log.Warn("connection ended", "error", err, "established", end.established)
	cm.penalize(addr, 0)
}

// refused handles a Reject (to a Hello) or a GoAway (ending a session).
func (cm *connManager) refused(addr string, r *wire.Refusal, goAway bool) {
	what := "Reject"
	if goAway {
		what = "GoAway"
	}
	log := cm.log.With("server_addr", addr, "code", r.Code.String(), "reason", r.Reason, "redirect", r.Redirect, "retry_after", r.RetryAfter)
	switch r.Code {
	case wire.CodeSessionUnknown:
		cm.forgetSession(log, fmt.Errorf("%s: %s", what, r.Reason))
		return
	case wire.CodeUnauthorized, wire.CodeVersionUnsupported:
		log.Error(what + ": server refuses this device")
		cm.penalize(addr, max(r.RetryAfter, cm.cfg.BackoffMax))
		return
	}
	log.Info(what + ": trying another server")
	cm.penalize(addr, r.RetryAfter)
	cm.mu.Lock()
	defer cm.mu.Unlock()
	cm.redirects = cm.redirects[:0]
	for _, s := range r.Redirect {
		if s == addr {
			continue
		}
		if _, _, err := net.SplitHostPort(s); err != nil {
			continue
		}
		cm.redirects = append(cm.redirects, s)
		if _, ok := cm.info[s]; !ok {
			cm.info[s] = &serverInfo{}
		}
	}
}

// forgetSession drops the journaled session so that the next Hello starts
// a new one with the full inventory.
func (cm *connManager) forgetSession(log hclog.Logger, why error) {
	log.Warn("session cannot be resumed; starting a new one", "why", why)
	if err := cm.a.j.SetSession("", nil); err != nil {
		log.Error("forget session", "error", err)
	}
}

// penalize keeps addr out of the candidates for at least min, and at
// least a jittered exponential backoff of its consecutive failures.
func (cm *connManager) penalize(addr string, minWait time.Duration) {
	cm.mu.Lock()
	defer cm.mu.Unlock()
	si := cm.info[addr]
	if si == nil {
		si = &serverInfo{}
		cm.info[addr] = si
	}
	si.failures++
	// Many failures in a row, on every server: perhaps the TLS ticket is
	// what fails; go back to full handshakes.
	if cm.failed++; cm.failed >= 2*len(cm.order)+1 {
		cm.log.Debug("every server failing; dropping the TLS session ticket", "failures", cm.failed)
		cm.tickets.reset()
		cm.failed = 0
	}
	d := backoff(cm.cfg.BackoffMin, cm.cfg.BackoffMax, si.failures)
	d = d/2 + time.Duration(cm.rng.Int64N(int64(d/2)+1)) // jitter in [d/2, d]
	si.penaltyUntil = cm.cfg.Clock.Now().Add(max(d, minWait))
}

// connect returns a connection to the best reachable server; it fails
// only when ctx ends.
func (cm *connManager) connect(ctx context.Context) (*quic.Conn, string, error) {
	for {
		if err := ctx.Err(); err != nil {
			return nil, "", err
		}
		cm.mu.Lock()
		cands, wait := rankServers(cm.order, cm.info, cm.preferred, cm.redirects, cm.cfg.Clock.Now())
		cm.preferred, cm.redirects = "", nil
		anyKnown := false
		for _, s := range cands {
			anyKnown = anyKnown || cm.info[s].rtt > 0
		}
		cm.mu.Unlock()
		if len(cands) == 0 {
			cm.log.Debug("every server in backoff", "wait", wait)
			select {
			case <-ctx.Done():
			case <-cm.cfg.Clock.After(wait):
			}
			continue
		}
		if !anyKnown && len(cands) > 1 {
			if conn, addr, err := cm.race(ctx, cands); err == nil {
				return conn, addr, nil
			}
			continue
		}
		for _, addr := range cands {
			conn, err := cm.dial(ctx, addr)
			if err == nil {
				return conn, addr, nil
			}
			if ctx.Err() != nil {
				return nil, "", ctx.Err()
			}
			cm.log.Warn("dial failed", "server_addr", addr, "error", err)
			cm.penalize(addr, 0)
		}
	}
}

// dial connects to addr with DialEarly: with a session ticket the
// connection is usable for 0-RTT data at once.
func (cm *connManager) dial(ctx context.Context, addr string) (*quic.Conn, error) {
	udp, err := net.ResolveUDPAddr("udp", addr)
	if err != nil {
		return nil, fmt.Errorf("resolve %s: %w", addr, err)
	}
	cm.a.traffic.learn(udp, addr)
	dctx, cancel := context.WithTimeout(ctx, cm.cfg.DialTimeout)
	defer cancel()
	conn, err := cm.tr.DialEarly(dctx, udp, cm.tlsConf, cm.cfg.QUIC)
	if err != nil {
		return nil, fmt.Errorf("dial %s: %w", addr, err)
	}
	return conn, nil
}

// measure completes a handshake with addr and returns the connection and
// its round-trip time.
func (cm *connManager) measure(ctx context.Context, addr string) (*quic.Conn, time.Duration, error) {
	udp, err := net.ResolveUDPAddr("udp", addr)
	if err != nil {
		return nil, 0, fmt.Errorf("resolve %s: %w", addr, err)
	}
	cm.a.traffic.learn(udp, addr)
	start := time.Now()
	conn, err := cm.tr.Dial(ctx, udp, cm.tlsConf, cm.cfg.QUIC)
	if err != nil {
		return nil, 0, fmt.Errorf("dial %s: %w", addr, err)
	}
	return conn, handshakeRTT(conn.ConnectionStats().MinRTT, time.Since(start)), nil
}

// quicInitialRTT is the RTT quic-go's statistics hold until the
// connection's first RTT sample (its DefaultInitialRTT): MinRTT reads it,
// not zero, when a handshake completed without a sample.
const quicInitialRTT = 100 * time.Millisecond

// handshakeRTT is the round-trip time a handshake measured: the
// connection's minimum RTT sample, or, when it has none (on a busy host a
// handshake can complete before one is taken), the handshake's duration.
// A QUIC client's handshake is one round trip (its Initial out, the
// server's Initial and Handshake flight back, and the client's Finished
// goes with its next packets), so the duration is an RTT plus the time
// the server took, an estimate on the far side, never the near one.
// quic-go's placeholder was once taken for a measurement: a server 400 ms
// away read as 100 ms, and the agent stayed on it beside servers 60 ms
// away. Half the duration, taken after that, read a server 200 ms away as
// 108 ms, not clearly farther than one at 77 ms, and the agent stayed on
// it too.
func handshakeRTT(minRTT, took time.Duration) time.Duration {
	if minRTT <= 0 || minRTT == quicInitialRTT {
		return took
	}
	return minRTT
}

// race dials every candidate at once and returns the first connection to
// complete its handshake: the nearest server. The others finish in the
// background, record their RTT and close.
func (cm *connManager) race(ctx context.Context, cands []string) (*quic.Conn, string, error) {
	type result struct {
		addr string
		conn *quic.Conn
		rtt  time.Duration
		err  error
	}
	rctx, cancel := context.WithTimeout(ctx, cm.cfg.DialTimeout)
	results := make(chan result, len(cands))
	for _, addr := range cands {
		cm.bg.Go(func() {
			conn, rtt, err := cm.measure(rctx, addr)
			results <- result{addr, conn, rtt, err}
		})
	}
	cm.log.Debug("racing handshakes", "server_addrs", cands)
	var lastErr error
	for n := 1; n <= len(cands); n++ {
		r := <-results
		if r.err != nil {
			lastErr = r.err
			if ctx.Err() == nil {
				cm.log.Warn("dial failed", "server_addr", r.addr, "error", r.err)
				cm.penalize(r.addr, 0)
			}
			continue
		}
		cm.recordRTT(r.addr, r.rtt)
		rest := len(cands) - n
		cm.bg.Go(func() {
			defer cancel()
			for range rest {
				l := <-results
				if l.err != nil {
					if rctx.Err() == nil || ctx.Err() == nil {
						cm.penalize(l.addr, 0)
					}
					continue
				}
				cm.recordRTT(l.addr, l.rtt)
				l.conn.CloseWithError(wire.CloseNormal, "agent chose a nearer server")
			}
		})
		cm.log.Info("nearest server", "server_addr", r.addr, "rtt", r.rtt)
		return r.conn, r.addr, nil
	}
	cancel()
	return nil, "", lastErr
}

// probeLoop re-measures every configured server while a session on
// current (over conn) lasts, and asks the session to move when the
// hysteresis says so. Rounds back off while the choice is stable
// (probeSchedule).
func (cm *connManager) probeLoop(ctx context.Context, conn *quic.Conn, current string, switchCh chan<- string) {
	if cm.cfg.RTTProbeInterval < 0 || len(cm.order) < 2 {
		return
	}
	cm.mu.Lock()
	clear(cm.streak)
	cm.mu.Unlock()
	sched := probeSchedule{base: cm.cfg.RTTProbeInterval, max: cm.cfg.RTTProbeMaxInterval}
	sched.reset(conn.ConnectionStats().SmoothedRTT)
	start := cm.cfg.Clock.Now()
	first := true
	contender := false // the last round found a server clearly nearer
	for {
		// Wait for the next round, checking the session's RTT every
		// base interval meanwhile (a local read).
		degraded := false
		for waited := time.Duration(0); waited < sched.interval && !degraded; {
			step := min(sched.base, sched.interval-waited)
			select {
			case <-ctx.Done():
				return
			case <-cm.cfg.Clock.After(step):
			}
			waited += step
			srtt := conn.ConnectionStats().SmoothedRTT
			switch {
			case first:
				// The baseline is the session's RTT once it carried a
				// few messages (the handshake's alone has none of the
				// peer's acknowledgement delays).
				first = false
				sched.baseline = srtt
				if cm.confirmed(current, start) {
					// The handshakes of this connect measured every
					// server and chose the nearest: nothing to
					// confirm soon.
					sched.interval = sched.max
				}
			case sched.observe(srtt):
				cm.log.Debug("the session's RTT grew: probing now", "server_addr", current, "rtt", srtt, "was", sched.baseline)
				degraded = true
			}
		}
		// The current server is measured as the others are, by a
		// handshake: the session's own RTT samples include its peer's
		// delayed acknowledgements and whatever queued on an idle path,
		// and would make it look farther than a handshake makes the others.
		// A routine round (nothing looked nearer last time, the path did
		// not degrade) takes its last handshake's RTT instead, to save a
		// handshake; a round that found a contender makes the next
		// measure it again.
		skip := ""
		if !contender && !degraded {
			skip = current
		}
		rtts := cm.probeRound(ctx, skip)
		if ctx.Err() != nil {
			return
		}
		if skip != "" {
			cm.mu.Lock()
			if rtt := cm.info[current].rtt; rtt > 0 {
				rtts[current] = rtt
			}
			cm.mu.Unlock()
		}
		cm.a.st.update(func(s *Status) { s.ProbeRounds++ })
		cm.mu.Lock()
		target := cm.hyst.round(current, rtts, cm.streak)
		contender = len(cm.streak) > 0
		cm.mu.Unlock()
		if target != "" {
			cm.log.Info("a server is clearly nearer", "server_addr", current, "rtt", rtts[current], "nearer_addr", target, "nearer_rtt", rtts[target])
			select {
			case switchCh <- target:
			case <-ctx.Done():
			}
			return
		}
		// The baseline moves only with a round that measured the current
		// server: otherwise a path slowing by degrees would drag it along
		// and never look degraded.
		baseline := sched.baseline
		if skip == "" {
			baseline = conn.ConnectionStats().SmoothedRTT
		}
		// A round that measured every server and found none nearer
		// confirms the choice as the connect's race of handshakes does.
		complete := len(rtts) == len(cm.order)
		sched.after(contender || degraded, complete, baseline)
		cm.log.Info("rtt probe round", "server_addr", current, "measured", len(rtts), "servers", len(cm.order),
			"contender", contender, "next_in", sched.interval)
	}
}

// probeSchedule spaces the probe rounds of one session: base apart at
// first; max after a round that measured every server and found none
// clearly nearer (the choice is confirmed); doubling (up to max) after
// one that found none nearer but could not measure some server (it may be
// down, or the path lossy); back to base after one that did find a
// nearer server (to confirm it quickly) or when the session's RTT grew
// clearly past its baseline, the RTT at the last round.
type probeSchedule struct {
	base, max time.Duration
	interval  time.Duration // until the next round
	baseline  time.Duration // the session's smoothed RTT at the last round, or lower since (observe)
}

func (p *probeSchedule) reset(srtt time.Duration) { p.interval, p.baseline = p.base, srtt }

// degradedRatio and degradedMargin say when a session's smoothed RTT is
// degraded: at least twice its baseline and 20 ms above it. An idle
// session's RTT samples are few and carry the server's delayed
// acknowledgements (on the footprint benchmark's fiber path 17 ms against
// 4.5 ms by handshake): the switching hysteresis (30 %, 5 ms) would read
// that as a degraded path and probe every few minutes.
const (
	degradedRatio  = 2
	degradedMargin = 20 * time.Millisecond
)

// degraded reports whether srtt is clearly worse than the baseline.
func (p *probeSchedule) degraded(srtt time.Duration) bool {
	return srtt >= degradedRatio*p.baseline && srtt >= p.baseline+degradedMargin
}

// observe takes a reading of the session's smoothed RTT between rounds and
// reports whether it is degraded. A lower reading lowers the baseline: a
// path is never faster than its RTT, while a busy host (the agent's or
// the server's) delays acknowledgements and inflates the estimate, so a
// baseline taken in a busy moment would hide a real degradation behind
// it. The baseline never rises here, so a path slowing by degrees does
// not drag it along; only a round that measures the current server moves
// it up (after).
func (p *probeSchedule) observe(srtt time.Duration) bool {
	if p.degraded(srtt) {
		return true
	}
	if srtt > 0 {
		p.baseline = min(p.baseline, srtt)
	}
	return false
}

// after sets the next interval once a round is done: urgent if a server
// looked clearly nearer in it, or the session's RTT had degraded;
// complete if it measured every server.
func (p *probeSchedule) after(urgent, complete bool, srtt time.Duration) {
	switch {
	case urgent:
		p.interval = p.base
	case complete:
		p.interval = p.max
	default:
		p.interval = min(2*p.interval, p.max)
	}
	p.baseline = srtt
}

// confirmed reports whether every configured server's RTT was measured
// since start (the race of handshakes that made the connection to current)
// and none is clearly nearer than current.
func (cm *connManager) confirmed(current string, start time.Time) bool {
	cm.mu.Lock()
	defer cm.mu.Unlock()
	cur := cm.info[current]
	if cur == nil || cur.rtt <= 0 {
		return false
	}
	for _, addr := range cm.order {
		si := cm.info[addr]
		if si.rtt <= 0 || si.measuredAt.Before(start.Add(-cm.cfg.DialTimeout)) {
			return false
		}
		if addr != current && cm.hyst.clearlyBetter(si.rtt, cur.rtt) {
			return false
		}
	}
	return true
}

// probeRound measures every configured server but skip concurrently with
// a handshake and no stream, and returns the RTTs of those that answered.
func (cm *connManager) probeRound(ctx context.Context, skip string) map[string]time.Duration {
	pctx, cancel := context.WithTimeout(ctx, cm.cfg.DialTimeout)
	defer cancel()
	var mu sync.Mutex
	rtts := map[string]time.Duration{}
	var wg sync.WaitGroup
	for _, addr := range cm.order {
		if addr == skip {
			continue
		}
		wg.Go(func() {
			conn, rtt, err := cm.measure(pctx, addr)
			if err != nil {
				cm.log.Debug("rtt probe failed", "server_addr", addr, "error", err)
				return
			}
			conn.CloseWithError(wire.CloseNormal, "rtt probe")
			cm.recordRTT(addr, rtt)
			mu.Lock()
			rtts[addr] = rtt
			mu.Unlock()
		})
	}
	wg.Wait()
	return rtts
}

// recordRTT stores a measurement.
func (cm *connManager) recordRTT(addr string, rtt time.Duration) {
	cm.mu.Lock()
	if si := cm.info[addr]; si != nil {
		si.rtt, si.measuredAt = rtt, cm.cfg.Clock.Now()
	}
	cm.mu.Unlock()
	cm.a.st.update(func(s *Status) {
		if s.ServerRTTs == nil {
			s.ServerRTTs = map[string]time.Duration{}
		}
		s.ServerRTTs[addr] = rtt
	})
}

// ticketCache is the agent's TLS session cache, shared by every dial.
//
//   - Get hands every dial its own copy of the cached session: quic-go
//     records on the session state whether 0-RTT is allowed
//     (SessionState.EarlyData) while it resumes, so concurrent dials (a
//     race of handshakes, RTT probes) must not share one.
//   - Put(nil) is ignored: crypto/tls drops the ticket after any failed
//     handshake, a timeout to a dead server included, which would cost the
//     0-RTT of the failover that follows. A ticket the servers cannot use
//     only costs a full handshake; reset drops it after many failed
//     attempts in a row (in case the ticket itself is what fails).
type ticketCache struct {
	inner tls.ClientSessionCache
}

func newTicketCache() *ticketCache { return &ticketCache{inner: tls.NewLRUClientSessionCache(4)} }

func (c *ticketCache) Put(key string, cs *tls.ClientSessionState) {
	if cs != nil {
		c.inner.Put(key, cs)
	}
}

func (c *ticketCache) Get(key string) (*tls.ClientSessionState, bool) {
	cs, ok := c.inner.Get(key)
	if !ok || cs == nil {
		return nil, false
	}
	ticket, state, err := cs.ResumptionState()
	if err != nil || state == nil {
		return nil, false
	}
	b, err := state.Bytes()
	if err != nil {
		return nil, false
	}
	clone, err := tls.ParseSessionState(b)
	if err != nil {
		return nil, false
	}
	cs, err = tls.NewResumptionState(ticket, clone)
	if err != nil {
		return nil, false
	}
	return cs, true
}

// reset drops the cached ticket.
func (c *ticketCache) reset() { c.inner.Put(wire.ClusterServerName, nil) }

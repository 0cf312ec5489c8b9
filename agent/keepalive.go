package agent

import (
	"fmt"
	"time"

	"github.com/meteor-edge/meteor/agent/journal"
	"github.com/meteor-edge/meteor/wire"
)

// bindingLearner learns how long the device's path may stay silent before
// a NAT on it forgets the UDP binding: after that the server's pushes no
// longer reach the device until it sends again. Keep-alives go just inside
// the longest silence verified, so an idle device sends as little as its
// path allows and pushes still arrive at once.
//
// A test asks the server for an echo (Pong) after a silence longer than
// the one verified, and stays silent meanwhile: an echo that arrives
// verifies the silence; one that does not means the binding died sooner.
// The first test tries max (most paths without a carrier NAT keep a
// binding for minutes, and one test settles them); after a failure the
// tests bisect between the longest verified and the shortest failed
// silence until the gap is small. A failure is tried again after
// retestAfter, since the device may have moved to another network.
//
// Only the session goroutine uses it; Status reads go through statusStore.
type bindingLearner struct {
	min, max time.Duration
	// safe is the longest silence verified (min until a test passed).
	safe time.Duration
	// verifiedAt is when safe was last verified; zero for a value not
	// verified on this run (restored from the journal), which is tested
	// again before it counts for long.
	verifiedAt time.Time
	// failed is the shortest silence seen to lose the path; zero if none,
	// or once retestAfter passed since failedAt.
	failed   time.Duration
	failedAt time.Time
	// once is a silence that failed one test and is tried again before
	// the failure counts; zero if none.
	once  time.Duration
	tests int // tests concluded, passed or failed
}

// retestAfter is how long a failed silence stands before the learner
// tries it again.
const retestAfter = 24 * time.Hour

// keepAliveMargin is the share of the verified silence a keep-alive
// interval uses: a NAT's timer is not exact.
const keepAliveMargin = 0.9

// learnGap ends the search: a gap between verified and failed silences
// below this is not worth another test.
func (b *bindingLearner) learnGap() time.Duration { return max(b.min/2, b.safe/8) }

func newBindingLearner(min, max time.Duration) *bindingLearner {
	return &bindingLearner{min: min, max: max, safe: min}
}

// interval is how often keep-alives go now, in whole milliseconds (as a
// Ping announces it). A path whose NAT forgets sooner than min is not
// learned: min is the floor, for an operator to lower.
func (b *bindingLearner) interval() time.Duration {
	if b.safe <= b.min {
		return b.min
	}
	return max(b.min, time.Duration(float64(b.safe)*keepAliveMargin).Truncate(time.Millisecond))
}

// next returns the silence to test next, or 0 when the search is over.
// A verified silence is tested again every retestAfter (and first thing
// when it was restored): the device may now be behind another NAT, and a
// binding that lapses between keep-alives shows nowhere else.
func (b *bindingLearner) next(now time.Time) time.Duration {
	if b.once > 0 {
		return b.once
	}
	if b.safe > b.min && now.Sub(b.verifiedAt) >= retestAfter {
		return b.safe
	}
	if b.failed > 0 && now.Sub(b.failedAt) >= retestAfter {
		b.failed = 0
	}
	hi := b.max
	if b.failed > 0 {
		hi = b.failed
	}
	if hi-b.safe < b.learnGap() {
		return 0
	}
	if b.failed == 0 {
		return hi
	}
	return b.safe + (hi-b.safe)/2
}

// passed records a silence the path survived at now.
func (b *bindingLearner) passed(silence time.Duration, now time.Time) {
	b.tests++
	if silence >= b.once {
		b.once = 0
	}
	if silence >= b.safe {
		b.safe, b.verifiedAt = silence, now
	}
	if b.failed > 0 && b.failed <= b.safe {
		b.failed = 0
	}
}

// lost records a silence the path did not survive, and reports whether
// the failure counts. A first failure of a silence does not: on a lossy
// path a burst of losses can take the test's echo and its
// retransmissions past the grace as surely as a lapsed binding, and one
// unlucky test would otherwise shorten the keep-alive interval for good
// (a 2-minute NAT behind 2 % loss was once learned as 73 s, and
// keep-alives went every 55 s). So the same silence is tried again
// (next), and only a second failure counts; a NAT's timer fails it
// every time.
func (b *bindingLearner) lost(silence time.Duration, now time.Time) (counted bool) {
	b.tests++
	if b.once != silence {
		b.once = silence
		return false
	}
	b.once = 0
	if b.failed == 0 || silence < b.failed {
		b.failed = silence
	}
	b.failedAt = now
	if b.safe >= silence {
		// A verified silence no longer holds (the NAT changed): start
		// over from below it.
		b.safe, b.verifiedAt = max(b.min, silence/2), now
	}
	return true
}

// restore takes what an earlier run learned, within this run's bounds.
func (b *bindingLearner) restore(saved journal.NATBinding) {
	b.tests = saved.Tests
	if saved.Verified > b.min {
		b.safe = min(saved.Verified, b.max) // verifiedAt zero: tested again first
	}
	if saved.Failed > b.safe {
		b.failed, b.failedAt = saved.Failed, saved.FailedAt
	}
}

// saved is what to journal.
func (b *bindingLearner) saved() journal.NATBinding {
	return journal.NATBinding{Verified: b.safe, VerifiedAt: b.verifiedAt, Failed: b.failed, FailedAt: b.failedAt, Tests: b.tests}
}

// keepAlive phases of a connection.
const (
	kaIdle    = iota // keep-alives every interval
	kaSettle         // a test's Ping sent; waiting for QUIC to acknowledge it
	kaWaiting        // silent, waiting for the test's Pong
)

// keepAlive is one connection's keep-alive state (protocol 1.3): the timer
// of the next Ping or test step, and the test in progress.
type keepAlive struct {
	on    bool
	seq   uint64
	phase int
	timer <-chan time.Time
	// dead fires KeepAliveTimeout after a Ping; recvAtPing is the packets
	// received when it was sent: none since means the server is gone.
	// suspect fires much sooner (a few round trips, then at doubling
	// waits, suspectWait): none by then sends a reset probe (suspectCheck).
	dead        <-chan time.Time
	suspect     <-chan time.Time
	suspectWait time.Duration
	recvAtPing  uint64
	// The test in progress: its silence and its Ping's seq. A message
	// the session writes meanwhile abandons it (wrote).
	test    time.Duration
	testSeq uint64
	// nextTest is the earliest time of the next test.
	nextTest time.Time
}

// The spacing of tests, in multiples of the learner's min: the first a
// few minutes into a connection (its first minutes are busy with pulls,
// applies and reports, which would void a test, and a fresh connection
// may be one of many moving after a server failed: while a test's
// silence runs, a dead server goes unnoticed), the next soon after a
// pass, and later after a failure, which may have cost a push its
// latency. At the default min (25 s): 5 min, 12.5 s, 100 s.
func (b *bindingLearner) firstTestDelay() time.Duration { return 12 * b.min }
func (b *bindingLearner) testGap() time.Duration        { return b.min / 2 }
func (b *bindingLearner) failGap() time.Duration        { return 4 * b.min }

// startKeepAlive begins the session's own keep-alives once the Welcome
// says the server speaks 1.3; an earlier server's connection keeps alive
// through QUIC (wire.KeepAlivePeriod).
func (s *session) startKeepAlive() error {
	if s.minor < wire.MinorKeepAlive {
		return nil
	}
	s.ka = keepAlive{on: true, nextTest: s.a.cfg.Clock.Now().Add(s.a.binding.firstTestDelay())}
	return s.ping()
}

// ping sends a plain keep-alive and arms the dead-server check.
func (s *session) ping() error { return s.pingPadded(0) }

// pingPadded is ping with pad bytes of padding (wire.Ping.Pad).
func (s *session) pingPadded(pad int) error {
	s.ka.seq++
	iv := s.a.binding.interval()
	if err := s.w.Write(&wire.Ping{Seq: s.ka.seq, Interval: iv, Pad: pad}); err != nil {
		return err
	}
	s.ka.phase, s.ka.test = kaIdle, 0
	s.ka.timer = s.a.cfg.Clock.After(iv)
	s.expectAnswer()
	return nil
}

// expectAnswer arms the dead-server check unless it is armed already: the
// check looks back to the earliest message still unanswered, so Pings
// closer together than KeepAliveTimeout do not keep postponing it.
func (s *session) expectAnswer() {
	if s.ka.dead == nil {
		s.ka.recvAtPing = s.conn.ConnectionStats().PacketsReceived
		s.ka.dead = s.a.cfg.Clock.After(s.a.cfg.KeepAliveTimeout)
		s.ka.suspectWait = s.rttGuard(time.Second, 4)
		s.ka.suspect = s.a.cfg.Clock.After(s.ka.suspectWait)
	}
}

// wrote notes that the session sent a message: it keeps the path alive
// like a Ping, so the next Ping waits a full interval, it spoils a test in
// progress, and, like a Ping, it expects some packet back within
// KeepAliveTimeout (an acknowledgement at least).
func (s *session) wrote() {
	if !s.ka.on {
		return
	}
	s.expectAnswer()
	if s.ka.phase != kaIdle {
		s.log.Debug("NAT binding test abandoned: the session had to send", "silence", s.ka.test)
		s.ka.phase, s.ka.test = kaIdle, 0
		s.ka.nextTest = s.a.cfg.Clock.Now().Add(s.a.binding.testGap())
	}
	s.ka.timer = s.a.cfg.Clock.After(s.a.binding.interval())
}

// rttGuard returns max(floor, k times the connection's smoothed RTT).
func (s *session) rttGuard(floor time.Duration, k int) time.Duration {
	return max(floor, time.Duration(k)*s.conn.ConnectionStats().SmoothedRTT)
}

// keepAliveTick acts when the keep-alive timer fires.
func (s *session) keepAliveTick() error {
	now := s.a.cfg.Clock.Now()
	switch s.ka.phase {
	case kaIdle:
		silence := s.a.binding.next(now)
		if silence == 0 || now.Before(s.ka.nextTest) || s.reportOut || s.pullOut {
			return s.ping()
		}
		// A test: ask for an echo after the silence, then stay silent.
		grace := s.rttGuard(2*time.Second, 4)
		s.ka.seq++
		if err := s.w.Write(&wire.Ping{Seq: s.ka.seq, Interval: silence + grace, EchoAfter: silence}); err != nil {
			return err
		}
		// A dead-server check armed earlier stays armed: the test's Ping
		// is acknowledged like any other packet.
		s.ka.phase, s.ka.test, s.ka.testSeq = kaSettle, silence, s.ka.seq
		s.ka.recvAtPing = s.conn.ConnectionStats().PacketsReceived
		s.ka.timer = s.a.cfg.Clock.After(s.rttGuard(time.Second, 3))
		s.log.Debug("NAT binding test", "silence", silence, "verified", s.a.binding.safe)
	case kaSettle:
		st := s.conn.ConnectionStats()
		if st.PacketsReceived == s.ka.recvAtPing {
			// The test's Ping is not acknowledged yet (lost, or a slow
			// path): the silence would not start clean.
			s.log.Debug("NAT binding test abandoned: its Ping is unacknowledged", "silence", s.ka.test)
			s.ka.nextTest = now.Add(s.a.binding.testGap())
			return s.ping()
		}
		s.ka.phase = kaWaiting
		s.ka.timer = s.a.cfg.Clock.After(s.ka.test + s.rttGuard(2*time.Second, 4))
	case kaWaiting:
		silence := s.ka.test
		counted := s.a.binding.lost(silence, now)
		s.ka.nextTest = now.Add(s.a.binding.failGap())
		s.recordBinding()
		if counted {
			s.log.Info("NAT binding test failed: the path did not outlive the silence", "silence", silence,
				"keepalive_interval", s.a.binding.interval())
		} else {
			s.log.Info("NAT binding test failed once: trying the silence again before it counts (a lost echo looks the same)", "silence", silence,
				"keepalive_interval", s.a.binding.interval())
		}
		return s.ping() // the path needs refreshing now
	}
	return nil
}

// onPong concludes the test the Pong answers. What it verifies is read at
// the socket, not assumed: how long the agent had sent nothing to the
// server when the Pong's datagram came in (trafficMeter.lastSilence). A
// retransmission, an acknowledgement or a QUIC keep-alive sent during the
// test shortens that silence, and the test counts only if what remains is
// the silence asked for.
func (s *session) onPong(m *wire.Pong) error {
	if s.ka.phase != kaWaiting || m.Seq != s.ka.testSeq {
		return nil // late: a test that failed or was abandoned
	}
	now := s.a.cfg.Clock.Now()
	asked := s.ka.test
	s.ka.phase, s.ka.test = kaIdle, 0
	s.ka.timer = s.a.cfg.Clock.After(s.a.binding.interval()) // the next Ping announces what this test taught
	s.ka.nextTest = now.Add(s.a.binding.testGap())
	silence, _, ok := s.a.traffic.lastSilence(s.conn.RemoteAddr())
	if !ok || silence < asked {
		s.log.Debug("NAT binding test void: the path was not silent", "silence", asked, "measured", silence)
		return nil
	}
	s.a.binding.passed(asked, now)
	s.recordBinding()
	s.log.Info("NAT binding test passed", "silence", asked, "measured", silence, "keepalive_interval", s.a.binding.interval())
	return nil
}

// suspectCheck acts when a message has gone unanswered for a few round
// trips, which on a healthy path its acknowledgement never does: the
// server may have restarted and lost the connection. A restarted server
// answers a packet of a connection it does not know with a stateless
// reset, which ends the connection at once, but only a packet long enough
// (wire.ResetProbePad); a plain Ping is not. So a padded Ping goes now,
// and again at doubling waits (a server still starting up when the first
// went is caught by a later one), instead of waiting out KeepAliveTimeout;
// a server that stays down answers nothing and deadCheck ends the session
// then. A healthy path costs nothing: its acknowledgements come first.
func (s *session) suspectCheck() error {
	if s.conn.ConnectionStats().PacketsReceived != s.ka.recvAtPing {
		// Answered: the server is there. Both checks stand down until the
		// session next writes, which arms them afresh; left armed, the
		// dead-server check would judge later messages by this answer.
		s.ka.dead, s.ka.suspect = nil, nil
		return nil
	}
	s.log.Debug("no answer yet; asking for a stateless reset in case the server restarted", "waited", s.ka.suspectWait)
	s.ka.suspectWait *= 2
	s.ka.suspect = s.a.cfg.Clock.After(s.ka.suspectWait)
	return s.pingPadded(wire.ResetProbePad)
}

// deadCheck ends the session if nothing came from the server since the
// last Ping (or message): it is gone, or the path is.
func (s *session) deadCheck() error {
	s.ka.dead, s.ka.suspect = nil, nil
	if s.conn.ConnectionStats().PacketsReceived != s.ka.recvAtPing {
		return nil
	}
	return fmt.Errorf("no answer from the server within %v of a keep-alive or message", s.a.cfg.KeepAliveTimeout)
}

// recordBinding journals what the learner knows after a test and
// publishes it in Status.
func (s *session) recordBinding() {
	b := s.a.binding
	if err := s.j.SaveNATBinding(b.saved()); err != nil {
		s.log.Warn("NAT binding not journaled; a restart learns it again", "error", err)
	}
	if s.a.publishBinding(b.next(s.a.cfg.Clock.Now()) == 0) {
		s.log.Info("NAT binding learned", "verified", b.safe, "failed", b.failed, "keepalive_interval", b.interval(), "tests", b.tests)
	}
}

// publishBinding shows the learner in Status; it reports whether the
// search became settled with this call.
func (a *Agent) publishBinding(settled bool) (nowSettled bool) {
	b := a.binding
	a.st.update(func(st *Status) {
		nowSettled = settled && !st.NATBindingSettled
		st.KeepAliveInterval, st.NATBindingVerified, st.NATBindingFailed, st.NATBindingTests = b.interval(), b.safe, b.failed, b.tests
		st.NATBindingSettled = settled
	})
	return nowSettled
}

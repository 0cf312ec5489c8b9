package cluster

import (
	"fmt"
	"net"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/meteor-edge/meteor/wire"
)

// slowEgress delays every datagram the server sends, as a congested
// uplink (a full socket buffer) does.
type slowEgress struct {
	net.PacketConn
	d time.Duration
}

func (s slowEgress) WriteTo(p []byte, addr net.Addr) (int, error) {
	time.Sleep(s.d) // the write's own latency, not a wait for a condition
	return s.PacketConn.WriteTo(p, addr)
}

// BenchmarkStopWithSessions stops a server with METEOR_BENCH_SESSIONS
// wire-level sessions on it (200 by default) whose datagrams take
// METEOR_BENCH_EGRESS_DELAY to leave (2 ms by default), and reports how
// long the stop took: "shutdown" as a crash-free stop does (Shutdown
// closes the sessions), "drain" as SIGTERM does (Drain tells the agents
// to go, they close, then Shutdown). Closing sessions one after the other
// costs the sum of their closes, each waiting for its connection's queued
// packets and CONNECTION_CLOSE to be written: sessions times the delay,
// minutes on a congested uplink with thousands of sessions. The wrapper
// that delays the datagrams keeps quic-go from enlarging the socket's
// receive buffer, so with many sessions some agents' closes are dropped
// and the drain waits out its deadline (DefaultDrainTimeout) for them.
//
//	go test -run '^$' -bench BenchmarkStopWithSessions -benchtime 1x ./cluster
func BenchmarkStopWithSessions(b *testing.B) {
	n, delay := 200, 2*time.Millisecond
	if v, err := strconv.Atoi(os.Getenv("METEOR_BENCH_SESSIONS")); err == nil {
		n = v
	}
	if v, err := time.ParseDuration(os.Getenv("METEOR_BENCH_EGRESS_DELAY")); err == nil {
		delay = v
	}
	pki := newTestPKI(b)
	for _, drain := range []bool{false, true} {
		name := "shutdown"
		if drain {
			name = "drain"
		}
		b.Run(name, func(b *testing.B) {
			for range b.N {
				b.StopTimer()
				c := newTestCluster(b, 1, func(cfg *Config) {
					pki.withAgents(b)(cfg)
					cfg.AgentPacketConn = func(pc net.PacketConn) net.PacketConn { return slowEgress{pc, delay} }
				})
				s := c.waitLeader()
				for i := range n {
					a := dialAgent(b, s.AgentAddr(), pki.deviceTLS(b, "dev-"+strconv.Itoa(i)))
					a.send(hello(map[string]string{"region": "eu"}))
					expect[*wire.Welcome](a)
					// As the agent does: leave on a GoAway.
					go func() {
						for {
							m, err := a.r.Read()
							if err != nil {
								return
							}
							if _, ok := m.(*wire.GoAway); ok {
								a.conn.CloseWithError(wire.CloseNormal, "moving")
								return
							}
						}
					}()
				}
				waitFor(b, time.Minute, func() error {
					if got := s.AgentStats().Connected; got != n {
						return fmt.Errorf("%d of %d sessions", got, n)
					}
					return nil
				})
				b.StartTimer()
				start := time.Now()
				if drain {
					s.Drain(DefaultDrainTimeout)
				}
				c.kill(0)
				b.ReportMetric(time.Since(start).Seconds(), "s/stop")
			}
			b.ReportMetric(float64(n), "sessions")
		})
	}
}

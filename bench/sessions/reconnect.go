package main

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"slices"
	"time"

	"github.com/quic-go/quic-go"

	"github.com/meteor-edge/meteor/bench/internal/benchkit"
	"github.com/meteor-edge/meteor/bench/internal/wiredev"
	"github.com/meteor-edge/meteor/chaos"
	"github.com/meteor-edge/meteor/cluster"
	"github.com/meteor-edge/meteor/wire"
)

// reconnectRow is part 2's figures for one link and one way of
// reconnecting.
type reconnectRow struct {
	Link          string  `json:"link"`
	OneWayDelayMs float64 `json:"injected_one_way_delay_ms"`
	Mode          string  `json:"mode"`
	N             int     `json:"reconnects"`
	Errors        int     `json:"errors"`
	WelcomeP50    float64 `json:"welcome_p50_ms"`
	WelcomeP99    float64 `json:"welcome_p99_ms"`
	DeltaP50      float64 `json:"first_delta_p50_ms"`
	DeltaP99      float64 `json:"first_delta_p99_ms"`
	// Used0RTT counts connections on which the client's early data was
	// accepted (ConnectionState().Used0RTT); TLSResumed those that
	// resumed a TLS session; Rejected0RTT those whose early data the
	// server refused (the Hello was then sent again).
	Used0RTT     int     `json:"used_0rtt"`
	Used0RTTFrac float64 `json:"used_0rtt_fraction"`
	TLSResumed   int     `json:"tls_resumed"`
	Rejected0RTT int     `json:"rejected_0rtt"`
	// MinRTTms is the median over connections of quic-go's MinRTT.
	MinRTTms float64 `json:"measured_min_rtt_ms"`
}

// reconnectWarmup reconnects are made before measuring each mode.
const reconnectWarmup = 3

// reconnector is one device reconnecting one way.
type reconnector struct {
	row *reconnectRow
	d   *wiredev.Device
	// cache and shared are the TLS session cache and configuration kept
	// across connections (0-RTT); nil for a fresh configuration each time.
	cache  *ticketCache
	shared *tls.Config
	conn   *quic.Conn

	welcome, delta, rtt []time.Duration
}

// connect drops the current connection, if any, and opens the session on
// a new one, measuring from the moment it dials.
func (r *reconnector) connect(ctx context.Context, cfg *config, tr *quic.Transport, addr net.Addr, p *pki, measure bool) error {
	if r.conn != nil {
		r.conn.CloseWithError(wire.CloseNormal, "link drop")
		r.conn = nil
	}
	tlsConf, tickets := r.shared, int64(0)
	if tlsConf == nil {
		tlsConf = r.d.TLSConfig(p.pool, nil)
	} else {
		tickets = r.cache.puts.Load()
	}
	start := time.Now()
	dctx, cancel := context.WithTimeout(ctx, cfg.timeout)
	conn, err := tr.DialEarly(dctx, addr, tlsConf, deviceQUIC())
	cancel()
	if err != nil {
		return fmt.Errorf("dial: %w", err)
	}
	o, err := openSession(ctx, r.d, conn, openOpts{inventory: true, pipeline: true, start: start, timeout: cfg.timeout})
	if err != nil {
		conn.CloseWithError(wire.CloseNormal, "")
		return err
	}
	r.conn = o.s.conn
	if r.cache != nil {
		// The next reconnect needs this connection's ticket; waiting for it
		// is not part of the measured time.
		waitTicket(r.cache, tickets, 2*time.Second)
	}
	if !measure {
		return nil
	}
	r.welcome = append(r.welcome, o.welcomeAt)
	r.delta = append(r.delta, o.deltaAt)
	r.rtt = append(r.rtt, r.conn.ConnectionStats().MinRTT)
	if o.used0RTT {
		r.row.Used0RTT++
	}
	if o.tlsResumed {
		r.row.TLSResumed++
	}
	if o.rejected0RTT {
		r.row.Rejected0RTT++
	}
	return nil
}

func (r *reconnector) finish() {
	row := r.row
	row.N = len(r.welcome)
	for _, s := range [][]time.Duration{r.welcome, r.delta, r.rtt} {
		slices.Sort(s)
	}
	row.WelcomeP50, row.WelcomeP99 = benchkit.MS(benchkit.Percentile(r.welcome, 50)), benchkit.MS(benchkit.Percentile(r.welcome, 99))
	row.DeltaP50, row.DeltaP99 = benchkit.MS(benchkit.Percentile(r.delta, 50)), benchkit.MS(benchkit.Percentile(r.delta, 99))
	row.MinRTTms = benchkit.MS(benchkit.Percentile(r.rtt, 50))
	if row.N > 0 {
		row.Used0RTTFrac = float64(row.Used0RTT) / float64(row.N)
	}
	if r.conn != nil {
		r.conn.CloseWithError(wire.CloseNormal, "")
	}
}

// runReconnect measures part 2 against srv: on each link, a 0-RTT device
// and a full-handshake device reconnect in turn, N times each.
func runReconnect(ctx context.Context, cfg *config, srv *cluster.Server, p *pki, out, log io.Writer) ([]*reconnectRow, error) {
	addr, err := net.ResolveUDPAddr("udp", srv.AgentAddr())
	if err != nil {
		return nil, err
	}
	links := []struct {
		name  string
		delay time.Duration
	}{
		{"loopback", 0},
		{fmt.Sprintf("%g ms RTT", benchkit.MS(2*cfg.delay)), cfg.delay},
	}
	var ids []string
	for i := range links {
		ids = append(ids, fmt.Sprintf("reconnect-%d-0rtt", i), fmt.Sprintf("reconnect-%d-full", i))
	}
	certs, err := p.issueDevices(ids)
	if err != nil {
		return nil, err
	}
	var rows []*reconnectRow
	for li, l := range links {
		fmt.Fprintf(log, "reconnect: %s, %d reconnects per mode\n", l.name, cfg.reconnects)
		udp, err := net.ListenPacket("udp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		// Both links go through the same fault-injecting socket (with no
		// fault on loopback), so the delay is the only difference.
		pc := chaos.NewPacketConn(udp, chaos.LinkProfile{Delay: l.delay, Dir: chaos.DirBoth}, uint64(li+1), nil)
		tr := &quic.Transport{Conn: pc}
		zero := &reconnector{d: wiredev.NewDevice(ids[2*li], certs[2*li], fleetLabels), cache: newTicketCache(),
			row: &reconnectRow{Link: l.name, OneWayDelayMs: benchkit.MS(l.delay), Mode: "0-RTT resumption"}}
		zero.shared = zero.d.TLSConfig(p.pool, zero.cache)
		full := &reconnector{d: wiredev.NewDevice(ids[2*li+1], certs[2*li+1], fleetLabels),
			row: &reconnectRow{Link: l.name, OneWayDelayMs: benchkit.MS(l.delay), Mode: "full handshake"}}
		modes := []*reconnector{zero, full}
		err = func() error {
			defer func() {
				for _, m := range modes {
					m.finish()
				}
				tr.Close()
				pc.Close()
			}()
			for _, m := range modes {
				for range reconnectWarmup + 1 {
					if err := m.connect(ctx, cfg, tr, addr, p, false); err != nil {
						return fmt.Errorf("%s, %s: warm-up: %w", l.name, m.row.Mode, err)
					}
				}
			}
			for i := range cfg.reconnects {
				// Alternate the order, so background load hits both alike.
				order := modes
				if i%2 == 1 {
					order = []*reconnector{full, zero}
				}
				for _, m := range order {
					if err := ctx.Err(); err != nil {
						return err
					}
					if err := m.connect(ctx, cfg, tr, addr, p, true); err != nil {
						m.row.Errors++
						fmt.Fprintf(log, "reconnect: %s, %s: %v\n", l.name, m.row.Mode, err)
						if m.row.Errors > max(cfg.reconnects/10, 3) {
							return fmt.Errorf("%s, %s: too many failed reconnects: %w", l.name, m.row.Mode, err)
						}
					}
				}
			}
			return nil
		}()
		if err != nil {
			return nil, err
		}
		for _, m := range modes {
			rows = append(rows, m.row)
			reconnectLine(out, m.row)
		}
	}
	return rows, nil
}

package agent

import (
	"cmp"
	"context"
	"errors"
	"maps"
	"net"
	"net/netip"
	"slices"
	"sync"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/meteor-edge/meteor/agent/journal"
	"github.com/meteor-edge/meteor/wire"
)

// The agent counts its own traffic: every datagram its socket sends or
// receives (sessions, RTT probes and race losers alike: all of them go
// through the one quic.Transport over that socket), per server address
// and UTC day of the agent's clock. The counts go to the servers with
// every report (withTraffic), to Status, and to the journal every
// trafficSaveInterval and when the agent stops.

// IP and UDP header bytes of a datagram, counted on top of its payload so
// that the counts are what the link carries (link-layer framing aside):
// a 20-byte IPv4 or 40-byte IPv6 header, and 8 of UDP.
const (
	ipv4Overhead = 20 + 8
	ipv6Overhead = 40 + 8
)

// trafficSaveInterval is how often the counters are written to the
// journal while they change. Every journal write is fsynced; a power loss
// loses at most this long's counts (the agent stopping saves them).
const trafficSaveInterval = 5 * time.Minute

// otherServers is the row the lightest addresses are summed into past
// wire.MaxTrafficServers, and the datagrams of addresses no dial resolved
// to past maxTrafficRows (no host:port starts with a parenthesis).
const otherServers = "(other)"

// maxTrafficRows bounds the rows of a day: datagrams from addresses the
// agent never dialled (anyone may send to its socket) go to otherServers
// once the day has this many.
const maxTrafficRows = 64

// Traffic is what the agent counted of its own traffic, as IP packets
// (UDP payload plus 28 bytes of headers over IPv4, 48 over IPv6), per
// server address as the agent dials it: docs/agent.md, "Traffic
// counters".
type Traffic struct {
	// Day is the start (00:00 UTC) of the day Today counts; zero before
	// anything was counted.
	Day time.Time
	// Today and Yesterday are the counts of that day so far and of the
	// day before, per server address, sorted by address. Yesterday is
	// empty if the agent did not count that day.
	Today, Yesterday []wire.ServerTraffic
}

// trafficRow is one server address's counts of one day.
type trafficRow struct {
	server string
	c      wire.TrafficCounts
}

// trafficDay is one day's rows by server address.
type trafficDay struct {
	day  uint32
	rows map[string]*trafficRow
}

func (d *trafficDay) row(server string) *trafficRow {
	r := d.rows[server]
	if r == nil {
		if d.rows == nil {
			d.rows = map[string]*trafficRow{}
		}
		r = &trafficRow{server: server}
		d.rows[server] = r
	}
	return r
}

// list returns the day's rows sorted by address.
func (d *trafficDay) list() []wire.ServerTraffic {
	out := make([]wire.ServerTraffic, 0, len(d.rows))
	for _, r := range d.rows {
		out = append(out, wire.ServerTraffic{Server: r.server, TrafficCounts: r.c})
	}
	slices.SortFunc(out, func(a, b wire.ServerTraffic) int { return cmp.Compare(a.Server, b.Server) })
	return out
}

// journal returns the day as the journal keeps it.
func (d *trafficDay) journal() journal.TrafficDay {
	jd := journal.TrafficDay{Day: d.day}
	for _, r := range d.list() {
		jd.Servers = append(jd.Servers, journal.TrafficCount{Server: r.Server,
			SentBytes: r.SentBytes, RecvBytes: r.RecvBytes, SentPackets: r.SentPackets, RecvPackets: r.RecvPackets})
	}
	return jd
}

// trafficMeter holds the counters. Counting a datagram takes the mutex
// for a map lookup and four additions; a remote address is mapped to its
// server once a day (byAddr), so nothing is allocated per datagram.
type trafficMeter struct {
	now func() time.Time

	mu      sync.Mutex
	names   map[netip.AddrPort]string      // the server address each remote address was dialled as; guarded by mu
	started bool                           // today holds a day; guarded by mu
	today   trafficDay                     // guarded by mu
	prev    trafficDay                     // the day before today's, or empty; guarded by mu
	byAddr  map[netip.AddrPort]*trafficRow // today's row of each remote address seen; guarded by mu
	gen     uint64                         // moves on with every datagram counted and day begun; guarded by mu
	saved   uint64                         // gen when the counters were last saved; guarded by mu
	// paths keeps, for each address the agent dialled, when it last sent
	// there and the last silence a datagram from there ended (see
	// lastSilence); guarded by mu.
	paths map[netip.AddrPort]*pathTimes
}

// pathTimes are the send and receive times of one remote address.
type pathTimes struct {
	sent time.Time // last datagram sent
	// silence is how long the agent had sent nothing there when the last
	// datagram from there arrived (at recv): a NAT binding outlived it.
	silence time.Duration
	recv    time.Time
}

func newTrafficMeter(now func() time.Time) *trafficMeter {
	return &trafficMeter{now: now, names: map[netip.AddrPort]string{}, byAddr: map[netip.AddrPort]*trafficRow{},
		paths: map[netip.AddrPort]*pathTimes{}}
}

// lastSilence returns how long the agent had sent nothing to addr when
// the last datagram from addr arrived, and when that was; ok is false if
// nothing was both sent there and received from there. The NAT binding of
// the path outlived that silence: the datagram got through it. Only
// addresses the agent dialled (learn) are tracked.
func (m *trafficMeter) lastSilence(addr net.Addr) (silence time.Duration, at time.Time, ok bool) {
	ap, valid := remoteAddr(addr)
	if !valid {
		return 0, at, false
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	p := m.paths[ap]
	if p == nil || p.recv.IsZero() || p.silence <= 0 {
		return 0, at, false
	}
	return p.silence, p.recv, true
}

// remoteAddr returns addr as a map key, IPv4-mapped IPv6 addresses as
// IPv4 (they travel as IPv4).
func remoteAddr(addr net.Addr) (netip.AddrPort, bool) {
	var ap netip.AddrPort
	if u, ok := addr.(*net.UDPAddr); ok {
		ap = u.AddrPort()
	} else if addr != nil {
		var err error
		if ap, err = netip.ParseAddrPort(addr.String()); err != nil {
			return ap, false
		}
	}
	if !ap.IsValid() {
		return ap, false
	}
	return netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port()), true
}

// learn records that the agent dials server (a configured or redirected
// host:port) at addr: the datagrams of addr count for server from now on.
func (m *trafficMeter) learn(addr *net.UDPAddr, server string) {
	ap, ok := remoteAddr(addr)
	if !ok {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.names[ap] == server {
		return
	}
	m.names[ap] = server
	if m.paths[ap] == nil {
		m.paths[ap] = &pathTimes{}
	}
	delete(m.byAddr, ap) // counted under another name so far today
}

// count adds one datagram of n payload bytes, sent to or received from
// addr.
func (m *trafficMeter) count(addr net.Addr, n int, sent bool) {
	now := m.now()
	ap, ok := remoteAddr(addr)
	size := uint64(n) + ipv4Overhead
	if ok && !ap.Addr().Is4() {
		size = uint64(n) + ipv6Overhead
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.rollLocked(wire.TrafficDay(now))
	r := m.byAddr[ap]
	if r == nil {
		name, named := m.names[ap]
		switch {
		case named:
		case !ok || len(m.today.rows) >= maxTrafficRows:
			// Not an IP address (never on a real socket), or a day
			// already full of addresses no dial resolved to.
			name = otherServers
		default:
			name = ap.String()
		}
		r = m.today.row(name)
		if name != otherServers {
			m.byAddr[ap] = r
		}
	}
	if sent {
		r.c.SentBytes += size
		r.c.SentPackets++
	} else {
		r.c.RecvBytes += size
		r.c.RecvPackets++
	}
	if p := m.paths[ap]; p != nil {
		if sent {
			p.sent = now
		} else if !p.sent.IsZero() {
			p.silence, p.recv = now.Sub(p.sent), now
		}
	}
	m.gen++
}

// rollLocked moves the counters on to day. Days only move forward: when
// the clock goes back (a device without a real-time clock, before NTP
// has set it) the agent keeps counting into the latest day it counted,
// rather than mixing an earlier day's counts with today's.
func (m *trafficMeter) rollLocked(day uint32) {
	switch {
	case !m.started:
		m.started, m.today = true, trafficDay{day: day}
	case day <= m.today.day:
		return
	case day == m.today.day+1:
		m.prev, m.today = m.today, trafficDay{day: day}
	default:
		m.prev, m.today = trafficDay{}, trafficDay{day: day}
	}
	clear(m.byAddr)
	m.gen++
}

// snapshot returns the counters as Status shows them.
func (m *trafficMeter) snapshot() Traffic {
	now := m.now()
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.started {
		return Traffic{}
	}
	m.rollLocked(wire.TrafficDay(now))
	t := Traffic{Day: wire.TrafficDayStart(m.today.day), Today: m.today.list()}
	if len(m.prev.rows) > 0 {
		t.Yesterday = m.prev.list()
	}
	return t
}

// wire returns the counters as a Report carries them: today's per server
// (at most wire.MaxTrafficServers rows, the lightest summed into one) and
// the previous day's total.
func (m *trafficMeter) wire() *wire.Traffic {
	now := m.now()
	m.mu.Lock()
	m.rollLocked(wire.TrafficDay(now))
	t := &wire.Traffic{Day: m.today.day}
	rows := m.today.list()
	for _, r := range m.prev.rows {
		t.Previous = t.Previous.Add(r.c)
	}
	m.mu.Unlock()

	// Addresses longer than the wire allows are cut, and may then meet.
	byName := make(map[string]wire.TrafficCounts, len(rows))
	for _, r := range rows {
		name := truncate(r.Server, wire.MaxNameLen)
		byName[name] = byName[name].Add(r.TrafficCounts)
	}
	if len(byName) > wire.MaxTrafficServers {
		names := slices.Collect(maps.Keys(byName))
		slices.SortFunc(names, func(a, b string) int {
			return cmp.Or(cmp.Compare(byName[b].Bytes(), byName[a].Bytes()), cmp.Compare(a, b))
		})
		var other wire.TrafficCounts
		for _, name := range names[wire.MaxTrafficServers-1:] {
			other = other.Add(byName[name])
			delete(byName, name)
		}
		byName[otherServers] = byName[otherServers].Add(other)
	}
	for _, name := range slices.Sorted(maps.Keys(byName)) {
		t.Servers = append(t.Servers, wire.ServerTraffic{Server: name, TrafficCounts: byName[name]})
	}
	return t
}

// restore takes the counters saved in the journal: the later saved day
// becomes today (days only move forward), and the one before it, if it
// is the day before, the previous day.
func (m *trafficMeter) restore(days []journal.TrafficDay) {
	m.mu.Lock()
	defer m.mu.Unlock()
	slices.SortFunc(days, func(a, b journal.TrafficDay) int { return cmp.Compare(a.Day, b.Day) })
	load := func(d journal.TrafficDay) trafficDay {
		td := trafficDay{day: d.Day}
		for _, c := range d.Servers {
			r := td.row(c.Server)
			r.c = r.c.Add(wire.TrafficCounts{SentBytes: c.SentBytes, RecvBytes: c.RecvBytes, SentPackets: c.SentPackets, RecvPackets: c.RecvPackets})
		}
		return td
	}
	if n := len(days); n > 0 {
		m.started, m.today, m.prev = true, load(days[n-1]), trafficDay{}
		if n > 1 && days[n-2].Day+1 == days[n-1].Day {
			m.prev = load(days[n-2])
		}
		clear(m.byAddr)
	}
	m.saved = m.gen
}

// save writes the counters to the journal if they changed since the last
// save.
func (m *trafficMeter) save(j *journal.Journal) error {
	m.mu.Lock()
	if m.gen == m.saved {
		m.mu.Unlock()
		return nil
	}
	gen := m.gen
	var days []journal.TrafficDay
	if len(m.prev.rows) > 0 {
		days = append(days, m.prev.journal())
	}
	days = append(days, m.today.journal())
	m.mu.Unlock()
	if err := j.SaveTraffic(days); err != nil {
		return err
	}
	m.mu.Lock()
	m.saved = max(m.saved, gen)
	m.mu.Unlock()
	return nil
}

// saveLoop saves the counters every trafficSaveInterval until ctx ends.
func (m *trafficMeter) saveLoop(ctx context.Context, j *journal.Journal, clock Clock, log hclog.Logger) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-clock.After(trafficSaveInterval):
		}
		if err := m.save(j); err != nil && !errors.Is(err, journal.ErrPowerCut) {
			log.Warn("save traffic counters", "error", err)
		}
	}
}

// trafficConn is the agent's socket with its datagrams counted.
//
// quic-go reads a *net.UDPConn in batches and writes it with GSO and ECN,
// bypassing ReadFrom and WriteTo; through this wrapper it uses ReadFrom and
// WriteTo, one datagram at a time, which costs an idle agent nothing it
// would notice. The socket's buffers and the don't-fragment bit are still
// set (trafficUDPConn).
type trafficConn struct {
	net.PacketConn
	m *trafficMeter
}

// ReadFrom implements net.PacketConn, counting the datagram read.
func (c *trafficConn) ReadFrom(p []byte) (int, net.Addr, error) {
	n, addr, err := c.PacketConn.ReadFrom(p)
	if err == nil {
		c.m.count(addr, n, false)
	}
	return n, addr, err
}

// WriteTo implements net.PacketConn, counting the datagram written.
func (c *trafficConn) WriteTo(p []byte, addr net.Addr) (int, error) {
	n, err := c.PacketConn.WriteTo(p, addr)
	if err == nil {
		c.m.count(addr, n, true)
	}
	return n, err
}

// udpSocket is what quic-go asks of a socket to size its buffers and set
// the don't-fragment bit.
type udpSocket interface {
	SyscallConn() (syscall.RawConn, error)
	SetReadBuffer(bytes int) error
	SetWriteBuffer(bytes int) error
}

// trafficUDPConn is a trafficConn over a real UDP socket: it passes
// udpSocket through, and nothing that would read or write around the
// counters.
type trafficUDPConn struct {
	*trafficConn
	udpSocket
}

// countTraffic wraps pc so that m counts its datagrams.
func countTraffic(pc net.PacketConn, m *trafficMeter) net.PacketConn {
	c := &trafficConn{PacketConn: pc, m: m}
	if u, ok := pc.(udpSocket); ok {
		return &trafficUDPConn{trafficConn: c, udpSocket: u}
	}
	return c
}

// withTraffic returns rep with the traffic counted so far, as a report
// is written to a session at protocol minor (rep itself below 1.3, whose
// servers refuse the flag). The counts go with every report written, not
// into the journaled report: the reporter compares report bodies to see
// whether anything changed, and traffic always does.
func (a *Agent) withTraffic(rep *wire.Report, minor uint16) *wire.Report {
	if minor < wire.MinorReportTraffic {
		return rep
	}
	out := *rep
	out.Traffic = a.traffic.wire()
	if wire.FrameLen(&out) > wire.DefaultMaxFrameSize {
		return rep // a report at the frame's edge goes without
	}
	a.st.update(func(s *Status) { s.ReportedTraffic, s.ReportedTrafficSeq = out.Traffic, rep.Seq })
	return &out
}

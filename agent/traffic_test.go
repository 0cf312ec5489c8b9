package agent

import (
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/meteor-edge/meteor/agent/journal"
	"github.com/meteor-edge/meteor/wire"
)

func udpAddr(s string) *net.UDPAddr {
	a, err := net.ResolveUDPAddr("udp", s)
	if err != nil {
		panic(err)
	}
	return a
}

func counts(sb, rb, sp, rp uint64) wire.TrafficCounts {
	return wire.TrafficCounts{SentBytes: sb, RecvBytes: rb, SentPackets: sp, RecvPackets: rp}
}

// TestTrafficMeterCounts: datagrams count with their IP and UDP headers
// (28 bytes over IPv4, IPv4-mapped addresses included, 48 over IPv6),
// under the server address they were dialled as, else under the remote
// address; a new UTC day starts from zero and keeps the day before,
// a skipped day forgets it, and a clock going back does not go back a day.
func TestTrafficMeterCounts(t *testing.T) {
	clock := newFakeClock() // 2026-01-02 03:04:05 UTC
	m := newTrafficMeter(clock.Now)
	if got := m.snapshot(); !got.Day.IsZero() || got.Today != nil {
		t.Fatalf("before any datagram: %+v", got)
	}
	m.learn(udpAddr("127.0.0.1:7443"), "s1.example:7443")
	m.count(udpAddr("127.0.0.1:7443"), 1200, true)
	m.count(&net.UDPAddr{IP: net.ParseIP("::ffff:127.0.0.1"), Port: 7443}, 100, false)
	m.count(udpAddr("[2001:db8::7]:7443"), 52, false)
	m.learn(udpAddr("10.1.1.1:7443"), "s2.example:7443")
	m.count(udpAddr("10.1.1.1:7443"), 72, true)
	// The address now resolves for another name: counted under it from now on.
	m.learn(udpAddr("10.1.1.1:7443"), "s3.example:7443")
	m.count(udpAddr("10.1.1.1:7443"), 72, true)

	s1 := udpAddr("127.0.0.1:7443")
	if n := testing.AllocsPerRun(100, func() { m.count(s1, 1200, true) }); n != 0 {
		t.Errorf("counting a datagram allocates %v times", n)
	}
	m.today.rows["s1.example:7443"].c.SentBytes -= 101 * 1228 // AllocsPerRun runs once more than asked
	m.today.rows["s1.example:7443"].c.SentPackets -= 101

	day1 := time.Date(2026, 1, 2, 0, 0, 0, 0, time.UTC)
	want := Traffic{Day: day1, Today: []wire.ServerTraffic{
		{Server: "[2001:db8::7]:7443", TrafficCounts: counts(0, 52+48, 0, 1)},
		{Server: "s1.example:7443", TrafficCounts: counts(1200+28, 100+28, 1, 1)},
		{Server: "s2.example:7443", TrafficCounts: counts(100, 0, 1, 0)},
		{Server: "s3.example:7443", TrafficCounts: counts(100, 0, 1, 0)},
	}}
	if diff := cmp.Diff(want, m.snapshot()); diff != "" {
		t.Fatalf("day 1 (-want +got):\n%s", diff)
	}

	clock.Advance(24 * time.Hour)
	m.count(udpAddr("127.0.0.1:7443"), 10, true)
	got := m.snapshot()
	if !got.Day.Equal(day1.AddDate(0, 0, 1)) || len(got.Today) != 1 || got.Today[0].TrafficCounts != counts(38, 0, 1, 0) {
		t.Fatalf("day 2: %+v", got)
	}
	if diff := cmp.Diff(want.Today, got.Yesterday); diff != "" {
		t.Fatalf("day 2's yesterday (-want +got):\n%s", diff)
	}
	w := m.wire()
	if w.Day != wire.TrafficDay(clock.Now()) || len(w.Servers) != 1 || w.Previous != counts(1228+100+100, 128+100, 3, 2) {
		t.Fatalf("day 2 on the wire: %+v", w)
	}

	// The clock goes back across midnight: still day 2.
	clock.Advance(-4 * time.Hour)
	m.count(udpAddr("127.0.0.1:7443"), 10, true)
	if got := m.snapshot(); !got.Day.Equal(day1.AddDate(0, 0, 1)) || got.Today[0].SentPackets != 2 || len(got.Yesterday) != 4 {
		t.Fatalf("after the clock went back: %+v", got)
	}

	// Two days on from day 2: it is not the day before, and is forgotten.
	clock.Advance(52 * time.Hour)
	if got := m.snapshot(); !got.Day.Equal(day1.AddDate(0, 0, 3)) || len(got.Today) != 0 || got.Yesterday != nil {
		t.Fatalf("two days on: %+v", got)
	}
	if w := m.wire(); w.Servers != nil || w.Previous != (wire.TrafficCounts{}) {
		t.Fatalf("two days on, on the wire: %+v", w)
	}
}

// TestTrafficConnCounts: the wrapped socket counts what it writes and
// reads, and still lets quic-go size a real UDP socket's buffers; a
// socket that is not one stays without those methods.
func TestTrafficConnCounts(t *testing.T) {
	clock := newFakeClock()
	m := newTrafficMeter(clock.Now)
	a, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	pc := countTraffic(a, m)
	if _, ok := pc.(udpSocket); !ok {
		t.Fatal("the counted UDP socket hides its buffer and syscall methods from quic-go")
	}
	if _, ok := pc.(interface {
		ReadMsgUDP(b, oob []byte) (n, oobn, flags int, addr *net.UDPAddr, err error)
	}); ok {
		t.Fatal("the counted socket offers ReadMsgUDP, which quic-go would read around the counters")
	}
	if _, ok := countTraffic(struct{ net.PacketConn }{a}, m).(udpSocket); ok {
		t.Fatal("a plain PacketConn gained udpSocket")
	}
	server := b.LocalAddr().String()
	m.learn(b.LocalAddr().(*net.UDPAddr), server)
	if _, err := pc.WriteTo(make([]byte, 500), b.LocalAddr()); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 2048)
	if _, from, err := b.ReadFrom(buf); err != nil || from.String() != a.LocalAddr().String() {
		t.Fatalf("read at the peer: %v from %v", err, from)
	}
	if _, err := b.WriteTo(make([]byte, 40), a.LocalAddr()); err != nil {
		t.Fatal(err)
	}
	if n, _, err := pc.ReadFrom(buf); err != nil || n != 40 {
		t.Fatalf("read: %d, %v", n, err)
	}
	got := m.snapshot().Today
	want := []wire.ServerTraffic{{Server: server, TrafficCounts: counts(528, 68, 1, 1)}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("counts (-want +got):\n%s", diff)
	}
}

// TestTrafficWireRows: past wire.MaxTrafficServers addresses, the lightest
// are summed into one row, and the rows stay sorted; nothing is lost.
func TestTrafficWireRows(t *testing.T) {
	m := newTrafficMeter(newFakeClock().Now)
	var total uint64
	for i := range wire.MaxTrafficServers + 5 {
		addr := udpAddr(fmt.Sprintf("10.0.0.%d:7443", i+1))
		m.learn(addr, fmt.Sprintf("s%02d:7443", i))
		m.count(addr, 100*(i+1), true)
		total += uint64(100*(i+1) + ipv4Overhead)
	}
	w := m.wire()
	if len(w.Servers) != wire.MaxTrafficServers {
		t.Fatalf("%d rows, want %d", len(w.Servers), wire.MaxTrafficServers)
	}
	if got := w.Total().SentBytes; got != total {
		t.Errorf("rows sum to %d bytes, counted %d", got, total)
	}
	for i, s := range w.Servers {
		if i > 0 && s.Server <= w.Servers[i-1].Server {
			t.Errorf("rows not sorted: %q after %q", s.Server, w.Servers[i-1].Server)
		}
		if s.Server == "s00:7443" {
			t.Error("the lightest server has a row of its own")
		}
	}
	if last := w.Servers[0]; last.Server != otherServers || last.SentPackets != 6 {
		t.Errorf("first row %+v, want the 6 lightest summed under %s", last, otherServers)
	}
	if _, err := wire.DecodeMessage(wire.TypeReport, (&wire.Report{Traffic: w}).Append(nil)); err != nil {
		t.Fatal(err)
	}
}

// TestTrafficSavedAcrossRestart: counters saved in the journal are what a
// meter of the next start counts on from, today as today and the day
// before as yesterday; started a day later, the saved today is yesterday.
func TestTrafficSavedAcrossRestart(t *testing.T) {
	dir := t.TempDir()
	clock := newFakeClock()
	j, err := journal.Open(dir, journal.Options{Now: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	m := newTrafficMeter(clock.Now)
	if err := m.save(j); err != nil {
		t.Fatal(err)
	}
	if days, _ := j.Traffic(); days != nil {
		t.Fatalf("saved before counting anything: %+v", days)
	}
	m.count(udpAddr("127.0.0.1:1"), 72, true)
	clock.Advance(24 * time.Hour)
	m.count(udpAddr("127.0.0.1:1"), 172, false)
	if err := m.save(j); err != nil {
		t.Fatal(err)
	}
	before := m.snapshot()

	again := newTrafficMeter(clock.Now)
	days, err := j.Traffic()
	if err != nil {
		t.Fatal(err)
	}
	again.restore(days)
	if diff := cmp.Diff(before, again.snapshot()); diff != "" {
		t.Fatalf("restored (-saved +restored):\n%s", diff)
	}
	again.count(udpAddr("127.0.0.1:1"), 72, true)
	if got := again.snapshot().Today[0].TrafficCounts; got != counts(100, 200, 1, 1) {
		t.Fatalf("today after the restart: %+v", got)
	}

	clock.Advance(24 * time.Hour)
	later := newTrafficMeter(clock.Now)
	later.restore(days)
	if got := later.snapshot(); len(got.Today) != 0 || len(got.Yesterday) != 1 || got.Yesterday[0].RecvBytes != 200 {
		t.Fatalf("a day after the save: %+v", got)
	}
}

// TestWithTraffic: a report written to a session of protocol 1.3 carries
// the counters, and the agent's status what it carried; below 1.3 the
// report is left alone.
func TestWithTraffic(t *testing.T) {
	clock := newFakeClock()
	a := &Agent{traffic: newTrafficMeter(clock.Now), st: newStatusStore("dev-1")}
	a.traffic.count(udpAddr("127.0.0.1:7443"), 100, true)
	rep := &wire.Report{Seq: 5, Full: true, States: true, Corrections: true}
	if got := a.withTraffic(rep, wire.MinorReportCorrections); got != rep || got.Traffic != nil {
		t.Fatalf("at minor 2: %+v", got)
	}
	if s := a.st.snapshot(); s.ReportedTraffic != nil {
		t.Fatalf("reported traffic after a 1.2 report: %+v", s.ReportedTraffic)
	}
	got := a.withTraffic(rep, wire.MinorReportTraffic)
	if rep.Traffic != nil {
		t.Fatal("withTraffic changed the queued report")
	}
	want := &wire.Traffic{Day: wire.TrafficDay(clock.Now()), Servers: []wire.ServerTraffic{{Server: "127.0.0.1:7443", TrafficCounts: counts(128, 0, 1, 0)}}}
	if diff := cmp.Diff(want, got.Traffic); diff != "" {
		t.Fatalf("traffic (-want +got):\n%s", diff)
	}
	if s := a.st.snapshot(); s.ReportedTrafficSeq != 5 || !cmp.Equal(s.ReportedTraffic, want) {
		t.Fatalf("status: seq %d, %+v", s.ReportedTrafficSeq, s.ReportedTraffic)
	}
}

// TestTrafficStrangersAreBounded: datagrams from addresses no dial
// resolved to (anyone may send to the agent's socket) take at most
// maxTrafficRows rows a day; the rest count under otherServers, so
// nothing is lost and memory stays bounded. Servers keep rows of their
// own.
func TestTrafficStrangersAreBounded(t *testing.T) {
	m := newTrafficMeter(newFakeClock().Now)
	m.learn(udpAddr("10.0.0.1:7443"), "s1:7443")
	for i := range 3 * maxTrafficRows {
		m.count(&net.UDPAddr{IP: net.IPv4(198, 51, byte(i/250), byte(i%250)), Port: 40000 + i}, 72, false)
	}
	m.count(udpAddr("10.0.0.1:7443"), 72, true)
	today := m.snapshot().Today
	if len(today) != maxTrafficRows+2 {
		t.Fatalf("%d rows, want %d of strangers, %s and the server's", len(today), maxTrafficRows, otherServers)
	}
	var packets uint64
	var named, other bool
	for _, r := range today {
		packets += r.SentPackets + r.RecvPackets
		named = named || r.Server == "s1:7443" && r.SentPackets == 1
		other = other || r.Server == otherServers && r.RecvPackets == 2*maxTrafficRows
	}
	if packets != 3*maxTrafficRows+1 || !named || !other {
		t.Fatalf("%d datagrams counted (want %d), server row %v, other row %v: %+v", packets, 3*maxTrafficRows+1, named, other, today)
	}
	if len(m.byAddr) > maxTrafficRows+1 { // the strangers with rows, and the server
		t.Errorf("%d addresses remembered", len(m.byAddr))
	}
}

// TestTrafficMeterLastSilence: the meter tells how long the agent had
// sent nothing to a dialled address when a datagram from it came in.
func TestTrafficMeterLastSilence(t *testing.T) {
	clock := newFakeClock()
	m := newTrafficMeter(clock.Now)
	srv := &net.UDPAddr{IP: net.IPv4(10, 0, 0, 1), Port: 7443}
	if _, _, ok := m.lastSilence(srv); ok {
		t.Fatal("a silence before anything was counted")
	}
	m.learn(srv, "10.0.0.1:7443")
	m.count(srv, 40, true)
	clock.Advance(90 * time.Second)
	m.count(srv, 30, false)
	if d, at, ok := m.lastSilence(srv); !ok || d != 90*time.Second || !at.Equal(clock.Now()) {
		t.Fatalf("silence %v at %v, %v; want 90s now", d, at, ok)
	}
	clock.Advance(time.Second)
	m.count(srv, 40, true) // the acknowledgement
	clock.Advance(10 * time.Millisecond)
	m.count(srv, 30, false)
	if d, _, ok := m.lastSilence(srv); !ok || d != 10*time.Millisecond {
		t.Fatalf("after another exchange: silence %v, %v; want 10ms", d, ok)
	}
	// Addresses never dialled are not tracked.
	stranger := &net.UDPAddr{IP: net.IPv4(192, 0, 2, 9), Port: 1}
	m.count(stranger, 40, true)
	m.count(stranger, 40, false)
	if _, _, ok := m.lastSilence(stranger); ok {
		t.Fatal("a stranger's address is tracked")
	}
}

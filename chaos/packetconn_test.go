package chaos

import (
	"encoding/binary"
	"errors"
	"net"
	"os"
	"slices"
	"sync"
	"testing"
	"time"
)

func listenUDP(t testing.TB) *net.UDPConn {
	t.Helper()
	c, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatalf("listen udp: %v", err)
	}
	// Room for every datagram a test sends, so a receiver slowed down by a
	// loaded machine does not make the kernel drop what chaos delivered.
	if err := c.SetReadBuffer(4 << 20); err != nil {
		t.Fatalf("set read buffer: %v", err)
	}
	return c
}

// sink reads datagrams from a socket in the background until the test ends.
type sink struct {
	conn net.PacketConn
	mu   sync.Mutex
	got  [][]byte
	done chan struct{}
}

func newSink(t testing.TB, conn net.PacketConn) *sink {
	s := &sink{conn: conn, done: make(chan struct{})}
	go func() {
		defer close(s.done)
		buf := make([]byte, maxDatagram)
		for {
			n, _, err := conn.ReadFrom(buf)
			if err != nil {
				return
			}
			s.mu.Lock()
			s.got = append(s.got, append([]byte(nil), buf[:n]...))
			s.mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		conn.Close()
		<-s.done
	})
	return s
}

func (s *sink) packets() [][]byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.got)
}

func (s *sink) len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.got)
}

// seqs decodes the sequence numbers written by sendSeq.
func (s *sink) seqs() []uint32 {
	var out []uint32
	for _, p := range s.packets() {
		out = append(out, binary.BigEndian.Uint32(p))
	}
	return out
}

// sendSeq writes datagrams carrying sequence numbers first..first+n-1.
func sendSeq(t testing.TB, c net.PacketConn, to net.Addr, first, n int) {
	t.Helper()
	buf := make([]byte, 32)
	for i := first; i < first+n; i++ {
		binary.BigEndian.PutUint32(buf, uint32(i))
		if _, err := c.WriteTo(buf, to); err != nil {
			t.Fatalf("write %d: %v", i, err)
		}
	}
}

func newTestPacketConn(t testing.TB, p LinkProfile, seed uint64, log *FaultLog) *PacketConn {
	t.Helper()
	pc := NewPacketConn(listenUDP(t), p, seed, log)
	t.Cleanup(func() { pc.Close() })
	return pc
}

func TestPacketConnPerfectLinkPassesEverything(t *testing.T) {
	pc := newTestPacketConn(t, LinkProfile{}, 1, nil)
	rx := newSink(t, listenUDP(t))
	sendSeq(t, pc, rx.conn.LocalAddr(), 0, 100)
	waitFor(t, 5*time.Second, "100 datagrams", func() bool { return rx.len() == 100 })
	for i, s := range rx.seqs() {
		if s != uint32(i) {
			t.Fatalf("datagram %d carries %d: perfect link reordered", i, s)
		}
	}
	st := pc.Stats().Out
	if st.Packets != 100 || st.Sent != 100 || st.Dropped != 0 || st.SentBytes != 3200 {
		t.Fatalf("stats = %+v, want 100 offered and sent, 3200 bytes", st)
	}
}

func TestPacketConnLossIsSeeded(t *testing.T) {
	run := func() ([]uint32, []Fault) {
		log := NewFaultLog()
		pc := newTestPacketConn(t, LinkProfile{Loss: 0.3}, 42, log)
		rx := newSink(t, listenUDP(t))
		sendSeq(t, pc, rx.conn.LocalAddr(), 0, 500)
		st := pc.Stats().Out
		if st.Dropped == 0 || st.Dropped > 250 {
			t.Fatalf("dropped %d of 500 at 30%% loss", st.Dropped)
		}
		if got := uint64(log.Count(KindLoss)); got != st.Dropped {
			t.Fatalf("fault log has %d losses, stats %d", got, st.Dropped)
		}
		waitFor(t, 5*time.Second, "survivors", func() bool { return uint64(rx.len()) == st.Sent })
		return rx.seqs(), log.Faults()
	}
	seqs1, faults1 := run()
	seqs2, faults2 := run()
	if !slices.Equal(seqs1, seqs2) {
		t.Fatalf("same seed delivered different datagrams")
	}
	if len(faults1) != len(faults2) {
		t.Fatalf("same seed logged %d then %d faults", len(faults1), len(faults2))
	}
	for i := range faults1 {
		if faults1[i].Kind != faults2[i].Kind || faults1[i].Detail != faults2[i].Detail {
			t.Fatalf("fault %d differs: %+v vs %+v", i, faults1[i], faults2[i])
		}
	}
}

func TestPacketConnDelayNeverBlocksAndCloseDiscards(t *testing.T) {
	log := NewFaultLog()
	pc := NewPacketConn(listenUDP(t), LinkProfile{Delay: time.Hour}, 1, log)
	rx := newSink(t, listenUDP(t))
	done := make(chan struct{})
	go func() {
		defer close(done)
		sendSeq(t, pc, rx.conn.LocalAddr(), 0, 2000)
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("WriteTo blocked on a delayed link")
	}
	if st := pc.Stats().Out; st.Delayed != 2000 || st.Sent != 0 {
		t.Fatalf("stats = %+v, want 2000 delayed and none sent", st)
	}
	if got := pc.eng.sched.len(); got != 2000 {
		t.Fatalf("scheduler holds %d, want 2000", got)
	}
	if err := pc.Close(); err != nil {
		t.Fatalf("close: %v", err)
	}
	if _, err := pc.WriteTo([]byte("x"), rx.conn.LocalAddr()); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("write after close: %v, want net.ErrClosed", err)
	}
	if rx.len() != 0 {
		t.Fatalf("%d datagrams escaped a one-hour delay", rx.len())
	}
}

func TestPacketConnDelayUnderLoad(t *testing.T) {
	pc := newTestPacketConn(t, LinkProfile{Delay: 2 * time.Millisecond, Jitter: 2 * time.Millisecond}, 7, nil)
	rx := newSink(t, listenUDP(t))
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Go(func() { sendSeq(t, pc, rx.conn.LocalAddr(), w*100, 100) })
	}
	wg.Wait()
	// The counters are bumped after the datagram is handed on, so wait for
	// them too.
	waitFor(t, 10*time.Second, "400 delayed datagrams", func() bool { return rx.len() == 400 && pc.Stats().Out.Sent == 400 })
	got := rx.seqs()
	slices.Sort(got)
	for i, s := range got {
		if s != uint32(i) {
			t.Fatalf("missing or duplicated datagram near %d", i)
		}
	}
	if st := pc.Stats().Out; st.Delayed == 0 || st.Sent != 400 {
		t.Fatalf("stats = %+v", st)
	}
}

func TestPacketConnReorderSwapsNeighbours(t *testing.T) {
	log := NewFaultLog()
	pc := newTestPacketConn(t, LinkProfile{Reorder: 1, ReorderHold: 10 * time.Millisecond}, 3, log)
	rx := newSink(t, listenUDP(t))
	sendSeq(t, pc, rx.conn.LocalAddr(), 0, 7)
	// Every datagram not releasing a held one is held: 1 0 3 2 5 4, and 6
	// comes out when its hold expires.
	waitFor(t, 5*time.Second, "7 datagrams", func() bool { return rx.len() == 7 })
	want := []uint32{1, 0, 3, 2, 5, 4, 6}
	if got := rx.seqs(); !slices.Equal(got, want) {
		t.Fatalf("order = %v, want %v", got, want)
	}
	if n := log.Count(KindReorder); n != 4 {
		t.Fatalf("logged %d reorders, want 4", n)
	}
}

func TestPacketConnDuplicateAndCorrupt(t *testing.T) {
	log := NewFaultLog()
	pc := newTestPacketConn(t, LinkProfile{Duplicate: 1, Corrupt: 1}, 5, log)
	rx := newSink(t, listenUDP(t))
	orig := []byte("0123456789abcdef")
	for range 10 {
		if _, err := pc.WriteTo(orig, rx.conn.LocalAddr()); err != nil {
			t.Fatal(err)
		}
	}
	if string(orig) != "0123456789abcdef" {
		t.Fatalf("corruption modified the caller's buffer: %q", orig)
	}
	waitFor(t, 5*time.Second, "20 datagrams", func() bool { return rx.len() == 20 })
	for _, p := range rx.packets() {
		diff := 0
		for i := range p {
			if p[i] != orig[i] {
				diff++
			}
		}
		if diff != 1 {
			t.Fatalf("datagram %q differs from %q in %d bytes, want 1", p, orig, diff)
		}
	}
	if log.Count(KindDuplicate) != 10 || log.Count(KindCorrupt) != 20 {
		t.Fatalf("fault counts %v", log.Counts())
	}
}

func TestPacketConnBlackhole(t *testing.T) {
	log := NewFaultLog()
	pc := newTestPacketConn(t, LinkProfile{}, 1, log)
	rx := newSink(t, listenUDP(t))
	pc.SetBlackhole(true)
	sendSeq(t, pc, rx.conn.LocalAddr(), 0, 10)
	pc.SetBlackhole(false)
	pc.Blackhole(time.Hour)
	sendSeq(t, pc, rx.conn.LocalAddr(), 10, 10)
	pc.SetBlackhole(false) // also ends the timed blackhole
	sendSeq(t, pc, rx.conn.LocalAddr(), 20, 1)
	waitFor(t, 5*time.Second, "marker", func() bool { return rx.len() == 1 })
	if got := rx.seqs(); got[0] != 20 {
		t.Fatalf("first datagram through is %d, want marker 20", got[0])
	}
	if n := log.Count(KindBlackhole); n != 20 {
		t.Fatalf("logged %d blackhole drops, want 20", n)
	}

	// A short timed blackhole ends by itself.
	pc.Blackhole(20 * time.Millisecond)
	seq := 100
	waitFor(t, 5*time.Second, "link back after a timed blackhole", func() bool {
		sendSeq(t, pc, rx.conn.LocalAddr(), seq, 1)
		seq++
		return rx.len() > 1
	})
}

func TestPacketConnPeerProfiles(t *testing.T) {
	pc := newTestPacketConn(t, LinkProfile{}, 9, nil)
	near, far := newSink(t, listenUDP(t)), newSink(t, listenUDP(t))
	if err := pc.SetPeerProfile(far.conn.LocalAddr(), LinkProfile{Delay: time.Hour}); err != nil {
		t.Fatal(err)
	}
	sendSeq(t, pc, near.conn.LocalAddr(), 0, 20)
	sendSeq(t, pc, far.conn.LocalAddr(), 0, 20)
	waitFor(t, 5*time.Second, "near peer", func() bool { return near.len() == 20 })
	if far.len() != 0 {
		t.Fatalf("far peer got %d datagrams through a one-hour delay", far.len())
	}
	if err := pc.SetPeerProfile(far.conn.LocalAddr(), LinkProfile{Loss: 2}); err == nil {
		t.Fatal("SetPeerProfile accepted Loss 2")
	}
	pc.ClearPeerProfile(far.conn.LocalAddr())
	sendSeq(t, pc, far.conn.LocalAddr(), 100, 1)
	waitFor(t, 5*time.Second, "far peer after clearing its profile", func() bool { return far.len() == 1 })
}

func TestPacketConnInboundFaultsAndReadDeadline(t *testing.T) {
	pc := newTestPacketConn(t, LinkProfile{Loss: 1, Dir: DirIn}, 1, nil)
	tx := listenUDP(t)
	defer tx.Close()
	sendSeq(t, tx, pc.LocalAddr(), 0, 5)
	pc.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
	buf := make([]byte, 64)
	_, _, err := pc.ReadFrom(buf)
	if ne, ok := errors.AsType[net.Error](err); !ok || !ne.Timeout() || !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("read through a lossy inbound link: %v, want a deadline error", err)
	}
	waitFor(t, 5*time.Second, "inbound drops", func() bool { return pc.Stats().In.Dropped == 5 })

	if err := pc.SetProfile(LinkProfile{Dir: DirIn, Delay: time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	pc.SetReadDeadline(time.Time{})
	sendSeq(t, tx, pc.LocalAddr(), 7, 1)
	n, from, err := pc.ReadFrom(buf)
	if err != nil || n != 32 || binary.BigEndian.Uint32(buf) != 7 {
		t.Fatalf("read = %d, %v, seq %d", n, err, binary.BigEndian.Uint32(buf))
	}
	if from.String() != tx.LocalAddr().String() {
		t.Fatalf("from %v, want %v", from, tx.LocalAddr())
	}
	if _, ok := from.(*net.UDPAddr); !ok {
		t.Fatalf("from is %T, want *net.UDPAddr (quic-go compares those)", from)
	}
}

func TestPacketConnUnblocksReaders(t *testing.T) {
	pc := NewPacketConn(listenUDP(t), LinkProfile{}, 1, nil)
	errs := make(chan error, 2)
	read := func() {
		_, _, err := pc.ReadFrom(make([]byte, 10))
		errs <- err
	}
	go read()
	go read()
	// A deadline set while a read is blocked wakes it.
	pc.SetReadDeadline(time.Now())
	if err := <-errs; !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("blocked read after deadline: %v", err)
	}
	if err := <-errs; !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("blocked read after deadline: %v", err)
	}
	pc.SetReadDeadline(time.Time{})
	go read()
	if err := pc.Close(); err != nil {
		t.Fatal(err)
	}
	if err := <-errs; !errors.Is(err, net.ErrClosed) {
		t.Fatalf("blocked read after close: %v", err)
	}
}

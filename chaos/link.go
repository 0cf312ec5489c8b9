package chaos

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
)

// LinkStats counts what happened to the packets of one direction.
type LinkStats struct {
	// Packets and Bytes were offered to the link (written by the caller, or
	// read from the socket for the inbound direction).
	Packets, Bytes uint64
	// Sent and SentBytes were delivered (duplicates included).
	Sent, SentBytes uint64
	// Dropped and DroppedBytes were discarded: loss, bursts, outages,
	// blackholes, partitions, full queues.
	Dropped, DroppedBytes uint64
	// Delayed, Duplicated, Reordered and Corrupted count packets that
	// suffered those faults.
	Delayed, Duplicated, Reordered, Corrupted uint64
	// Errors counts deliveries the underlying socket refused.
	Errors uint64
}

// Stats holds the counters of both directions of a link.
type Stats struct {
	// Out is the sending direction (PacketConn writes, client→target for a
	// UDPProxy).
	Out LinkStats
	// In is the receiving direction (PacketConn reads, target→client for a
	// UDPProxy).
	In LinkStats
}

type dirCounters struct {
	packets, bytes, sent, sentBytes, dropped, droppedBytes atomic.Uint64
	delayed, duplicated, reordered, corrupted, errors      atomic.Uint64
}

func (c *dirCounters) snapshot() LinkStats {
	return LinkStats{
		Packets: c.packets.Load(), Bytes: c.bytes.Load(),
		Sent: c.sent.Load(), SentBytes: c.sentBytes.Load(),
		Dropped: c.dropped.Load(), DroppedBytes: c.droppedBytes.Load(),
		Delayed: c.delayed.Load(), Duplicated: c.duplicated.Load(),
		Reordered: c.reordered.Load(), Corrupted: c.corrupted.Load(),
		Errors: c.errors.Load(),
	}
}

// outFunc delivers one datagram to its next hop. It returns errDropped if
// it discarded the datagram itself (a full queue), after logging why.
type outFunc func(b []byte, addr net.Addr) error

// errDropped is returned by an outFunc that dropped its datagram.
var errDropped = errors.New("chaos: datagram dropped")

// packet is a datagram waiting in the scheduler.
type packet struct {
	data []byte
	addr net.Addr
	out  outFunc
	dir  Direction
	at   time.Time // when it is due, before any reordering hold
	// held marks a reordered packet: it is queued twice (after its successor
	// and at a timeout) and delivered by whichever comes first.
	held    bool
	claimed atomic.Bool
}

// route says which way a datagram travels and how to name its ends.
type route struct {
	dir      Direction // DirOut or DirIn
	key      string    // peer address: selects the peer profile and random stream
	from, to string    // for the fault log
}

type linkKey struct {
	dir  Direction
	peer string
}

// linkState is the per-link (direction, peer) fault state.
type linkState struct {
	rng     *rand.Rand
	inBurst bool
	held    *packet
}

// engine decides the fate of every datagram of a PacketConn or UDPProxy.
type engine struct {
	defDir Direction // what DirDefault means for this component
	seed   uint64
	start  time.Time
	log    *FaultLog
	logger hclog.Logger
	sched  *scheduler
	stats  [2]dirCounters // [0] DirOut, [1] DirIn

	mu             sync.Mutex
	def            LinkProfile            // guarded by mu
	peers          map[string]LinkProfile // guarded by mu
	links          map[linkKey]*linkState // guarded by mu
	blackhole      bool                   // guarded by mu
	blackholeUntil time.Time              // guarded by mu
	cut            bool                   // guarded by mu
}

func newEngine(p LinkProfile, defDir Direction, seed uint64, log *FaultLog, o options) *engine {
	e := &engine{
		defDir: defDir,
		seed:   seed,
		start:  time.Now(),
		log:    log,
		logger: o.logger,
		def:    p,
		peers:  make(map[string]LinkProfile),
		links:  make(map[linkKey]*linkState),
	}
	e.sched = newScheduler(o.maxQueue, func(p *packet) { _ = e.deliver(p) })
	return e
}

func (e *engine) close() { e.sched.close() }

func (e *engine) counters(dir Direction) *dirCounters {
	if dir == DirIn {
		return &e.stats[1]
	}
	return &e.stats[0]
}

func (e *engine) snapshot() Stats {
	return Stats{Out: e.stats[0].snapshot(), In: e.stats[1].snapshot()}
}

func (e *engine) linkLocked(k linkKey) *linkState {
	ls, ok := e.links[k]
	if !ok {
		// Streams are numbered by first appearance rather than keyed by
		// address, so a rerun with other ephemeral ports replays the same
		// decisions.
		ls = &linkState{rng: rand.New(rand.NewPCG(e.seed, uint64(len(e.links))))}
		e.links[k] = ls
	}
	return ls
}

func (e *engine) profileLocked(key string) LinkProfile {
	if p, ok := e.peers[key]; ok {
		return p
	}
	return e.def
}

func (e *engine) setProfile(p LinkProfile) error {
	if err := p.Validate(); err != nil {
		return err
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	e.def = p
	return nil
}

func (e *engine) profile() LinkProfile {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.def
}

func (e *engine) setPeerProfile(key string, p LinkProfile) error {
	if err := p.Validate(); err != nil {
		return err
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	e.peers[key] = p
	return nil
}

func (e *engine) clearPeerProfile(key string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	delete(e.peers, key)
}

func (e *engine) setBlackhole(on bool, name string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.blackhole = on
	if !on {
		e.blackholeUntil = time.Time{}
	}
	e.log.Record(KindPartition, name, "", fmt.Sprintf("blackhole=%t", on))
}

func (e *engine) blackholeFor(d time.Duration, name string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if until := time.Now().Add(d); until.After(e.blackholeUntil) {
		e.blackholeUntil = until
	}
	e.log.Record(KindPartition, name, "", fmt.Sprintf("blackhole for %v", d))
}

func (e *engine) setCut(on bool, from, to string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.cut = on
	e.log.Record(KindPartition, from, to, fmt.Sprintf("partition=%t", on))
}

// handle applies the link's faults to one datagram and delivers it (now, in
// the caller's goroutine, or later from the scheduler). owned says data may
// be kept and modified; otherwise it is copied before either. The error is
// that of an immediate delivery of the datagram itself; a dropped datagram
// is not an error, as on a real network.
func (e *engine) handle(r route, data []byte, addr net.Addr, out outFunc, owned bool) error {
	c := e.counters(r.dir)
	c.packets.Add(1)
	c.bytes.Add(uint64(len(data)))
	now := time.Now()

	e.mu.Lock()
	drop := func(kind, detail string) error {
		e.log.Add(Fault{At: now, Kind: kind, From: r.from, To: r.to, Detail: detail})
		e.mu.Unlock()
		c.dropped.Add(1)
		c.droppedBytes.Add(uint64(len(data)))
		return nil
	}
	if e.cut {
		return drop(KindCut, fmt.Sprintf("%d bytes", len(data)))
	}
	if e.blackhole || now.Before(e.blackholeUntil) {
		return drop(KindBlackhole, fmt.Sprintf("%d bytes", len(data)))
	}
	k := linkKey{dir: r.dir, peer: r.key}
	prof := e.profileLocked(r.key)
	applies := prof.Dir.covers(r.dir, e.defDir) && !prof.perfect()
	ls := e.links[k]
	if !applies && (ls == nil || ls.held == nil) {
		e.mu.Unlock()
		return e.deliverNow(c, out, data, addr)
	}
	if ls == nil {
		ls = e.linkLocked(k)
	}
	rng := ls.rng

	if applies {
		if prof.inOutage(now.Sub(e.start)) {
			return drop(KindOutage, fmt.Sprintf("%d bytes", len(data)))
		}
		if ls.inBurst {
			if rng.Float64() < 1/float64(prof.burstLen()) {
				ls.inBurst = false
			}
			return drop(KindBurstLoss, fmt.Sprintf("%d bytes", len(data)))
		}
		if prof.BurstLoss > 0 && rng.Float64() < prof.BurstLoss {
			ls.inBurst = true
			return drop(KindBurstLoss, fmt.Sprintf("%d bytes, burst starts", len(data)))
		}
		if prof.Loss > 0 && rng.Float64() < prof.Loss {
			return drop(KindLoss, fmt.Sprintf("%d bytes", len(data)))
		}
	}

	// The datagram goes through: it releases any packet held for reordering.
	release := ls.held
	ls.held = nil
	if release != nil && release.claimed.Load() {
		release = nil // its hold expired and it went out already
	}

	copies := 1
	if applies && prof.Duplicate > 0 && rng.Float64() < prof.Duplicate {
		copies = 2
		c.duplicated.Add(1)
		e.log.Add(Fault{At: now, Kind: KindDuplicate, From: r.from, To: r.to, Detail: fmt.Sprintf("%d bytes", len(data))})
	}
	var immediate []*packet
	var firstAt time.Time
	for i := range copies {
		p := &packet{data: data, addr: addr, out: out, dir: r.dir}
		var d time.Duration
		if applies {
			d = prof.Delay
			if prof.Jitter > 0 {
				d += time.Duration(rng.Int64N(2*int64(prof.Jitter)+1)) - prof.Jitter
				d = max(d, 0)
			}
			if prof.Corrupt > 0 && len(data) > 0 && rng.Float64() < prof.Corrupt {
				p.data = append([]byte(nil), data...)
				idx := rng.IntN(len(p.data))
				mask := byte(1 + rng.IntN(255))
				p.data[idx] ^= mask
				c.corrupted.Add(1)
				e.log.Add(Fault{At: now, Kind: KindCorrupt, From: r.from, To: r.to, Detail: fmt.Sprintf("byte %d ^= %#02x", idx, mask)})
			}
		}
		p.at = now.Add(d)
		if i == 0 {
			firstAt = p.at
			// Hold the datagram back until the next one of the link passes
			// it, or until the hold expires. A datagram that releases a held
			// one is not held itself.
			p.held = applies && release == nil && prof.Reorder > 0 && rng.Float64() < prof.Reorder
		}
		if !owned && (p.held || d > 0) && sameBuf(p.data, data) {
			p.data = append([]byte(nil), data...) // the caller reuses its buffer
		}
		switch {
		case p.held:
			ls.held = p
			c.reordered.Add(1)
			hold := prof.reorderHold()
			e.log.Add(Fault{At: now, Kind: KindReorder, From: r.from, To: r.to, Detail: fmt.Sprintf("held up to %v", hold)})
			e.scheduleLocked(c, r, p.at.Add(hold), p)
		case d > 0:
			c.delayed.Add(1)
			e.log.Add(Fault{At: now, Kind: KindDelay, From: r.from, To: r.to, Detail: d.String()})
			e.scheduleLocked(c, r, p.at, p)
		default:
			immediate = append(immediate, p)
		}
	}
	own := len(immediate)
	if release != nil {
		// Deliver the held datagram right after this one, but never before
		// its own delay has passed.
		at := firstAt
		if release.at.After(at) {
			at = release.at
		}
		if at.After(now) {
			e.scheduleLocked(c, r, at, release)
		} else {
			immediate = append(immediate, release)
		}
	}
	e.mu.Unlock()

	var err error
	for i, p := range immediate {
		if derr := e.deliver(p); derr != nil && i < own && err == nil {
			err = derr
		}
	}
	return err
}

func sameBuf(a, b []byte) bool {
	return len(a) > 0 && len(b) > 0 && &a[0] == &b[0]
}

// scheduleLocked queues p for delivery at at; a full queue drops it.
func (e *engine) scheduleLocked(c *dirCounters, r route, at time.Time, p *packet) {
	switch err := e.sched.push(at, p); err {
	case nil:
	case errSchedFull:
		if p.held {
			// A held datagram has a second chance: the datagram that
			// releases it, or the other queue entry.
			return
		}
		c.dropped.Add(1)
		c.droppedBytes.Add(uint64(len(p.data)))
		e.log.Record(KindOverflow, r.from, r.to, fmt.Sprintf("%d bytes, delay queue full", len(p.data)))
	default:
		// Closed: the link is gone and so is the packet.
	}
}

// deliverNow is the fast path of a datagram that suffers nothing.
func (e *engine) deliverNow(c *dirCounters, out outFunc, data []byte, addr net.Addr) error {
	if err := out(data, addr); err != nil {
		return c.failed(err, len(data))
	}
	c.sent.Add(1)
	c.sentBytes.Add(uint64(len(data)))
	return nil
}

// deliver hands p to its next hop, once.
func (e *engine) deliver(p *packet) error {
	if p.held && !p.claimed.CompareAndSwap(false, true) {
		return nil
	}
	c := e.counters(p.dir)
	if err := p.out(p.data, p.addr); err != nil {
		e.logger.Trace("delivery failed", "addr", p.addr, "error", err)
		return c.failed(err, len(p.data))
	}
	c.sent.Add(1)
	c.sentBytes.Add(uint64(len(p.data)))
	return nil
}

// failed counts a delivery error; a datagram the next hop dropped on
// purpose is counted as dropped and is no error to the sender.
func (c *dirCounters) failed(err error, n int) error {
	if errors.Is(err, errDropped) {
		c.dropped.Add(1)
		c.droppedBytes.Add(uint64(n))
		return nil
	}
	c.errors.Add(1)
	return err
}

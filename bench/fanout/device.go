package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"sync/atomic"
	"time"

	"github.com/quic-go/quic-go"

	"github.com/meteor-edge/meteor/agent"
	"github.com/meteor-edge/meteor/wire"
)

// device is one simulated Meteor agent at the wire level: it keeps what
// the agent journals (session, resume token, acknowledged revision, the
// applied set, report seqs) and answers as the agent does: a Notify above
// its acknowledged revision makes it pull; a complete Delta is taken,
// acknowledged, applied (in zero time: nothing runs) and reported; the
// ReportAck confirms the report. One goroutine (run) owns every field but
// log.
type device struct {
	id     string
	tls    *tls.Config
	labels map[string]string
	// home is the index of the server the device connects to first.
	home int

	session wire.SessionID
	token   []byte
	acked   uint64
	applied map[string]wire.AppliedResource
	seq     uint64 // last report seq sent
	// unacked are the reports sent and not yet acknowledged, by seq.
	unacked []sentReport

	// log confirms the reports (ReportAck), took the applied revisions
	// (complete Deltas).
	log, took confirmLog
}

type sentReport struct {
	seq, revision uint64
}

// benchSilence is the keep-alive interval the benchmark's devices
// announce (wire.Ping): longer than any run.
const benchSilence = time.Hour

func newDevice(id string, cert tls.Certificate, roots *x509.CertPool, labels map[string]string, home int) *device {
	return &device{id: id, tls: wire.ClientTLSConfig(roots, cert, ""), labels: labels, home: home, applied: map[string]wire.AppliedResource{}}
}

func (d *device) inventory() []wire.AppliedResource {
	out := make([]wire.AppliedResource, 0, len(d.applied))
	for _, a := range d.applied {
		out = append(out, a)
	}
	return out
}

func (d *device) hello() *wire.Hello {
	return &wire.Hello{
		Major: wire.ProtocolMajor, Minor: wire.ProtocolMinor, AgentVersion: "bench-fanout",
		SessionID: d.session, ResumeToken: d.token, Labels: d.labels, AckedRevision: d.acked,
		Inventory: true, Applied: d.inventory(),
	}
}

func (d *device) pull() *wire.Pull {
	return &wire.Pull{KnownRevision: d.acked, Inventory: true, Applied: d.inventory()}
}

// take records a complete Delta as applied and returns whether it moved
// the acknowledged revision.
func (d *device) take(frames []*wire.Delta) bool {
	for _, f := range frames {
		for _, u := range f.Upserts {
			d.applied[u.Key] = wire.AppliedResource{Key: u.Key, Digest: u.Digest, Revision: u.Revision}
		}
		for _, k := range f.Deletes {
			delete(d.applied, k)
		}
	}
	target := frames[len(frames)-1].TargetRevision
	if target <= d.acked {
		return false
	}
	d.acked = target
	return true
}

// report is a full report that every applied resource is in effect.
func (d *device) report() *wire.Report {
	d.seq++
	r := &wire.Report{Seq: d.seq, DesiredRevision: d.acked, Full: true, Status: "converged"}
	now := time.Now().UnixNano()
	for _, a := range d.applied {
		r.Resources = append(r.Resources, wire.ResourceReport{
			Key: a.Key, AppliedDigest: a.Digest, AppliedRevision: a.Revision,
			Effective: wire.EffectiveOK, UpdatedAtUnixNano: now,
		})
	}
	d.unacked = append(d.unacked, sentReport{seq: d.seq, revision: d.acked})
	return r
}

// acknowledged confirms the reports up to seq.
func (d *device) acknowledged(seq uint64, at time.Time) {
	var rev uint64
	keep := d.unacked[:0]
	for _, r := range d.unacked {
		if r.seq <= seq {
			rev = max(rev, r.revision)
		} else {
			keep = append(keep, r)
		}
	}
	d.unacked = keep
	if rev > 0 {
		d.log.record(rev, at)
	}
}

// link is one connection's control stream.
type link struct {
	conn *quic.Conn
	str  *quic.Stream
	r    *wire.Reader
	w    *wire.Writer
}

func (l *link) send(m wire.Message) error {
	if err := l.w.Write(m); err != nil {
		return fmt.Errorf("send %s: %w", m.Type(), wire.FromQUICError(err))
	}
	return nil
}

// errEnded is a session the server ended with Reject or GoAway.
var errEnded = errors.New("session ended by the server")

// dial connects to addr and opens a session: Hello (resuming the session
// if the device has one, always with the inventory), Welcome; then Pull
// if the server's desired revision is ahead, and a fresh report if one is
// unacknowledged. The rest of the session (the Delta, Acks, reports)
// happens in serve.
func (d *device) dial(ctx context.Context, tr *quic.Transport, addr net.Addr, timeout time.Duration) (*link, cadence, error) {
	dctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	conn, err := tr.Dial(dctx, addr, d.tls, wire.ClientQUICConfig())
	if err != nil {
		return nil, cadence{}, fmt.Errorf("dial: %w", err)
	}
	l, c, err := d.open(dctx, conn)
	if err != nil {
		conn.CloseWithError(wire.CloseNormal, "")
		return nil, c, err
	}
	return l, c, nil
}

func (d *device) open(ctx context.Context, conn *quic.Conn) (*link, cadence, error) {
	c := cadence{pull: agent.DefaultPullInterval, report: agent.DefaultReportInterval}
	str, err := conn.OpenStream()
	if err != nil {
		return nil, c, err
	}
	l := &link{conn: conn, str: str, r: wire.NewReader(str), w: wire.NewWriter(str)}
	if err := l.send(d.hello()); err != nil {
		return nil, c, err
	}
	if dl, ok := ctx.Deadline(); ok {
		str.SetReadDeadline(dl)
	}
	m, err := l.r.Read()
	if err != nil {
		return nil, c, fmt.Errorf("receive: %w", wire.FromQUICError(err))
	}
	str.SetReadDeadline(time.Time{})
	w, ok := m.(*wire.Welcome)
	if !ok {
		return nil, c, fmt.Errorf("%w: got %s, want Welcome", errEnded, m.Type())
	}
	d.session, d.token = w.SessionID, w.ResumeToken
	if w.PullInterval > 0 {
		c.pull = w.PullInterval
	}
	if w.Minor >= wire.MinorKeepAlive {
		// These devices leave keep-alives to QUIC (wire.KeepAlivePeriod);
		// announce a silence the server will not cut them off for.
		if err := l.send(&wire.Ping{Seq: 1, Interval: benchSilence}); err != nil {
			return nil, c, err
		}
	}
	if w.DesiredRevision > d.acked || d.acked == 0 {
		if err := l.send(d.pull()); err != nil {
			return nil, c, err
		}
	}
	if len(d.unacked) > 0 && d.unacked[len(d.unacked)-1].seq > w.AcceptedReportSeq {
		// Coalesce what is unacknowledged into one report with a new seq.
		if err := l.send(d.report()); err != nil {
			return nil, c, err
		}
	}
	return l, c, nil
}

// cadence is how often a device pulls and reports on its own, as the
// agent does (agent.DefaultPullInterval unless the server's Welcome says
// otherwise, agent.DefaultReportInterval): a report the server did not
// acknowledge is sent again with the next periodic report, and a missed
// change is found by the next periodic pull.
type cadence struct {
	pull, report time.Duration
}

// frameOrErr is what the reader goroutine of serve hands over.
type frameOrErr struct {
	m   wire.Message
	err error
}

// serve runs the session until the connection fails, the server ends the
// session, or ctx ends. A reader goroutine decodes frames; this goroutine
// answers them and runs the pull and report cadences.
func (d *device) serve(ctx context.Context, l *link, c cadence) error {
	stop := context.AfterFunc(ctx, func() { l.conn.CloseWithError(wire.CloseNormal, "") })
	defer stop()
	frames := make(chan frameOrErr)
	done := make(chan struct{})
	defer close(done)
	go func() {
		for {
			m, err := l.r.Read()
			select {
			case frames <- frameOrErr{m, err}:
			case <-done:
				return
			}
			if err != nil {
				return
			}
		}
	}()
	pullTick := time.NewTicker(c.pull)
	defer pullTick.Stop()
	reportTick := time.NewTicker(c.report)
	defer reportTick.Stop()
	var parts []*wire.Delta
	pulling, notified := false, uint64(0)
	for {
		var m wire.Message
		select {
		case f := <-frames:
			if f.err != nil {
				return fmt.Errorf("receive: %w", wire.FromQUICError(f.err))
			}
			m = f.m
		case <-pullTick.C:
			if !pulling {
				if err := l.send(d.pull()); err != nil {
					return err
				}
				pulling = true
			}
			continue
		case <-reportTick.C:
			if err := l.send(d.report()); err != nil {
				return err
			}
			continue
		}
		switch m := m.(type) {
		case *wire.Notify:
			notified = max(notified, m.Revision)
			if m.Revision > d.acked && !pulling {
				if err := l.send(d.pull()); err != nil {
					return err
				}
				pulling = true
			}
		case *wire.Delta:
			parts = append(parts, m)
			if !m.Complete {
				continue
			}
			if err := m.Verify(); err != nil {
				return err
			}
			moved := d.take(parts)
			parts, pulling = nil, false
			if moved {
				d.took.record(d.acked, time.Now())
				// Ack means journaled; the apply itself takes no time
				// here, so the report follows at once.
				if err := l.send(&wire.Ack{Revision: d.acked}); err != nil {
					return err
				}
				if err := l.send(d.report()); err != nil {
					return err
				}
				reportTick.Reset(c.report)
			}
			if notified > d.acked {
				if err := l.send(d.pull()); err != nil {
					return err
				}
				pulling = true
			}
		case *wire.ReportAck:
			d.acknowledged(m.Seq, time.Now())
		case *wire.Reject:
			return fmt.Errorf("%w: Reject %s: %s", errEnded, m.Code, m.Reason)
		case *wire.GoAway:
			return fmt.Errorf("%w: GoAway %s: %s", errEnded, m.Code, m.Reason)
		default:
			return fmt.Errorf("unexpected %s", m.Type())
		}
	}
}

// meteorFleet is the simulated devices and the sockets they share.
type meteorFleet struct {
	devs    []*device
	servers []net.Addr
	trs     []*quic.Transport
	pcs     []net.PacketConn
	timeout time.Duration

	reconnects atomic.Int64
	lastErr    atomic.Value // error: the latest session failure, for logs
}

func (f *meteorFleet) close() {
	for _, tr := range f.trs {
		tr.Close()
	}
	for _, pc := range f.pcs {
		pc.Close()
	}
}

// run keeps device i in session until ctx ends, starting from l (its
// first session), reconnecting after a failure with a backoff of 100 ms
// doubling to 5 s, to its home server first and then to the next ones.
func (f *meteorFleet) run(ctx context.Context, i int, l *link, c cadence) {
	d := f.devs[i]
	tr := f.trs[i%len(f.trs)]
	backoff := 100 * time.Millisecond
	for attempt := 0; ctx.Err() == nil; attempt++ {
		if l == nil {
			var err error
			l, c, err = d.dial(ctx, tr, f.servers[(d.home+attempt)%len(f.servers)], f.timeout)
			if err != nil {
				f.lastErr.Store(fmt.Errorf("%s: %w", d.id, err))
				select {
				case <-ctx.Done():
					return
				case <-time.After(backoff):
				}
				backoff = min(2*backoff, 5*time.Second)
				continue
			}
			backoff = 100 * time.Millisecond
		}
		err := d.serve(ctx, l, c)
		l.conn.CloseWithError(wire.CloseNormal, "")
		l = nil
		if ctx.Err() != nil {
			return
		}
		f.lastErr.Store(fmt.Errorf("%s: %w", d.id, err))
		f.reconnects.Add(1)
		attempt = -1 // the home server first again
	}
}

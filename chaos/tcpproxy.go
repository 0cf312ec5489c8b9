package chaos

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"sync"
	"time"
)

// TCPProfile describes the faults of a TCP link. Loss and corruption have no
// place here (the kernel retransmits and checksums); what a stream sees is
// latency and connections that break, which Partition provides.
type TCPProfile struct {
	// Delay is the one-way latency added to every chunk of bytes.
	Delay time.Duration
	// Jitter varies the latency uniformly within ±Jitter; bytes still
	// arrive in order (a chunk is never delivered before the previous one).
	Jitter time.Duration
}

// Validate reports whether the fields are in range.
func (p TCPProfile) Validate() error {
	if p.Delay < 0 || p.Jitter < 0 {
		return fmt.Errorf("chaos: invalid tcp profile: negative delay %v or jitter %v", p.Delay, p.Jitter)
	}
	return nil
}

// tcpBufferLimit bounds the bytes in flight per direction of a proxied
// connection; a sender beyond it is slowed down, as by a full socket buffer.
const tcpBufferLimit = 1 << 20

// TCPProxy forwards TCP connections to one target, adding latency, and can
// partition the link: while partitioned it resets connections as soon as
// they are accepted (the listening port stays bound, so the proxy's address
// does not change) and it resets every connection already open.
type TCPProxy struct {
	ln     net.Listener
	target string
	name   string
	log    *FaultLog
	o      options
	life   lifecycle

	mu          sync.Mutex
	prof        TCPProfile            // guarded by mu
	rng         *rand.Rand            // guarded by mu
	partitioned bool                  // guarded by mu
	pairs       map[*tcpPair]struct{} // guarded by mu
	wg          sync.WaitGroup        // connection goroutines
}

// tcpPair is one proxied connection: the client's and the target's side.
type tcpPair struct {
	client, server net.Conn
	writers        [2]*delayedWriter // towards server, towards client
	once           sync.Once
}

// NewTCPProxy listens on listen (host:port, port 0 for any) and will forward
// to target once Run is called. seed drives the jitter; log (nil to discard)
// receives every fault.
func NewTCPProxy(listen, target string, p TCPProfile, seed uint64, log *FaultLog, opts ...Option) (*TCPProxy, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return nil, fmt.Errorf("chaos: tcp proxy listen %q: %w", listen, err)
	}
	o := buildOptions(opts)
	name := ln.Addr().String()
	o.logger = o.logger.Named("chaos-tcpproxy").With("listen", name, "target", target)
	return &TCPProxy{
		ln:     ln,
		target: target,
		name:   name,
		log:    log,
		o:      o,
		life:   newLifecycle(),
		prof:   p,
		rng:    rand.New(rand.NewPCG(seed, 0)),
		pairs:  make(map[*tcpPair]struct{}),
	}, nil
}

// Addr returns the address clients connect to.
func (p *TCPProxy) Addr() net.Addr { return p.ln.Addr() }

// SetProfile changes the latency of new and existing connections.
func (p *TCPProxy) SetProfile(tp TCPProfile) error {
	if err := tp.Validate(); err != nil {
		return err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.prof = tp
	return nil
}

// Conns returns the number of connections being proxied.
func (p *TCPProxy) Conns() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.pairs)
}

// Partition, while on, resets new connections on accept and, when turned
// on, resets every open connection.
func (p *TCPProxy) Partition(on bool) {
	p.mu.Lock()
	p.partitioned = on
	var cut []*tcpPair
	if on {
		for pr := range p.pairs {
			cut = append(cut, pr)
		}
	}
	p.log.Record(KindPartition, p.name, p.target, fmt.Sprintf("partition=%t", on))
	p.mu.Unlock()
	for _, pr := range cut {
		p.log.Record(KindCut, pr.client.RemoteAddr().String(), p.target, "connection reset")
		pr.reset()
	}
}

// Run accepts and forwards connections until ctx ends or Close is called,
// then closes every connection and returns once all goroutines exited. It
// returns nil after a requested stop and an error if accepting failed.
func (p *TCPProxy) Run(ctx context.Context) error {
	if err := p.life.begin(); err != nil {
		return err
	}
	defer p.life.end()

	acceptErr := make(chan error, 1)
	var loop sync.WaitGroup
	loop.Go(func() { acceptErr <- p.acceptLoop() })

	var err error
	select {
	case <-ctx.Done():
	case <-p.life.closing:
	case err = <-acceptErr:
		err = fmt.Errorf("chaos: tcp proxy %s: %w", p.name, err)
	}
	p.life.close()
	p.shutdown()
	loop.Wait()
	return err
}

// Close stops the proxy and waits for Run to return.
func (p *TCPProxy) Close() error {
	running, first := p.life.close()
	if running {
		<-p.life.stopped
	} else if first {
		p.shutdown()
	}
	return nil
}

func (p *TCPProxy) shutdown() {
	p.ln.Close()
	p.mu.Lock()
	pairs := make([]*tcpPair, 0, len(p.pairs))
	for pr := range p.pairs {
		pairs = append(pairs, pr)
	}
	p.mu.Unlock()
	for _, pr := range pairs {
		pr.close()
	}
	p.wg.Wait()
}

func (p *TCPProxy) acceptLoop() error {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			select {
			case <-p.life.closing:
				return nil
			default:
			}
			if errors.Is(err, net.ErrClosed) {
				return nil
			}
			return err
		}
		p.mu.Lock()
		refused := p.partitioned
		p.mu.Unlock()
		if refused {
			p.log.Record(KindCut, c.RemoteAddr().String(), p.target, "connection refused")
			resetConn(c)
			continue
		}
		p.wg.Go(func() { p.serve(c) })
	}
}

// serve dials the target for one client and copies both ways until both
// directions ended or the pair is cut.
func (p *TCPProxy) serve(client net.Conn) {
	d := net.Dialer{Timeout: p.o.dialTimeout}
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		select {
		case <-p.life.closing:
			cancel()
		case <-ctx.Done():
		}
	}()
	server, err := d.DialContext(ctx, "tcp", p.target)
	cancel()
	if err != nil {
		p.o.logger.Debug("dial target failed", "client", client.RemoteAddr(), "error", err)
		resetConn(client)
		return
	}
	pr := &tcpPair{client: client, server: server}
	pr.writers[0] = newDelayedWriter(server, tcpBufferLimit, func(error) { pr.close() }, func() { closeWrite(server) })
	pr.writers[1] = newDelayedWriter(client, tcpBufferLimit, func(error) { pr.close() }, func() { closeWrite(client) })
	p.mu.Lock()
	select {
	case <-p.life.closing:
		p.mu.Unlock()
		pr.close()
		return
	default:
	}
	if p.partitioned {
		p.mu.Unlock()
		p.log.Record(KindCut, client.RemoteAddr().String(), p.target, "connection refused")
		pr.reset()
		return
	}
	p.pairs[pr] = struct{}{}
	p.mu.Unlock()

	var dirs sync.WaitGroup
	dirs.Go(func() { p.pipe(pr, pr.writers[0], client, client.RemoteAddr().String(), p.target) })
	dirs.Go(func() { p.pipe(pr, pr.writers[1], server, p.target, client.RemoteAddr().String()) })
	dirs.Wait()
	pr.close()
	p.mu.Lock()
	delete(p.pairs, pr)
	p.mu.Unlock()
}

// pipe copies src to w's stream, half-closing it when src ends.
func (p *TCPProxy) pipe(pr *tcpPair, w *delayedWriter, src net.Conn, from, to string) {
	defer w.stop()
	buf := make([]byte, 32<<10)
	var lastAt time.Time
	for {
		n, err := src.Read(buf)
		if n > 0 {
			now := time.Now()
			at := now.Add(p.latency())
			if at.Before(lastAt) {
				at = lastAt
			}
			lastAt = at
			if d := at.Sub(now); d > 0 {
				p.log.Add(Fault{At: now, Kind: KindDelay, From: from, To: to, Detail: fmt.Sprintf("%d bytes %v", n, d)})
			}
			if werr := w.write(buf[:n], at); werr != nil {
				pr.close()
				return
			}
		}
		if err == io.EOF {
			w.finish()
			return
		}
		if err != nil {
			pr.close()
			return
		}
	}
}

func (p *TCPProxy) latency() time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	d := p.prof.Delay
	if p.prof.Jitter > 0 {
		d += time.Duration(p.rng.Int64N(2*int64(p.prof.Jitter)+1)) - p.prof.Jitter
	}
	return max(d, 0)
}

// close tears the pair down.
func (pr *tcpPair) close() {
	pr.once.Do(func() {
		pr.client.Close()
		pr.server.Close()
		for _, w := range pr.writers {
			if w != nil {
				w.abort()
			}
		}
	})
}

// reset tears the pair down with RSTs, as a broken link would look to both.
func (pr *tcpPair) reset() {
	setLinger0(pr.client)
	setLinger0(pr.server)
	pr.close()
}

func resetConn(c net.Conn) {
	setLinger0(c)
	c.Close()
}

func setLinger0(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
}

func closeWrite(c net.Conn) {
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		_ = cw.CloseWrite()
		return
	}
	c.Close()
}

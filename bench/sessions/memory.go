package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/quic-go/quic-go"

	"github.com/meteor-edge/meteor/bench/internal/benchkit"
	"github.com/meteor-edge/meteor/bench/internal/wiredev"
	"github.com/meteor-edge/meteor/cluster/api"
	"github.com/meteor-edge/meteor/wire"
)

// memoryLevel is part 3's figures with Agents idle agents connected.
type memoryLevel struct {
	Agents int `json:"agents"`
	// Added devices connected in this step (on top of the previous
	// level's), Failed of them never got a session.
	Added  int `json:"added"`
	Failed int `json:"failed"`
	// ConnectSec is the wall time from the first dial of the step to the
	// last Delta; ConnectsPerSec = Added / ConnectSec.
	ConnectSec     float64 `json:"connect_s"`
	ConnectsPerSec float64 `json:"connects_per_s"`
	// ConnectP50ms and ConnectP99ms: per device, dial to Delta received.
	ConnectP50ms float64 `json:"connect_p50_ms"`
	ConnectP99ms float64 `json:"connect_p99_ms"`
	// ServerCPUms is the server's CPU time per connect during the step;
	// RaftEntries the Raft log entries per connect, counted until the log
	// stopped growing.
	ServerCPUms float64 `json:"server_cpu_ms_per_connect"`
	RaftEntries float64 `json:"raft_entries_per_connect"`
	SettleSec   float64 `json:"settle_s"`
	Memory      memory  `json:"memory"`
	// Per-agent figures: (reading - baseline) / Agents, in KiB; Marginal
	// against the previous level instead of the baseline.
	RSSKiB         float64 `json:"rss_kib_per_agent"`
	AnonKiB        float64 `json:"rss_anon_kib_per_agent"`
	HeapKiB        float64 `json:"go_heap_kib_per_agent"`
	MarginalRSSKiB float64 `json:"marginal_rss_kib_per_agent,omitempty"`
	// Elections counts the server's leader elections while connecting
	// (a single voter keeps its leadership; counted all the same); UDP
	// the datagrams dropped by full receive buffers meanwhile.
	Elections int                `json:"leader_elections"`
	UDP       *benchkit.UDPDrops `json:"udp_drops,omitempty"`
}

// memoryResult is part 3.
type memoryResult struct {
	Sockets     int            `json:"client_udp_sockets"`
	Concurrency int            `json:"dials_in_flight"`
	CertSec     float64        `json:"device_certs_issue_s"`
	Baseline    memory         `json:"baseline"`
	Levels      []*memoryLevel `json:"levels"`
	// Listed and ListedConnected are what GET /v1/devices said at the end.
	Listed          int     `json:"devices_listed"`
	ListedConnected int     `json:"devices_listed_connected"`
	ListSec         float64 `json:"devices_list_s"`
}

// fleet is simulated devices and their connections (parts 3 and 4).
type fleet struct {
	// name prefixes the fleet's log lines ("memory", "storm").
	name  string
	devs  []*wiredev.Device
	conns []*quic.Conn
	// sess are the devices' sessions (control streams) on conns.
	sess  []*session
	socks *wiredev.Sockets
	// tlsFor returns device i's TLS configuration; nil means a fresh one
	// without a session cache for every dial.
	tlsFor func(i int) *tls.Config
	// report has each device, once it holds its desired state, report it
	// applied and wait for the report's acknowledgement, as an agent
	// does: the server then holds the device converged, as it holds an
	// idle fleet.
	report bool
}

// newFleet opens sockets client UDP sockets (quic.Transports) for n
// devices to share.
func newFleet(name string, sockets, n int) (*fleet, error) {
	socks, err := wiredev.OpenSockets(sockets)
	if err != nil {
		return nil, err
	}
	return &fleet{name: name, conns: make([]*quic.Conn, n), sess: make([]*session, n), socks: socks}, nil
}

// ports returns the local UDP ports of the fleet's sockets.
func (f *fleet) ports() []int { return f.socks.Ports() }

func (f *fleet) close() { f.socks.Close() }

// runMemory measures part 3 against a server process.
func runMemory(ctx context.Context, cfg *config, g *benchkit.Group, bin string, p *pki, dir string, elections *benchkit.ElectionLog, out, log io.Writer) (*memoryResult, error) {
	res := &memoryResult{Sockets: cfg.sockets, Concurrency: cfg.concurrency}
	maxAgents := slices.Max(cfg.agents)
	fmt.Fprintf(log, "memory: issuing %d device certificates\n", maxAgents)
	ids := make([]string, maxAgents)
	for i := range ids {
		ids[i] = fmt.Sprintf("idle-%05d", i)
	}
	t0 := time.Now()
	certs, err := p.issueDevices(ids)
	if err != nil {
		return nil, err
	}
	res.CertSec = time.Since(t0).Seconds()

	fmt.Fprintln(log, "memory: starting meteor server --dev")
	// GODEBUG=gctrace=1 has the server's log show its live heap.
	opts := benchkit.MeteorOptions{
		Bin: bin, Dir: dir, IDs: []string{serverID}, Dev: true, Regions: []string{"bench"},
		Agents: true, PKI: p.dir, Env: []string{"GODEBUG=gctrace=1"},
	}
	if cfg.profiles != "" {
		opts.ExtraArgs = func(int) []string { return []string{"--enable-debug"} }
	}
	mc, err := benchkit.StartMeteor(ctx, g, opts)
	if err != nil {
		return nil, err
	}
	defer elections.Record(context.WithoutCancel(ctx), "memory (one dev server)", mc)
	sp := mc.Servers[0]
	addr, err := net.ResolveUDPAddr("udp", sp.AgentAddr)
	if err != nil {
		return nil, err
	}
	f, err := newFleetIntent(cfg.resources, cfg.bodySize)
	if err != nil {
		return nil, err
	}
	if _, err := putIntent(ctx, sp.API, f); err != nil {
		return nil, err
	}
	fl, err := newFleet("memory", cfg.sockets, maxAgents)
	if err != nil {
		return nil, err
	}
	fl.report = true
	defer fl.close()
	for i, id := range ids {
		fl.devs = append(fl.devs, wiredev.NewDevice(id, certs[i], fleetLabels))
	}

	if _, err := mc.Rest(ctx, cfg.settle); err != nil {
		return nil, err
	}
	if res.Baseline, err = readMemory(sp.Proc); err != nil {
		return nil, err
	}
	memoryHeader(out, res)
	memoryLine(out, &memoryLevel{Memory: res.Baseline}, res.Baseline)

	connected := 0
	var prev *memoryLevel
	for _, n := range cfg.agents {
		lvl := &memoryLevel{Agents: n, Added: n - connected}
		h0, err := sp.API.Health(ctx)
		if err != nil {
			return nil, err
		}
		cpu0, err := sp.Proc.CPUTime()
		if err != nil {
			return nil, err
		}
		term0, err := mc.RaftTerm(ctx)
		if err != nil {
			return nil, err
		}
		udp := benchkit.WatchUDP(mc.AgentPorts(), fl.ports())
		fmt.Fprintf(log, "memory: connecting devices %d..%d\n", connected, n-1)
		start := time.Now()
		times, failed := fl.connect(ctx, cfg, addr, p.pool, connected, n, log)
		if len(failed) > 0 {
			fmt.Fprintf(log, "memory: retrying %d devices\n", len(failed))
			var more []time.Duration
			more, failed = fl.connectAll(ctx, cfg, addr, p.pool, failed, log)
			times = append(times, more...)
		}
		lvl.ConnectSec = time.Since(start).Seconds()
		cpu1, err := sp.Proc.CPUTime()
		if err != nil {
			return nil, err
		}
		lvl.Failed = len(failed)
		ok := lvl.Added - lvl.Failed
		slices.Sort(times)
		lvl.ConnectP50ms, lvl.ConnectP99ms = benchkit.MS(benchkit.Percentile(times, 50)), benchkit.MS(benchkit.Percentile(times, 99))
		if ok > 0 {
			lvl.ConnectsPerSec = float64(ok) / lvl.ConnectSec
			lvl.ServerCPUms = benchkit.MS(cpu1-cpu0) / float64(ok)
		}
		connected = n
		took, err := mc.Rest(ctx, cfg.settle)
		if err != nil {
			return nil, err
		}
		lvl.SettleSec = took.Seconds()
		drops := udp.Drops()
		lvl.UDP = &drops
		if lvl.Elections, err = mc.ElectionsSince(ctx, term0); err != nil {
			return nil, err
		}
		h1, err := sp.API.Health(ctx)
		if err != nil {
			return nil, err
		}
		if ok > 0 {
			lvl.RaftEntries = float64(h1.LastIndex-h0.LastIndex) / float64(ok)
		}
		if lvl.Memory, err = readMemory(sp.Proc); err != nil {
			return nil, err
		}
		live := n - countFailed(fl, n)
		b, m := res.Baseline, lvl.Memory
		lvl.RSSKiB = perAgentKiB(b.RSSKiB*1024, m.RSSKiB*1024, live)
		lvl.AnonKiB = perAgentKiB(b.AnonKiB*1024, m.AnonKiB*1024, live)
		lvl.HeapKiB = perAgentKiB(int64(b.HeapLiveMB)<<20, int64(m.HeapLiveMB)<<20, live)
		if prev != nil {
			lvl.MarginalRSSKiB = perAgentKiB(prev.Memory.RSSKiB*1024, m.RSSKiB*1024, live-(prev.Agents-countFailed(fl, prev.Agents)))
		}
		memoryLine(out, lvl, res.Baseline)
		if cfg.profiles != "" {
			// After the reading: a heap profile collects first.
			if err := saveProfiles(ctx, sp.API, cfg.profiles, n); err != nil {
				return nil, err
			}
		}
		res.Levels = append(res.Levels, lvl)
		prev = lvl
	}

	t0 = time.Now()
	lctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	list, err := sp.API.ListDevices(lctx, api.ReadOptions{Stale: true})
	cancel()
	if err != nil {
		fmt.Fprintf(log, "memory: list devices: %v\n", err)
	} else {
		res.ListSec = time.Since(t0).Seconds()
		res.Listed = len(list.Devices)
		for _, d := range list.Devices {
			if d.Connected {
				res.ListedConnected++
			}
		}
	}
	return res, nil
}

func countFailed(fl *fleet, n int) int {
	failed := 0
	for _, c := range fl.conns[:n] {
		if c == nil {
			failed++
		}
	}
	return failed
}

// connect opens sessions for devices [from, to); see connectAll.
func (fl *fleet) connect(ctx context.Context, cfg *config, addr net.Addr, pool *x509.CertPool, from, to int, log io.Writer) ([]time.Duration, []int) {
	idx := make([]int, 0, to-from)
	for i := from; i < to; i++ {
		idx = append(idx, i)
	}
	return fl.connectAll(ctx, cfg, addr, pool, idx, log)
}

// connectAll opens sessions for the devices idx with cfg.concurrency dials
// in flight, spread over the fleet's sockets. It returns each success's
// time from dial to Delta, and the devices that failed.
func (fl *fleet) connectAll(ctx context.Context, cfg *config, addr net.Addr, pool *x509.CertPool, idx []int, log io.Writer) ([]time.Duration, []int) {
	work := make(chan int)
	var mu sync.Mutex
	var times []time.Duration
	var failed []int
	var errs []error
	var wg sync.WaitGroup
	for range cfg.concurrency {
		wg.Go(func() {
			for i := range work {
				d, err := fl.open(ctx, cfg, addr, pool, i)
				mu.Lock()
				if err != nil {
					failed = append(failed, i)
					if len(errs) < 3 {
						errs = append(errs, fmt.Errorf("%s: %w", fl.devs[i].ID, err))
					}
				} else {
					times = append(times, d)
				}
				mu.Unlock()
			}
		})
	}
	for _, i := range idx {
		if ctx.Err() != nil {
			break
		}
		work <- i
	}
	close(work)
	wg.Wait()
	if len(errs) > 0 {
		fmt.Fprintf(log, "%s: %d devices failed, e.g. %v\n", fl.name, len(failed), errors.Join(errs...))
	}
	return times, failed
}

// open gives device i a session: Hello with its (empty) inventory,
// Welcome, Pull, the whole desired state, Ack, and with fleet.report a
// full report acknowledged; the connection then stays idle (keep-alives
// only).
func (fl *fleet) open(ctx context.Context, cfg *config, addr net.Addr, pool *x509.CertPool, i int) (time.Duration, error) {
	d := fl.devs[i]
	tr := fl.socks.Transport(i)
	tlsConf := d.TLSConfig(pool, nil)
	if fl.tlsFor != nil {
		tlsConf = fl.tlsFor(i)
	}
	start := time.Now()
	dctx, cancel := context.WithTimeout(ctx, cfg.timeout)
	conn, err := tr.DialEarly(dctx, addr, tlsConf, deviceQUIC())
	cancel()
	if err != nil {
		return 0, fmt.Errorf("dial: %w", err)
	}
	o, err := openSession(ctx, d, conn, openOpts{inventory: true, start: start, timeout: cfg.timeout})
	if err != nil {
		conn.CloseWithError(wire.CloseNormal, "")
		return 0, err
	}
	if n := accountDelta(o.delta).Upserts; n != cfg.resources {
		conn.CloseWithError(wire.CloseNormal, "")
		return 0, fmt.Errorf("first Delta has %d upserts, want %d", n, cfg.resources)
	}
	if fl.report {
		rep := d.Report()
		if err := o.s.send(rep); err != nil {
			conn.CloseWithError(wire.CloseNormal, "")
			return 0, err
		}
		if err := o.s.waitReportAck(rep.Seq); err != nil {
			conn.CloseWithError(wire.CloseNormal, "")
			return 0, err
		}
	}
	fl.conns[i], fl.sess[i] = o.s.conn, o.s
	return o.deltaAt, nil
}

// saveProfiles writes the server's heap profile (after a collection) and
// its goroutines at n sessions into dir, for `go tool pprof`.
func saveProfiles(ctx context.Context, cl *api.Client, dir string, n int) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for _, p := range []struct {
		name string
		q    url.Values
		ext  string // pb.gz: for go tool pprof; txt: the text form, ending in runtime.MemStats
	}{{"heap", url.Values{"gc": {"1"}}, "pb.gz"}, {"goroutine", nil, "pb.gz"}, {"heap", url.Values{"debug": {"1"}}, "txt"}} {
		f, err := os.Create(filepath.Join(dir, fmt.Sprintf("%s-%d.%s", p.name, n, p.ext)))
		if err != nil {
			return err
		}
		_, err = cl.Profile(ctx, p.name, p.q, f)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return fmt.Errorf("%s profile at %d sessions: %w", p.name, n, err)
		}
	}
	return nil
}

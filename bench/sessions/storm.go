package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/quic-go/quic-go"

	"github.com/meteor-edge/meteor/bench/internal/benchkit"
	"github.com/meteor-edge/meteor/bench/internal/wiredev"
	"github.com/meteor-edge/meteor/cluster/api"
	"github.com/meteor-edge/meteor/wire"
)

// The ways the storm's devices reconnect (-storm-modes).
const (
	storm0RTT = "0rtt"
	stormFull = "full"
)

// When the storm's devices notice that their server is gone
// (-storm-detect).
const (
	// detectKill: every device gives up its connection at the kill, the
	// worst case, all at once.
	detectKill = "kill"
	// detectIdle: each device notices as agents of protocol 1.2 did,
	// when its QUIC connection's idle timeout (wire.LegacyIdleTimeout,
	// deviceQUIC) expires.
	detectIdle = "idle"
)

func stormModeName(key string) string {
	if key == storm0RTT {
		return "0-RTT resumption"
	}
	return "full handshake"
}

// stormMode is part 4's figures for one way of reconnecting. Times are
// from the SIGKILL of the devices' server.
type stormMode struct {
	Key    string `json:"key"`
	Mode   string `json:"mode"`
	Agents int    `json:"agents"`
	// Victim is the server the devices were on (a follower), Survivors
	// the two they move to, Leader the Raft leader at the kill and
	// LeaderAfter once the log settled; Elections counts the elections
	// held from the kill until then, won or not (the storm can starve the
	// leader of CPU until it misses its lease and steps down).
	Victim      string   `json:"victim"`
	Survivors   []string `json:"survivors"`
	Leader      string   `json:"leader"`
	LeaderAfter string   `json:"leader_after"`
	Elections   int      `json:"elections"`
	// ConnectSec is how long connecting every device to the victim took
	// (not part of the storm); InitialFailed devices never connected and
	// take no part. WithTicket devices held a session ticket at the kill.
	ConnectSec    float64 `json:"initial_connect_s"`
	InitialFailed int     `json:"initial_failed"`
	WithTicket    int     `json:"devices_with_ticket"`
	// DetectP50 and DetectMax: when devices gave up their old connection.
	DetectP50ms float64 `json:"detect_p50_ms"`
	DetectMaxms float64 `json:"detect_max_ms"`
	// Time until 50%, 99% and 100% of the devices had their first Delta
	// (resumed), and the Welcome percentiles. ResumedAllms is 0 if some
	// never did.
	Resumed50ms  float64 `json:"resumed_p50_ms"`
	Resumed99ms  float64 `json:"resumed_p99_ms"`
	ResumedAllms float64 `json:"resumed_all_ms"`
	Welcome50ms  float64 `json:"welcome_p50_ms"`
	Welcome99ms  float64 `json:"welcome_p99_ms"`
	// Opened devices got a Welcome and a first Delta; of them Resumed got
	// their old session back, NewSession a new one, and Resyncs a first
	// Delta with resources in it (they are converged, so a resumed session
	// with its inventory needs none). NotOpened never got there in time.
	Opened     int `json:"opened"`
	Resumed    int `json:"resumed_same_session"`
	NewSession int `json:"new_session"`
	Resyncs    int `json:"resyncs"`
	NotOpened  int `json:"not_opened"`
	// Attempts counts connection attempts; Retries those after a failed
	// one; DialFailures attempts whose handshake failed or timed out,
	// OpenFailures those connected but without a Welcome and Delta.
	Attempts       int `json:"attempts"`
	Retries        int `json:"retries"`
	DialFailures   int `json:"dial_failures"`
	OpenFailures   int `json:"open_failures"`
	TicketsDropped int `json:"tickets_dropped"`
	// ServerUDPDrops and ClientUDPDrops count the datagrams the kernel
	// dropped (full receive buffers) on the survivors' agent sockets and
	// on the devices' sockets, from the kill until the last device
	// resumed; -1 if unknown.
	ServerUDPDrops int64 `json:"server_udp_drops"`
	ClientUDPDrops int64 `json:"client_udp_drops"`
	// Used0RTT devices had their early data accepted, TLSResumed resumed
	// TLS, Rejected0RTT had their early data refused.
	Used0RTT     int            `json:"used_0rtt"`
	TLSResumed   int            `json:"tls_resumed"`
	Rejected0RTT int            `json:"rejected_0rtt"`
	PerServer    map[string]int `json:"resumed_per_server"`
	// CPU seconds: of the two survivors together from the kill until
	// the last device resumed (or gave up), and until the Raft log had
	// settled (every session and Ack committed); of this process (the
	// devices) until the last resumed.
	ServerCPUs        float64 `json:"survivors_cpu_s"`
	ServerCPUSettleds float64 `json:"survivors_cpu_settled_s"`
	// SettledSec is the time from the kill until the log had been quiet
	// for stormQuiet (included).
	SettledSec  float64 `json:"settled_s"`
	SettleError string  `json:"settle_error,omitempty"`
	ClientCPUs  float64 `json:"client_cpu_s"`
	RaftEntries uint64  `json:"raft_entries"`
	// What the cluster records (GET /v1/devices, once the log settled)
	// of the devices, all of which resumed on a survivor: connected to
	// that survivor, connected to the other one (where an attempt failed),
	// disconnected from a survivor, or still on the dead server.
	// RecordsSec is the time from the kill until the cluster recorded
	// every device as connected to a survivor, 0 if it had not within
	// stormRecordsWait after the log settled; the counts are the last
	// reading.
	RecordedOnSurvivor   int     `json:"recorded_on_survivor"`
	RecordedElsewhere    int     `json:"recorded_on_other_survivor"`
	RecordedDisconnected int     `json:"recorded_disconnected"`
	RecordedOnVictim     int     `json:"recorded_on_victim"`
	RecordsSec           float64 `json:"records_correct_s"`
	// ClosedAfter devices had their connection closed after they resumed
	// (read at each reading of the records, until the last),
	// ClosedReasons a few of the reasons; the record figures are of the
	// others.
	ClosedAfter   int      `json:"closed_after_resuming"`
	ClosedReasons []string `json:"closed_reasons,omitempty"`
	// WrongRecords are a few of the wrong records at the last reading,
	// each with its device's QUIC RTT estimate.
	WrongRecords []string `json:"wrong_records,omitempty"`
	// After the last reading, every device whose record was still wrong
	// and whose connection was open sent a keep-alive as an agent's reset
	// probe does (a Ping padded to draw a stateless reset, asking for a
	// Pong): ProbeAnswered got its Pong (its server holds the session,
	// so the record is wrong), ProbeClosed had its connection closed
	// (its server no longer holds the session: the record is right, and
	// only the device had not noticed), ProbeSilent neither within
	// stormProbeWait. ProbeResults are a few of the outcomes.
	ProbeAnswered int      `json:"probe_answered"`
	ProbeClosed   int      `json:"probe_closed"`
	ProbeSilent   int      `json:"probe_silent"`
	ProbeResults  []string `json:"probe_results,omitempty"`
	// Errors are a few of the last failures of devices that never
	// resumed, FailedAttempts a few first failures of any device.
	Errors         []string `json:"errors,omitempty"`
	FailedAttempts []string `json:"failed_attempts,omitempty"`
}

// stormResult is part 4.
type stormResult struct {
	Agents  int          `json:"agents"`
	Detect  string       `json:"detect"`
	Sockets int          `json:"client_udp_sockets"`
	Modes   []*stormMode `json:"modes"`
}

// mode returns the result of the mode with key, or nil.
func (r *stormResult) mode(key string) *stormMode {
	for _, m := range r.Modes {
		if m.Key == key {
			return m
		}
	}
	return nil
}

// stormServers is the size of the storm's cluster.
const stormServers = 3

// runStorm measures part 4: for each mode, a fresh three-server cluster,
// every device on one follower, SIGKILL, and the storm onto the other
// two.
func runStorm(ctx context.Context, cfg *config, bin string, p *pki, dir string, elections *benchkit.ElectionLog, out, log io.Writer) (*stormResult, error) {
	res := &stormResult{Agents: cfg.stormAgents, Detect: cfg.stormDetect, Sockets: cfg.stormSockets}
	ids := make([]string, cfg.stormAgents)
	for i := range ids {
		ids[i] = fmt.Sprintf("storm-%05d", i)
	}
	fmt.Fprintf(log, "storm: issuing %d device certificates\n", len(ids))
	certs, err := p.issueDevices(ids)
	if err != nil {
		return nil, err
	}
	stormHeader(out, res)
	for mi, key := range cfg.stormModes {
		m, err := runStormMode(ctx, cfg, bin, p, filepath.Join(dir, "storm-"+key), key, ids, certs, uint64(mi), elections, log)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", stormModeName(key), err)
		}
		stormLine(out, m)
		res.Modes = append(res.Modes, m)
	}
	return res, nil
}

// runStormMode runs one mode on a fresh cluster in dir: the devices
// connect to a follower, which is then killed; see stormMode.storm.
func runStormMode(ctx context.Context, cfg *config, bin string, p *pki, dir, key string, ids []string, certs []tls.Certificate, seed uint64, elections *benchkit.ElectionLog, log io.Writer) (*stormMode, error) {
	m := &stormMode{Key: key, Mode: stormModeName(key), Agents: len(ids), PerServer: map[string]int{}}
	g := &benchkit.Group{}
	defer g.StopAll(3 * time.Second)
	fmt.Fprintf(log, "storm: %s: starting a %d-server cluster\n", m.Mode, stormServers)
	// Every server has its own certificate and the shared cluster secret,
	// so that session tickets and resume tokens of one are good on the
	// others.
	c, err := benchkit.StartMeteor(ctx, g, benchkit.MeteorOptions{
		Bin: bin, Dir: dir, IDs: benchkit.MeteorIDs("storm", stormServers), Regions: []string{"bench"},
		Agents: true, PKI: p.dir,
		// Profiling endpoints, idle unless asked (-keep a run and fetch
		// /debug/pprof/profile from a survivor during the storm).
		ExtraArgs: func(int) []string { return []string{"--enable-debug"} },
	})
	if err != nil {
		return nil, err
	}
	// Counted before the servers stop (the deferred StopAll runs after).
	defer elections.Record(context.WithoutCancel(ctx), "storm "+key, c)
	li, err := c.WaitLeader(ctx)
	if err != nil {
		return nil, err
	}
	// The devices' server is a follower, so the cluster keeps its leader.
	victim := (li + 1) % stormServers
	var survivors []int
	for i := range stormServers {
		if i != victim {
			survivors = append(survivors, i)
		}
	}
	m.Victim, m.Leader = c.Servers[victim].ID, c.Servers[li].ID
	for _, i := range survivors {
		m.Survivors = append(m.Survivors, c.Servers[i].ID)
	}
	if err := putFleetIntent(ctx, cfg, c, li, victim); err != nil {
		return nil, err
	}

	fl, live, err := connectStormFleet(ctx, cfg, c.Servers[victim].AgentAddr, p, key, ids, certs, seed, m, log)
	if err != nil {
		return nil, err
	}
	defer fl.close()
	index0, err := c.Settle(ctx, time.Second, 2*time.Minute)
	if err != nil {
		return nil, err
	}

	if err := m.storm(ctx, cfg, c, fl, live, victim, survivors, index0, log); err != nil {
		return nil, err
	}
	return m, nil
}

// putFleetIntent writes the devices' intent through the leader li and
// waits until server on has it: a follower answers Pulls from its own
// state, and the first devices would otherwise converge on nothing.
func putFleetIntent(ctx context.Context, cfg *config, c *benchkit.MeteorCluster, li, on int) error {
	f, err := newFleetIntent(cfg.resources, cfg.bodySize)
	if err != nil {
		return err
	}
	rev, err := putIntent(ctx, c.Servers[li].API, f)
	if err != nil {
		return err
	}
	return c.WaitRevision(ctx, rev, on)
}

// storm kills the victim and lets the live devices reconnect to the
// survivors, then waits for the Raft log to settle, and records the
// figures in m. index0 is the log's last index before the kill.
func (m *stormMode) storm(ctx context.Context, cfg *config, c *benchkit.MeteorCluster, fl *fleet, live []*stormDev, victim int, survivors []int, index0 uint64, log io.Writer) error {
	term0, err := c.RaftTerm(ctx)
	if err != nil {
		return err
	}
	targets, err := stormTargets(c, victim, survivors)
	if err != nil {
		return err
	}
	sctx, cancel := context.WithTimeout(ctx, cfg.stormTimeout)
	defer cancel()
	cpu0, err := c.CPUTime(survivors...)
	if err != nil {
		return err
	}
	self0, err := benchkit.CPUTime("self")
	if err != nil {
		return err
	}
	serverPorts, clientPorts := c.AgentPorts(survivors...), fl.ports()
	drops0, dropsErr := benchkit.ReadUDPDrops(append(serverPorts, clientPorts...))
	fmt.Fprintf(log, "storm: %s: SIGKILL %s, %d devices reconnect (detect: %s)\n", m.Mode, m.Victim, len(live), cfg.stormDetect)
	t0 := time.Now()
	if err := c.Kill(victim); err != nil {
		return fmt.Errorf("kill %s: %w", m.Victim, err)
	}
	outcomes := make([]stormOutcome, len(live))
	var opened atomic.Int64
	var wg sync.WaitGroup
	for i, sd := range live {
		wg.Go(func() {
			outcomes[i] = sd.storm(sctx, t0, cfg.stormDetect, targets[i%len(targets)])
			if outcomes[i].ok {
				opened.Add(1)
			}
		})
	}
	progressDone := make(chan struct{})
	var progress sync.WaitGroup // log is not safe for concurrent use: the line below waits for the last progress line
	progress.Go(func() {
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		for {
			select {
			case <-progressDone:
				return
			case <-tick.C:
				fmt.Fprintf(log, "storm: %s: %.0f s, %d of %d resumed\n", m.Mode, time.Since(t0).Seconds(), opened.Load(), len(live))
			}
		}
	})
	wg.Wait()
	close(progressDone)
	progress.Wait()
	cpu1, err1 := c.CPUTime(survivors...)
	self1, err2 := benchkit.CPUTime("self")
	if err := firstErr(err1, err2); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if drops1, err := benchkit.ReadUDPDrops(append(serverPorts, clientPorts...)); err == nil && dropsErr == nil {
		m.ServerUDPDrops, m.ClientUDPDrops = benchkit.SumDrops(drops0, drops1, serverPorts), benchkit.SumDrops(drops0, drops1, clientPorts)
	} else {
		m.ServerUDPDrops, m.ClientUDPDrops = -1, -1
	}
	m.ServerCPUs = (cpu1 - cpu0).Seconds()
	m.ClientCPUs = (self1 - self0).Seconds()
	// Servers retry failed session records with a backoff of up to 2 s
	// (cluster/session.go, retryRecord): a quieter log than that.
	index1, err := c.Settle(ctx, stormQuiet, 2*time.Minute)
	if err != nil {
		if ctx.Err() != nil {
			return err
		}
		// The storm's figures stand; the settled ones are then up to now.
		fmt.Fprintf(log, "storm: %s: %v\n", m.Mode, err)
		m.SettleError = err.Error()
		if top, ierr := c.IndexIfSteady(ctx); ierr == nil {
			index1 = top
		} else {
			index1 = index0
		}
	}
	m.SettledSec = time.Since(t0).Seconds()
	cpu2, err := c.CPUTime(survivors...)
	if err != nil {
		return err
	}
	m.ServerCPUSettleds = (cpu2 - cpu0).Seconds()
	m.RaftEntries = index1 - index0
	term1, err := c.RaftTerm(ctx)
	if err != nil {
		return err
	}
	m.Elections = benchkit.Elections(term0, term1)
	if li, err := c.Leader(ctx); err == nil {
		m.LeaderAfter = c.Servers[li].ID
	}
	// Devices do not read after their first Delta: a connection the
	// server closed since (e.g. a 0-RTT connection whose handshake never
	// completed, or a session the server found silent) leaves them
	// unconnected, as an agent would notice and reconnect. Only devices
	// still connected are checked, at every reading (checkRecords).
	resumed := make([]resumedDev, 0, len(live))
	for i, sd := range live {
		if outcomes[i].ok {
			resumed = append(resumed, resumedDev{sd, outcomes[i].server})
		}
	}
	m.checkRecords(ctx, c, t0, resumed, log)
	summarizeStorm(m, outcomes)
	fmt.Fprintf(log, "storm: %s: %d of %d resumed, last at %.2f s\n", m.Mode, m.Opened, len(live), m.ResumedAllms/1000)
	return nil
}

// connectStormFleet connects every device to the victim's agent address,
// as the mode has it (0-RTT devices keep a session cache and wait for
// their ticket), and returns the fleet and the devices that connected.
// It records the connect time, failures and tickets in m.
func connectStormFleet(ctx context.Context, cfg *config, victimAddr string, p *pki, key string, ids []string, certs []tls.Certificate, seed uint64, m *stormMode, log io.Writer) (fl *fleet, live []*stormDev, err error) {
	if fl, err = newFleet("storm", cfg.stormSockets, len(ids)); err != nil {
		return nil, nil, err
	}
	defer func() {
		if err != nil {
			fl.close()
			fl, live = nil, nil
		}
	}()
	devs := make([]*stormDev, len(ids))
	for i, id := range ids {
		d := wiredev.NewDevice(id, certs[i], fleetLabels)
		fl.devs = append(fl.devs, d)
		sd := &stormDev{d: d, tr: fl.socks.Transport(i), pool: p.pool, rng: rand.New(rand.NewPCG(seed, uint64(i)))}
		if key == storm0RTT {
			sd.cache = newTicketCache()
			sd.tlsConf = d.TLSConfig(p.pool, sd.cache)
		}
		devs[i] = sd
	}
	if key == storm0RTT {
		fl.tlsFor = func(i int) *tls.Config { return devs[i].tlsConf }
	}
	addr, err := net.ResolveUDPAddr("udp", victimAddr)
	if err != nil {
		return nil, nil, err
	}
	fmt.Fprintf(log, "storm: %s: connecting %d devices to %s\n", m.Mode, len(ids), m.Victim)
	start := time.Now()
	_, failed := fl.connect(ctx, cfg, addr, p.pool, 0, len(ids), log)
	if len(failed) > 0 {
		fmt.Fprintf(log, "storm: retrying %d devices\n", len(failed))
		_, failed = fl.connectAll(ctx, cfg, addr, p.pool, failed, log)
	}
	m.ConnectSec = time.Since(start).Seconds()
	m.InitialFailed = len(failed)
	if err := ctx.Err(); err != nil {
		return nil, nil, err
	}
	// Tickets follow the handshake at once; give stragglers a few seconds
	// in all, not each.
	ticketDeadline := time.Now().Add(5 * time.Second)
	for i, sd := range devs {
		if fl.conns[i] == nil {
			continue
		}
		sd.conn, sd.sess = fl.conns[i], fl.sess[i]
		if sd.cache != nil && waitTicket(sd.cache, 0, max(time.Until(ticketDeadline), time.Millisecond)) {
			m.WithTicket++
		}
		live = append(live, sd)
	}
	if len(live) == 0 {
		return nil, nil, fmt.Errorf("no device connected to %s", m.Victim)
	}
	return fl, live, nil
}

// stormTargets returns, for each survivor, the order in which the devices
// that prefer it try the servers: that survivor, the other (equal RTTs on
// loopback, so half the devices prefer each), then the dead server.
func stormTargets(c *benchkit.MeteorCluster, victim int, survivors []int) ([][]stormTarget, error) {
	targets := make([][]stormTarget, len(survivors))
	for k := range survivors {
		for _, i := range append([]int{survivors[k], survivors[1-k]}, victim) {
			addr, err := net.ResolveUDPAddr("udp", c.Servers[i].AgentAddr)
			if err != nil {
				return nil, err
			}
			targets[k] = append(targets[k], stormTarget{id: c.Servers[i].ID, addr: addr})
		}
	}
	return targets, nil
}

// summarizeStorm fills m's counts and percentiles from the outcomes.
func summarizeStorm(m *stormMode, outcomes []stormOutcome) {
	var detect, welcome, delta []time.Duration
	for _, o := range outcomes {
		detect = append(detect, o.detected)
		m.Attempts += o.attempts
		m.Retries += max(o.attempts-1, 0)
		m.DialFailures += o.dialFailures
		m.OpenFailures += o.openFailures
		m.TicketsDropped += o.ticketsDropped
		if o.firstErr != nil && len(m.FailedAttempts) < 5 {
			m.FailedAttempts = append(m.FailedAttempts, o.firstErr.Error())
		}
		if !o.ok {
			m.NotOpened++
			if o.err != nil && len(m.Errors) < 5 {
				m.Errors = append(m.Errors, o.err.Error())
			}
			continue
		}
		m.Opened++
		welcome = append(welcome, o.welcome)
		delta = append(delta, o.delta)
		m.PerServer[o.server]++
		if o.resumed {
			m.Resumed++
		} else {
			m.NewSession++
		}
		if o.resync {
			m.Resyncs++
		}
		if o.used0RTT {
			m.Used0RTT++
		}
		if o.tlsResumed {
			m.TLSResumed++
		}
		if o.rejected0RTT {
			m.Rejected0RTT++
		}
	}
	for _, s := range [][]time.Duration{detect, welcome, delta} {
		slices.Sort(s)
	}
	// Percentiles are of all the devices that took part: one that never
	// resumed counts as later than every one that did.
	n := len(outcomes)
	at := func(sorted []time.Duration, p float64) float64 {
		rank := int(math.Ceil(p / 100 * float64(n)))
		rank = min(max(rank, 1), n)
		if rank > len(sorted) {
			return 0
		}
		return benchkit.MS(sorted[rank-1])
	}
	m.DetectP50ms, m.DetectMaxms = benchkit.MS(benchkit.Percentile(detect, 50)), benchkit.MS(benchkit.Percentile(detect, 100))
	m.Resumed50ms, m.Resumed99ms, m.ResumedAllms = at(delta, 50), at(delta, 99), at(delta, 100)
	m.Welcome50ms, m.Welcome99ms = at(welcome, 50), at(welcome, 99)
}

func firstErr(errs ...error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// How long the log must be quiet before the storm counts as settled, and
// how long, after that, the records of the devices may take to name the
// servers the devices are on.
const (
	stormQuiet       = 3 * time.Second
	stormRecordsWait = time.Minute
	stormProbeWait   = 10 * time.Second
)

// resumedDev is a device that resumed on server.
type resumedDev struct {
	sd     *stormDev
	server string
}

// checkRecords reads what the cluster records of the devices until every
// one still connected is recorded as connected to the server it resumed
// on, at most stormRecordsWait, and fills m's record figures. Before each
// reading it leaves out the devices whose connection closed since the last
// (ClosedAfter): the record of a session that ended is right to say so.
func (m *stormMode) checkRecords(ctx context.Context, c *benchkit.MeteorCluster, t0 time.Time, resumed []resumedDev, log io.Writer) {
	deadline := time.Now().Add(stormRecordsWait)
	on := make(map[string]string, len(resumed)) // device ID → the server it resumed on
	devs := make(map[string]*stormDev, len(resumed))
	for _, r := range resumed {
		on[r.sd.d.ID] = r.server
		devs[r.sd.d.ID] = r.sd
	}
	var wrong []wrongRecord // as the last reading found them
	for {
		for _, r := range resumed {
			if _, ok := on[r.sd.d.ID]; !ok {
				continue
			}
			if err := context.Cause(r.sd.conn.Context()); err != nil {
				delete(on, r.sd.d.ID)
				m.ClosedAfter++
				if len(m.ClosedReasons) < 5 {
					m.ClosedReasons = append(m.ClosedReasons, fmt.Sprintf("%s on %s: %v", r.sd.d.ID, r.server, err))
				}
			}
		}
		li, err := c.Leader(ctx)
		if err == nil {
			var rec recordCounts
			if rec, err = recordedServers(ctx, c.Servers[li], m.Victim, on); err == nil {
				m.RecordedOnSurvivor, m.RecordedElsewhere, m.RecordedDisconnected, m.RecordedOnVictim = rec.right, rec.elsewhere, rec.disconnected, rec.dead
				wrong = rec.wrong
			}
		}
		switch {
		case err != nil:
			fmt.Fprintf(log, "storm: %s: records: %v\n", m.Mode, err)
		case m.RecordedOnSurvivor == len(on):
			m.RecordsSec = time.Since(t0).Seconds()
			return
		}
		if time.Now().After(deadline) {
			m.probeWrong(ctx, devs, wrong, log)
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Second):
		}
	}
}

// recordedServers counts, of the devices in on (device ID to the server
// it resumed on), those the cluster records as connected to that server,
// as connected to another survivor, as disconnected from one, and as
// still on victim, and lists those not recorded as connected to their
// server.
func recordedServers(ctx context.Context, sp *benchkit.MeteorServer, victim string, on map[string]string) (recordCounts, error) {
	lctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	list, err := sp.API.ListDevices(lctx, api.ReadOptions{})
	if err != nil {
		return recordCounts{}, err
	}
	var c recordCounts
	for _, d := range list.Devices {
		srv, ours := on[d.ID]
		switch {
		case !ours:
		case d.Server == victim:
			c.dead++
		case !d.Connected:
			c.disconnected++
		case d.Server == srv:
			c.right++
		default:
			c.elsewhere++
		}
		if ours && (d.Server != srv || !d.Connected) {
			c.wrong = append(c.wrong, wrongRecord{device: d.ID, says: fmt.Sprintf("%s resumed on %s, recorded on %s (connected %v)", d.ID, srv, d.Server, d.Connected)})
		}
	}
	return c, nil
}

// recordCounts is what recordedServers found.
type recordCounts struct {
	right, elsewhere, disconnected, dead int
	wrong                                []wrongRecord
}

// wrongRecord is a device whose record does not name the server it
// resumed on as connected, and what the record says.
type wrongRecord struct {
	device, says string
}

// probeWrong has every device whose record is wrong (wrong: as
// recordedServers lists them) send a reset probe, and counts the
// outcomes (stormMode.ProbeAnswered and the others). It fills
// WrongRecords with the first few, each with its device's RTT estimate:
// QUIC stretches a connection's keep-alive interval and idle timeout to
// 1.5 and 3 times its probe timeout, which the storm's delays inflate.
func (m *stormMode) probeWrong(ctx context.Context, devs map[string]*stormDev, wrong []wrongRecord, log io.Writer) {
	m.WrongRecords = m.WrongRecords[:0]
	type outcome struct {
		line string
		res  int // probeAnswered, probeClosed or probeSilent
	}
	out := make([]outcome, len(wrong))
	var wg sync.WaitGroup
	sem := make(chan struct{}, 256)
	for i, w := range wrong {
		id := w.device
		sd := devs[id]
		st := sd.conn.ConnectionStats()
		rtt := fmt.Sprintf("%s; its RTT estimate %.1f s, deviation %.1f s", w.says, st.SmoothedRTT.Seconds(), st.MeanDeviation.Seconds())
		if len(m.WrongRecords) < 5 {
			m.WrongRecords = append(m.WrongRecords, rtt)
		}
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			res, why := probeSession(ctx, sd, stormProbeWait)
			out[i] = outcome{line: fmt.Sprintf("%s: %s", id, why), res: res}
		})
	}
	wg.Wait()
	for _, o := range out {
		switch o.res {
		case probeAnswered:
			m.ProbeAnswered++
		case probeClosed:
			m.ProbeClosed++
		default:
			m.ProbeSilent++
		}
		if len(m.ProbeResults) < 5 {
			m.ProbeResults = append(m.ProbeResults, o.line)
		}
	}
	if len(wrong) > 0 {
		fmt.Fprintf(log, "storm: %s: %d wrong records probed: %d answered, %d closed, %d silent\n", m.Mode, len(wrong), m.ProbeAnswered, m.ProbeClosed, m.ProbeSilent)
	}
}

// The outcomes of probeSession.
const (
	probeAnswered = iota
	probeClosed
	probeSilent
)

// probeSession sends a Ping on sd's session as an agent's reset probe: its
// padding draws a stateless reset from a server that no longer knows the
// connection, and its EchoAfter a Pong from one that holds the session.
// It waits for either at most wait.
func probeSession(ctx context.Context, sd *stormDev, wait time.Duration) (int, string) {
	if err := context.Cause(sd.conn.Context()); err != nil {
		return probeClosed, fmt.Sprintf("closed before the probe: %v", err)
	}
	s := sd.sess
	defer func(was time.Duration) { s.timeout = was }(s.timeout)
	s.timeout = wait
	if err := s.send(&wire.Ping{Seq: 2, Interval: time.Hour, EchoAfter: time.Millisecond, Pad: wire.ResetProbePad}); err != nil {
		return probeClosed, err.Error()
	}
	_, err := waitFor[*wire.Pong](s)
	var reset *quic.StatelessResetError
	switch {
	case err == nil:
		return probeAnswered, "Pong: the server holds the session"
	case errors.As(err, &reset):
		// The stream's read can report the reset before the
		// connection's context ends (seen on a loaded host).
		return probeClosed, fmt.Sprintf("closed: %v", err)
	case context.Cause(sd.conn.Context()) != nil:
		return probeClosed, fmt.Sprintf("closed: %v", context.Cause(sd.conn.Context()))
	case ctx.Err() != nil:
		return probeSilent, ctx.Err().Error()
	default:
		return probeSilent, err.Error()
	}
}

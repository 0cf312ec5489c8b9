package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/meteor-edge/meteor/agent"
	"github.com/meteor-edge/meteor/bench/internal/benchkit"
	"github.com/meteor-edge/meteor/chaos"
	"github.com/meteor-edge/meteor/cluster"
	"github.com/meteor-edge/meteor/cluster/api"
	"github.com/meteor-edge/meteor/cluster/pki"
)

// agentCommand is how the agent is started: bin with sub before its
// flags (["agent"] for the meteor binary, nothing for a standalone one).
type agentCommand struct {
	bin string
	sub []string
}

// pathResult is one server's path: what crossed its proxy in the idle
// window.
type pathResult struct {
	Server string `json:"server"`
	// Connected says the agent's session was on this server for the
	// whole window; the other paths carry only probes.
	Connected bool `json:"connected"`
	traffic
	IPBytesPerDay float64 `json:"ip_bytes_per_day"`
	// NFT is the nftables count of the same path, where it was made.
	NFT *nftCount `json:"nft,omitempty"`
}

// profileResult is everything measured on one link profile.
type profileResult struct {
	Profile string            `json:"profile"`
	Link    chaos.LinkProfile `json:"link"`
	// ConvergeSec is from the agent's start until the API showed the
	// device converged on the first revision.
	ConvergeSec float64 `json:"converge_sec"`
	WindowSec   float64 `json:"idle_window_sec"`
	// Server is the server the agent was connected to when the window
	// began; ServerEnd when the pushes were done.
	Server    string       `json:"server"`
	ServerEnd string       `json:"server_end"`
	Paths     []pathResult `json:"paths"`
	Total     traffic      `json:"total"`
	// IPBytesPerDay is Total with headers, scaled to a day; Connected
	// and Others split it by path.
	IPBytesPerDay          float64 `json:"ip_bytes_per_day"`
	ConnectedIPBytesPerDay float64 `json:"connected_ip_bytes_per_day"`
	OthersIPBytesPerDay    float64 `json:"others_ip_bytes_per_day"`
	// NFTTotal and NFTIPBytesPerDay are the nftables cross-check.
	NFTTotal         *nftCount `json:"nft_total,omitempty"`
	NFTIPBytesPerDay float64   `json:"nft_ip_bytes_per_day,omitempty"`
	// The agent process at the end of the window, and over it.
	RSSBytes   uint64  `json:"rss_bytes"`
	HWMBytes   uint64  `json:"hwm_bytes"`
	CPUSec     float64 `json:"cpu_sec"`
	CPUPercent float64 `json:"cpu_percent_of_one_core"`
	// PushMS are the timed changes, from the write's answer until the
	// device's acknowledgement of its revision was visible.
	PushMS    []float64 `json:"push_ms"`
	PushP50MS float64   `json:"push_p50_ms"`
	PushMaxMS float64   `json:"push_max_ms"`
	Elections int       `json:"leader_elections"`

	// NATBindingSec is the NAT binding of the profile's proxies.
	NATBindingSec secondsField `json:"nat_binding_sec"`
	// WarmupSec is from convergence until the agent learned its NAT
	// binding, and KeepAlive what it learned (from its log).
	WarmupSec float64 `json:"warmup_sec"`
	KeepAlive string  `json:"keepalive"`
	// NATDropped counts datagrams from the servers dropped at a lapsed
	// NAT binding during the window: a push would have been delayed.
	NATDropped int64 `json:"nat_dropped"`
	// RaceBytes is the connect's traffic to the other servers (IP bytes,
	// until the device converged): the race of handshakes that chose the
	// server, full handshakes.
	RaceBytes uint64 `json:"race_bytes"`
	// ProbeRoundsBefore and ProbeRoundsInWindow count the agent's RTT
	// probe rounds (its "rtt probe round" log lines) between converging
	// and the window, and in it; NextProbe is when its last round said
	// the next would come. ProbeRoundBytes is what a round cost on the
	// paths to the other servers, measured over those rounds (IP bytes,
	// each path's traffic after the race divided by the rounds), or,
	// with no round to measure (ProbeRoundMeasured false), the race's
	// cost, which is more.
	ProbeRoundsBefore   int    `json:"probe_rounds_before_window"`
	ProbeRoundsInWindow int    `json:"probe_rounds_in_window"`
	NextProbe           string `json:"next_probe_in,omitempty"`
	ProbeRoundBytes     uint64 `json:"probe_round_bytes"`
	ProbeRoundMeasured  bool   `json:"probe_round_measured"`
	// AgentCountedBytes is what the agent counted of its whole run (its
	// last report's counters for the day), ProxyCountedBytes what the
	// proxies counted from their start until that report was visible;
	// AgentCountedDay the UTC day the agent counted.
	AgentCountedBytes uint64 `json:"agent_counted_bytes"`
	ProxyCountedBytes uint64 `json:"proxy_counted_bytes"`
	AgentCountedDay   string `json:"agent_counted_day"`
	// ProbeRoundsPerDay is the rounds a stable day holds and
	// ProbesPerDay their bytes (ProbeRoundBytes each); OthersUnprobed is
	// what the other paths carried in the window beyond probe rounds,
	// a day (nothing should). DayBytes, the row's figure, is the session
	// path's day plus those two: a window's probe rounds are not
	// extrapolated (a day holds ProbeRoundsPerDay of them, not 144 times
	// the window's) but counted at their measured cost.
	ProbeRoundsPerDay float64 `json:"probe_rounds_per_day"`
	ProbesPerDay      float64 `json:"probes_bytes_per_day"`
	OthersUnprobed    float64 `json:"others_unprobed_bytes_per_day"`
	DayBytes          float64 `json:"day_bytes"`
}

// probeRounds counts the agent's RTT probe rounds in its log and returns
// what the last one said of the next.
func probeRounds(path string) (n int, next string) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, ""
	}
	for _, line := range strings.Split(string(b), "\n") {
		if !strings.Contains(line, "rtt probe round") {
			continue
		}
		n++
		if _, rest, ok := strings.Cut(line, "next_in="); ok {
			next, _, _ = strings.Cut(rest, " ")
		}
	}
	return n, next
}

// agentProbeMax is the agent's default RTT probe interval once stable.
const agentProbeMax = agent.DefaultRTTProbeMax

// secondsField is a duration in seconds, in JSON.
type secondsField float64

func seconds(d time.Duration) secondsField { return secondsField(d.Seconds()) }
func (s secondsField) dur() time.Duration  { return time.Duration(float64(s) * float64(time.Second)) }

// natStats sums the proxies' NAT counters.
func natStats(proxies []*chaos.UDPProxy) chaos.NATStats {
	var t chaos.NATStats
	for _, p := range proxies {
		st := p.NAT()
		t.Dropped += st.Dropped
		t.DroppedBytes += st.DroppedBytes
		t.Rebinds += st.Rebinds
	}
	return t
}

// learnedKeepAlive returns what the agent's "NAT binding learned" log
// line says, or "" if there is none.
func learnedKeepAlive(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	for _, line := range strings.Split(string(b), "\n") {
		if _, rest, ok := strings.Cut(line, "NAT binding learned"); ok {
			return strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(rest), ":"))
		}
	}
	return ""
}

// runProfile starts a cluster, the proxies and the agent, lets the agent
// converge and idle, and measures. seed selects the proxies' faults.
func runProfile(ctx context.Context, cfg *config, g *benchkit.Group, bin string, ag agentCommand, dir, name string, seed uint64,
	counters *counterTable, elections *benchkit.ElectionLog, log io.Writer) (*profileResult, string, error) {
	link, err := linkProfile(name)
	if err != nil {
		return nil, "", err
	}
	res := &profileResult{Profile: name, Link: link, NATBindingSec: seconds(natBinding(name))}
	pkiDir := filepath.Join(dir, "pki")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, "", err
	}
	if err := benchkit.InitMeteorCA(ctx, bin, pkiDir); err != nil {
		return nil, "", err
	}
	if out, err := benchkit.RunCmd(ctx, bin, "ca", "issue-device", "--dir", pkiDir, "--id", deviceID); err != nil {
		return nil, "", fmt.Errorf("meteor ca issue-device: %w\n%s", err, out)
	}
	fmt.Fprintf(log, "%s: starting 3 servers\n", name)
	mc, err := benchkit.StartMeteor(ctx, g, benchkit.MeteorOptions{Bin: bin, Dir: dir, Agents: true, PKI: pkiDir})
	if err != nil {
		return nil, "", err
	}
	defer elections.Record(context.WithoutCancel(ctx), "footprint "+name, mc)
	doc, err := intentDoc(1)
	if err != nil {
		return nil, "", err
	}
	w, err := mc.Servers[0].API.PutIntent(ctx, intentName, doc, nil)
	if err != nil {
		return nil, "", fmt.Errorf("put intent: %w", err)
	}
	if err := mc.WaitRevision(ctx, w.Revision); err != nil {
		return nil, "", err
	}
	reader, err := newDeviceReader(pkiDir)
	if err != nil {
		return nil, "", err
	}

	// One proxy per server, each with the profile in both directions.
	var proxies []*chaos.UDPProxy
	var wg sync.WaitGroup
	pctx, stopProxies := context.WithCancel(ctx)
	defer func() {
		stopProxies()
		wg.Wait()
	}()
	var addrs []string
	var ports []int
	for i, s := range mc.Servers {
		p, err := chaos.NewUDPProxy("127.0.0.1:0", s.AgentAddr, link, seed*100+uint64(i), nil,
			chaos.WithNATBinding(res.NATBindingSec.dur()), chaos.WithIdleTimeout(time.Hour))
		if err != nil {
			return nil, "", err
		}
		proxies = append(proxies, p)
		wg.Go(func() {
			if err := p.Run(pctx); err != nil {
				fmt.Fprintf(log, "%s: proxy for %s: %v\n", name, s.ID, err)
			}
		})
		addrs = append(addrs, p.Addr().String())
		ports = append(ports, p.Addr().(*net.UDPAddr).Port)
	}
	if counters != nil {
		if err := counters.watch(ctx, ports); err != nil {
			return nil, "", err
		}
	}

	root := filepath.Join(dir, "device-root")
	if err := os.MkdirAll(root, 0o700); err != nil {
		return nil, "", err
	}
	args := append(slices.Clone(ag.sub),
		"--servers", strings.Join(addrs, ","), "--device-id", deviceID, "--data-dir", filepath.Join(dir, "agent"),
		"--labels", labelFleet+"="+fleetValue, "--root", root, "--ca-file", benchkit.MeteorCAFile(pkiDir),
		"--cert-file", filepath.Join(pkiDir, "device-"+deviceID+".pem"), "--key-file", filepath.Join(pkiDir, "device-"+deviceID+"-key.pem"))
	fmt.Fprintf(log, "%s: starting the agent\n", name)
	agent, err := g.Start("agent", ag.bin, args, nil, dir, filepath.Join(dir, "agent.log"))
	if err != nil {
		return nil, "", err
	}
	err = benchkit.WaitFor(ctx, 2*time.Minute, 250*time.Millisecond, agent, func(ctx context.Context) error {
		d, err := mc.Servers[0].API.GetDevice(ctx, deviceID, api.ReadOptions{})
		if err != nil {
			return err
		}
		if !d.Connected || d.AckedRevision < w.Revision || !d.Converged {
			return fmt.Errorf("device connected %v, acked %d of %d, converged %v", d.Connected, d.AckedRevision, w.Revision, d.Converged)
		}
		return nil
	})
	if err != nil {
		return nil, "", fmt.Errorf("agent converging: %w", err)
	}
	res.ConvergeSec = time.Since(agent.Started).Seconds()
	// What the race of handshakes cost on the paths to the other servers.
	tsRace := make([]traffic, len(proxies))
	for i, p := range proxies {
		st := p.Stats()
		tsRace[i] = traffic{UpPackets: st.Out.Packets, UpBytes: st.Out.Bytes, DownPackets: st.In.Sent, DownBytes: st.In.SentBytes}
	}
	fmt.Fprintf(log, "%s: converged in %.1f s; waiting until the agent learned its NAT binding\n", name, res.ConvergeSec)
	// Steady state: the agent's keep-alive interval settled (a fresh
	// agent tests its path's NAT binding first, which takes minutes; a
	// day is nearly all steady state).
	agentLog := filepath.Join(dir, "agent.log")
	err = benchkit.WaitFor(ctx, cfg.warmupMax, time.Second, agent, func(ctx context.Context) error {
		b, err := os.ReadFile(agentLog)
		if err != nil {
			return err
		}
		if !strings.Contains(string(b), "NAT binding learned") {
			return errors.New("the agent has not learned its NAT binding")
		}
		return nil
	})
	if err != nil {
		return nil, "", fmt.Errorf("agent warming up: %w", err)
	}
	res.WarmupSec = time.Since(agent.Started).Seconds() - res.ConvergeSec
	res.KeepAlive = learnedKeepAlive(agentLog)
	fmt.Fprintf(log, "%s: NAT binding learned after %.0f s (%s); waiting for the Raft log to settle\n", name, res.WarmupSec, res.KeepAlive)
	if _, err := mc.Rest(ctx, 2*time.Second); err != nil {
		return nil, "", err
	}
	term0, err := mc.RaftTerm(ctx)
	if err != nil {
		return nil, "", err
	}
	d, err := mc.Servers[0].API.GetDevice(ctx, deviceID, api.ReadOptions{})
	if err != nil {
		return nil, "", err
	}
	res.Server = d.Server

	// The idle window.
	read := func() ([]traffic, []nftCount, time.Duration, error) {
		ts := make([]traffic, len(proxies))
		for i, p := range proxies {
			st := p.Stats()
			ts[i] = traffic{UpPackets: st.Out.Packets, UpBytes: st.Out.Bytes, DownPackets: st.In.Sent, DownBytes: st.In.SentBytes}
		}
		var ns []nftCount
		if counters != nil {
			var err error
			if ns, err = counters.read(ctx, len(proxies)); err != nil {
				return nil, nil, 0, err
			}
		}
		cpu, err := agent.CPUTime()
		return ts, ns, cpu, err
	}
	fmt.Fprintf(log, "%s: idle for %s, connected to %s\n", name, cfg.duration, res.Server)
	ts0, ns0, cpu0, err := read()
	if err != nil {
		return nil, "", err
	}
	nat0 := natStats(proxies)
	res.ProbeRoundsBefore, _ = probeRounds(agentLog)
	t0 := time.Now()
	if err := benchkit.Sleep(ctx, cfg.duration); err != nil {
		return nil, "", err
	}
	ts1, ns1, cpu1, err := read()
	window := time.Since(t0)
	if err != nil {
		return nil, "", err
	}
	mem, err := readMemory(agent.PID())
	if err != nil {
		return nil, "", fmt.Errorf("agent memory: %w", err)
	}
	if agent.Exited() {
		return nil, "", fmt.Errorf("the agent exited during the window (%v):\n%s", agent.Err(), agent.LogTail(20))
	}
	res.WindowSec = window.Seconds()
	var rounds int
	rounds, res.NextProbe = probeRounds(agentLog)
	res.ProbeRoundsInWindow = rounds - res.ProbeRoundsBefore
	res.NATDropped = natStats(proxies).Dropped - nat0.Dropped
	res.RSSBytes, res.HWMBytes = mem.RSS, mem.HWM
	res.CPUSec = (cpu1 - cpu0).Seconds()
	res.CPUPercent = cpuPercent(cpu1-cpu0, window)

	// Which server the session stayed on: read after the window, since
	// a move would show as traffic on two paths.
	d, err = mc.Servers[0].API.GetDevice(ctx, deviceID, api.ReadOptions{})
	if err != nil {
		return nil, "", err
	}
	stayed := d.Server == res.Server
	var nftTotal nftCount
	for i, s := range mc.Servers {
		pr := pathResult{Server: s.ID, Connected: stayed && s.ID == res.Server, traffic: ts1[i].sub(ts0[i])}
		pr.IPBytesPerDay = perDay(pr.ipBytes(), window)
		if counters != nil {
			n := ns1[i].sub(ns0[i])
			pr.NFT = &n
			nftTotal = nftTotal.add(n)
		}
		res.Paths = append(res.Paths, pr)
		res.Total = res.Total.add(pr.traffic)
		if pr.Connected {
			res.ConnectedIPBytesPerDay += pr.IPBytesPerDay
		} else {
			res.OthersIPBytesPerDay += pr.IPBytesPerDay
		}
	}
	res.IPBytesPerDay = perDay(res.Total.ipBytes(), window)
	// RTT probe rounds come every 24 h while the choice is stable (the
	// agent's default RTTProbeMaxInterval): count the day's at what the
	// rounds seen so far cost on the other paths, whether or not one fell
	// into the window.
	var others, race uint64
	for i, s := range mc.Servers {
		if s.ID != res.Server {
			others += ts1[i].sub(tsRace[i]).ipBytes()
			race += tsRace[i].ipBytes()
		}
	}
	res.RaceBytes = race
	if rounds > 0 {
		res.ProbeRoundBytes, res.ProbeRoundMeasured = others/uint64(rounds), true
	} else {
		res.ProbeRoundBytes = race
	}
	if res.ProbeRoundsInWindow == 0 {
		res.OthersUnprobed = res.OthersIPBytesPerDay
	}
	res.ProbeRoundsPerDay = float64(24 * time.Hour / agentProbeMax)
	res.ProbesPerDay = res.ProbeRoundsPerDay * float64(res.ProbeRoundBytes)
	res.DayBytes = res.ConnectedIPBytesPerDay + res.OthersUnprobed + res.ProbesPerDay
	if counters != nil {
		res.NFTTotal = &nftTotal
		res.NFTIPBytesPerDay = perDay(nftTotal.UpBytes+nftTotal.DownBytes, window)
	}

	// Push latency.
	fmt.Fprintf(log, "%s: timing %d changes\n", name, cfg.pushes)
	var lastWrite time.Time // when the last change's write was answered
	for k := range cfg.pushes {
		if k > 0 {
			if err := benchkit.Sleep(ctx, cfg.pushGap); err != nil {
				return nil, "", err
			}
		}
		doc, err := intentDoc(k + 2)
		if err != nil {
			return nil, "", err
		}
		srv := mc.Servers[k%len(mc.Servers)].API
		w, err := srv.PutIntent(ctx, intentName, doc, nil)
		if err != nil {
			return nil, "", fmt.Errorf("put intent: %w", err)
		}
		committed := time.Now()
		lastWrite = committed
		if err := reader.waitAcked(ctx, srv.Addr(), w.Revision, w.Index, agent); err != nil {
			return nil, "", err
		}
		res.PushMS = append(res.PushMS, benchkit.MS(time.Since(committed)))
	}
	lat := make([]time.Duration, len(res.PushMS))
	for i, ms := range res.PushMS {
		lat[i] = time.Duration(ms * float64(time.Millisecond))
	}
	slices.Sort(lat)
	res.PushP50MS, res.PushMaxMS = benchkit.MS(benchkit.Percentile(lat, 50)), benchkit.MS(lat[len(lat)-1])
	if res.Elections, err = mc.ElectionsSince(ctx, term0); err != nil {
		return nil, "", err
	}
	d, err = mc.Servers[0].API.GetDevice(ctx, deviceID, api.ReadOptions{})
	if err != nil {
		return nil, "", err
	}
	res.ServerEnd = d.Server

	// The agent's own counters, cross-checked against the proxies': the
	// report that followed the last push carried them (an idle agent
	// reports nothing, so they are not read at the window's bounds).
	err = benchkit.WaitFor(ctx, time.Minute, 250*time.Millisecond, agent, func(ctx context.Context) error {
		if d, err = mc.Servers[0].API.GetDevice(ctx, deviceID, api.ReadOptions{}); err != nil {
			return err
		}
		if d.Traffic == nil || !d.Traffic.AsOf.After(lastWrite) {
			return errors.New("no report with traffic counters since the last change")
		}
		return nil
	})
	if err != nil {
		// The figures stand without the cross-check; say so.
		fmt.Fprintf(log, "%s: no cross-check with the agent's counters: %v\n", name, err)
		return res, mc.Version, nil
	}
	ts2, _, _, err := read()
	if err != nil {
		return nil, "", err
	}
	var all traffic
	for _, t := range ts2 {
		all = all.add(t)
	}
	res.AgentCountedBytes, res.ProxyCountedBytes = d.Traffic.Today.Bytes(), all.ipBytes()
	res.AgentCountedDay = d.Traffic.Day
	return res, mc.Version, nil
}

// deviceReader makes blocking reads of the device over the servers' TLS
// API, keeping the X-Meteor-Index of each answer for the next.
type deviceReader struct{ hc *http.Client }

func newDeviceReader(pkiDir string) (*deviceReader, error) {
	caPEM, err := os.ReadFile(benchkit.MeteorCAFile(pkiDir))
	if err != nil {
		return nil, err
	}
	pool, err := pki.PoolFromPEM(caPEM)
	if err != nil {
		return nil, err
	}
	return &deviceReader{hc: &http.Client{Timeout: time.Minute, Transport: &http.Transport{TLSClientConfig: cluster.OperatorTLS(pool)}}}, nil
}

// blockingWait bounds each blocking read.
const blockingWait = 30 * time.Second

// waitAcked waits, with blocking reads of GET /v1/devices/{id} on the
// server at base, until the device has acknowledged revision rev; index
// is the write's Raft index, the first read's ?index. It gives up after a
// minute or if p exits.
func (r *deviceReader) waitAcked(ctx context.Context, base string, rev, index uint64, p *benchkit.Proc) error {
	deadline := time.Now().Add(time.Minute)
	for time.Now().Before(deadline) {
		d, next, err := r.read(ctx, base, index)
		if err != nil {
			return err
		}
		if d.AckedRevision >= rev {
			return nil
		}
		if p.Exited() {
			return fmt.Errorf("the agent exited (%v):\n%s", p.Err(), p.LogTail(20))
		}
		index = max(index, next)
	}
	return fmt.Errorf("device %s has not acknowledged revision %d after a minute", deviceID, rev)
}

// read makes one blocking read past index and returns the device and the
// index of the answer.
func (r *deviceReader) read(ctx context.Context, base string, index uint64) (*api.Device, uint64, error) {
	q := url.Values{"index": {strconv.FormatUint(index, 10)}, "wait": {blockingWait.String()}}
	u := base + "/v1/devices/" + url.PathEscape(deviceID) + "?" + q.Encode()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, 0, err
	}
	resp, err := r.hc.Do(req)
	if err != nil {
		return nil, 0, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return nil, 0, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, 0, fmt.Errorf("GET %s: %s: %s", u, resp.Status, strings.TrimSpace(string(body)))
	}
	next, err := strconv.ParseUint(resp.Header.Get(api.HeaderIndex), 10, 64)
	if err != nil {
		return nil, 0, errors.New("GET /v1/devices/{id}: no " + api.HeaderIndex + " header")
	}
	var d api.Device
	if err := json.Unmarshal(body, &d); err != nil {
		return nil, 0, fmt.Errorf("GET /v1/devices/{id}: %w", err)
	}
	return &d, next, nil
}

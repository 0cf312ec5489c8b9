package sim

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/meteor-edge/meteor/agent"
	"github.com/meteor-edge/meteor/agent/driver"
	"github.com/meteor-edge/meteor/chaos"
	"github.com/meteor-edge/meteor/cluster/pki"
	"github.com/meteor-edge/meteor/fsm/intent"
	"github.com/meteor-edge/meteor/wire"
)

// File names in a PKI directory, as `meteor ca init` and `meteor dev`
// write them.
const (
	CACertFile = "ca.pem"
	CAKeyFile  = "ca-key.pem"
)

// Options configures a Fleet. Start from DefaultOptions.
type Options struct {
	// Servers are the agent UDP addresses (host:port) of the cluster.
	// Server i is taken to be in region ServerRegions[i], or
	// Regions()[i%3] without them. Required.
	Servers []string
	// ServerRegions, when set, gives the region of each of Servers (as
	// many), which decides the delay of each device's path to it.
	ServerRegions []string
	// Region, when set, puts every device in this region (its region
	// label) instead of spreading the fleet over Regions().
	Region string
	// PKIDir holds the cluster CA (ca.pem, ca-key.pem) from which every
	// device certificate is issued; with EnrollToken only ca.pem, which
	// the devices trust. Required unless CA is set.
	PKIDir string
	// CA, when set, issues the device certificates instead of the CA in
	// PKIDir.
	CA *pki.CA
	// EnrollToken, when set, is an enrollment token (meteor token create
	// --enroll) with which each device gets its certificate from the
	// servers, as a real device does (agent.LoadOrEnroll), instead of
	// from the CA: the devices then have the token's control-plane
	// labels, and the simulator needs no CA key. A device whose data dir
	// (under BaseDir) holds the certificate of an earlier run uses it.
	EnrollToken string
	// BaseDir holds one directory per device: its journal and the Root of
	// its drivers. Required.
	BaseDir string
	// Devices is the number of devices; 0 means RetailDevices for the
	// retail mix.
	Devices int
	// Profile is a link name (LinkFiber, LinkCellular, LinkPopup) given to
	// every device, or MixRetail. Empty means MixRetail.
	Profile string
	// Seed decides the devices' labels, their sim drivers' failures, the
	// links' random faults and the pop-up sites' schedules.
	Seed uint64
	// IDPrefix starts every device ID; empty means "sim".
	IDPrefix string
	// LocalIP, when set, is the address every device's socket binds to
	// (port 0). nil means 127.0.0.1 when every server is on IPv4
	// loopback, else every address. A fleet of more devices than one
	// address has ephemeral ports spreads over several fleets, each on
	// its own loopback address (127.0.1.1, 127.0.1.2, ...).
	LocalIP net.IP
	// Loss, when positive, replaces the random loss of lossy links
	// (cellular, popup), in each direction.
	Loss float64
	// TimeScale multiplies the links' outage and offline periods (a
	// cellular outage every 3 min, pop-up sites offline for 30 min), so
	// tests can see them in seconds; 0 means 1.
	TimeScale float64
	// RampBatch devices are started every RampEvery, so that handshakes
	// do not stampede. Defaults 50 and 1 s.
	RampBatch int
	RampEvery time.Duration
	// SampleEvery is how often the agents' Status is sampled; the times
	// to converge are as precise as that. Default 200 ms.
	SampleEvery time.Duration
	// SummaryEvery is how often Run writes a summary line to Summary.
	// Default 1 s.
	SummaryEvery time.Duration
	// Summary receives the live summary lines; nil means none.
	Summary io.Writer
	// Logger receives the fleet's and the agents' logs; nil means none.
	Logger hclog.Logger
	// Agent, when set, adjusts each device's agent configuration after
	// the simulator filled it (tests shorten the intervals).
	Agent func(*agent.Config)
}

// DefaultOptions returns Options with the default ramp and cadences, the
// retail mix and no servers, PKI or base directory.
func DefaultOptions() Options {
	return Options{
		Profile: MixRetail, IDPrefix: "sim", TimeScale: 1,
		RampBatch: 50, RampEvery: time.Second,
		SampleEvery: 200 * time.Millisecond, SummaryEvery: time.Second,
	}
}

// Validate reports whether the options are usable; zero cadences are
// accepted and mean their defaults.
func (o Options) Validate() error {
	var errs []error
	if len(o.Servers) == 0 {
		errs = append(errs, errors.New("no servers"))
	}
	for _, s := range o.Servers {
		if _, _, err := net.SplitHostPort(s); err != nil {
			errs = append(errs, fmt.Errorf("server %q: %w", s, err))
		}
	}
	if o.PKIDir == "" && o.CA == nil {
		errs = append(errs, errors.New("no PKI dir"))
	}
	if o.EnrollToken != "" && o.CA != nil {
		errs = append(errs, errors.New("a CA and an enrollment token: the devices get their certificates from one of them"))
	}
	if o.ServerRegions != nil && len(o.ServerRegions) != len(o.Servers) {
		errs = append(errs, fmt.Errorf("%d server regions for %d servers", len(o.ServerRegions), len(o.Servers)))
	}
	if o.BaseDir == "" {
		errs = append(errs, errors.New("no base dir"))
	}
	if o.Devices < 0 {
		errs = append(errs, fmt.Errorf("%d devices", o.Devices))
	}
	if !(o.Loss >= 0 && o.Loss <= 1) {
		errs = append(errs, fmt.Errorf("loss %v not in [0,1]", o.Loss))
	}
	if !(o.TimeScale >= 0) {
		errs = append(errs, fmt.Errorf("time scale %v is negative", o.TimeScale))
	}
	if o.RampBatch < 0 || o.RampEvery < 0 || o.SampleEvery < 0 || o.SummaryEvery < 0 {
		errs = append(errs, errors.New("negative ramp or cadence"))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("sim options: %w", err)
	}
	return nil
}

func (o Options) withDefaults() Options {
	def := DefaultOptions()
	if o.Profile == "" {
		o.Profile = def.Profile
	}
	if o.IDPrefix == "" {
		o.IDPrefix = def.IDPrefix
	}
	if o.TimeScale == 0 {
		o.TimeScale = def.TimeScale
	}
	if o.RampBatch == 0 {
		o.RampBatch = def.RampBatch
	}
	if o.RampEvery == 0 {
		o.RampEvery = def.RampEvery
	}
	if o.SampleEvery == 0 {
		o.SampleEvery = def.SampleEvery
	}
	if o.SummaryEvery == 0 {
		o.SummaryEvery = def.SummaryEvery
	}
	if o.Logger == nil {
		o.Logger = hclog.NewNullLogger()
	}
	return o
}

// server is one agent endpoint of the cluster.
type server struct {
	addr   string
	udp    *net.UDPAddr
	region string
}

// Fleet runs simulated devices against a cluster. Create it with New and
// run it with Run, once; Mark, Summary and Report may be called from any
// goroutine at any time.
type Fleet struct {
	opts     Options
	log      hclog.Logger
	ca       *pki.CA        // nil when the devices enroll
	roots    *x509.CertPool // the cluster CA the devices trust
	servers  []server
	loopback bool
	devices  []*device
	running  atomic.Bool

	mu      sync.Mutex
	started time.Time // guarded by mu; when Run started
	markAt  time.Time // guarded by mu; convergence is timed from it
	markRev uint64    // guarded by mu; the revision a device must reach
	markGen uint64    // guarded by mu; counts Mark calls
	errs    []error   // guarded by mu; devices that could not run
}

// device is one simulated device. The plan and identity are fixed at New
// (an enrolling device's certificate is set by its goroutine, the only one
// to read it, before its first agent starts); the rest is guarded by mu.
type device struct {
	plan    devicePlan
	cert    tls.Certificate // empty until an enrolling device enrolled
	dataDir string
	root    string
	simDev  *driver.SimDevice

	mu          sync.Mutex
	ag          *agent.Agent      // guarded by mu; nil while powered off
	pc          *chaos.PacketConn // guarded by mu; the latest socket
	prior       chaos.Stats       // guarded by mu; counters of closed sockets
	sockets     int               // guarded by mu
	started     bool              // guarded by mu
	restarts    int               // guarded by mu; power losses
	outages     int               // guarded by mu; network blackholes
	interrupted int               // guarded by mu; steps in flight at a power loss, of agents stopped
	connected   bool              // guarded by mu; at the last sample
	converged   bool              // guarded by mu; at the last sample
	server      string            // guarded by mu; at the last sample
	convergedAt time.Time         // guarded by mu; first converged sample since the mark
	markGen     uint64            // guarded by mu; the Mark convergedAt belongs to
}

// New plans the fleet, loads the CA and issues a certificate to every
// device. It starts nothing.
func New(opts Options) (*Fleet, error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	opts = opts.withDefaults()
	plans, err := planFleet(opts.IDPrefix, opts.Profile, opts.Devices, opts.Seed, opts.TimeScale, opts.Loss, opts.Region)
	if err != nil {
		return nil, err
	}
	f := &Fleet{opts: opts, log: opts.Logger.Named("sim"), ca: opts.CA, loopback: true}
	switch {
	case opts.EnrollToken != "":
		if f.roots, err = loadRoots(opts.PKIDir); err != nil {
			return nil, err
		}
	case f.ca == nil:
		if f.ca, err = loadCA(opts.PKIDir); err != nil {
			return nil, err
		}
	}
	if f.ca != nil {
		f.roots = f.ca.Pool()
	}
	regions := opts.ServerRegions
	if regions == nil {
		regions = Regions()
	}
	for i, s := range opts.Servers {
		udp, err := net.ResolveUDPAddr("udp", s)
		if err != nil {
			return nil, fmt.Errorf("sim: server %q: %w", s, err)
		}
		if udp.IP == nil || udp.IP.To4() == nil || !udp.IP.IsLoopback() {
			f.loopback = false
		}
		f.servers = append(f.servers, server{addr: s, udp: udp, region: regions[i%len(regions)]})
	}
	for _, p := range plans {
		var cert tls.Certificate
		if f.ca != nil {
			if cert, err = f.ca.IssueDevice(p.id); err != nil {
				return nil, fmt.Errorf("sim: device %s: %w", p.id, err)
			}
		}
		dir := filepath.Join(opts.BaseDir, p.id)
		f.devices = append(f.devices, &device{
			plan: p, cert: cert,
			dataDir: filepath.Join(dir, "data"), root: filepath.Join(dir, "root"),
			simDev: driver.NewSimDevice(p.seed),
		})
	}
	abs, err := filepath.Abs(opts.BaseDir)
	if err != nil {
		return nil, fmt.Errorf("sim: base dir: %w", err)
	}
	for _, d := range f.devices {
		d.root = filepath.Join(abs, d.plan.id, "root")
	}
	return f, nil
}

func loadCA(dir string) (*pki.CA, error) {
	certPEM, err := os.ReadFile(filepath.Join(dir, CACertFile))
	if err != nil {
		return nil, fmt.Errorf("sim: load CA: %w", err)
	}
	keyPEM, err := os.ReadFile(filepath.Join(dir, CAKeyFile))
	if err != nil {
		return nil, fmt.Errorf("sim: load CA: %w", err)
	}
	ca, err := pki.LoadCA(certPEM, keyPEM)
	if err != nil {
		return nil, fmt.Errorf("sim: load CA from %s: %w", dir, err)
	}
	return ca, nil
}

// loadRoots reads the cluster CA's certificate (ca.pem) from dir.
func loadRoots(dir string) (*x509.CertPool, error) {
	certPEM, err := os.ReadFile(filepath.Join(dir, CACertFile))
	if err != nil {
		return nil, fmt.Errorf("sim: load CA: %w", err)
	}
	roots, err := pki.PoolFromPEM(certPEM)
	if err != nil {
		return nil, fmt.Errorf("sim: load CA from %s: %w", dir, err)
	}
	return roots, nil
}

// Len returns the number of devices.
func (f *Fleet) Len() int { return len(f.devices) }

// Mark restarts the convergence clock: from now on a device counts as
// converged once its agent has journaled a desired revision at or above
// revision (the revision a write answered with; 0 means any) and reports
// the converged state. Call it when applying the change to measure. Until
// the first Mark, the clock starts with Run and any desired revision
// counts.
func (f *Fleet) Mark(revision uint64) {
	now := time.Now()
	f.mu.Lock()
	f.markAt, f.markRev = now, revision
	f.markGen++
	gen := f.markGen
	f.mu.Unlock()
	for _, d := range f.devices {
		d.mu.Lock()
		d.convergedAt, d.converged, d.markGen = time.Time{}, false, gen
		d.mu.Unlock()
	}
}

// Run starts the devices, RampBatch every RampEvery, and keeps them
// running, samples them and writes the live summary until ctx ends. It
// returns after every agent stopped and every goroutine exited, leaving
// the last sample taken while they ran for Summary and Report; the error
// joins those of devices that could not start.
func (f *Fleet) Run(ctx context.Context) error {
	if !f.running.CompareAndSwap(false, true) {
		return errors.New("sim: Run called twice")
	}
	now := time.Now()
	f.mu.Lock()
	f.started = now
	if f.markAt.IsZero() {
		f.markAt = now
	}
	f.mu.Unlock()
	f.log.Info("fleet starting", "devices", len(f.devices), "profile", f.opts.Profile, "server_addrs", f.opts.Servers, "seed", f.opts.Seed)

	var wg sync.WaitGroup
	wg.Go(func() { f.every(ctx, f.opts.SampleEvery, f.sample) })
	if f.opts.Summary != nil {
		wg.Go(func() {
			f.every(ctx, f.opts.SummaryEvery, func() { fmt.Fprintln(f.opts.Summary, f.Summary()) })
		})
	}
	ramp := time.NewTicker(f.opts.RampEvery)
	defer ramp.Stop()
ramping:
	for i, d := range f.devices {
		if i > 0 && i%f.opts.RampBatch == 0 {
			select {
			case <-ctx.Done():
				break ramping
			case <-ramp.C:
			}
		}
		d.mu.Lock()
		d.started = true
		d.mu.Unlock()
		wg.Go(func() { f.runDevice(ctx, d) })
	}
	<-ctx.Done()
	wg.Wait()
	f.log.Info("fleet stopped")
	f.mu.Lock()
	defer f.mu.Unlock()
	return errors.Join(f.errs...)
}

// every calls fn every period until ctx ends.
func (f *Fleet) every(ctx context.Context, period time.Duration, fn func()) {
	t := time.NewTicker(period)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			fn()
		}
	}
}

// sample reads every running agent's Status.
func (f *Fleet) sample() {
	f.mu.Lock()
	markAt, markRev, gen := f.markAt, max(f.markRev, 1), f.markGen
	f.mu.Unlock()
	for _, d := range f.devices {
		d.mu.Lock()
		a := d.ag
		d.mu.Unlock()
		var st agent.Status
		if a != nil {
			st = a.Status()
		}
		now := time.Now()
		converged := a != nil && st.State == agent.StateConverged && st.DesiredRevision >= markRev
		d.mu.Lock()
		if d.markGen != gen {
			d.mu.Unlock()
			continue // a Mark came in since this round began
		}
		d.connected, d.converged, d.server = a != nil && st.Connected, converged, st.Server
		if converged && d.convergedAt.IsZero() && !now.Before(markAt) {
			d.convergedAt = now
		}
		d.mu.Unlock()
	}
}

func (f *Fleet) fail(d *device, err error) {
	f.log.Error("device cannot run", "device", d.plan.id, "error", err)
	f.mu.Lock()
	f.errs = append(f.errs, fmt.Errorf("device %s: %w", d.plan.id, err))
	f.mu.Unlock()
}

// runDevice runs one device's agent until ctx ends. A device whose link
// goes offline alternates online and offline periods; an offline period
// is either a blackhole of its socket or a power loss: the agent is
// stopped abruptly (whatever it was applying) and started again from its
// data directory when the period ends.
func (f *Fleet) runDevice(ctx context.Context, d *device) {
	l := d.plan.link
	rng := rand.New(rand.NewPCG(d.plan.seed, 0xda3e39cb94b95bdb))
	jitter := func(mean time.Duration) time.Duration {
		return time.Duration(float64(mean) * (0.5 + rng.Float64()))
	}
	if d.cert.Certificate == nil {
		if err := f.enroll(ctx, d); err != nil {
			f.fail(d, err)
			return
		}
	}
	for ctx.Err() == nil {
		a, err := f.newAgent(d)
		if err != nil {
			f.fail(d, err)
			return
		}
		actx, stop := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- a.Run(actx) }()
		d.mu.Lock()
		d.ag = a
		d.mu.Unlock()

		var powerLoss time.Duration
		exited := false
		if l.onlineFor > 0 {
			powerLoss, exited, err = f.goOffline(actx, d, rng, jitter, done)
		} else {
			err, exited = <-done, true // runs until ctx ends
		}
		stop()
		if !exited {
			err = <-done
		}
		d.mu.Lock()
		d.ag = nil
		d.interrupted += a.Status().Interrupted
		d.mu.Unlock()
		if err != nil {
			f.fail(d, err)
			return
		}
		if powerLoss == 0 {
			return
		}
		f.log.Debug("power restored", "device", d.plan.id)
		select {
		case <-ctx.Done():
		case <-time.After(powerLoss):
		}
	}
}

// enroll gets the device its certificate with the fleet's enrollment
// token, or loads the one an earlier run got. A refusal (the token used
// up, expired or revoked, the device ID taken) is final; anything else
// (no server answers yet, one without the CA key) is tried again, after
// 1 s doubling to 30 s, until ctx ends.
func (f *Fleet) enroll(ctx context.Context, d *device) error {
	wait := time.Second
	for {
		cert, err := agent.LoadOrEnroll(ctx, agent.EnrollConfig{
			DataDir: d.dataDir, DeviceID: d.plan.id, Token: f.opts.EnrollToken,
			Servers: f.opts.Servers, RootCAs: f.roots, Logger: f.opts.Logger,
			ListenPacket: func() (net.PacketConn, error) { return f.listen(d) },
		})
		if err == nil {
			d.cert = cert
			return nil
		}
		var refused *wire.EnrollError
		if errors.As(err, &refused) && refused.Status != wire.EnrollUnavailable {
			return fmt.Errorf("enroll: %w", err)
		}
		if ctx.Err() != nil {
			return nil
		}
		f.log.Warn("enrollment failed, trying again", "device", d.plan.id, "error", err, "retry_in", wait)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(wait):
		}
		wait = min(2*wait, 30*time.Second)
	}
}

// goOffline runs the online/offline schedule of a device until ctx ends,
// the agent stops (exited, with the agent's error), or the device loses
// power; then it returns how long the power stays off (0 if it did not
// lose power).
func (f *Fleet) goOffline(ctx context.Context, d *device, rng *rand.Rand, jitter func(time.Duration) time.Duration, done <-chan error) (off time.Duration, exited bool, err error) {
	l := d.plan.link
	wait := jitter(l.onlineFor)
	for {
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return 0, false, nil
		case err := <-done:
			t.Stop()
			return 0, true, err
		case <-t.C:
		}
		off = jitter(l.offlineFor)
		if rng.Float64() < l.powerLoss {
			f.log.Debug("power loss", "device", d.plan.id, "off_for", off)
			d.mu.Lock()
			d.restarts++
			if d.ag != nil {
				// Nothing more reaches the journal: a step being applied
				// stays in flight, as on a device whose power went.
				d.ag.PowerCut()
			}
			d.mu.Unlock()
			return off, false, nil
		}
		f.log.Debug("offline", "device", d.plan.id, "off_for", off)
		d.mu.Lock()
		pc := d.pc
		d.outages++
		d.mu.Unlock()
		if pc != nil {
			pc.Blackhole(off)
		}
		wait = off + jitter(l.onlineFor)
	}
}

// newAgent builds the device's agent: its identity, labels, data dir, the
// sim driver only, and a socket wrapped in its link.
func (f *Fleet) newAgent(d *device) (*agent.Agent, error) {
	reg, err := simRegistry(d.root, d.simDev, f.log)
	if err != nil {
		return nil, err
	}
	cfg := agent.DefaultConfig()
	cfg.Servers = f.opts.Servers
	cfg.DataDir = d.dataDir
	cfg.Root = d.root
	cfg.Labels = d.plan.labels
	cfg.RootCAs = f.roots
	cfg.Certificate = d.cert
	if f.opts.EnrollToken != "" {
		// An enrolled device renews its certificate in its data dir.
		cfg.CertificateDir = d.dataDir
	}
	cfg.AgentVersion = "meteor-sim"
	cfg.Drivers = reg
	cfg.Logger = f.opts.Logger
	cfg.ListenPacket = func() (net.PacketConn, error) { return f.listen(d) }
	// Nobody works on a simulated device: no control socket, no lock
	// files (a thousand agents need not hold a thousand sockets).
	cfg.ControlSocket, cfg.LockDir = "-", "-"
	if f.opts.Agent != nil {
		f.opts.Agent(&cfg)
	}
	return agent.New(cfg)
}

// listen opens the device's UDP socket wrapped in its link, with one peer
// profile per server carrying the region delay.
func (f *Fleet) listen(d *device) (net.PacketConn, error) {
	laddr := &net.UDPAddr{}
	network := "udp"
	switch {
	case f.opts.LocalIP != nil:
		laddr.IP = f.opts.LocalIP
		if f.opts.LocalIP.To4() != nil {
			network = "udp4"
		}
	case f.loopback:
		laddr, network = &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)}, "udp4"
	}
	udp, err := net.ListenUDP(network, laddr)
	if err != nil {
		return nil, err
	}
	base := d.plan.link.base
	d.mu.Lock()
	defer d.mu.Unlock()
	pc := chaos.NewPacketConn(udp, base, d.plan.seed+uint64(d.sockets), nil, chaos.WithLogger(f.log))
	for _, s := range f.servers {
		p := base
		p.Delay += regionDelay(d.plan.region(), s.region)
		if err := pc.SetPeerProfile(s.udp, p); err != nil {
			pc.Close()
			return nil, err
		}
	}
	if d.pc != nil {
		d.prior = addStats(d.prior, d.pc.Stats())
	}
	d.pc = pc
	d.sockets++
	return pc, nil
}

func addStats(a, b chaos.Stats) chaos.Stats {
	add := func(x, y chaos.LinkStats) chaos.LinkStats {
		return chaos.LinkStats{
			Packets: x.Packets + y.Packets, Bytes: x.Bytes + y.Bytes,
			Sent: x.Sent + y.Sent, SentBytes: x.SentBytes + y.SentBytes,
			Dropped: x.Dropped + y.Dropped, DroppedBytes: x.DroppedBytes + y.DroppedBytes,
			Delayed: x.Delayed + y.Delayed, Duplicated: x.Duplicated + y.Duplicated,
			Reordered: x.Reordered + y.Reordered, Corrupted: x.Corrupted + y.Corrupted,
			Errors: x.Errors + y.Errors,
		}
	}
	return chaos.Stats{Out: add(a.Out, b.Out), In: add(a.In, b.In)}
}

// stats returns the device's counters over all its sockets.
func (d *device) statsLocked() chaos.Stats {
	if d.pc == nil {
		return d.prior
	}
	return addStats(d.prior, d.pc.Stats())
}

// simRegistry returns a driver registry in which only "sim" does
// anything: file, exec and certificate resources fail terminally, so a
// simulated device never touches the host (Root confines them anyway).
func simRegistry(root string, dev *driver.SimDevice, log hclog.Logger) (*driver.Registry, error) {
	reg, err := driver.NewRegistry(driver.Config{Root: root, Sim: dev, Logger: log})
	if err != nil {
		return nil, fmt.Errorf("sim drivers: %w", err)
	}
	for _, typ := range reg.Types() {
		if typ != "sim" {
			reg.Register(typ, refused{typ: typ})
		}
	}
	return reg, nil
}

// refused is the driver of every type a simulated device does not have.
type refused struct{ typ string }

func (r refused) err() error {
	return fmt.Errorf("%w %q: not simulated", driver.ErrUnknownType, r.typ)
}

func (r refused) Current(context.Context, intent.Resource) (driver.State, error) {
	return driver.State{}, r.err()
}
func (r refused) Diff(intent.Resource, driver.State) (driver.Diff, error) {
	return driver.Diff{}, r.err()
}
func (r refused) Apply(context.Context, intent.Resource) error { return r.err() }
func (r refused) Probe(context.Context, intent.Resource) (driver.Effective, error) {
	return driver.Effective{}, r.err()
}

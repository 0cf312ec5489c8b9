package agent

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/quic-go/quic-go"

	"github.com/meteor-edge/meteor/agent/driver"
	"github.com/meteor-edge/meteor/agent/journal"
	"github.com/meteor-edge/meteor/wire"
)

// Agent is a device agent: it keeps a session with the nearest server,
// journals the desired state it is given, reconciles the device towards
// it and reports what is applied and effective. Create it with New and
// run it with Run, once.
type Agent struct {
	cfg      Config // with defaults
	deviceID string
	log      hclog.Logger
	drivers  *driver.Registry
	st       *statusStore
	running  atomic.Bool
	// cert is the device certificate connections present; renewLoop
	// replaces it.
	cert atomic.Pointer[tls.Certificate]
	// refused0RTT counts connections whose 0-RTT data a server refused.
	refused0RTT atomic.Int64
	// binding is what the agent learned of its path's NAT binding; the
	// session goroutine of the moment uses it.
	binding *bindingLearner
	// traffic counts the datagrams of the agent's socket.
	traffic *trafficMeter
	// book holds the settings the control plane sent (classes first).
	book *settingsBook

	// Set by Run before its goroutines start, read by them.
	j   *journal.Journal
	rp  *reporter
	rec *reconciler

	// jnl is j while Run runs, for Status from any goroutine.
	jnl atomic.Pointer[journal.Journal]
}

// New validates cfg and returns an agent ready to Run.
func New(cfg Config) (*Agent, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	id, err := certDeviceID(cfg.Certificate)
	if err != nil {
		return nil, err
	}
	a := &Agent{cfg: cfg, deviceID: id, drivers: cfg.Drivers, traffic: newTrafficMeter(cfg.Clock.Now)}
	a.log = cfg.Logger.Named("agent").With("device", id)
	if a.drivers == nil {
		a.drivers, err = driver.NewRegistry(driver.Config{Root: cfg.Root, Clock: cfg.Clock, Logger: a.log, ExecPolicy: cfg.ExecPolicy})
		if err != nil {
			return nil, fmt.Errorf("agent drivers: %w", err)
		}
	}
	a.st = newStatusStore(id)
	a.book = newSettingsBook(&a.cfg)
	a.binding = newBindingLearner(cfg.KeepAliveMin, cfg.KeepAliveMax)
	a.publishBinding(false)
	cert := cfg.Certificate
	if cert.Leaf == nil {
		// certDeviceID parsed it already.
		cert.Leaf, _ = x509.ParseCertificate(cert.Certificate[0])
	}
	a.cert.Store(&cert)
	return a, nil
}

// PowerCut makes the agent's journal refuse every later write, as if the
// device lost power now: a step in flight stays in flight on disk, and the
// next agent started on the same data dir resolves it. Cancel Run's
// context after it to stop the agent. It does nothing before Run opened
// the journal.
func (a *Agent) PowerCut() {
	if j := a.jnl.Load(); j != nil {
		j.PowerCut()
	}
}

// DeviceID returns the device ID of the agent's certificate.
func (a *Agent) DeviceID() string { return a.deviceID }

// Run opens the journal and the agent's socket, then reconciles and keeps
// a session until ctx ends. It returns nil after ctx ended and every
// goroutine it started has exited and the journal is closed, or an error
// if it could not start. An Agent runs once.
func (a *Agent) Run(ctx context.Context) error {
	if !a.running.CompareAndSwap(false, true) {
		return errors.New("agent: Run called twice")
	}
	j, err := journal.Open(a.cfg.DataDir, journal.Options{Logger: a.log, Now: a.cfg.Clock.Now})
	if err != nil {
		return fmt.Errorf("agent: %w", err)
	}
	defer j.Close()
	sess, err := j.Session()
	if err != nil {
		return fmt.Errorf("agent: %w", err)
	}
	rev, err := j.DesiredRevision()
	if err != nil {
		return fmt.Errorf("agent: %w", err)
	}
	a.st.update(func(s *Status) {
		s.SessionID, s.AckedRevision, s.DesiredRevision = sess.ID, sess.AckedRevision, rev
	})
	if nat, ok, err := j.NATBinding(); err != nil {
		return fmt.Errorf("agent: %w", err)
	} else if ok {
		a.binding.restore(nat)
		a.publishBinding(false)
		a.log.Info("NAT binding restored from the journal; it is tested again", "verified", a.binding.safe, "keepalive_interval", a.binding.interval())
	}
	if days, err := j.Traffic(); err != nil {
		a.log.Warn("traffic counters unreadable; counting from zero", "error", err)
	} else {
		a.traffic.restore(days)
	}
	// Deferred before the socket closes, so it runs after: the last
	// datagrams are counted too.
	defer func() {
		if err := a.traffic.save(j); err != nil && !errors.Is(err, journal.ErrPowerCut) {
			a.log.Warn("save traffic counters", "error", err)
		}
	}()

	listen := a.cfg.ListenPacket
	if listen == nil {
		listen = defaultListener(a.cfg.Servers)
	}
	pc, err := listen()
	if err != nil {
		return fmt.Errorf("agent: open socket: %w", err)
	}
	defer pc.Close()
	tr := &quic.Transport{Conn: countTraffic(pc, a.traffic)}
	defer tr.Close()

	a.j = j
	if body, ok, err := j.Settings(); err != nil {
		return fmt.Errorf("agent: %w", err)
	} else if ok {
		var s wire.Settings
		if err := s.Decode(body); err != nil {
			a.log.Warn("settings in the journal unreadable; waiting for the servers'", "error", err)
		} else {
			a.book.set(&s)
		}
	}
	a.rp = newReporter(j, a.st, a.cfg.Clock, a.book.reportInterval, a.log.Named("report"))
	a.rec = newReconciler(&a.cfg, j, a.drivers, a.st, a.rp, a.book, a.log.Named("reconcile"))
	if a.rec.startup, err = startupOf(j, a.cfg.Clock.Now()); err != nil {
		return fmt.Errorf("agent: %w", err)
	}
	defer func() {
		// A clean stop; after a power cut nothing more is written, and the
		// next start knows it lost power.
		if err := j.Stop(); err != nil && !errors.Is(err, journal.ErrPowerCut) {
			a.log.Warn("record stop", "error", err)
		}
	}()
	if a.cfg.LockDir == "" && a.cfg.DataDir != "" {
		// The default lock directory, for workloads of the agent's user.
		if err := os.MkdirAll(a.cfg.lockDir(), 0o700); err != nil {
			return fmt.Errorf("agent: lock directory: %w", err)
		}
	}
	ctl, err := a.listenControl()
	if err != nil {
		return fmt.Errorf("agent: %w", err)
	}
	cm := newConnManager(a, tr)
	// Connections present the current certificate, which a renewal
	// replaces.
	cm.tlsConf.Certificates = nil
	cm.tlsConf.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return a.cert.Load(), nil }
	a.jnl.Store(j)
	defer a.jnl.Store(nil)

	a.log.Info("agent starting", "server_addrs", a.cfg.Servers, "data_dir", a.cfg.DataDir, "socket", pc.LocalAddr().String(),
		"session", sess.ID, "acked_revision", sess.AckedRevision, "desired_revision", rev)
	var wg sync.WaitGroup
	wg.Go(func() { a.rec.run(ctx) })
	wg.Go(func() { cm.run(ctx) })
	wg.Go(func() { a.traffic.saveLoop(ctx, j, a.cfg.Clock, a.log) })
	if a.cfg.CertificateDir != "" {
		wg.Go(func() { a.renewLoop(ctx, tr, cm) })
	}
	if ctl != nil {
		wg.Go(func() { ctl.serve(ctx) })
	}
	wg.Wait()
	a.log.Info("agent stopped")
	return nil
}

// Status returns a snapshot of the agent's state. It is safe to call at
// any time from any goroutine; before Run the report fields are zero.
func (a *Agent) Status() Status {
	s := a.st.snapshot()
	s.Traffic = a.traffic.snapshot()
	if set := a.book.settings(); set != nil {
		s.SettingsSeq = set.Seq
	}
	s.PullInterval, s.ReportInterval, s.ProbeIntervals = a.book.pullInterval(a.cfg.PullInterval), a.book.reportInterval(), a.book.probeIntervals()
	if j := a.jnl.Load(); j != nil {
		if sum, err := j.Summary(); err == nil {
			sess := sum.Session
			s.SessionID, s.AckedRevision = sess.ID, sess.AckedRevision
			s.LastReportSeq, s.AckedReportSeq = sess.LastReportSeq, sess.AckedReportSeq
			s.PendingReports = sum.PendingReports
		}
	}
	return s
}

// startupOf records the agent's start and says how it found the journal:
// whether the agent before stopped cleanly, and how many of the desired
// resources were applied then.
func startupOf(j *journal.Journal, now time.Time) (*journal.Recovery, error) {
	unclean, err := j.Start()
	if err != nil {
		return nil, err
	}
	p, err := j.Progress()
	if err != nil {
		return nil, err
	}
	set, err := j.Desired()
	if err != nil {
		return nil, err
	}
	return &journal.Recovery{At: now, Unclean: unclean, Total: len(set.Resources), Applied: len(p.Applied)}, nil
}

// defaultListener returns a listener on UDP port 0: on 127.0.0.1 when
// every server is an IPv4 loopback address, else on every address.
func defaultListener(servers []string) func() (net.PacketConn, error) {
	loopback := true
	for _, s := range servers {
		host, _, err := net.SplitHostPort(s)
		ip := net.ParseIP(host)
		if err != nil || ip == nil || ip.To4() == nil || !ip.IsLoopback() {
			loopback = false
		}
	}
	return func() (net.PacketConn, error) {
		if loopback {
			return net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
		}
		return net.ListenUDP("udp", &net.UDPAddr{})
	}
}

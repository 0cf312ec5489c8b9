package agent

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/quic-go/quic-go"

	"github.com/meteor-edge/meteor/agent/driver"
	"github.com/meteor-edge/meteor/wire"
)

// Clock is the agent's time source: reconcile cadences, retry backoff,
// report and pull intervals, connection backoff and RTT re-probes. It is
// the drivers' clock too. Inside a testing/synctest bubble
// driver.SystemClock() is the bubble's fake clock.
type Clock = driver.Clock

// Config configures an Agent. Build it from DefaultConfig, fill the
// identity and servers, and pass it to New, which validates it.
type Config struct {
	// Servers are the UDP addresses (host:port) of the cluster's agent
	// endpoints. The agent connects to the nearest and fails over to the
	// others. Required.
	Servers []string
	// DataDir holds the journal (journal.db). Required; created 0700 when
	// missing.
	DataDir string
	// Labels are sent in every Hello; the server registers the device with
	// them.
	Labels map[string]string
	// RootCAs verifies the servers (the cluster CA). Required.
	RootCAs *x509.CertPool
	// Certificate is the device certificate and key. The device ID is the
	// certificate's meteor://device/ URI SAN and nothing else. Required.
	Certificate tls.Certificate
	// CertificateDir, if set, is the directory whose DeviceCertFile
	// holds Certificate (LoadOrEnroll keeps it in the data dir): the
	// agent then renews the certificate there on its own, at about two
	// thirds of its lifetime, for a new key (docs/security.md, "Device
	// certificate rotation"). Empty: Certificate is managed outside the
	// agent and never renewed.
	CertificateDir string
	// AgentVersion is reported in Hello, for operators; empty means
	// "meteor-agent".
	AgentVersion string

	// Drivers runs resources; nil means driver.NewRegistry with Root,
	// Clock and Logger.
	Drivers *driver.Registry
	// Root confines the paths of file and certificate resources under a
	// directory (driver.Config.Root), for demos and tests; empty means the
	// real paths. Ignored when Drivers is set.
	Root string
	// ExecPolicy decides which programs exec resources may run and which
	// env variables their specs may set (driver.ExecPolicy); the zero
	// value allows every program and no spec variable. Ignored when
	// Drivers is set.
	ExecPolicy driver.ExecPolicy

	// Logger receives the agent's logs, named "agent"; nil means none.
	Logger hclog.Logger
	// Clock is the time source; nil means driver.SystemClock().
	Clock Clock

	// PullInterval is how often the agent pulls without a Notify, unless
	// the server's Welcome names one. Default 10 min: pushes are what
	// bring changes; the pull is the check that none was missed.
	PullInterval time.Duration
	// ReportInterval bounds the time between two full reports. Reports
	// in between carry only what changed, and an idle device sends none;
	// the full one checks what the server holds. Default 6 h.
	ReportInterval time.Duration
	// ReportResendMin is the first wait before a report the server has
	// not acknowledged is sent again on the same connection (a server
	// that cannot commit it, during an election, sends no ReportAck). The
	// wait is jittered and doubles up to ReportResendMax. Defaults 1 s
	// and 60 s.
	ReportResendMin, ReportResendMax time.Duration
	// ProbeInterval is the cadence at which applied resources are re-read
	// (drift) and re-probed (effective state). Default 60 s.
	ProbeInterval time.Duration
	// RetryMin and RetryMax bound the exponential backoff of a failing
	// apply, and of re-probes of an applied resource that is not yet
	// effective. Defaults 1 s and 5 min.
	//
	// PullInterval, ReportInterval, ProbeInterval, RetryMin and RetryMax
	// are the agent's own cadences: they hold for every class until a
	// server of protocol 1.4 sends the reconcile classes in effect
	// (wire.Settings), and with older servers. From then on each resource
	// is reconciled on its class's cadence, the pull and report intervals
	// being the shortest among the classes of the desired resources.
	RetryMin, RetryMax time.Duration

	// ControlSocket is the path of the agent's local control socket
	// (meteor agent override, meteor agent lock); empty means
	// DataDir/agent.sock, "-" none. Only the agent's user and root may use
	// it (the socket is mode 0600; docs/agent.md, "The control socket").
	ControlSocket string

	// LockDir is the directory of workload lock files: a file NAME in it
	// holds the lock NAME (docs/agent.md, "Workload locks"). Empty means
	// DataDir/locks, "-" none. LockMaxHold is the maximum hold of a lock
	// file that names none; default 4 h.
	LockDir     string
	LockMaxHold time.Duration

	// FightThreshold corrections of one resource's drift within
	// FightWindow make a fight: something on the device keeps undoing the
	// resource. The agent then reports it fighting and backs its
	// corrections off, from FightBackoffMin doubling to FightBackoffMax,
	// until a correction holds for a whole FightWindow. Defaults 3, 10
	// min, 1 min and 1 h.
	FightThreshold                   int
	FightWindow                      time.Duration
	FightBackoffMin, FightBackoffMax time.Duration

	// BackoffMin and BackoffMax bound the jittered exponential backoff
	// between connection attempts once every server failed. Defaults
	// 500 ms and 30 s.
	BackoffMin, BackoffMax time.Duration
	// DialTimeout bounds one connection attempt (handshake, or Hello to
	// Welcome). Default wire.HandshakeIdleTimeout.
	DialTimeout time.Duration
	// RTTProbeInterval is how often, while connected, the agent first
	// measures the round-trip time to every server with a short (resumed)
	// handshake. A round that measured every server and found none
	// clearly nearer confirms the choice: the next comes after
	// RTTProbeMaxInterval. While some server cannot be measured the
	// interval doubles after each round, up to RTTProbeMaxInterval; it
	// drops back when a server looks nearer or the current session's RTT
	// grows clearly. Default 60 s; negative disables re-probing.
	RTTProbeInterval time.Duration
	// RTTProbeMaxInterval caps that backoff. A connection whose handshake
	// race measured every server and found none nearer starts at the cap.
	// Default 24 h; below RTTProbeInterval it is RTTProbeInterval (no
	// backoff).
	RTTProbeMaxInterval time.Duration
	// KeepAliveMin and KeepAliveMax bound the interval of the agent's own
	// keep-alives (protocol 1.3). The agent starts at KeepAliveMin and
	// learns, with NAT binding tests, how long its path may stay silent,
	// spacing keep-alives up to KeepAliveMax. Defaults
	// wire.KeepAliveStart (25 s) and 2 min: an idle agent notices that its
	// server died within one interval plus KeepAliveTimeout, so the cap
	// bounds failover as much as it saves traffic. KeepAliveMax at or
	// below KeepAliveMin turns learning off.
	KeepAliveMin, KeepAliveMax time.Duration
	// KeepAliveTimeout is how long after a keep-alive the agent waits for
	// any packet from its server before it takes the server, or the path,
	// for dead and connects again. Default 15 s: longer than a lossy
	// link's retransmissions take, or than the outages of chaos's
	// cellular profile.
	KeepAliveTimeout time.Duration

	// SwitchRatio and SwitchMargin are the hysteresis of the nearest-server
	// choice: the agent moves only to a server whose RTT is lower than the
	// current one's by more than SwitchRatio (a fraction) and by more than
	// SwitchMargin, in SwitchProbes consecutive probe rounds. Defaults
	// 0.3, 5 ms and 3.
	SwitchRatio  float64
	SwitchMargin time.Duration
	SwitchProbes int

	// ListenPacket opens the agent's UDP socket; every connection and
	// probe of the agent shares it through one quic.Transport. nil means
	// UDP on 0.0.0.0:0 (127.0.0.1:0 when every server is on loopback).
	// Tests wrap the socket to inject faults.
	ListenPacket func() (net.PacketConn, error)
	// QUIC is the QUIC configuration of connections; nil means
	// wire.ClientQUICConfig(). Tests shorten its idle timeout.
	QUIC *quic.Config
}

// Defaults of Config.
const (
	DefaultPullInterval     = 10 * time.Minute
	DefaultReportInterval   = 6 * time.Hour
	DefaultReportResendMin  = time.Second
	DefaultReportResendMax  = 60 * time.Second
	DefaultProbeInterval    = 60 * time.Second
	DefaultRetryMin         = time.Second
	DefaultRetryMax         = 5 * time.Minute
	DefaultBackoffMin       = 500 * time.Millisecond
	DefaultBackoffMax       = 30 * time.Second
	DefaultRTTProbeInterval = 60 * time.Second
	DefaultRTTProbeMax      = 24 * time.Hour
	DefaultKeepAliveMax     = 2 * time.Minute
	DefaultKeepAliveTimeout = 15 * time.Second
	DefaultSwitchRatio      = 0.3
	DefaultSwitchMargin     = 5 * time.Millisecond
	DefaultSwitchProbes     = 3
	DefaultLockMaxHold      = 4 * time.Hour
	DefaultFightThreshold   = 3
	DefaultFightWindow      = 10 * time.Minute
	DefaultFightBackoffMin  = time.Minute
	DefaultFightBackoffMax  = time.Hour
)

// DefaultConfig returns a Config with every interval at its default and no
// identity, servers or data directory.
func DefaultConfig() Config {
	return Config{
		PullInterval:        DefaultPullInterval,
		ReportInterval:      DefaultReportInterval,
		ReportResendMin:     DefaultReportResendMin,
		ReportResendMax:     DefaultReportResendMax,
		ProbeInterval:       DefaultProbeInterval,
		RetryMin:            DefaultRetryMin,
		RetryMax:            DefaultRetryMax,
		BackoffMin:          DefaultBackoffMin,
		BackoffMax:          DefaultBackoffMax,
		DialTimeout:         wire.HandshakeIdleTimeout,
		RTTProbeInterval:    DefaultRTTProbeInterval,
		RTTProbeMaxInterval: DefaultRTTProbeMax,
		KeepAliveMin:        wire.KeepAliveStart,
		KeepAliveMax:        DefaultKeepAliveMax,
		KeepAliveTimeout:    DefaultKeepAliveTimeout,
		SwitchRatio:         DefaultSwitchRatio,
		SwitchMargin:        DefaultSwitchMargin,
		SwitchProbes:        DefaultSwitchProbes,
		LockMaxHold:         DefaultLockMaxHold,
		FightThreshold:      DefaultFightThreshold,
		FightWindow:         DefaultFightWindow,
		FightBackoffMin:     DefaultFightBackoffMin,
		FightBackoffMax:     DefaultFightBackoffMax,
	}
}

// Validate reports whether the config is usable. Zero intervals are
// accepted and mean their defaults.
func (c Config) Validate() error {
	var errs []error
	if len(c.Servers) == 0 {
		errs = append(errs, errors.New("no servers"))
	}
	for _, s := range c.Servers {
		if _, _, err := net.SplitHostPort(s); err != nil {
			errs = append(errs, fmt.Errorf("server %q: %w", s, err))
		}
	}
	if c.DataDir == "" {
		errs = append(errs, errors.New("no data dir"))
	}
	if c.RootCAs == nil {
		errs = append(errs, errors.New("no root CAs"))
	}
	if _, err := certDeviceID(c.Certificate); err != nil {
		errs = append(errs, err)
	}
	if c.Root != "" && !filepath.IsAbs(c.Root) {
		errs = append(errs, fmt.Errorf("root %q must be absolute", c.Root))
	}
	if len(c.Labels) > wire.MaxLabels {
		errs = append(errs, fmt.Errorf("%d labels, at most %d", len(c.Labels), wire.MaxLabels))
	}
	for k, v := range c.Labels {
		if k == "" || len(k) > wire.MaxNameLen || len(v) > wire.MaxNameLen {
			errs = append(errs, fmt.Errorf("label %q: key must be 1-%d bytes and value at most %d", k, wire.MaxNameLen, wire.MaxNameLen))
		}
	}
	for name, d := range map[string]time.Duration{
		"pull interval": c.PullInterval, "report interval": c.ReportInterval, "report resend min": c.ReportResendMin,
		"report resend max": c.ReportResendMax,
		"probe interval":    c.ProbeInterval, "retry min": c.RetryMin, "retry max": c.RetryMax,
		"backoff min": c.BackoffMin, "backoff max": c.BackoffMax, "dial timeout": c.DialTimeout,
		"switch margin": c.SwitchMargin, "rtt probe max interval": c.RTTProbeMaxInterval,
		"keep-alive min": c.KeepAliveMin, "keep-alive max": c.KeepAliveMax, "keep-alive timeout": c.KeepAliveTimeout,
		"lock max hold": c.LockMaxHold, "fight window": c.FightWindow, "fight backoff min": c.FightBackoffMin, "fight backoff max": c.FightBackoffMax,
	} {
		if d < 0 {
			errs = append(errs, fmt.Errorf("%s %v is negative", name, d))
		}
	}
	if c.RetryMin > 0 && c.RetryMax > 0 && c.RetryMin > c.RetryMax {
		errs = append(errs, fmt.Errorf("retry min %v above retry max %v", c.RetryMin, c.RetryMax))
	}
	if c.BackoffMin > 0 && c.BackoffMax > 0 && c.BackoffMin > c.BackoffMax {
		errs = append(errs, fmt.Errorf("backoff min %v above backoff max %v", c.BackoffMin, c.BackoffMax))
	}
	if c.SwitchRatio < 0 || c.SwitchRatio >= 1 {
		errs = append(errs, fmt.Errorf("switch ratio %v not in [0,1)", c.SwitchRatio))
	}
	if c.FightThreshold < 0 {
		errs = append(errs, fmt.Errorf("fight threshold %d is negative", c.FightThreshold))
	}
	if c.SwitchProbes < 0 {
		errs = append(errs, fmt.Errorf("switch probes %d is negative", c.SwitchProbes))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("agent config: %w", err)
	}
	return nil
}

// withDefaults fills zero fields with their documented defaults.
func (c Config) withDefaults() Config {
	def := DefaultConfig()
	set := func(v *time.Duration, d time.Duration) {
		if *v == 0 {
			*v = d
		}
	}
	set(&c.PullInterval, def.PullInterval)
	set(&c.ReportInterval, def.ReportInterval)
	set(&c.ReportResendMin, def.ReportResendMin)
	set(&c.ReportResendMax, def.ReportResendMax)
	c.ReportResendMax = max(c.ReportResendMax, c.ReportResendMin)
	set(&c.ProbeInterval, def.ProbeInterval)
	set(&c.RetryMin, def.RetryMin)
	set(&c.RetryMax, def.RetryMax)
	set(&c.BackoffMin, def.BackoffMin)
	set(&c.BackoffMax, def.BackoffMax)
	set(&c.DialTimeout, def.DialTimeout)
	set(&c.RTTProbeInterval, def.RTTProbeInterval)
	set(&c.RTTProbeMaxInterval, def.RTTProbeMaxInterval)
	c.RTTProbeMaxInterval = max(c.RTTProbeMaxInterval, c.RTTProbeInterval)
	set(&c.KeepAliveMin, def.KeepAliveMin)
	set(&c.KeepAliveMax, def.KeepAliveMax)
	c.KeepAliveMax = max(c.KeepAliveMax, c.KeepAliveMin)
	set(&c.KeepAliveTimeout, def.KeepAliveTimeout)
	set(&c.SwitchMargin, def.SwitchMargin)
	if c.SwitchRatio == 0 {
		c.SwitchRatio = def.SwitchRatio
	}
	if c.SwitchProbes == 0 {
		c.SwitchProbes = def.SwitchProbes
	}
	if c.FightThreshold == 0 {
		c.FightThreshold = def.FightThreshold
	}
	set(&c.LockMaxHold, def.LockMaxHold)
	set(&c.FightWindow, def.FightWindow)
	set(&c.FightBackoffMin, def.FightBackoffMin)
	set(&c.FightBackoffMax, def.FightBackoffMax)
	c.FightBackoffMax = max(c.FightBackoffMax, c.FightBackoffMin)
	if c.AgentVersion == "" {
		c.AgentVersion = "meteor-agent"
	}
	if c.Logger == nil {
		c.Logger = hclog.NewNullLogger()
	}
	if c.Clock == nil {
		c.Clock = driver.SystemClock()
	}
	if c.QUIC == nil {
		c.QUIC = wire.ClientQUICConfig()
	}
	return c
}

// lockDir is the lock directory; "" for none.
func (c *Config) lockDir() string {
	switch c.LockDir {
	case "-":
		return ""
	case "":
		return filepath.Join(c.DataDir, "locks")
	}
	return c.LockDir
}

// certDeviceID returns the device ID of a device certificate.
func certDeviceID(cert tls.Certificate) (string, error) {
	leaf := cert.Leaf
	if leaf == nil {
		if len(cert.Certificate) == 0 {
			return "", errors.New("no device certificate")
		}
		var err error
		if leaf, err = x509.ParseCertificate(cert.Certificate[0]); err != nil {
			return "", fmt.Errorf("device certificate: %w", err)
		}
	}
	if cert.PrivateKey == nil {
		return "", errors.New("device certificate has no private key")
	}
	id, err := wire.DeviceIDFromCert(leaf)
	if err != nil {
		return "", fmt.Errorf("device certificate: %w", err)
	}
	return id, nil
}

// DeviceIDFromCertificate returns the device ID the servers will see for
// cert: its meteor://device/<id> URI SAN.
func DeviceIDFromCertificate(cert tls.Certificate) (string, error) { return certDeviceID(cert) }

package cluster

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/memberlist"
	"github.com/hashicorp/raft"

	"github.com/meteor-edge/meteor/cluster/pki"
	"github.com/meteor-edge/meteor/fsm"
	"github.com/meteor-edge/meteor/scheduler"
	"github.com/meteor-edge/meteor/wire"
)

// Config configures a server node. Build it from DefaultConfig and set the
// addresses and identity.
type Config struct {
	// NodeID names the server; it must be unique in the cluster and stable
	// across restarts (it is recorded in DataDir).
	NodeID string
	// Region is the server's region, used to place devices near it.
	Region string
	// DataDir holds the Raft log, stable store and snapshots.
	DataDir string

	// HTTPAddr is the host:port the HTTP API listens on; RaftAddr the TCP
	// host:port for Raft; GossipAddr the host:port (TCP and UDP) for
	// memberlist. Port 0 picks a free port (tests). The addresses are also
	// what other servers use to reach this one, so they must not be
	// wildcard addresses.
	HTTPAddr   string
	RaftAddr   string
	GossipAddr string

	// Join lists gossip addresses of servers to join at start.
	Join []string
	// BootstrapExpect, when non-zero, forms a new cluster once this many
	// servers see each other through gossip and none of them has Raft
	// state yet. Every server of the initial set must use the same value.
	BootstrapExpect int
	// Dev runs a single throw-away server that bootstraps itself.
	Dev bool

	// GossipKey, if set, encrypts gossip (16, 24 or 32 bytes, AES).
	GossipKey []byte

	// AgentAddr, if set, is the UDP host:port agents connect to over QUIC.
	// It needs AgentTLS.
	AgentAddr string
	// AgentTLS holds the cluster CA and this server's certificate.
	AgentTLS *AgentTLS
	// DeviceCA, if set, is the cluster CA with its private key: this
	// server then signs the certificate requests of devices enrolling
	// with a token and of enrolled devices renewing their certificate
	// (docs/security.md, "Device enrollment"). Its certificate must be
	// among AgentTLS.ClientCAs. nil: enrollments and renewals sent here
	// are answered with an error naming --ca-key-file.
	DeviceCA *pki.CA
	// DeviceCertLifetime is how long the device certificates this server
	// signs are valid; zero means pki.DefaultDeviceValidity (90 days).
	// Agents renew at about two thirds of it.
	DeviceCertLifetime time.Duration
	// PeerTLS, if set, runs Raft over mutual TLS: servers accept and dial
	// only servers with a certificate of the cluster CA, a server is
	// added to the Raft configuration (or bootstrapped with) only after
	// its certificate proved the node ID gossip announced for it, and a
	// dialled server must prove the node ID the configuration has at its
	// address. The HTTP API then speaks TLS with the same certificate, and
	// its internal endpoints take only servers that present theirs. nil
	// means plain TCP and HTTP (docs/security.md).
	PeerTLS *PeerTLS
	// ClusterSecret, shared by every server, derives the keys of resume
	// tokens and TLS session tickets, and signs server-to-server requests.
	// At least 16 bytes; required with AgentAddr.
	ClusterSecret []byte
	// Now is the wall clock the server stamps and judges by (intent write
	// times, device last-seen and status times, key epochs); nil means
	// time.Now. Tests and chaos scenarios skew it. Raft and memberlist
	// keep their own (monotonic) timers, as they would on a host whose
	// wall clock is wrong.
	Now func() time.Time
	// Clock is the clock the server's components measure durations and
	// run timers on, and, unless Now is set, read the wall clock from; nil
	// means the host's (SystemClock). Raft and memberlist keep their own
	// timers.
	Clock Clock
	// TokenLifetime is how long a resume token stays valid; TicketPeriod
	// how often session ticket and token keys rotate. Servers accept the
	// keys of the previous and the next period too, so a server whose
	// clock is up to one period ahead of or behind another's still resumes
	// the sessions the other opened.
	TokenLifetime time.Duration
	TicketPeriod  time.Duration
	// PullInterval is the pull cadence servers suggest to agents: the
	// check that no push was missed, not the way changes travel (a Notify
	// brings them at once). Default 10 min.
	PullInterval time.Duration
	// SessionCheckInterval is how often a server compares the replica's
	// record of every device connected here (or lately connected) with its
	// sessions and commits what differs (see sessionSync), besides doing so
	// for each device whose session changed.
	SessionCheckInterval time.Duration
	// LagWait is how long a server whose replica is behind an agent's
	// acknowledged revision waits to catch up before sending the agent
	// elsewhere.
	LagWait time.Duration
	// StatusBatchSize and StatusBatchInterval bound how many status
	// transitions an owner puts in one Raft entry and how long the first
	// of them waits for others. StatusEvalInterval is how often an owner
	// re-classifies its devices (silence becomes unreachable, lack of
	// progress stuck).
	StatusBatchSize     int
	StatusBatchInterval time.Duration
	StatusEvalInterval  time.Duration
	// Classes is the server's built-in set of reconcile classes
	// (default: intent.BuiltinClasses): the classes in effect until an
	// operator writes one of the same name (meteor class apply), which
	// the replicated state then holds. Every server of a cluster should
	// have the same set: a class nobody wrote is judged, and pushed to
	// agents, as each server's set has it.
	Classes scheduler.Classes

	// TrustReportedLabels makes intent selection take the labels a device
	// reports in its Hello as its labels while the control plane has given
	// it none (fsm.DeviceRecord.SelectionLabels). Reported labels are
	// self-asserted: any holder of a device certificate can claim
	// role=pos-gateway and receive what such devices receive. Only
	// development and in-process clusters, which enroll no devices, trust
	// them (Dev implies it; StartLocal sets it). false: a device is
	// selected by the labels the control plane gave it (enrollment,
	// meteor device label), and by none until then.
	TrustReportedLabels bool

	// AgentIdleTimeout, if set, replaces the QUIC idle timeout of agent
	// connections (wire.MaxIdleTimeout): how long a silent agent keeps its
	// session before the server records it as disconnected. Agents of
	// protocol 1.3 announce their own silence (Ping), which the server
	// holds them to as well (wire.LivenessBound).
	AgentIdleTimeout time.Duration
	// AgentLivenessSlack, if set, replaces wire.LivenessSlack in the
	// liveness bound of agents of 1.3. Tests shorten it.
	AgentLivenessSlack time.Duration

	// NotifyWindow bounds how many sessions a change is being pushed to
	// at once on this server (notifyWindow); 0 means
	// DefaultNotifyWindow. NotifyPullWait is how long a push holds its
	// place waiting for the device's Pull; 0 means DefaultNotifyPullWait.
	NotifyWindow   int
	NotifyPullWait time.Duration
	// AckFoldWait is how long a device's acknowledgement is left to the
	// report that follows it, which commits both in one entry, before the
	// session server commits it alone (agentSession.handleAck); 0 means
	// DefaultAckFoldWait. Tests lengthen it.
	AckFoldWait time.Duration

	// AgentPacketConn, if set, wraps the agents' UDP socket as quic-go
	// would otherwise be given it, agentSocket (fault injection in tests).
	AgentPacketConn func(net.PacketConn) net.PacketConn

	// FSM configures the state machine. Every server must use the same
	// history limit. Its FeatureLevel is set from FeatureLevel.
	FSM fsm.Config

	// FeatureLevel and WireMinor are the feature level of the state
	// machine (fsm.FeatureLevel) and the agent protocol minor
	// (wire.ProtocolMinor) this server runs and advertises in gossip;
	// zero means this release's. A lower value makes the server stand
	// for one of an earlier release: its replica applies and restores
	// only what that level did, and it speaks that minor to agents. Tests
	// of mixed-version clusters and rolling upgrades set them.
	FeatureLevel uint16
	WireMinor    uint16

	// SnapshotThreshold and SnapshotInterval control Raft snapshots;
	// TrailingLogs how many entries stay after one.
	SnapshotThreshold uint64
	SnapshotInterval  time.Duration
	TrailingLogs      uint64

	// RaftMultiplier scales Raft's heartbeat, election and leader-lease
	// timeouts (1 s each at 1) for slow or shared hosts and long round
	// trips between regions, where a busy leader would otherwise step down.
	// The default, 2, holds on a 2-core host with other work running
	// (docs/operations.md); 1 halves the time to replace a failed leader.
	// 0 means 1.
	RaftMultiplier int

	// ApplyTimeout bounds how long a write waits to be committed.
	ApplyTimeout time.Duration
	// DrainTimeout bounds Drain, which Run does before it shuts the
	// server down (leadership hand-over, agents told to go); 0 means
	// DefaultDrainTimeout.
	DrainTimeout time.Duration
	// RolloutInterval is how often the leader judges every rollout in
	// progress and commits what it decides; 0 means a second.
	RolloutInterval time.Duration
	// ReconcileInterval is how often the leader reconciles Raft membership
	// with gossip, besides reacting to gossip events.
	ReconcileInterval time.Duration
	// ReconnectInterval is how often a server tries to rejoin servers
	// gossip considers failed (after a partition heals, for instance).
	ReconnectInterval time.Duration

	// PeerScheme is the scheme of the requests a server makes to other
	// servers' HTTP APIs (forwarded writes and reads, forwarded reports,
	// status): "http" or "https". "" means "https" with PeerTLS (whose
	// HTTP API then speaks TLS), "http" without.
	PeerScheme string
	// PeerClient makes those requests (its transport carries the TLS
	// configuration for "https"); nil means a client that keeps up to 256
	// idle connections per server and, with PeerTLS, presents this
	// server's certificate and trusts only servers of the cluster CA.
	PeerClient *http.Client

	// LeaderWorkers run while this server leads, after the server's own
	// (the membership reconciler); see LeaderWorker.
	LeaderWorkers []LeaderWorker

	// ACL, if set, authenticates operator requests: every endpoint but
	// the liveness probe (/v1/healthz) and the signed internal ones needs
	// a token whose policy and scope allow it (docs/security.md,
	// "Operators"). It needs ClusterSecret, which signs what servers
	// forward to each other. nil means no authentication.
	ACL *ACLConfig

	// EnableDebug serves Go's profiling endpoints under /debug/pprof/ on
	// the HTTP API. Leave it off on untrusted networks.
	EnableDebug bool

	// Logger receives the server's logs; nil means hclog.Default().
	Logger hclog.Logger

	// RaftTuning, if set, adjusts the Raft configuration before start
	// (tests tighten timeouts with it).
	RaftTuning func(*raft.Config)
	// GossipTuning, if set, adjusts the memberlist configuration.
	GossipTuning func(*memberlist.Config)
	// RaftLayer, if set, wraps the Raft TCP listener (fault injection).
	// nil means plain TCP.
	RaftLayer func(nodeID string, ln net.Listener) raft.StreamLayer
	// GossipTransport, if set, wraps memberlist's transport.
	GossipTransport func(nodeID string, t memberlist.NodeAwareTransport) memberlist.NodeAwareTransport
}

// DefaultConfig returns a configuration with production defaults and no
// identity or addresses.
func DefaultConfig() Config {
	return Config{
		Region:               "default",
		FSM:                  fsm.DefaultConfig(),
		SnapshotThreshold:    8192,
		SnapshotInterval:     2 * time.Minute,
		TrailingLogs:         10240,
		ApplyTimeout:         10 * time.Second,
		RaftMultiplier:       2,
		ReconcileInterval:    5 * time.Second,
		ReconnectInterval:    30 * time.Second,
		TokenLifetime:        24 * time.Hour,
		TicketPeriod:         time.Hour,
		PullInterval:         10 * time.Minute,
		SessionCheckInterval: 10 * time.Second,
		LagWait:              2 * time.Second,

		StatusBatchSize:     512,
		StatusBatchInterval: 50 * time.Millisecond,
		StatusEvalInterval:  5 * time.Second,
		Classes:             scheduler.DefaultClasses(),
	}
}

// AgentTLS is the TLS material for serving agents: the cluster CA that
// signs device certificates, and this server's certificate, which
// Server.ReloadTLS replaces at run time (see reloadableAgentTLS).
type AgentTLS struct {
	ClientCAs   *x509.CertPool
	Certificate tls.Certificate

	live atomic.Pointer[tlsMaterial] // set by reload; nil: ClientCAs, Certificate
}

// Validate checks the configuration and says what to fix.
func (c *Config) Validate() error {
	var errs []error
	if err := CheckNodeID(c.NodeID); err != nil {
		errs = append(errs, err)
	}
	if c.Region == "" {
		errs = append(errs, errors.New("region: must not be empty"))
	}
	if c.DataDir == "" {
		errs = append(errs, errors.New("data dir: must be set"))
	}
	for name, addr := range map[string]string{"http addr": c.HTTPAddr, "raft addr": c.RaftAddr, "gossip addr": c.GossipAddr} {
		if err := checkAddr(addr); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", name, err))
		}
	}
	if c.BootstrapExpect < 0 || c.BootstrapExpect > 7 {
		errs = append(errs, fmt.Errorf("bootstrap expect %d: must be between 1 and 7 (3 or 5 recommended)", c.BootstrapExpect))
	}
	if c.Dev && c.BootstrapExpect > 1 {
		errs = append(errs, errors.New("dev mode runs a single server: do not set bootstrap expect"))
	}
	if k := len(c.GossipKey); k != 0 && k != 16 && k != 24 && k != 32 {
		errs = append(errs, fmt.Errorf("gossip key: %d bytes, must be 16, 24 or 32", k))
	}
	if c.AgentAddr != "" {
		if err := checkAddr(c.AgentAddr); err != nil {
			errs = append(errs, fmt.Errorf("agent addr: %w", err))
		}
		if c.AgentTLS == nil {
			errs = append(errs, errors.New("agent addr: serving agents needs the cluster CA and a server certificate (--ca-file, --cert-file, --key-file)"))
		} else if c.DeviceCA != nil {
			if _, err := c.DeviceCA.Cert.Verify(x509.VerifyOptions{Roots: c.AgentTLS.ClientCAs, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}}); err != nil {
				errs = append(errs, fmt.Errorf("ca key: the CA of --ca-key-file is not the cluster CA the agent port trusts (--ca-file): %v", err))
			}
		}
		if c.DeviceCertLifetime < 0 {
			errs = append(errs, fmt.Errorf("device cert lifetime %v: must not be negative (0: 90 days)", c.DeviceCertLifetime))
		}
		if len(c.ClusterSecret) < 16 {
			errs = append(errs, errors.New("agent addr: serving agents needs a cluster secret of at least 16 bytes, the same on every server (--cluster-secret-file)"))
		}
		if c.TicketPeriod < time.Minute || c.TokenLifetime < c.TicketPeriod || c.PullInterval <= 0 || c.LagWait <= 0 || c.SessionCheckInterval <= 0 {
			errs = append(errs, errors.New("agent timings: ticket period at least 1m, token lifetime at least the ticket period, pull interval, session check interval and lag wait positive"))
		}
	}
	if c.ACL != nil {
		if err := c.ACL.Validate(); err != nil {
			errs = append(errs, err)
		}
		if len(c.ClusterSecret) < 16 {
			errs = append(errs, errors.New("acl: authenticating operators needs a cluster secret of at least 16 bytes, the same on every server (--cluster-secret-file): it signs the requests servers forward"))
		}
	}
	if c.PeerScheme != "" && c.PeerScheme != "http" && c.PeerScheme != "https" {
		errs = append(errs, fmt.Errorf("peer scheme %q: must be http or https", c.PeerScheme))
	}
	if c.StatusBatchSize < 1 || c.StatusBatchInterval <= 0 || c.StatusEvalInterval <= 0 {
		errs = append(errs, errors.New("status batch size, batch interval and evaluation interval must be positive"))
	}
	if err := c.Classes.Validate(); err != nil {
		errs = append(errs, fmt.Errorf("classes: %w", err))
	}
	if err := c.FSM.Validate(); err != nil {
		errs = append(errs, err)
	}
	if c.FeatureLevel > fsm.FeatureLevel || c.WireMinor > wire.ProtocolMinor {
		errs = append(errs, fmt.Errorf("feature level %d, wire minor %d: this release runs up to level %d and minor %d", c.FeatureLevel, c.WireMinor, fsm.FeatureLevel, wire.ProtocolMinor))
	}
	if c.RaftMultiplier < 0 || c.RaftMultiplier > 10 {
		errs = append(errs, fmt.Errorf("raft multiplier %d: must be between 1 and 10", c.RaftMultiplier))
	}
	if c.ApplyTimeout <= 0 || c.ReconcileInterval <= 0 || c.ReconnectInterval <= 0 {
		errs = append(errs, errors.New("apply timeout, reconcile and reconnect intervals must be positive"))
	}
	return errors.Join(errs...)
}

func checkAddr(addr string) error {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("%q is not host:port: %w", addr, err)
	}
	ip := net.ParseIP(host)
	if ip == nil {
		return fmt.Errorf("%q: host must be an IP address", addr)
	}
	if ip.IsUnspecified() {
		return fmt.Errorf("%q: other servers must be able to reach this address; use a specific IP, not %s", addr, host)
	}
	if _, err := net.LookupPort("tcp", port); err != nil {
		return fmt.Errorf("%q: bad port: %w", addr, err)
	}
	return nil
}

func (c *Config) drainTimeout() time.Duration {
	if c.DrainTimeout <= 0 {
		return DefaultDrainTimeout
	}
	return c.DrainTimeout
}

// ParseGossipKey decodes a base64 gossip encryption key.
func ParseGossipKey(s string) ([]byte, error) {
	k, err := base64.StdEncoding.DecodeString(s)
	if err != nil {
		return nil, fmt.Errorf("gossip key: not base64: %w", err)
	}
	if n := len(k); n != 16 && n != 24 && n != 32 {
		return nil, fmt.Errorf("gossip key: %d bytes after decoding, must be 16, 24 or 32", n)
	}
	return k, nil
}

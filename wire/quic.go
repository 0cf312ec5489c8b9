package wire

import (
	"context"
	"fmt"
	"net"
	"time"

	"github.com/quic-go/quic-go"
)

// QUIC timing shared by servers and agents.
const (
	// MaxIdleTimeout closes a connection after this long without any packet
	// from the peer. At protocol 1.3 it is only a backstop: agents send
	// their own keep-alives (Ping), as far apart as their path allows, and
	// each side judges the other's liveness from them (LivenessBound on
	// the server, Config.KeepAliveTimeout on the agent). A peer of 1.2 or
	// earlier offers LegacyIdleTimeout, and QUIC uses the lower of the two
	// sides' values.
	MaxIdleTimeout = 20 * time.Minute
	// KeepAlivePeriod is when QUIC itself sends a keep-alive on an agent's
	// connection: after half the negotiated idle timeout without a packet
	// received (quic-go caps the period there). Against a 1.3 server that
	// never happens, the agent's Pings being answered long before; against
	// an earlier server, which offers LegacyIdleTimeout, it makes QUIC
	// keep the path alive every 15 s, as agents of 1.2 did.
	KeepAlivePeriod = MaxIdleTimeout / 2
	// LegacyIdleTimeout is the idle timeout of protocol 1.2 and earlier.
	LegacyIdleTimeout = 30 * time.Second
	// HandshakeIdleTimeout allows for slow, lossy links (quic-go's default
	// is 5 s).
	HandshakeIdleTimeout = 10 * time.Second
	// MaxControlStreams bounds the bidirectional streams an agent may have
	// open at once. Version 1 uses one control stream per connection; the
	// headroom lets a later minor add streams without lowering a limit,
	// which would make servers refuse 0-RTT for tickets issued before.
	MaxControlStreams = 4
)

// SharedConnectionIDLength is the length of the connection IDs chosen by
// a QUIC transport that many connections share: a server's agent socket,
// which carries every session on the server, and the sockets the
// benchmarks' simulated devices share. quic-go files a connection under
// each ID it chooses for it, the first one and those it issues once the
// handshake is done (which the peer moves to at once), without making
// sure no live connection of the transport has it: the first it files
// over the other connection's, an issued one it does not file at all.
// Either way the packets the peer sends under that ID go to the wrong
// connection, which cannot decrypt them, and a session goes silent, with
// nothing logged, until its liveness bound or idle timeout ends it.
// quic-go's default is 4 random bytes: each new connection then takes
// the ID in use of one of the n live ones with a chance of n/2³², so a
// fleet of n connecting silences about n²/2³³ sessions, 0.001 for the
// 3,300 of a server in the fan-out benchmark but 1.2 for 100,000, and
// every reconnect after that another 2·10⁻⁵ (one a day for 100,000
// devices reconnecting twice a day). 8 bytes make it 3·10⁻¹⁰ for
// 100,000. It costs 4 bytes in every packet sent to the transport.
const SharedConnectionIDLength = 8

// NewSharedTransport returns a QUIC transport on pc for many connections,
// which chooses IDs of SharedConnectionIDLength bytes.
func NewSharedTransport(pc net.PacketConn) *quic.Transport {
	return &quic.Transport{Conn: pc, ConnectionIDLength: SharedConnectionIDLength}
}

// ServerQUICConfig returns the QUIC configuration of a server: 0-RTT
// allowed (only Hello and Pull may be acted on before the handshake
// completes, see AllowedInEarlyData), MaxIdleTimeout, up to
// MaxControlStreams bidirectional and no unidirectional streams from the
// agent, and no path MTU discovery: its probes, padded datagrams of up
// to 1,452 bytes, a few to each agent once there is something to send,
// made the first change after a fleet connected cost its servers half
// again the CPU of later ones (docs/performance.md), and what a server
// sends an agent is mostly small. Servers send no keep-alives; agents do.
// Every server of a cluster must use the same limits: quic-go accepts
// 0-RTT only if the server's current transport parameters are at least
// those remembered in the session ticket, which may come from another
// server.
func ServerQUICConfig() *quic.Config {
	return &quic.Config{
		HandshakeIdleTimeout:    HandshakeIdleTimeout,
		MaxIdleTimeout:          MaxIdleTimeout,
		MaxIncomingStreams:      MaxControlStreams,
		MaxIncomingUniStreams:   -1,
		Allow0RTT:               true,
		DisablePathMTUDiscovery: true,
	}
}

// ClientQUICConfig returns the QUIC configuration of an agent:
// keep-alives every KeepAlivePeriod, MaxIdleTimeout, no path MTU
// discovery, and no streams opened by the server (it pushes on the agent's control stream). Dial with
// quic.DialAddrEarly (or Transport.DialEarly) to send Hello and Pull in
// 0-RTT when a session ticket is cached.
func ClientQUICConfig() *quic.Config {
	return &quic.Config{
		HandshakeIdleTimeout:  HandshakeIdleTimeout,
		MaxIdleTimeout:        MaxIdleTimeout,
		KeepAlivePeriod:       KeepAlivePeriod,
		MaxIncomingStreams:    -1,
		MaxIncomingUniStreams: -1,
		// An agent's messages are small: path MTU probes (datagrams of up
		// to 1,452 bytes) would cost an idle device more than they save,
		// and would break the silence of its NAT binding tests.
		DisablePathMTUDiscovery: true,
	}
}

// PeerDeviceID returns the device ID of the agent on a server-side
// connection. On a resumed connection the client certificate comes from
// the session ticket and is known at once, while 0-RTT data is being read;
// otherwise it waits for the handshake to complete. Before the handshake
// completes the ID is provisional: the ticket's certificate has not yet
// passed tls.Config.VerifyConnection (e.g. a deny-list check), which is
// one more reason to commit nothing before HandshakeComplete.
func PeerDeviceID(ctx context.Context, conn *quic.Conn) (string, error) {
	cs := conn.ConnectionState().TLS
	if !cs.DidResume || len(cs.PeerCertificates) == 0 {
		select {
		case <-conn.HandshakeComplete():
		case <-conn.Context().Done():
			return "", fmt.Errorf("wire: peer device ID: %w", context.Cause(conn.Context()))
		case <-ctx.Done():
			return "", fmt.Errorf("wire: peer device ID: %w", context.Cause(ctx))
		}
		cs = conn.ConnectionState().TLS
	}
	if len(cs.PeerCertificates) == 0 {
		return "", fmt.Errorf("%w: no client certificate", ErrNoIdentity)
	}
	return DeviceIDFromCert(cs.PeerCertificates[0])
}

// HandshakeDone reports whether conn's handshake has completed, i.e.
// whether a message written now is no longer 0-RTT data (Hello.Early).
func HandshakeDone(conn *quic.Conn) bool {
	select {
	case <-conn.HandshakeComplete():
		return true
	default:
		return false
	}
}

package wire

import (
	"github.com/quic-go/quic-go"

	"crypto/hkdf"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/binary"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"
)

// ClusterServerName is the TLS server name agents use for every server of
// a cluster, and which every server certificate carries as a DNS SAN. One
// name for all servers lets a session ticket from one server be offered to
// any other (crypto/tls keys its client session cache by server name).
const ClusterServerName = "server.meteor.internal"

// MinClusterSecretLen is the shortest cluster secret accepted for deriving
// ticket and token keys.
const MinClusterSecretLen = 16

// An identity in a certificate is a URI SAN meteor://<kind>/<id>, the kind
// being device or server. DeviceURI and ServerURI build it for the issuer
// (package cluster/pki); DeviceIDFromCert and ServerIDFromCert read it back.
const (
	identityScheme = "meteor"
	deviceKind     = "device"
	serverKind     = "server"
)

// DeviceURI returns the URI SAN naming device id: meteor://device/<id>.
// It does not validate id (see ValidDeviceID).
func DeviceURI(id string) *url.URL { return identityURI(deviceKind, id) }

// ServerURI returns the URI SAN naming server id: meteor://server/<id>.
// It does not validate id (see ValidDeviceID).
func ServerURI(id string) *url.URL { return identityURI(serverKind, id) }

func identityURI(kind, id string) *url.URL {
	return &url.URL{Scheme: identityScheme, Host: kind, Path: "/" + id}
}

// ErrNoIdentity reports a certificate without a valid Meteor identity.
var ErrNoIdentity = errors.New("certificate carries no valid meteor identity")

// DeviceIDFromCert returns the device ID in cert's URI SAN
// meteor://device/<id>. The CommonName is ignored; a certificate with no
// such SAN, more than one, or an invalid ID yields ErrNoIdentity.
func DeviceIDFromCert(cert *x509.Certificate) (string, error) {
	return idFromCert(cert, deviceKind)
}

// ServerIDFromCert returns the server ID in cert's URI SAN
// meteor://server/<id>.
func ServerIDFromCert(cert *x509.Certificate) (string, error) {
	return idFromCert(cert, serverKind)
}

func idFromCert(cert *x509.Certificate, kind string) (string, error) {
	prefix := identityURI(kind, "").String() // meteor://<kind>/
	if cert == nil {
		return "", fmt.Errorf("%w: no certificate", ErrNoIdentity)
	}
	var id string
	found := 0
	for _, u := range cert.URIs {
		s := u.String()
		if rest, ok := strings.CutPrefix(s, prefix); ok {
			id, found = rest, found+1
		}
	}
	if found != 1 {
		return "", fmt.Errorf("%w: %d %s* URI SANs, want 1", ErrNoIdentity, found, prefix)
	}
	if err := ValidDeviceID(id); err != nil {
		return "", fmt.Errorf("%w: %v", ErrNoIdentity, err)
	}
	return id, nil
}

// ServerTLSConfig returns a server's TLS configuration: TLS 1.3, ALPN,
// client certificates required and verified against clientCAs, and a
// VerifyConnection check that the client certificate carries a device ID
// (it also runs on resumed connections, whose certificate comes from the
// session ticket). ticketKeys (see TicketKeys) are shared by all servers so
// any of them resumes any agent's session; nil leaves crypto/tls's own
// per-process keys. Rotate with cfg.SetSessionTicketKeys on the returned
// config: quic-go clones it for each new connection.
func ServerTLSConfig(clientCAs *x509.CertPool, serverCert tls.Certificate, ticketKeys [][32]byte) *tls.Config {
	cfg := &tls.Config{
		MinVersion:   tls.VersionTLS13,
		Certificates: []tls.Certificate{serverCert},
		ClientAuth:   tls.RequireAndVerifyClientCert,
		ClientCAs:    clientCAs,
		NextProtos:   []string{ALPN},
		VerifyConnection: func(cs tls.ConnectionState) error {
			if len(cs.PeerCertificates) == 0 {
				return fmt.Errorf("%w: no client certificate", ErrNoIdentity)
			}
			_, err := DeviceIDFromCert(cs.PeerCertificates[0])
			return err
		},
	}
	if len(ticketKeys) > 0 {
		cfg.SetSessionTicketKeys(ticketKeys)
	}
	return cfg
}

// ClientTLSConfig returns an agent's TLS configuration: TLS 1.3, ALPN, the
// device certificate, servers verified against roots under serverName
// (empty means ClusterServerName), and a session cache so that reconnects
// resume (and may use 0-RTT) with any server of the cluster. Reuse the
// returned config, or at least its ClientSessionCache, across dials.
func ClientTLSConfig(roots *x509.CertPool, deviceCert tls.Certificate, serverName string) *tls.Config {
	if serverName == "" {
		serverName = ClusterServerName
	}
	return &tls.Config{
		MinVersion:         tls.VersionTLS13,
		RootCAs:            roots,
		Certificates:       []tls.Certificate{deviceCert},
		ServerName:         serverName,
		NextProtos:         []string{ALPN},
		ClientSessionCache: tls.NewLRUClientSessionCache(4),
	}
}

// TicketKeys returns the TLS session ticket keys every server derives from
// the cluster secret at now: the key of the current epoch (Unix time /
// period) first, which seals new tickets, then the previous epoch's, which
// still opens tickets, then the next epoch's, which opens the tickets of a
// server whose clock runs up to one period ahead. A ticket thus stays
// usable for one to two periods (and never beyond crypto/tls's 7-day cap). Feed the result to
// tls.Config.SetSessionTicketKeys, again at every epoch boundary. It panics
// if period is under a second or the secret is shorter than
// MinClusterSecretLen: validate configuration at startup.
func TicketKeys(clusterSecret []byte, now time.Time, period time.Duration) [][32]byte {
	if period < time.Second || len(clusterSecret) < MinClusterSecretLen {
		panic("wire: TicketKeys: period under a second or cluster secret too short")
	}
	epoch := uint64(now.Unix() / int64(period/time.Second))
	return [][32]byte{ticketKey(clusterSecret, epoch), ticketKey(clusterSecret, epoch-1), ticketKey(clusterSecret, epoch+1)}
}

// StatelessResetKey derives the QUIC stateless reset key every server of a
// cluster uses from the cluster secret. With it, a server that restarted
// (and so knows none of its old connections) answers an agent's next
// packet on one with a stateless reset, and the agent connects again at
// once instead of waiting for its keep-alive to go unanswered.
func StatelessResetKey(clusterSecret []byte) *quic.StatelessResetKey {
	raw, err := hkdf.Key(sha256.New, clusterSecret, nil, "meteor quic stateless reset key v1", 32)
	if err != nil {
		panic(err) // only for lengths over 255*32 bytes
	}
	k := quic.StatelessResetKey(raw)
	return &k
}

func ticketKey(secret []byte, epoch uint64) [32]byte {
	info := binary.BigEndian.AppendUint64([]byte("meteor tls session ticket key v1 "), epoch)
	raw, err := hkdf.Key(sha256.New, secret, nil, string(info), 32)
	if err != nil {
		panic(err) // only for lengths over 255*32 bytes
	}
	return [32]byte(raw)
}

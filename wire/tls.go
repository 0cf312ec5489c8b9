package wire

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/hkdf"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/binary"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
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

// URI SAN prefixes carrying identities in certificates.
const (
	deviceURIPrefix = "meteor://device/"
	serverURIPrefix = "meteor://server/"
)

// ErrNoIdentity reports a certificate without a valid Meteor identity.
var ErrNoIdentity = errors.New("certificate carries no valid meteor identity")

// CA is the cluster's certificate authority (ECDSA P-256). Servers need
// only its certificate (Pool); the key stays with whoever issues
// certificates.
type CA struct {
	Cert *x509.Certificate
	Key  *ecdsa.PrivateKey
	// LeafValidity is how long issued certificates are valid; zero means
	// 365 days. Issued certificates never outlive the CA.
	LeafValidity time.Duration
}

// NewCA creates a self-signed CA valid for validFor from now.
func NewCA(commonName string, validFor time.Duration) (*CA, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("wire: generate CA key: %w", err)
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		Subject:               pkix.Name{CommonName: commonName},
		NotBefore:             now.Add(-time.Hour), // tolerate clock skew
		NotAfter:              now.Add(validFor),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	cert, err := createCert(tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, fmt.Errorf("wire: create CA %q: %w", commonName, err)
	}
	return &CA{Cert: cert, Key: key}, nil
}

func createCert(tmpl, parent *x509.Certificate, pub *ecdsa.PublicKey, signer *ecdsa.PrivateKey) (*x509.Certificate, error) {
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, err
	}
	tmpl.SerialNumber = serial
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, pub, signer)
	if err != nil {
		return nil, err
	}
	return x509.ParseCertificate(der)
}

// Pool returns a pool holding the CA certificate, for ServerTLSConfig and
// ClientTLSConfig.
func (ca *CA) Pool() *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(ca.Cert)
	return p
}

// IssueServer issues a server certificate for serverID: CommonName and URI
// SAN meteor://server/<id>, DNS SAN ClusterServerName, plus hosts (IP
// addresses become IP SANs, names DNS SANs). It is valid for server
// authentication only.
func (ca *CA) IssueServer(serverID string, hosts []string) (tls.Certificate, error) {
	if err := ValidDeviceID(serverID); err != nil {
		return tls.Certificate{}, fmt.Errorf("wire: server ID: %w", err)
	}
	tmpl := &x509.Certificate{
		Subject:     pkix.Name{CommonName: serverID},
		DNSNames:    []string{ClusterServerName},
		URIs:        []*url.URL{{Scheme: "meteor", Host: "server", Path: "/" + serverID}},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else if h != ClusterServerName {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	return ca.issue(tmpl)
}

// IssueDevice issues a device certificate: CommonName and URI SAN
// meteor://device/<id>, valid for client authentication only. The URI SAN
// is the device's identity (DeviceIDFromCert).
func (ca *CA) IssueDevice(deviceID string) (tls.Certificate, error) {
	if err := ValidDeviceID(deviceID); err != nil {
		return tls.Certificate{}, fmt.Errorf("wire: %w", err)
	}
	tmpl := &x509.Certificate{
		Subject:     pkix.Name{CommonName: deviceID},
		URIs:        []*url.URL{{Scheme: "meteor", Host: "device", Path: "/" + deviceID}},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	return ca.issue(tmpl)
}

func (ca *CA) issue(tmpl *x509.Certificate) (tls.Certificate, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("wire: generate key: %w", err)
	}
	validity := ca.LeafValidity
	if validity <= 0 {
		validity = 365 * 24 * time.Hour
	}
	now := time.Now()
	tmpl.NotBefore = now.Add(-time.Hour)
	tmpl.NotAfter = now.Add(validity)
	if tmpl.NotAfter.After(ca.Cert.NotAfter) {
		tmpl.NotAfter = ca.Cert.NotAfter
	}
	tmpl.KeyUsage = x509.KeyUsageDigitalSignature
	cert, err := createCert(tmpl, ca.Cert, &key.PublicKey, ca.Key)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("wire: issue %q: %w", tmpl.Subject.CommonName, err)
	}
	return tls.Certificate{Certificate: [][]byte{cert.Raw}, PrivateKey: key, Leaf: cert}, nil
}

// PEM returns the CA certificate and private key in PEM.
func (ca *CA) PEM() (certPEM, keyPEM []byte, err error) {
	return CertificatePEM(tls.Certificate{Certificate: [][]byte{ca.Cert.Raw}, PrivateKey: ca.Key})
}

// LoadCA parses a CA from PEM as written by CA.PEM.
func LoadCA(certPEM, keyPEM []byte) (*CA, error) {
	c, err := LoadCertificate(certPEM, keyPEM)
	if err != nil {
		return nil, err
	}
	key, ok := c.PrivateKey.(*ecdsa.PrivateKey)
	if !ok || !c.Leaf.IsCA {
		return nil, errors.New("wire: load CA: not an ECDSA CA certificate")
	}
	return &CA{Cert: c.Leaf, Key: key}, nil
}

// CertificatePEM encodes a certificate chain and its private key (PKCS #8)
// in PEM.
func CertificatePEM(cert tls.Certificate) (certPEM, keyPEM []byte, err error) {
	for _, der := range cert.Certificate {
		certPEM = append(certPEM, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})...)
	}
	der, err := x509.MarshalPKCS8PrivateKey(cert.PrivateKey)
	if err != nil {
		return nil, nil, fmt.Errorf("wire: encode private key: %w", err)
	}
	return certPEM, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), nil
}

// LoadCertificate parses a certificate and key from PEM; Leaf is set.
func LoadCertificate(certPEM, keyPEM []byte) (tls.Certificate, error) {
	c, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("wire: load certificate: %w", err)
	}
	return c, nil
}

// PoolFromPEM returns a pool of the certificates in pemCerts.
func PoolFromPEM(pemCerts []byte) (*x509.CertPool, error) {
	p := x509.NewCertPool()
	if !p.AppendCertsFromPEM(pemCerts) {
		return nil, errors.New("wire: no certificates in PEM")
	}
	return p, nil
}

// DeviceIDFromCert returns the device ID in cert's URI SAN
// meteor://device/<id>. The CommonName is ignored; a certificate with no
// such SAN, more than one, or an invalid ID yields ErrNoIdentity.
func DeviceIDFromCert(cert *x509.Certificate) (string, error) {
	return idFromCert(cert, deviceURIPrefix)
}

// ServerIDFromCert returns the server ID in cert's URI SAN
// meteor://server/<id>.
func ServerIDFromCert(cert *x509.Certificate) (string, error) {
	return idFromCert(cert, serverURIPrefix)
}

func idFromCert(cert *x509.Certificate, prefix string) (string, error) {
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

func ticketKey(secret []byte, epoch uint64) [32]byte {
	info := binary.BigEndian.AppendUint64([]byte("meteor tls session ticket key v1 "), epoch)
	raw, err := hkdf.Key(sha256.New, secret, nil, string(info), 32)
	if err != nil {
		panic(err) // only for lengths over 255*32 bytes
	}
	return [32]byte(raw)
}

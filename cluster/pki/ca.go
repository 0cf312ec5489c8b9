package pki

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"fmt"
	"math/big"
	"net"
	"net/url"
	"time"

	"github.com/meteor-edge/meteor/wire"
)

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
		return nil, fmt.Errorf("pki: generate CA key: %w", err)
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
		return nil, fmt.Errorf("pki: create CA %q: %w", commonName, err)
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

// Pool returns a pool holding the CA certificate, for wire.ServerTLSConfig
// and wire.ClientTLSConfig.
func (ca *CA) Pool() *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(ca.Cert)
	return p
}

// IssueServer issues a server certificate for serverID: CommonName and URI
// SAN wire.ServerURI (meteor://server/<id>), DNS SAN
// wire.ClusterServerName, plus hosts (IP addresses become IP SANs, names
// DNS SANs). It is valid for server and client authentication: servers
// connect to each other with it (mutual TLS between servers).
func (ca *CA) IssueServer(serverID string, hosts []string) (tls.Certificate, error) {
	if err := wire.ValidDeviceID(serverID); err != nil {
		return tls.Certificate{}, fmt.Errorf("pki: server ID: %w", err)
	}
	tmpl := &x509.Certificate{
		Subject:     pkix.Name{CommonName: serverID},
		DNSNames:    []string{wire.ClusterServerName},
		URIs:        []*url.URL{wire.ServerURI(serverID)},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else if h != wire.ClusterServerName {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	return ca.issue(tmpl)
}

// IssueDevice issues a device certificate: CommonName and URI SAN
// wire.DeviceURI (meteor://device/<id>), valid for client authentication
// only. The URI SAN is the device's identity (wire.DeviceIDFromCert).
func (ca *CA) IssueDevice(deviceID string) (tls.Certificate, error) {
	if err := wire.ValidDeviceID(deviceID); err != nil {
		return tls.Certificate{}, fmt.Errorf("pki: %w", err)
	}
	return ca.issue(deviceTemplate(deviceID))
}

func (ca *CA) issue(tmpl *x509.Certificate) (tls.Certificate, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("pki: generate key: %w", err)
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
		return tls.Certificate{}, fmt.Errorf("pki: issue %q: %w", tmpl.Subject.CommonName, err)
	}
	return tls.Certificate{Certificate: [][]byte{cert.Raw}, PrivateKey: key, Leaf: cert}, nil
}

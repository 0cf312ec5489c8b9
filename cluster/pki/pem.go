package pki

import (
	"crypto/ecdsa"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
)

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
		return nil, errors.New("pki: load CA: not an ECDSA CA certificate")
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
		return nil, nil, fmt.Errorf("pki: encode private key: %w", err)
	}
	return certPEM, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), nil
}

// LoadCertificate parses a certificate and key from PEM; Leaf is set.
func LoadCertificate(certPEM, keyPEM []byte) (tls.Certificate, error) {
	c, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("pki: load certificate: %w", err)
	}
	return c, nil
}

// PoolFromPEM returns a pool of the certificates in pemCerts.
func PoolFromPEM(pemCerts []byte) (*x509.CertPool, error) {
	p := x509.NewCertPool()
	if !p.AppendCertsFromPEM(pemCerts) {
		return nil, errors.New("pki: no certificates in PEM")
	}
	return p, nil
}

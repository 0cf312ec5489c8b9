package pki

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"net/url"
	"time"

	"github.com/meteor-edge/meteor/wire"
)

// MaxCSRSize bounds a certificate request in DER. A P-256 request with a
// device ID is a few hundred bytes.
const MaxCSRSize = 4 << 10

// DefaultDeviceValidity is how long a device certificate signed from a
// request is valid unless the signer says otherwise.
const DefaultDeviceValidity = 90 * 24 * time.Hour

// ErrBadCSR reports a certificate request pki refuses to sign.
var ErrBadCSR = errors.New("pki: bad certificate request")

// DeviceCSR is a checked certificate request of a device: its key is an
// ECDSA P-256 key, its signature proves the requester holds it, and its
// subject's CommonName is a valid device ID.
//
// Nothing else of the request is used. Its SANs, key usages, basic
// constraints and other extensions are ignored: a device certificate's
// extensions come from SignDeviceCSR's template only, so a request cannot
// smuggle in a CA flag or a server identity.
type DeviceCSR struct {
	DeviceID string
	Key      *ecdsa.PublicKey
}

// NewDeviceCSR creates a certificate request for deviceID signed with
// key: what an agent sends to enroll or renew.
func NewDeviceCSR(deviceID string, key *ecdsa.PrivateKey) ([]byte, error) {
	if err := wire.ValidDeviceID(deviceID); err != nil {
		return nil, fmt.Errorf("pki: certificate request: %w", err)
	}
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{
		Subject: pkix.Name{CommonName: deviceID},
		URIs:    []*url.URL{wire.DeviceURI(deviceID)},
	}, key)
	if err != nil {
		return nil, fmt.Errorf("pki: certificate request for %q: %w", deviceID, err)
	}
	return der, nil
}

// ParseDeviceCSR parses and checks a device's certificate request (DER).
// Errors wrap ErrBadCSR and say what is wrong.
func ParseDeviceCSR(der []byte) (*DeviceCSR, error) {
	if len(der) == 0 || len(der) > MaxCSRSize {
		return nil, fmt.Errorf("%w: %d bytes, want 1 to %d", ErrBadCSR, len(der), MaxCSRSize)
	}
	req, err := x509.ParseCertificateRequest(der)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBadCSR, err)
	}
	key, ok := req.PublicKey.(*ecdsa.PublicKey)
	if !ok || key.Curve != elliptic.P256() {
		return nil, fmt.Errorf("%w: the key must be ECDSA P-256, not %v", ErrBadCSR, req.PublicKeyAlgorithm)
	}
	if req.SignatureAlgorithm != x509.ECDSAWithSHA256 {
		return nil, fmt.Errorf("%w: signature algorithm %v, want %v", ErrBadCSR, req.SignatureAlgorithm, x509.ECDSAWithSHA256)
	}
	if err := req.CheckSignature(); err != nil {
		return nil, fmt.Errorf("%w: signature: %v", ErrBadCSR, err)
	}
	id := req.Subject.CommonName
	if err := wire.ValidDeviceID(id); err != nil {
		return nil, fmt.Errorf("%w: subject common name: %v", ErrBadCSR, err)
	}
	return &DeviceCSR{DeviceID: id, Key: key}, nil
}

// SignDeviceCSR issues a device certificate for a checked request, from
// the same template as IssueDevice: the device ID as CommonName and URI
// SAN, client authentication only, not a CA. It is valid from shortly
// before now for validity (zero means DefaultDeviceValidity), and never
// beyond the CA.
func (ca *CA) SignDeviceCSR(req *DeviceCSR, now time.Time, validity time.Duration) (*x509.Certificate, error) {
	if req == nil || req.Key == nil {
		return nil, fmt.Errorf("%w: no request", ErrBadCSR)
	}
	if validity <= 0 {
		validity = DefaultDeviceValidity
	}
	tmpl := deviceTemplate(req.DeviceID)
	// Tolerate clocks a little behind the CA's, without making a short
	// lifetime much longer than asked.
	tmpl.NotBefore = now.Add(-min(5*time.Minute, validity/10))
	tmpl.NotAfter = now.Add(validity)
	if tmpl.NotAfter.After(ca.Cert.NotAfter) {
		tmpl.NotAfter = ca.Cert.NotAfter
	}
	if !tmpl.NotAfter.After(now) {
		return nil, fmt.Errorf("pki: sign certificate request of %q: the CA expired at %v", req.DeviceID, ca.Cert.NotAfter)
	}
	tmpl.KeyUsage = x509.KeyUsageDigitalSignature
	cert, err := createCert(tmpl, ca.Cert, req.Key, ca.Key)
	if err != nil {
		return nil, fmt.Errorf("pki: sign certificate request of %q: %w", req.DeviceID, err)
	}
	return cert, nil
}

// deviceTemplate is every device certificate's identity and usage.
func deviceTemplate(deviceID string) *x509.Certificate {
	return &x509.Certificate{
		Subject:     pkix.Name{CommonName: deviceID},
		URIs:        []*url.URL{wire.DeviceURI(deviceID)},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
}

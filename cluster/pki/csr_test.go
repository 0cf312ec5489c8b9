package pki

import (
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/asn1"
	"errors"
	"net"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/meteor-edge/meteor/wire"
)

func p256(t testing.TB) *ecdsa.PrivateKey {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// basicConstraintsCA is a basicConstraints extension saying "CA".
func basicConstraintsCA(t testing.TB) pkix.Extension {
	v, err := asn1.Marshal(struct {
		IsCA bool `asn1:"optional"`
	}{true})
	if err != nil {
		t.Fatal(err)
	}
	return pkix.Extension{Id: asn1.ObjectIdentifier{2, 5, 29, 19}, Critical: true, Value: v}
}

func TestSignDeviceCSR(t *testing.T) {
	ca := testCA(t)
	key := p256(t)
	der, err := NewDeviceCSR("store-42", key)
	if err != nil {
		t.Fatal(err)
	}
	req, err := ParseDeviceCSR(der)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	cert, err := ca.SignDeviceCSR(req, now, 2*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if id, err := wire.DeviceIDFromCert(cert); err != nil || id != "store-42" {
		t.Errorf("device ID %q, %v", id, err)
	}
	if !cert.PublicKey.(*ecdsa.PublicKey).Equal(&key.PublicKey) {
		t.Error("certificate is not for the request's key")
	}
	if _, err := cert.Verify(x509.VerifyOptions{Roots: ca.Pool(), KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		t.Errorf("does not verify as a device: %v", err)
	}
	if got := cert.NotAfter.Sub(now); got < 2*time.Hour-time.Second || got > 2*time.Hour+time.Second {
		t.Errorf("valid for %v, want 2h", got)
	}
	if back := now.Sub(cert.NotBefore); back > 13*time.Minute {
		t.Errorf("backdated by %v", back)
	}
	// Zero is 90 days, capped by the CA (the test CA lives a day).
	if cert, err = ca.SignDeviceCSR(req, now, 0); err != nil || !cert.NotAfter.Equal(ca.Cert.NotAfter) {
		t.Errorf("default lifetime beyond the CA: %v, %v (CA until %v)", cert.NotAfter, err, ca.Cert.NotAfter)
	}
	if _, err := ca.SignDeviceCSR(req, ca.Cert.NotAfter.Add(time.Hour), time.Hour); err == nil {
		t.Error("signed after the CA expired")
	}
}

// TestCSRSmuggling: whatever a request asks for, the certificate is a
// device's: no CA, no server identity, no server authentication, no
// other SANs.
func TestCSRSmuggling(t *testing.T) {
	ca := testCA(t)
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{
		Subject:         pkix.Name{CommonName: "s1", Organization: []string{"evil"}},
		DNSNames:        []string{wire.ClusterServerName, "evil.example"},
		IPAddresses:     []net.IP{net.IPv4(127, 0, 0, 1)},
		EmailAddresses:  []string{"x@example.com"},
		URIs:            []*url.URL{wire.ServerURI("s1"), wire.DeviceURI("other")},
		ExtraExtensions: []pkix.Extension{basicConstraintsCA(t)},
	}, p256(t))
	if err != nil {
		t.Fatal(err)
	}
	req, err := ParseDeviceCSR(der)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := ca.SignDeviceCSR(req, time.Now(), time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if cert.IsCA || cert.KeyUsage&x509.KeyUsageCertSign != 0 {
		t.Error("the certificate is a CA")
	}
	if len(cert.DNSNames)+len(cert.IPAddresses)+len(cert.EmailAddresses) != 0 || len(cert.URIs) != 1 {
		t.Errorf("SANs copied: %v %v %v %v", cert.DNSNames, cert.IPAddresses, cert.EmailAddresses, cert.URIs)
	}
	if len(cert.ExtKeyUsage) != 1 || cert.ExtKeyUsage[0] != x509.ExtKeyUsageClientAuth {
		t.Errorf("key usages %v", cert.ExtKeyUsage)
	}
	if _, err := wire.ServerIDFromCert(cert); err == nil {
		t.Error("the certificate names a server")
	}
	if id, err := wire.DeviceIDFromCert(cert); err != nil || id != "s1" {
		t.Errorf("device ID %q, %v", id, err)
	}
	if len(cert.Subject.Organization) != 0 {
		t.Errorf("subject copied: %v", cert.Subject)
	}
}

func TestParseDeviceCSRRefuses(t *testing.T) {
	mk := func(tmpl *x509.CertificateRequest, key any) []byte {
		t.Helper()
		der, err := x509.CreateCertificateRequest(rand.Reader, tmpl, key)
		if err != nil {
			t.Fatal(err)
		}
		return der
	}
	rsaKey, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	p384, _ := ecdsa.GenerateKey(elliptic.P384(), rand.Reader)
	_, edKey, _ := ed25519.GenerateKey(rand.Reader)
	good := mk(&x509.CertificateRequest{Subject: pkix.Name{CommonName: "d1"}}, p256(t))
	badSig := append([]byte(nil), good...)
	badSig[len(badSig)-3] ^= 0xff
	for name, der := range map[string][]byte{
		"empty":         nil,
		"garbage":       []byte("not a request"),
		"too large":     make([]byte, MaxCSRSize+1),
		"rsa":           mk(&x509.CertificateRequest{Subject: pkix.Name{CommonName: "d1"}}, rsaKey),
		"p384":          mk(&x509.CertificateRequest{Subject: pkix.Name{CommonName: "d1"}}, p384),
		"ed25519":       mk(&x509.CertificateRequest{Subject: pkix.Name{CommonName: "d1"}}, edKey),
		"sha384":        mk(&x509.CertificateRequest{Subject: pkix.Name{CommonName: "d1"}, SignatureAlgorithm: x509.ECDSAWithSHA384}, p256(t)),
		"bad signature": badSig,
		"no subject":    mk(&x509.CertificateRequest{}, p256(t)),
		"bad ID":        mk(&x509.CertificateRequest{Subject: pkix.Name{CommonName: "a/b"}}, p256(t)),
	} {
		if _, err := ParseDeviceCSR(der); !errors.Is(err, ErrBadCSR) {
			t.Errorf("%s: %v, want ErrBadCSR", name, err)
		}
	}
	if _, err := ParseDeviceCSR(good); err != nil {
		t.Errorf("good request: %v", err)
	}
	if _, err := NewDeviceCSR("", p256(t)); err == nil {
		t.Error("NewDeviceCSR accepted an empty ID")
	}
}

// FuzzCSR: parsing never panics, and whatever parses signs into a device
// certificate for the request's key and subject, and nothing more.
func FuzzCSR(f *testing.F) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		f.Fatal(err)
	}
	good, err := NewDeviceCSR("d1", key)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(good)
	smuggle, _ := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{
		Subject: pkix.Name{CommonName: "s1"}, DNSNames: []string{wire.ClusterServerName},
		URIs: []*url.URL{wire.ServerURI("s1")}, ExtraExtensions: []pkix.Extension{basicConstraintsCA(f)},
	}, key)
	f.Add(smuggle)
	f.Add([]byte{0x30, 0x03, 0x02, 0x01, 0x00})
	ca := testCA(f)
	f.Fuzz(func(t *testing.T, der []byte) {
		req, err := ParseDeviceCSR(der)
		if err != nil {
			if !errors.Is(err, ErrBadCSR) {
				t.Fatalf("error not ErrBadCSR: %v", err)
			}
			return
		}
		if err := wire.ValidDeviceID(req.DeviceID); err != nil {
			t.Fatalf("accepted device ID %q: %v", req.DeviceID, err)
		}
		cert, err := ca.SignDeviceCSR(req, time.Now(), time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		if cert.IsCA || len(cert.DNSNames)+len(cert.IPAddresses)+len(cert.EmailAddresses) != 0 ||
			len(cert.ExtKeyUsage) != 1 || cert.ExtKeyUsage[0] != x509.ExtKeyUsageClientAuth {
			t.Fatalf("not a plain device certificate: CA %v, DNS %v, usages %v", cert.IsCA, cert.DNSNames, cert.ExtKeyUsage)
		}
		if id, err := wire.DeviceIDFromCert(cert); err != nil || id != req.DeviceID || strings.Contains(id, "/") {
			t.Fatalf("device ID %q, %v", id, err)
		}
	})
}

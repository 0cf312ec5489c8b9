package wire

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"math/big"
	"net"
	"net/url"
	"sync"
	"testing"
	"time"
)

// testCA signs the certificates of wire's tests. Issuing certificates is
// package cluster/pki's job, and pki imports wire, so wire's tests carry
// this minimal signer; pki's tests check that what pki issues verifies
// here.
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
}

// sharedTestCA is the CA of the package's tests, made once: key
// generation is the slow part. It panics if the standard library cannot
// create a key or a certificate.
var sharedTestCA = sync.OnceValue(func() *testCA {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		panic(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "meteor wire test CA"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		panic(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		panic(err)
	}
	return &testCA{cert: cert, key: key}
})

func (ca *testCA) pool() *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(ca.cert)
	return p
}

// sign issues a leaf certificate from tmpl (serial and validity filled in)
// with a fresh key.
func (ca *testCA) sign(t testing.TB, tmpl *x509.Certificate) tls.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl.SerialNumber = big.NewInt(time.Now().UnixNano())
	tmpl.NotBefore = time.Now().Add(-time.Hour)
	tmpl.NotAfter = time.Now().Add(time.Hour)
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf}
}

// device signs a device certificate as cluster/pki issues one.
func (ca *testCA) device(t testing.TB, id string) tls.Certificate {
	return ca.sign(t, &x509.Certificate{
		Subject:     pkix.Name{CommonName: id},
		URIs:        []*url.URL{DeviceURI(id)},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	})
}

// server signs a server certificate for 127.0.0.1 as cluster/pki issues one.
func (ca *testCA) server(t testing.TB, id string) tls.Certificate {
	return ca.sign(t, &x509.Certificate{
		Subject:     pkix.Name{CommonName: id},
		DNSNames:    []string{ClusterServerName},
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
		URIs:        []*url.URL{ServerURI(id)},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	})
}

// certWithURIs signs a client certificate with arbitrary URI SANs.
func certWithURIs(t *testing.T, ca *testCA, cn string, uris ...string) *x509.Certificate {
	t.Helper()
	tmpl := &x509.Certificate{
		Subject:     pkix.Name{CommonName: cn},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	for _, s := range uris {
		u, err := url.Parse(s)
		if err != nil {
			t.Fatal(err)
		}
		tmpl.URIs = append(tmpl.URIs, u)
	}
	return ca.sign(t, tmpl).Leaf
}

func TestIdentityURIs(t *testing.T) {
	if got, want := DeviceURI("store-42").String(), "meteor://device/store-42"; got != want {
		t.Errorf("DeviceURI = %q, want %q", got, want)
	}
	if got, want := ServerURI("s1").String(), "meteor://server/s1"; got != want {
		t.Errorf("ServerURI = %q, want %q", got, want)
	}
}

func TestDeviceIDFromCert(t *testing.T) {
	ca := sharedTestCA()
	if id, err := DeviceIDFromCert(ca.device(t, "store-42").Leaf); err != nil || id != "store-42" {
		t.Errorf("device cert: %q, %v", id, err)
	}

	srv := ca.server(t, "s1")
	if _, err := DeviceIDFromCert(srv.Leaf); !errors.Is(err, ErrNoIdentity) {
		t.Errorf("server cert as device: %v", err)
	}
	if id, err := ServerIDFromCert(srv.Leaf); err != nil || id != "s1" {
		t.Errorf("ServerIDFromCert = %q, %v", id, err)
	}

	for name, c := range map[string]*x509.Certificate{
		"CommonName only": certWithURIs(t, ca, "store-42"),
		"two device SANs": certWithURIs(t, ca, "a", "meteor://device/a", "meteor://device/b"),
		"invalid ID":      certWithURIs(t, ca, "x", "meteor://device/a%20b"),
		"empty ID":        certWithURIs(t, ca, "x", "meteor://device/"),
		"nested path":     certWithURIs(t, ca, "x", "meteor://device/a/b"),
		"query":           certWithURIs(t, ca, "x", "meteor://device/a?b=c"),
		"other scheme":    certWithURIs(t, ca, "x", "spiffe://device/a"),
		"nil certificate": nil,
	} {
		if id, err := DeviceIDFromCert(c); !errors.Is(err, ErrNoIdentity) {
			t.Errorf("%s: %q, %v; want ErrNoIdentity", name, id, err)
		}
	}
	// An unrelated URI SAN beside the device one is fine.
	c := certWithURIs(t, ca, "x", "https://example.com/", "meteor://device/dev-9")
	if id, err := DeviceIDFromCert(c); err != nil || id != "dev-9" {
		t.Errorf("with an extra SAN: %q, %v", id, err)
	}
}

func TestTicketKeys(t *testing.T) {
	const period = time.Hour
	a := TicketKeys(testSecret, t0, period)
	if len(a) != 3 || a[0] == a[1] || a[0] == a[2] || a[1] == a[2] {
		t.Fatalf("want three distinct keys (current, previous, next), got %d", len(a))
	}
	if b := TicketKeys(testSecret, t0.Add(period-time.Second), period); b[0] != a[0] || b[1] != a[1] || b[2] != a[2] {
		t.Error("keys changed within an epoch")
	}
	next := TicketKeys(testSecret, t0.Add(period), period)
	if next[1] != a[0] || next[0] != a[2] {
		t.Error("next epoch must seal with the key the current one accepted as next, and keep the current one as previous")
	}
	if other := TicketKeys([]byte("another-cluster-secret-0123456"), t0, period); other[0] == a[0] {
		t.Error("different secrets give the same key")
	}
	token, _ := DeriveTokenKey(testSecret, uint32(t0.Unix()/3600))
	if token.Secret == a[0] {
		t.Error("ticket and token keys are not domain-separated")
	}
	defer func() {
		if recover() == nil {
			t.Error("short secret did not panic")
		}
	}()
	TicketKeys([]byte("short"), t0, period)
}

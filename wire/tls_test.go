package wire

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"math/big"
	"net/url"
	"sync"
	"testing"
	"time"
)

// The CA is shared by the tests of the package: key generation is the
// slow part.
var (
	testCAOnce sync.Once
	testCAVal  *CA
	testCAErr  error
)

func testCA(t testing.TB) *CA {
	t.Helper()
	testCAOnce.Do(func() { testCAVal, testCAErr = NewCA("meteor test CA", 24*time.Hour) })
	if testCAErr != nil {
		t.Fatal(testCAErr)
	}
	return testCAVal
}

// certWithURIs signs a client certificate with arbitrary URI SANs.
func certWithURIs(t *testing.T, ca *CA, cn string, uris ...string) *x509.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1),
		Subject:      pkix.Name{CommonName: cn},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	for _, s := range uris {
		u, err := url.Parse(s)
		if err != nil {
			t.Fatal(err)
		}
		tmpl.URIs = append(tmpl.URIs, u)
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, &key.PublicKey, ca.Key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return cert
}

func TestDeviceIDFromCert(t *testing.T) {
	ca := testCA(t)
	dev, err := ca.IssueDevice("store-42")
	if err != nil {
		t.Fatal(err)
	}
	if id, err := DeviceIDFromCert(dev.Leaf); err != nil || id != "store-42" {
		t.Errorf("issued device cert: %q, %v", id, err)
	}
	if dev.Leaf.Subject.CommonName != "store-42" {
		t.Errorf("CommonName = %q", dev.Leaf.Subject.CommonName)
	}
	if _, err := ca.IssueDevice("bad/id"); err == nil {
		t.Error("IssueDevice accepted an invalid ID")
	}

	srv, err := ca.IssueServer("s1", []string{"127.0.0.1", "s1.example"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := DeviceIDFromCert(srv.Leaf); !errors.Is(err, ErrNoIdentity) {
		t.Errorf("server cert as device: %v", err)
	}
	if id, err := ServerIDFromCert(srv.Leaf); err != nil || id != "s1" {
		t.Errorf("ServerIDFromCert = %q, %v", id, err)
	}
	if err := srv.Leaf.VerifyHostname(ClusterServerName); err != nil {
		t.Errorf("server cert lacks the cluster name: %v", err)
	}
	if err := srv.Leaf.VerifyHostname("127.0.0.1"); err != nil {
		t.Errorf("server cert lacks its IP: %v", err)
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

func TestKeyUsageSeparatesRoles(t *testing.T) {
	ca := testCA(t)
	dev, err := ca.IssueDevice("d1")
	if err != nil {
		t.Fatal(err)
	}
	srv, err := ca.IssueServer("s1", nil)
	if err != nil {
		t.Fatal(err)
	}
	asServer := x509.VerifyOptions{Roots: ca.Pool(), DNSName: ClusterServerName, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	asClient := x509.VerifyOptions{Roots: ca.Pool(), KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}
	if _, err := srv.Leaf.Verify(asServer); err != nil {
		t.Errorf("server cert as server: %v", err)
	}
	if _, err := dev.Leaf.Verify(asClient); err != nil {
		t.Errorf("device cert as client: %v", err)
	}
	if _, err := dev.Leaf.Verify(asServer); err == nil {
		t.Error("a device certificate verifies as a server")
	}
	if _, err := srv.Leaf.Verify(asClient); err == nil {
		t.Error("a server certificate verifies as a client")
	}
}

func TestPEMRoundTrip(t *testing.T) {
	ca := testCA(t)
	certPEM, keyPEM, err := ca.PEM()
	if err != nil {
		t.Fatal(err)
	}
	loaded, err := LoadCA(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	dev, err := loaded.IssueDevice("d2")
	if err != nil {
		t.Fatal(err)
	}
	pool, err := PoolFromPEM(certPEM)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := dev.Leaf.Verify(x509.VerifyOptions{Roots: pool, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		t.Errorf("cert from the loaded CA does not verify: %v", err)
	}
	devCert, devKey, err := CertificatePEM(dev)
	if err != nil {
		t.Fatal(err)
	}
	back, err := LoadCertificate(devCert, devKey)
	if err != nil {
		t.Fatal(err)
	}
	if id, err := DeviceIDFromCert(back.Leaf); err != nil || id != "d2" {
		t.Errorf("reloaded device cert: %q, %v", id, err)
	}
	if _, err := LoadCA(devCert, devKey); err == nil {
		t.Error("LoadCA accepted a leaf certificate")
	}
	if _, err := PoolFromPEM([]byte("not pem")); err == nil {
		t.Error("PoolFromPEM accepted garbage")
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

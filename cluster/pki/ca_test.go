package pki

import (
	"crypto/x509"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/meteor-edge/meteor/wire"
)

// sharedCA is the CA of the package's tests, made once: key generation is
// the slow part.
var sharedCA = sync.OnceValues(func() (*CA, error) { return NewCA("meteor test CA", 24*time.Hour) })

func testCA(t testing.TB) *CA {
	t.Helper()
	ca, err := sharedCA()
	if err != nil {
		t.Fatal(err)
	}
	return ca
}

// TestIssuedIdentities checks that what the CA issues carries the
// identities package wire reads back.
func TestIssuedIdentities(t *testing.T) {
	ca := testCA(t)
	dev, err := ca.IssueDevice("store-42")
	if err != nil {
		t.Fatal(err)
	}
	if id, err := wire.DeviceIDFromCert(dev.Leaf); err != nil || id != "store-42" {
		t.Errorf("issued device cert: %q, %v", id, err)
	}
	if dev.Leaf.Subject.CommonName != "store-42" {
		t.Errorf("CommonName = %q", dev.Leaf.Subject.CommonName)
	}
	if _, err := ca.IssueDevice("bad/id"); err == nil {
		t.Error("IssueDevice accepted an invalid ID")
	}

	srv, err := ca.IssueServer("s1", []string{"127.0.0.1", "s1.example", wire.ClusterServerName})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := wire.DeviceIDFromCert(srv.Leaf); !errors.Is(err, wire.ErrNoIdentity) {
		t.Errorf("server cert as device: %v", err)
	}
	if id, err := wire.ServerIDFromCert(srv.Leaf); err != nil || id != "s1" {
		t.Errorf("ServerIDFromCert = %q, %v", id, err)
	}
	for _, host := range []string{wire.ClusterServerName, "127.0.0.1", "s1.example"} {
		if err := srv.Leaf.VerifyHostname(host); err != nil {
			t.Errorf("server cert lacks %s: %v", host, err)
		}
	}
	if n := len(srv.Leaf.DNSNames); n != 2 {
		t.Errorf("DNS SANs %q, want the cluster name once and s1.example", srv.Leaf.DNSNames)
	}
	if _, err := ca.IssueServer("", nil); err == nil {
		t.Error("IssueServer accepted an empty ID")
	}
}

func TestRolesAreSeparate(t *testing.T) {
	ca := testCA(t)
	dev, err := ca.IssueDevice("d1")
	if err != nil {
		t.Fatal(err)
	}
	srv, err := ca.IssueServer("s1", nil)
	if err != nil {
		t.Fatal(err)
	}
	asServer := x509.VerifyOptions{Roots: ca.Pool(), DNSName: wire.ClusterServerName, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
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
	// Servers are clients of each other (Raft, forwarded requests); what
	// keeps a server certificate off the agent port, and a device's off
	// the servers' ports, is the identity it names.
	if _, err := srv.Leaf.Verify(asClient); err != nil {
		t.Errorf("server cert as a client of another server: %v", err)
	}
	if _, err := wire.DeviceIDFromCert(srv.Leaf); err == nil {
		t.Error("a server certificate names a device")
	}
	if _, err := wire.ServerIDFromCert(dev.Leaf); err == nil {
		t.Error("a device certificate names a server")
	}
}

func TestLeafValidity(t *testing.T) {
	short, err := NewCA("short-lived CA", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	dev, err := short.IssueDevice("d1")
	if err != nil {
		t.Fatal(err)
	}
	if !dev.Leaf.NotAfter.Equal(short.Cert.NotAfter) {
		t.Errorf("leaf expires %v, after its CA (%v)", dev.Leaf.NotAfter, short.Cert.NotAfter)
	}
	short.LeafValidity = time.Minute
	if dev, err = short.IssueDevice("d2"); err != nil {
		t.Fatal(err)
	}
	if d := dev.Leaf.NotAfter.Sub(dev.Leaf.NotBefore); d > 2*time.Hour {
		t.Errorf("LeafValidity of a minute gave %v", d)
	}
}

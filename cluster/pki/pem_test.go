package pki

import (
	"crypto/x509"
	"testing"

	"github.com/meteor-edge/meteor/wire"
)

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
	if id, err := wire.DeviceIDFromCert(back.Leaf); err != nil || id != "d2" {
		t.Errorf("reloaded device cert: %q, %v", id, err)
	}
	if _, err := LoadCA(devCert, devKey); err == nil {
		t.Error("LoadCA accepted a leaf certificate")
	}
	if _, err := PoolFromPEM([]byte("not pem")); err == nil {
		t.Error("PoolFromPEM accepted garbage")
	}
}

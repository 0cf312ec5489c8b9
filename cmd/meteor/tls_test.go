package main

import (
	"crypto/x509"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/meteor-edge/meteor/fsm/acl"
	"github.com/meteor-edge/meteor/wire"
)

// TestTLSInit creates a cluster's material and reads it back the way
// 'meteor server --tls-dir' does.
func TestTLSInit(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "pki")
	ids := []string{"eu-1", "us-1", "ap-1"}
	if err := initTLS(io.Discard, dir, ids, []string{"127.0.0.1"}, time.Hour); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{caKeyFile, clusterSecret, gossipKeyFile, "server-eu-1-key.pem", adminTokenFile, adminTokenHashFile} {
		fi, err := os.Stat(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != 0o600 {
			t.Errorf("%s: mode %v, want 0600", name, fi.Mode().Perm())
		}
	}
	for _, id := range ids {
		at, secret, err := loadAgentTLS(filepath.Join(dir, caCertFile), filepath.Join(dir, "server-"+id+".pem"), filepath.Join(dir, "server-"+id+"-key.pem"), filepath.Join(dir, clusterSecret))
		if err != nil {
			t.Fatal(err)
		}
		if len(secret) != 32 {
			t.Errorf("cluster secret of %d bytes", len(secret))
		}
		leaf, err := x509.ParseCertificate(at.Certificate.Certificate[0])
		if err != nil {
			t.Fatal(err)
		}
		if got, err := wire.ServerIDFromCert(leaf); err != nil || got != id {
			t.Errorf("certificate of %s names server %q (%v)", id, got, err)
		}
		if _, err := leaf.Verify(x509.VerifyOptions{Roots: at.ClientCAs, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err != nil {
			t.Errorf("certificate of %s: %v", id, err)
		}
	}
	if k, err := readGossipKey(filepath.Join(dir, gossipKeyFile)); err != nil || len(k) != 32 {
		t.Errorf("gossip key of %d bytes: %v", len(k), err)
	}
	// The admin token's secret and the hash the servers read match.
	secret, err := os.ReadFile(filepath.Join(dir, adminTokenFile))
	if err != nil {
		t.Fatal(err)
	}
	if err := acl.CheckSecretFormat(strings.TrimSpace(string(secret))); err != nil {
		t.Errorf("admin token: %v", err)
	}
	hash, err := readAdminTokenHash(filepath.Join(dir, adminTokenHashFile))
	if err != nil || hash != acl.HashSecret(strings.TrimSpace(string(secret))) {
		t.Errorf("admin token hash %q (%v) is not the secret's", hash, err)
	}
	// Nothing is overwritten, and a bad node ID is refused before
	// anything is written.
	if err := initTLS(io.Discard, dir, ids, nil, time.Hour); err == nil {
		t.Error("a second init in the same directory succeeded")
	}
	other := filepath.Join(t.TempDir(), "other")
	if err := initTLS(io.Discard, other, []string{"bad id"}, nil, time.Hour); err == nil {
		t.Error("a bad node ID was accepted")
	}
	if _, err := os.Stat(other); !os.IsNotExist(err) {
		t.Errorf("a refused init left %s behind (%v)", other, err)
	}
}

// TestServerRefusesInsecureStart: meteor server does not start without
// its certificate unless told --insecure-plaintext, nor with a
// certificate but unencrypted gossip, nor with both a certificate and
// --insecure-plaintext.
func TestServerRefusesInsecureStart(t *testing.T) {
	base := []string{"server", "--node-id", "s1", "--data-dir", t.TempDir()}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{nil, "needs its certificate"},
		{[]string{"--cert-file", "s1.pem", "--key-file", "s1-key.pem"}, "gossip would travel unencrypted"},
		{[]string{"--cert-file", "s1.pem", "--key-file", "s1-key.pem", "--insecure-plaintext"}, "drop one of them"},
	} {
		_, err := run(t, append(base, tc.args...)...)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("meteor server %v: %v, want an error saying %q", tc.args, err, tc.want)
		}
	}
}

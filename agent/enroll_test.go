package agent

import (
	"context"
	"crypto/x509"
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/meteor-edge/meteor/cluster/pki"
)

// TestLoadOrEnrollLocal: what LoadOrEnroll decides from the data dir
// alone, without asking a server.
func TestLoadOrEnrollLocal(t *testing.T) {
	ca, err := pki.NewCA("agent enroll test", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	other, err := pki.NewCA("another CA", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	cfg := func(dir, id string) EnrollConfig {
		// No server listens there: a test that reached the network
		// would fail on it.
		return EnrollConfig{DataDir: dir, DeviceID: id, Servers: []string{"127.0.0.1:9"}, RootCAs: ca.Pool(), DialTimeout: 200 * time.Millisecond}
	}
	ctx := context.Background()

	dir := t.TempDir()
	if _, err := LoadOrEnroll(ctx, cfg(dir, "d1")); !errors.Is(err, ErrNoCertificate) || !strings.Contains(err.Error(), "--enroll") {
		t.Errorf("empty data dir, no token: %v", err)
	}
	store := func(dir string, ca *pki.CA, id string) {
		t.Helper()
		cert, err := ca.IssueDevice(id)
		if err != nil {
			t.Fatal(err)
		}
		if err := storeDeviceCert(dir, cert, ca.Cert.Raw); err != nil {
			t.Fatal(err)
		}
	}
	store(dir, ca, "d1")
	c := cfg(dir, "d1")
	c.Token = "ignored: a valid certificate is there"
	if cert, err := LoadOrEnroll(ctx, c); err != nil || cert.Leaf == nil {
		t.Fatalf("valid certificate in the data dir: %v", err)
	}
	for _, name := range []string{DeviceCertFile, EnrollCAFile} {
		if fi, err := os.Stat(filepath.Join(dir, name)); err != nil || fi.Mode().Perm() != 0o600 {
			t.Errorf("%s: %v %v", name, fi.Mode(), err)
		}
	}
	c.DeviceID = "d2"
	if _, err := LoadOrEnroll(ctx, c); err == nil || !strings.Contains(err.Error(), `not of "d2"`) {
		t.Errorf("certificate of another device: %v", err)
	}

	foreign := t.TempDir()
	store(foreign, other, "d1")
	if _, err := LoadOrEnroll(ctx, cfg(foreign, "d1")); err == nil || !strings.Contains(err.Error(), "not a device certificate of this cluster") {
		t.Errorf("certificate of another CA: %v", err)
	}

	c = cfg(dir, "d1")
	c.Now = func() time.Time { return time.Now().Add(400 * 24 * time.Hour) }
	if _, err := LoadOrEnroll(ctx, c); !errors.Is(err, ErrNoCertificate) || !strings.Contains(err.Error(), "expired") {
		t.Errorf("expired certificate, no token: %v", err)
	}
	// With a token, an expired certificate is replaced by enrolling:
	// here no server answers, and the old files stay as they were.
	before, _ := os.ReadFile(filepath.Join(dir, DeviceCertFile))
	c.Token = "mtk_x"
	if _, err := LoadOrEnroll(ctx, c); err == nil || !strings.Contains(err.Error(), "no server signed") {
		t.Errorf("enrolling with no server: %v", err)
	}
	after, _ := os.ReadFile(filepath.Join(dir, DeviceCertFile))
	if string(before) != string(after) {
		t.Error("a failed enrollment changed the certificate file")
	}
	if fi, err := os.Stat(filepath.Join(dir, enrollKeyFile)); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("pending enrollment key: %v, %v", fi.Mode(), err)
	}
}

func TestRenewAt(t *testing.T) {
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	leaf := &x509.Certificate{NotBefore: start, NotAfter: start.Add(90 * time.Hour)}
	rng := rand.New(rand.NewPCG(1, 2))
	lo, hi := start.Add(51*time.Hour), start.Add(60*time.Hour)
	seen := map[time.Time]bool{}
	for range 100 {
		at := renewAt(leaf, rng)
		if at.Before(lo) || at.After(hi) {
			t.Fatalf("renew at %v, want between %v and %v", at, lo, hi)
		}
		seen[at] = true
	}
	if len(seen) < 50 {
		t.Errorf("only %d distinct renewal times in 100: no jitter", len(seen))
	}
}

package driver

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/meteor-edge/meteor/fsm/intent"
)

// testCert is a self-signed certificate and key.
type testCert struct {
	certPEM, keyPEM string
	tls             tls.Certificate
	fingerprint     string
}

func newTestCert(t *testing.T, cn string, notBefore, notAfter time.Time) testCert {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()),
		Subject:      pkix.Name{CommonName: cn},
		DNSNames:     []string{cn},
		NotBefore:    notBefore,
		NotAfter:     notAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	c := testCert{
		certPEM: string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})),
		keyPEM:  string(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER})),
	}
	if c.tls, err = tls.X509KeyPair([]byte(c.certPEM), []byte(c.keyPEM)); err != nil {
		t.Fatal(err)
	}
	leaf, _ := x509.ParseCertificate(der)
	c.fingerprint = fingerprint(leaf)
	return c
}

func certRes(c testCert, probe map[string]any) intent.Resource {
	return intent.Resource{ID: "pos-tls", Type: "certificate", Spec: map[string]any{
		"certPath": "/etc/pos/tls.crt", "keyPath": "/etc/pos/tls.key",
		"cert": c.certPEM, "key": c.keyPEM,
	}, Probe: probe}
}

// serveTLS serves whatever served holds on 127.0.0.1 until the test ends.
func serveTLS(t *testing.T, served *atomic.Pointer[tls.Certificate]) string {
	t.Helper()
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return served.Load(), nil },
	})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			_ = c.SetDeadline(time.Now().Add(5 * time.Second))
			_ = c.(*tls.Conn).Handshake()
			_ = c.Close()
		}
	})
	t.Cleanup(func() {
		_ = ln.Close()
		wg.Wait()
	})
	return ln.Addr().String()
}

func TestCertificateProbeComparesServedCertificate(t *testing.T) {
	now := time.Now()
	oldCert := newTestCert(t, "pos.local", now.Add(-48*time.Hour), now.Add(time.Hour))
	newCert := newTestCert(t, "pos.local", now.Add(-time.Hour), now.Add(90*24*time.Hour))
	var served atomic.Pointer[tls.Certificate]
	served.Store(&oldCert.tls)
	addr := serveTLS(t, &served)

	root := t.TempDir()
	clock := &fakeClock{now: now}
	d := lookup(t, newRegistry(t, Config{Root: root, Clock: clock}), "certificate")
	ctx := t.Context()
	r := certRes(newCert, map[string]any{"address": addr, "serverName": "pos.local"})

	if err := d.Apply(ctx, r); err != nil {
		t.Fatalf("Apply: %v", err)
	}
	for path, mode := range map[string]os.FileMode{"etc/pos/tls.crt": 0o644, "etc/pos/tls.key": 0o600} {
		st, err := os.Stat(filepath.Join(root, path))
		if err != nil || st.Mode().Perm() != mode {
			t.Errorf("%s: mode %v, %v; want %v", path, st.Mode().Perm(), err, mode)
		}
	}
	cur, err := d.Current(ctx, r)
	if err != nil {
		t.Fatal(err)
	}
	if cur.Attrs["fingerprint"] != newCert.fingerprint || cur.Attrs["validity"] != "valid" ||
		cur.Attrs["notAfter"] != newCert.tls.Leaf.NotAfter.UTC().Format(time.RFC3339) {
		t.Errorf("Current attrs = %v", cur.Attrs)
	}
	if diff, err := d.Diff(r, cur); err != nil || diff.Changed {
		t.Fatalf("Diff after apply = %+v, %v; want unchanged", diff, err)
	}

	// On disk but not loaded: the port still serves the old certificate.
	eff, err := d.Probe(ctx, r)
	if err != nil {
		t.Fatal(err)
	}
	wantDetail := "served fingerprint " + short(oldCert.fingerprint)
	if eff.Result != EffectiveMismatch || !strings.Contains(eff.Detail, wantDetail) ||
		!strings.Contains(eff.Detail, "want "+short(newCert.fingerprint)) || !strings.Contains(eff.Detail, "not after ") {
		t.Fatalf("Probe with old cert served = %+v; want mismatch %q…", eff, wantDetail)
	}

	// The service reloads.
	served.Store(&newCert.tls)
	if eff, err := d.Probe(ctx, r); err != nil || eff.Result != EffectiveOK {
		t.Fatalf("Probe with new cert served = %+v, %v; want ok", eff, err)
	}

	// Time passes: the desired certificate itself expires, or is not yet
	// valid on a device whose clock is behind.
	clock.Set(newCert.tls.Leaf.NotAfter.Add(time.Second))
	if eff, _ := d.Probe(ctx, r); eff.Result != EffectiveMismatch || !strings.Contains(eff.Detail, "expired") {
		t.Errorf("Probe after expiry = %+v; want expired mismatch", eff)
	}
	if cur, _ := d.Current(ctx, r); cur.Attrs["validity"] != "expired" {
		t.Errorf("Current validity after expiry = %q", cur.Attrs["validity"])
	}
	clock.Set(newCert.tls.Leaf.NotBefore.Add(-time.Second))
	if eff, _ := d.Probe(ctx, r); eff.Result != EffectiveMismatch || !strings.Contains(eff.Detail, "not valid before") {
		t.Errorf("Probe before validity = %+v; want not yet valid mismatch", eff)
	}
}

func TestCertificateProbeUnreachable(t *testing.T) {
	now := time.Now()
	c := newTestCert(t, "pos.local", now.Add(-time.Hour), now.Add(time.Hour))
	// A port that was just free: nothing listens there.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	d := NewCertificate(Config{Root: t.TempDir(), Logger: testLogger(t)})
	eff, err := d.Probe(t.Context(), certRes(c, map[string]any{"address": addr, "timeout": "2s"}))
	if err != nil || eff.Result != EffectiveUnknown || !strings.Contains(eff.Detail, addr) {
		t.Errorf("Probe of a closed port = %+v, %v; want unknown naming %s", eff, err, addr)
	}
}

func TestCertificateOnDiskDiffAndDefaultProbe(t *testing.T) {
	now := time.Now()
	c := newTestCert(t, "a", now.Add(-time.Hour), now.Add(time.Hour))
	other := newTestCert(t, "b", now.Add(-time.Hour), now.Add(time.Hour))
	root := t.TempDir()
	d := NewCertificate(Config{Root: root, Logger: testLogger(t), Clock: &fakeClock{now: now}})
	ctx := t.Context()
	r := certRes(c, nil)

	if eff, err := d.Probe(ctx, r); err != nil || eff.Result != EffectiveMismatch || !strings.Contains(eff.Detail, "absent") {
		t.Fatalf("Probe before apply = %+v, %v; want absent mismatch", eff, err)
	}
	if err := d.Apply(ctx, r); err != nil {
		t.Fatal(err)
	}
	if eff, err := d.Probe(ctx, r); err != nil || eff.Result != EffectiveOK {
		t.Fatalf("default Probe after apply = %+v, %v; want ok", eff, err)
	}
	keyPath := filepath.Join(root, "etc/pos/tls.key")
	crtPath := filepath.Join(root, "etc/pos/tls.crt")
	before, _ := os.Stat(crtPath)
	if err := d.Apply(ctx, r); err != nil {
		t.Fatal(err)
	}
	if after, _ := os.Stat(crtPath); !os.SameFile(before, after) {
		t.Error("second Apply rewrote the certificate")
	}

	// Someone installs another certificate and loosens the key's mode.
	if err := os.WriteFile(crtPath, []byte(other.certPEM), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(keyPath, 0o644); err != nil {
		t.Fatal(err)
	}
	cur, err := d.Current(ctx, r)
	if err != nil {
		t.Fatal(err)
	}
	diff, err := d.Diff(r, cur)
	if err != nil || !diff.Changed || len(diff.Reasons) != 2 ||
		!strings.Contains(diff.Reasons[0], "fingerprint "+short(other.fingerprint)) ||
		!strings.Contains(diff.Reasons[1], "key mode 0644, want 0600") {
		t.Fatalf("Diff after tampering = %+v, %v", diff, err)
	}
	if err := d.Apply(ctx, r); err != nil {
		t.Fatal(err)
	}
	cur, _ = d.Current(ctx, r)
	if diff, _ := d.Diff(r, cur); diff.Changed {
		t.Errorf("Diff after re-apply = %+v", diff)
	}

	// Garbage in the certificate file is a difference, not an error.
	if err := os.WriteFile(crtPath, []byte("garbage"), 0o644); err != nil {
		t.Fatal(err)
	}
	cur, err = d.Current(ctx, r)
	if err != nil {
		t.Fatal(err)
	}
	if diff, _ := d.Diff(r, cur); !diff.Changed || !strings.Contains(diff.Reasons[0], "unparsable") {
		t.Errorf("Diff with garbage on disk = %+v", diff)
	}
}

func TestCertificateBadSpecs(t *testing.T) {
	now := time.Now()
	c := newTestCert(t, "a", now, now.Add(time.Hour))
	other := newTestCert(t, "b", now, now.Add(time.Hour))
	d := NewCertificate(Config{Root: t.TempDir()})
	spec := func(kv ...string) map[string]any {
		m := map[string]any{"certPath": "/c.crt", "keyPath": "/c.key", "cert": c.certPEM, "key": c.keyPEM}
		for i := 0; i < len(kv); i += 2 {
			if kv[i+1] == "" {
				delete(m, kv[i])
			} else {
				m[kv[i]] = kv[i+1]
			}
		}
		return m
	}
	checkBadSpecs(t, d, map[string]intent.Resource{
		"relative cert path": {ID: "rel", Type: "certificate", Spec: spec("certPath", "c.crt")},
		"same paths":         {ID: "same", Type: "certificate", Spec: spec("keyPath", "/c.crt")},
		"no key":             {ID: "nokey", Type: "certificate", Spec: spec("key", "")},
		"not PEM":            {ID: "notpem", Type: "certificate", Spec: spec("cert", "hello")},
	})
	mismatched := intent.Resource{ID: "pair", Type: "certificate", Spec: spec("key", other.keyPEM)}
	if err := d.Apply(t.Context(), mismatched); !errors.Is(err, ErrInvalidSpec) {
		t.Errorf("Apply with a key of another certificate = %v, want ErrInvalidSpec", err)
	}
	badAddr := intent.Resource{ID: "addr", Type: "certificate", Spec: spec(), Probe: map[string]any{"address": "nope"}}
	if _, err := d.Probe(t.Context(), badAddr); !errors.Is(err, ErrInvalidSpec) {
		t.Errorf("Probe with a bad address = %v, want ErrInvalidSpec", err)
	}
}

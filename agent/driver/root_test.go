package driver

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/meteor-edge/meteor/fsm/intent"
)

// escapes builds, beneath a fresh root, links that lead out of it: at the
// file itself and in an intermediate directory, absolute and relative.
// It returns the root, the directory outside it (holding a file
// "secret"), and the resource paths that go through each link.
func escapes(t *testing.T) (root, outside string, paths map[string]string) {
	t.Helper()
	root, outside = t.TempDir(), t.TempDir()
	secret := filepath.Join(outside, "secret")
	if err := os.WriteFile(secret, []byte("outside\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	etc := filepath.Join(root, "etc")
	rel := func(target string) string {
		r, err := filepath.Rel(etc, target)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	link(t, secret, filepath.Join(etc, "abs-file"))
	link(t, rel(secret), filepath.Join(etc, "rel-file"))
	link(t, outside, filepath.Join(etc, "abs-dir"))
	link(t, rel(outside), filepath.Join(etc, "rel-dir"))
	link(t, "../../..", filepath.Join(etc, "sub", "up"))
	return root, outside, map[string]string{
		"absolute link at the file":      "/etc/abs-file",
		"relative link at the file":      "/etc/rel-file",
		"absolute link in a directory":   "/etc/abs-dir/secret",
		"relative link in a directory":   "/etc/rel-dir/secret",
		"new file in a linked directory": "/etc/rel-dir/new",
		"link up out of the root":        "/etc/sub/up/" + filepath.Base(outside) + "/secret",
	}
}

// requireOutsideUntouched checks that outside holds only "secret", with
// its original content.
func requireOutsideUntouched(t *testing.T, outside string) {
	t.Helper()
	entries, _ := os.ReadDir(outside)
	b, err := os.ReadFile(filepath.Join(outside, "secret"))
	if len(entries) != 1 || err != nil || string(b) != "outside\n" {
		t.Errorf("outside the root: %d entries, secret %q, %v; want it untouched", len(entries), b, err)
	}
}

// requireEscapeRefused runs r through d and requires that Current and
// Apply fail saying the path escapes, and that Probe cannot observe it.
func requireEscapeRefused(t *testing.T, d Driver, r intent.Resource) {
	t.Helper()
	ctx := t.Context()
	if _, err := d.Current(ctx, r); err == nil || !strings.Contains(err.Error(), "escapes") {
		t.Errorf("Current = %v, want a path escape error", err)
	}
	if err := d.Apply(ctx, r); err == nil || !strings.Contains(err.Error(), "escapes") {
		t.Errorf("Apply = %v, want a path escape error", err)
	}
	if eff, err := d.Probe(ctx, r); err != nil || eff.Result == EffectiveOK {
		t.Errorf("Probe = %+v, %v; want not ok", eff, err)
	}
}

func TestFileRefusesLinksOutOfRoot(t *testing.T) {
	root, outside, paths := escapes(t)
	d := NewFile(Config{Root: root, Logger: testLogger(t)})
	for name, p := range paths {
		t.Run(name, func(t *testing.T) {
			requireEscapeRefused(t, d, fileRes("escape", p, "written\n", ""))
		})
	}
	requireOutsideUntouched(t, outside)
}

func TestCertificateRefusesLinksOutOfRoot(t *testing.T) {
	root, outside, paths := escapes(t)
	now := time.Now()
	c := newTestCert(t, "a", now.Add(-time.Hour), now.Add(time.Hour))
	d := NewCertificate(Config{Root: root, Logger: testLogger(t)})
	for name, p := range paths {
		for _, key := range []string{"certPath", "keyPath"} {
			t.Run(name+" "+key, func(t *testing.T) {
				r := certRes(c, nil)
				r.Spec[key] = p
				requireEscapeRefused(t, d, r)
			})
		}
	}
	requireOutsideUntouched(t, outside)
}

func TestFileFollowsLinksInsideRoot(t *testing.T) {
	root := t.TempDir()
	link(t, "../data", filepath.Join(root, "etc", "app"))
	if err := os.Mkdir(filepath.Join(root, "data"), 0o755); err != nil {
		t.Fatal(err)
	}
	d := NewFile(Config{Root: root, Logger: testLogger(t)})
	r := fileRes("inside", "/etc/app/new/config", "inside\n", "")
	if err := d.Apply(t.Context(), r); err != nil {
		t.Fatalf("Apply through a link inside the root: %v", err)
	}
	if b, err := os.ReadFile(filepath.Join(root, "data", "new", "config")); err != nil || string(b) != "inside\n" {
		t.Errorf("data/new/config = %q, %v", b, err)
	}
	if eff, err := d.Probe(t.Context(), r); err != nil || eff.Result != EffectiveOK {
		t.Errorf("Probe = %+v, %v; want ok", eff, err)
	}
}

func TestFileWithoutRootUsesRealPaths(t *testing.T) {
	dir := t.TempDir()
	d := NewFile(Config{Logger: testLogger(t)})
	p := filepath.Join(dir, "sub", "f")
	if err := d.Apply(t.Context(), fileRes("real", p, "real\n", "0600")); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(p); err != nil || string(b) != "real\n" {
		t.Errorf("%s = %q, %v", p, b, err)
	}
}

package driver

import (
	"encoding/base64"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/meteor-edge/meteor/fsm/intent"
)

func fileRes(id, path, content, mode string) intent.Resource {
	spec := map[string]any{"path": path, "content": content}
	if mode != "" {
		spec["mode"] = mode
	}
	return intent.Resource{ID: id, Type: "file", Spec: spec}
}

func TestFileApplyConvergesAndIsIdempotent(t *testing.T) {
	root := t.TempDir()
	d := lookup(t, newRegistry(t, Config{Root: root}), "file")
	ctx := t.Context()
	r := fileRes("motd", "/etc/meteor/motd", "hello\n", "0640")
	onDisk := filepath.Join(root, "etc/meteor/motd")

	cur, err := d.Current(ctx, r)
	if err != nil || cur.Present {
		t.Fatalf("Current before apply = %+v, %v; want absent", cur, err)
	}
	if diff, err := d.Diff(r, cur); err != nil || !diff.Changed {
		t.Fatalf("Diff before apply = %+v, %v; want changed", diff, err)
	}
	if eff, err := d.Probe(ctx, r); err != nil || eff.Result != EffectiveMismatch {
		t.Fatalf("Probe before apply = %+v, %v; want mismatch", eff, err)
	}

	if err := d.Apply(ctx, r); err != nil {
		t.Fatalf("Apply: %v", err)
	}
	got, err := os.ReadFile(onDisk)
	if err != nil || string(got) != "hello\n" {
		t.Fatalf("file content = %q, %v", got, err)
	}
	st, err := os.Stat(onDisk)
	if err != nil || st.Mode().Perm() != 0o640 {
		t.Fatalf("file mode = %v, %v; want 0640", st.Mode(), err)
	}
	cur, err = d.Current(ctx, r)
	if err != nil {
		t.Fatal(err)
	}
	if diff, err := d.Diff(r, cur); err != nil || diff.Changed {
		t.Fatalf("Diff after apply = %+v, %v; want unchanged", diff, err)
	}
	if eff, err := d.Probe(ctx, r); err != nil || eff.Result != EffectiveOK {
		t.Fatalf("Probe after apply = %+v, %v; want ok", eff, err)
	}

	// A second apply touches nothing: mtime and inode stay.
	old := time.Date(2020, 1, 2, 3, 4, 5, 0, time.UTC)
	if err := os.Chtimes(onDisk, old, old); err != nil {
		t.Fatal(err)
	}
	before, _ := os.Stat(onDisk)
	if err := d.Apply(ctx, r); err != nil {
		t.Fatalf("second Apply: %v", err)
	}
	after, _ := os.Stat(onDisk)
	if !after.ModTime().Equal(old) || !os.SameFile(before, after) {
		t.Errorf("second Apply rewrote the file: mtime %v, same file %v", after.ModTime(), os.SameFile(before, after))
	}

	entries, _ := os.ReadDir(filepath.Dir(onDisk))
	if len(entries) != 1 {
		t.Errorf("directory holds %d entries, want only the file (no temp files)", len(entries))
	}
}

func TestFileDriftIsDetectedAndCorrected(t *testing.T) {
	root := t.TempDir()
	d := lookup(t, newRegistry(t, Config{Root: root}), "file")
	ctx := t.Context()
	r := fileRes("conf", "/srv/app.conf", "a=1\n", "")
	onDisk := filepath.Join(root, "srv/app.conf")
	if err := d.Apply(ctx, r); err != nil {
		t.Fatal(err)
	}
	if st, _ := os.Stat(onDisk); st.Mode().Perm() != defaultFileMode {
		t.Fatalf("default mode = %v, want 0644", st.Mode().Perm())
	}
	if err := os.WriteFile(onDisk, []byte("a=2\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(onDisk, 0o600); err != nil {
		t.Fatal(err)
	}
	cur, err := d.Current(ctx, r)
	if err != nil {
		t.Fatal(err)
	}
	diff, err := d.Diff(r, cur)
	if err != nil || !diff.Changed || len(diff.Reasons) != 2 {
		t.Fatalf("Diff after drift = %+v, %v; want content and mode reasons", diff, err)
	}
	if !strings.Contains(diff.Reasons[1], "mode 0600, want 0644") {
		t.Errorf("mode reason = %q", diff.Reasons[1])
	}
	eff, err := d.Probe(ctx, r)
	if err != nil || eff.Result != EffectiveMismatch || !strings.Contains(eff.Detail, "content sha256") {
		t.Fatalf("Probe after drift = %+v, %v", eff, err)
	}
	if err := d.Apply(ctx, r); err != nil {
		t.Fatal(err)
	}
	if eff, err := d.Probe(ctx, r); err != nil || eff.Result != EffectiveOK {
		t.Fatalf("Probe after correction = %+v, %v; want ok", eff, err)
	}
}

func TestFileContentBase64(t *testing.T) {
	root := t.TempDir()
	d := lookup(t, newRegistry(t, Config{Root: root}), "file")
	bin := []byte{0, 1, 2, 0xff}
	r := intent.Resource{ID: "blob", Type: "file", Spec: map[string]any{
		"path": "/var/lib/blob", "contentBase64": base64.StdEncoding.EncodeToString(bin),
	}}
	if err := d.Apply(t.Context(), r); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(filepath.Join(root, "var/lib/blob"))
	if err != nil || string(got) != string(bin) {
		t.Fatalf("content = %v, %v; want %v", got, err, bin)
	}
}

func TestFileDirectoryInTheWay(t *testing.T) {
	root := t.TempDir()
	d := lookup(t, newRegistry(t, Config{Root: root}), "file")
	if err := os.MkdirAll(filepath.Join(root, "etc/x"), 0o755); err != nil {
		t.Fatal(err)
	}
	r := fileRes("x", "/etc/x", "data", "")
	if _, err := d.Current(t.Context(), r); err == nil || !strings.Contains(err.Error(), "not a regular file") {
		t.Errorf("Current = %v, want not a regular file", err)
	}
	if err := d.Apply(t.Context(), r); err == nil {
		t.Error("Apply over a directory succeeded")
	}
	if eff, err := d.Probe(t.Context(), r); err != nil || eff.Result != EffectiveUnknown {
		t.Errorf("Probe = %+v, %v; want unknown", eff, err)
	}
}

func TestFileBadSpecs(t *testing.T) {
	d := NewFile(Config{Root: t.TempDir()})
	bad := map[string]intent.Resource{
		"relative path": fileRes("rel", "etc/x", "x", ""),
		"no path":       {ID: "nopath", Type: "file", Spec: map[string]any{"content": "x"}},
		"root path":     fileRes("slash", "/", "x", ""),
		"no content":    {ID: "nocontent", Type: "file", Spec: map[string]any{"path": "/x"}},
		"both contents": {ID: "both", Type: "file", Spec: map[string]any{"path": "/x", "content": "a", "contentBase64": "YQ=="}},
		"bad base64":    {ID: "b64", Type: "file", Spec: map[string]any{"path": "/x", "contentBase64": "!!"}},
		"decimal mode":  fileRes("mode9", "/x", "x", "0999"),
		"setuid mode":   fileRes("mode4", "/x", "x", "04755"),
		"numeric mode":  {ID: "modenum", Type: "file", Spec: map[string]any{"path": "/x", "content": "x", "mode": 420}},
		"content type":  {ID: "ctype", Type: "file", Spec: map[string]any{"path": "/x", "content": 5}},
	}
	checkBadSpecs(t, d, bad)
}

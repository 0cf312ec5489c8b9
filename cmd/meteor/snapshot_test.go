package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/meteor-edge/meteor/cluster"
	"github.com/meteor-edge/meteor/cluster/snapshot"
)

// TestSnapshotCommands: 'meteor snapshot save' writes a file that
// 'inspect' finds intact and 'restore' puts back; a damaged copy is
// refused by the CLI itself, naming what is wrong, and a save that fails
// leaves no file. The restore says what it kept of the replaced state: a
// device revoked after the backup stays revoked.
func TestSnapshotCommands(t *testing.T) {
	l, base := startACLCluster(t)
	cli := func(args ...string) (string, error) { return run(t, append(append([]string{}, base...), args...)...) }
	dir := t.TempDir()
	doc := filepath.Join(dir, "web.yaml")
	os.WriteFile(doc, []byte("name: web\nselector: {region: eu}\nresources:\n  - {id: motd, type: file, spec: {path: /etc/motd, content: v1}}\n"), 0o600)
	if _, err := cli("apply", "-f", doc); err != nil {
		t.Fatal(err)
	}

	file := filepath.Join(dir, "backup.snap")
	out, err := cli("snapshot", "save", file)
	if err != nil || !strings.HasPrefix(out, "saved "+file+": index ") {
		t.Fatalf("snapshot save: %v\n%s", err, out)
	}
	out, err = cli("-o", "json", "snapshot", "inspect", file)
	var in inspection
	if err != nil || json.Unmarshal([]byte(out), &in) != nil || in.Records["intent"] != 1 || in.Records["token"] != 1 || in.Header.Revision != 1 {
		t.Fatalf("snapshot inspect: %v\n%s", err, out)
	}
	if out, err := cli("snapshot", "inspect", file); err != nil || !strings.Contains(out, "intact") || !strings.Contains(out, "intent 1") {
		t.Fatalf("snapshot inspect: %v\n%s", err, out)
	}

	data, _ := os.ReadFile(file)
	bad := filepath.Join(dir, "bad.snap")
	os.WriteFile(bad, data[:len(data)-1], 0o600)
	if _, err := cli("snapshot", "restore", bad); err == nil || !strings.Contains(err.Error(), "truncated") || !strings.Contains(err.Error(), "nothing was restored") {
		t.Fatalf("restore of a truncated file: %v", err)
	}
	if _, err := cli("snapshot", "inspect", bad); err == nil || !strings.Contains(err.Error(), "truncated") {
		t.Fatalf("inspect of a truncated file: %v", err)
	}

	os.WriteFile(doc, []byte("name: web\nselector: {region: eu}\nresources:\n  - {id: motd, type: file, spec: {path: /etc/motd, content: v2}}\n"), 0o600)
	if _, err := cli("apply", "-f", doc); err != nil {
		t.Fatal(err)
	}
	if _, err := cli("device", "revoke", "stolen-1"); err != nil {
		t.Fatal(err)
	}
	out, err = cli("snapshot", "restore", file)
	if err != nil || !strings.Contains(out, "the cluster is at revision 3") || !strings.Contains(out, "s1: restored") ||
		!strings.Contains(out, "kept revoked: 1 devices revoked since the backup: stolen-1") || !strings.Contains(out, "tokens not restored: 0") {
		t.Fatalf("snapshot restore: %v\n%s", err, out)
	}
	if out, err := cli("device", "revoked"); err != nil || !strings.Contains(out, "stolen-1") {
		t.Fatalf("revoked devices after the restore: %v\n%s", err, out)
	}
	if out, err := cli("-o", "json", "get", "intent", "web"); err != nil || !strings.Contains(out, `"content": "v1"`) {
		t.Fatalf("web after the restore: %v\n%s", err, out)
	}

	// A save the server refuses leaves no file behind.
	gone := filepath.Join(dir, "refused.snap")
	if _, err := run(t, "--addr", l.HTTPAddr(0), "--ca-cert", base[3], "--token", "mtk_bogus", "snapshot", "save", gone); err == nil {
		t.Fatal("a save with a bad token succeeded")
	}
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if strings.Contains(e.Name(), "refused") {
			t.Fatalf("a refused save left %s", e.Name())
		}
	}
	if _, err := snapshot.Verify(strings.NewReader(string(data))); err != nil {
		t.Fatal(err)
	}
}

// startACLCluster starts a one-server cluster with the ACL on, stopped at
// the test's end, and returns it with the global flags that reach it as
// its admin.
func startACLCluster(t *testing.T) (*cluster.Local, []string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	l, err := cluster.StartLocal(ctx, cluster.LocalOptions{Servers: 1, Dir: t.TempDir(), ACL: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l, []string{"--addr", l.HTTPAddr(0), "--ca-cert", writeCACert(t, l.CA()), "--token", l.AdminToken()}
}

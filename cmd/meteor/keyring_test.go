package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/meteor-edge/meteor/cluster"
	"github.com/meteor-edge/meteor/cluster/api"
)

// TestKeyringCommands: a rotation from the command line, with a generated
// key file: install --generate, use, remove the old key; list shows every
// server with only the new key, primary; removing the primary and
// generating over an existing file are refused.
func TestKeyringCommands(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	l, err := cluster.StartLocal(ctx, cluster.LocalOptions{Servers: 3, Dir: t.TempDir(), Configure: func(_ int, c *cluster.Config) {
		c.ClusterSecret = bytes.Repeat([]byte{7}, 32)
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	addr := l.HTTPAddr(0)
	caPath := writeCACert(t, l.CA())
	dir := t.TempDir()
	oldFile, newFile := filepath.Join(dir, "gossip.key"), filepath.Join(dir, "gossip.key.new")
	if err := writeSecretFile(oldFile, l.GossipKey()); err != nil {
		t.Fatal(err)
	}

	out, err := run(t, "--addr", addr, "--ca-cert", caPath, "keyring", "install", "--generate", "--key-file", newFile)
	if err != nil || !strings.Contains(out, "generated sha256:") {
		t.Fatalf("install --generate: %v\n%s", err, out)
	}
	if fi, err := os.Stat(newFile); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("generated key file: %v, %v; want mode 0600", fi, err)
	}
	if _, err := run(t, "--addr", addr, "--ca-cert", caPath, "keyring", "install", "--generate", "--key-file", newFile); err == nil {
		t.Fatal("--generate overwrote a key file")
	}
	if out, err := run(t, "--addr", addr, "--ca-cert", caPath, "keyring", "use", "--key-file", newFile); err != nil {
		t.Fatalf("use: %v\n%s", err, out)
	}
	if out, err := run(t, "--addr", addr, "--ca-cert", caPath, "keyring", "remove", "--key-file", newFile); err == nil || !strings.Contains(err.Error(), "primary key of") {
		t.Fatalf("remove the primary: %v\n%s", err, out)
	}
	if out, err := run(t, "--addr", addr, "--ca-cert", caPath, "keyring", "remove", "--key-file", oldFile); err != nil {
		t.Fatalf("remove the old key: %v\n%s", err, out)
	}

	key, err := readGossipKey(newFile)
	if err != nil {
		t.Fatal(err)
	}
	out, err = run(t, "--addr", addr, "--ca-cert", caPath, "-o", "json", "keyring", "list")
	if err != nil {
		t.Fatal(err)
	}
	var res api.KeyringResponse
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, s := range res.Servers {
		ids = append(ids, s.ID)
		if s.Primary != api.KeyFingerprint(key) || !slices.Equal(s.Keys, []string{s.Primary}) || len(s.Secrets) != 0 {
			t.Errorf("server %s after the rotation: %+v", s.ID, s)
		}
	}
	if !slices.Equal(ids, []string{"s1", "s2", "s3"}) {
		t.Fatalf("keyring list shows %v, want s1 s2 s3", ids)
	}
	out, err = run(t, "--addr", addr, "--ca-cert", caPath, "keyring", "list")
	if err != nil || strings.Contains(out, strings.TrimSpace(mustRead(t, newFile))) {
		t.Fatalf("keyring list printed the secret or failed: %v\n%s", err, out)
	}
}

func mustRead(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

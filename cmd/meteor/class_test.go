package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/meteor-edge/meteor/cluster"
)

// TestClassCommands writes a class with 'meteor class apply' (a field left
// out keeps its value), lists the classes in effect with 'meteor get
// classes', refuses a class too fast for a device, and deletes the written
// class, which brings the built-in one back.
func TestClassCommands(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	l, err := cluster.StartLocal(ctx, cluster.LocalOptions{Servers: 1, Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	base := []string{"--addr", l.HTTPAddr(0), "--ca-cert", writeCACert(t, l.CA())}
	cli := func(args ...string) (string, error) {
		t.Helper()
		return run(t, append(base, args...)...)
	}
	file := filepath.Join(t.TempDir(), "classes.yaml")
	if err := os.WriteFile(file, []byte("name: network-policy\nprobeInterval: 5s\n---\nname: pos-critical\npullInterval: 30s\nretry: {base: 2s, max: 20s}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := cli("class", "apply", "-f", file)
	if err != nil || !strings.Contains(out, "class/network-policy applied (index ") || !strings.Contains(out, "class/pos-critical applied") {
		t.Fatalf("class apply: %v\n%s", err, out)
	}
	out, err = cli("get", "classes")
	if err != nil {
		t.Fatal(err)
	}
	lines := map[string]string{}
	for _, line := range strings.Split(out, "\n") {
		if f := strings.Fields(line); len(f) > 0 {
			lines[f[0]] = line
		}
	}
	for name, want := range map[string][]string{
		"NAME":           {"PULL", "PROBE", "REPORT", "RETRY", "UNREACHABLE", "PROGRESS", "SOURCE"},
		"network-policy": {"10m", "5s", "1h", "1s..30s ±10%", "2m", "written by"},
		"pos-critical":   {"30s", "1m", "6h", "2s..20s", "written by"},
		"package":        {"1h", "10m", "1m..1h", "built-in"},
	} {
		for _, w := range want {
			if !strings.Contains(lines[name], w) {
				t.Errorf("get classes: line of %s %q lacks %q\n%s", name, lines[name], w, out)
			}
		}
	}
	if err := os.WriteFile(file, []byte("name: logging\nprobeInterval: 100ms\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := cli("class", "apply", "-f", file); err == nil || !strings.Contains(out+err.Error(), "probeInterval must be at least 1s") {
		t.Errorf("a class probing every 100ms: %v\n%s", err, out)
	}
	if out, err := cli("class", "delete", "network-policy"); err != nil || out != "class/network-policy deleted\n" {
		t.Fatalf("class delete: %v %q", err, out)
	}
	if out, _ := cli("get", "classes"); !strings.Contains(out, "network-policy  10m   15s") {
		t.Errorf("after the delete network-policy is not the built-in one:\n%s", out)
	}
	if _, err := cli("class", "delete", "package"); err == nil {
		t.Error("deleting a built-in class nobody wrote succeeded")
	}

	// Maintenance windows.
	if err := os.WriteFile(file, []byte("name: store-nights\nselector: {role: pos-gateway}\nschedule:\n  - {days: mon-fri, from: \"22:00\", to: \"05:00\"}\n  - {days: weekends, from: \"00:00\", to: \"23:59\"}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := cli("window", "apply", "-f", file); err != nil || !strings.HasPrefix(out, "maintenance-window/store-nights applied (index ") {
		t.Fatalf("window apply: %v %q", err, out)
	}
	out, err = cli("get", "windows")
	if err != nil || !strings.Contains(out, "store-nights  role=pos-gateway  mon-fri 22:00-05:00; sat,sun 00:00-23:59  by ") {
		t.Fatalf("get windows: %v\n%s", err, out)
	}
	if out, err := cli("window", "delete", "store-nights"); err != nil || out != "maintenance-window/store-nights deleted\n" {
		t.Fatalf("window delete: %v %q", err, out)
	}
	if out, _ := cli("get", "windows"); strings.Contains(out, "store-nights") {
		t.Errorf("after the delete:\n%s", out)
	}
}

package deploy

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// units are the systemd units of deploy/systemd and the binary each runs.
var units = map[string]string{
	"meteor-server.service": "meteor",
	"meteor-agent.service":  "meteor-agent",
}

// TestSystemdUnitsVerify runs systemd-analyze verify on the units, their
// ExecStart binaries stood in for by stubs of the same name (verify
// checks that the command exists): any warning, such as a key systemd does
// not know, fails the test. Where systemd-analyze supports it, it logs
// each unit's exposure level from systemd-analyze security.
func TestSystemdUnitsVerify(t *testing.T) {
	analyze, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Skip("systemd-analyze is not installed: the units of deploy/systemd are not verified (TestSystemdUnitsHardening still reads them)")
	}
	dir := t.TempDir()
	var paths []string
	for unit, bin := range units {
		b, err := os.ReadFile(filepath.Join("systemd", unit))
		if err != nil {
			t.Fatal(err)
		}
		text := strings.ReplaceAll(string(b), "/usr/local/bin/", dir+"/")
		p := filepath.Join(dir, unit)
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, bin), []byte("#!/bin/sh\n"), 0o755); err != nil {
			t.Fatal(err)
		}
		paths = append(paths, p)
	}
	out, err := exec.Command(analyze, append([]string{"verify"}, paths...)...).CombinedOutput()
	if err != nil || len(strings.TrimSpace(string(out))) > 0 {
		t.Errorf("systemd-analyze verify: %v\n%s", err, out)
	}
	for _, p := range paths {
		out, err := exec.Command(analyze, "security", "--offline=yes", "--no-pager", p).CombinedOutput()
		if err != nil {
			t.Logf("systemd-analyze security --offline=yes %s: %v (older systemd: not measured)", filepath.Base(p), err)
			continue
		}
		lines := strings.Split(strings.TrimSpace(string(out)), "\n")
		t.Logf("%s", lines[len(lines)-1])
	}
}

// TestSystemdUnitsHardening: the units keep the hardening docs/deploy.md
// describes: no capabilities, no new privileges, a read-only system
// beside their own state dir, a private /tmp, no home, the
// @system-service system calls, sockets of the families listed, their
// config file, and reload by SIGHUP for the server (which reloads its TLS
// material on it).
func TestSystemdUnitsHardening(t *testing.T) {
	want := map[string]string{
		"NoNewPrivileges":         "yes",
		"CapabilityBoundingSet":   "",
		"AmbientCapabilities":     "",
		"ProtectSystem":           "strict",
		"ProtectHome":             "yes",
		"PrivateTmp":              "yes",
		"PrivateDevices":          "yes",
		"ProtectKernelTunables":   "yes",
		"ProtectKernelModules":    "yes",
		"ProtectControlGroups":    "yes",
		"RestrictNamespaces":      "yes",
		"RestrictSUIDSGID":        "yes",
		"LockPersonality":         "yes",
		"SystemCallArchitectures": "native",
		"SystemCallFilter":        "@system-service",
		"UMask":                   "0077",
	}
	for unit, bin := range units {
		keys := readUnit(t, filepath.Join("systemd", unit))
		for k, v := range want {
			if !contains(keys[k], v) {
				t.Errorf("%s: %s=%s missing (has %q)", unit, k, v, keys[k])
			}
		}
		state := "/var/lib/" + keys["StateDirectory"][0]
		if !contains(keys["ReadWritePaths"], state) {
			t.Errorf("%s: ReadWritePaths=%s missing (has %q)", unit, state, keys["ReadWritePaths"])
		}
		if u := keys["User"]; len(u) != 1 || u[0] == "root" || u[0] == "" {
			t.Errorf("%s: runs as %q, want a user of its own", unit, u)
		}
		exec := keys["ExecStart"]
		if len(exec) != 1 || !strings.HasPrefix(exec[0], "/usr/local/bin/"+bin+" ") || !strings.Contains(exec[0], " --config /etc/meteor/") {
			t.Errorf("%s: ExecStart=%q, want /usr/local/bin/%s ... --config /etc/meteor/...", unit, exec, bin)
		}
		if fams := keys["RestrictAddressFamilies"]; len(fams) != 1 || !strings.Contains(fams[0], "AF_INET AF_INET6") {
			t.Errorf("%s: RestrictAddressFamilies=%q", unit, fams)
		}
	}
	server := readUnit(t, "systemd/meteor-server.service")
	if r := server["ExecReload"]; len(r) != 1 || r[0] != "/bin/kill -HUP $MAINPID" {
		t.Errorf("meteor-server.service: ExecReload=%q, want SIGHUP (the server reloads its TLS material)", r)
	}
	if f := server["RestrictAddressFamilies"]; len(f) != 1 || f[0] != "AF_INET AF_INET6" {
		t.Errorf("meteor-server.service: RestrictAddressFamilies=%q, want TCP and UDP only", f)
	}
	if server["MemoryDenyWriteExecute"] == nil {
		t.Error("meteor-server.service: no MemoryDenyWriteExecute")
	}
	if agent := readUnit(t, "systemd/meteor-agent.service"); agent["ExecReload"] != nil {
		t.Error("meteor-agent.service: ExecReload set: the agent takes no SIGHUP (it would stop)")
	}
}

// readUnit returns the values of each key of a unit file, in order.
func readUnit(t *testing.T, path string) map[string][]string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	keys := map[string][]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") || strings.HasPrefix(line, "[") {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		if !ok {
			t.Fatalf("%s: %q is not key=value", path, line)
		}
		keys[k] = append(keys[k], v)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return keys
}

func contains(list []string, s string) bool {
	for _, e := range list {
		if e == s {
			return true
		}
	}
	return false
}

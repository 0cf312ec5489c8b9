package main

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/spf13/pflag"

	"github.com/meteor-edge/meteor/cluster"
	"github.com/meteor-edge/meteor/cluster/pki"
	"github.com/meteor-edge/meteor/cmd/internal/agentcmd"
)

// writeCA creates a CA and writes its certificate, and its key if
// keyName is not empty, into dir; it returns the certificate's path.
func writeCA(t *testing.T, dir, certName, keyName string) string {
	t.Helper()
	ca, err := pki.NewCA("test CA "+certName, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	certPEM, keyPEM, err := ca.PEM()
	if err != nil {
		t.Fatal(err)
	}
	files := map[string][]byte{certName: certPEM}
	if keyName != "" {
		files[keyName] = keyPEM
	}
	for name, b := range files {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return filepath.Join(dir, certName)
}

// TestAgentCmdEnrollFlags runs `meteor agent` as main does: the command
// of package agentcmd refuses enrollment flags that do not go together.
func TestAgentCmdEnrollFlags(t *testing.T) {
	dir := t.TempDir()
	caFile := writeCA(t, dir, "ca.pem", "")
	run := func(args ...string) error {
		code, out, errOut := cliRun(t, append([]string{"agent", "--servers", "127.0.0.1:1", "--data-dir", filepath.Join(dir, "data"), "--device-id", "d1", "--ca-file", caFile}, args...)...)
		if code == exitOK {
			return nil
		}
		if code != exitError || out != "" {
			t.Errorf("meteor agent %v: exit %d, stdout %q; want exit %d and nothing", args, code, out, exitError)
		}
		return errors.New(errOut)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{nil, "enroll with a token (meteor agent --enroll)"},
		{[]string{"--enroll", "mtk_x", "--cert-file", "c.pem", "--key-file", "k.pem"}, "without --cert-file"},
		{[]string{"--cert-file", "c.pem"}, "go together"},
		{[]string{"--enroll", "mtk_x", "--enroll-file", "f"}, "not both"},
		{[]string{"--enroll-file", filepath.Join(dir, "missing")}, "--enroll-file"},
	} {
		if err := run(c.args...); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: %v, want %q", c.args, err, c.want)
		}
	}
}

func TestDeviceCAFlags(t *testing.T) {
	// A TLS directory without ca-key.pem: no signing, no error.
	dir := t.TempDir()
	caFile := writeCA(t, dir, caCertFile, "")
	var cfg cluster.Config
	d := deviceCAFlags{lifetime: pki.DefaultDeviceValidity}
	if err := d.apply(&cfg, dir, caFile); err != nil || cfg.DeviceCA != nil {
		t.Fatalf("no key: %v, %v", cfg.DeviceCA, err)
	}
	dir = t.TempDir()
	caFile = writeCA(t, dir, caCertFile, caKeyFile)
	if err := d.apply(&cfg, dir, caFile); err != nil || cfg.DeviceCA == nil || cfg.DeviceCertLifetime != pki.DefaultDeviceValidity {
		t.Fatalf("ca-key.pem in --tls-dir: %v, %v", cfg.DeviceCA, err)
	}
	writeCA(t, dir, "other.pem", "")
	if err := d.apply(&cluster.Config{}, "", filepath.Join(dir, "other.pem")); err != nil {
		t.Fatalf("no --tls-dir and no --ca-key-file: %v", err)
	}
	d.keyFile = filepath.Join(dir, caKeyFile)
	if err := d.apply(&cluster.Config{}, "", filepath.Join(dir, "other.pem")); err == nil {
		t.Error("a key that does not match the CA certificate was accepted")
	}
	d.lifetime = time.Second
	if err := d.apply(&cluster.Config{}, "", caFile); err == nil || !strings.Contains(err.Error(), "--device-cert-lifetime") {
		t.Errorf("one-second lifetime: %v", err)
	}
}

// TestAgentCmdIsAgentcmd: `meteor agent` has exactly the flags of the
// agent binary's command (package agentcmd), with the same defaults and
// help, so the two binaries run one agent.
func TestAgentCmdIsAgentcmd(t *testing.T) {
	cmd, _, err := newRootCmd().Find([]string{"agent"})
	if err != nil {
		t.Fatal(err)
	}
	flags := func(f *pflag.FlagSet) map[string]string {
		out := map[string]string{}
		f.VisitAll(func(fl *pflag.Flag) {
			if fl.Name != "help" { // cobra's, naming the command
				out[fl.Name] = fl.DefValue + " | " + fl.Usage
			}
		})
		return out
	}
	want := flags(agentcmd.New("meteor-agent").Flags())
	if diff := cmp.Diff(want, flags(cmd.LocalNonPersistentFlags())); diff != "" {
		t.Errorf("meteor agent flags (-meteor-agent +meteor agent):\n%s", diff)
	}
	if len(want) < 15 {
		t.Errorf("agentcmd has %d flags: %v", len(want), want)
	}
	if !strings.Contains(cmd.Example, "  meteor agent --servers ") {
		t.Errorf("meteor agent's examples do not name it:\n%s", cmd.Example)
	}
}

package agentcmd

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/meteor-edge/meteor/agent/driver"
	"github.com/meteor-edge/meteor/cluster/pki"
)

// deviceMaterial writes a test CA (ca.pem) and a certificate for device
// store-42 (dev.pem, dev-key.pem) into a new directory.
func deviceMaterial(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	ca, err := pki.NewCA("test CA", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	caPEM, _, err := ca.PEM()
	if err != nil {
		t.Fatal(err)
	}
	cert, err := ca.IssueDevice("store-42")
	if err != nil {
		t.Fatal(err)
	}
	certPEM, keyPEM, err := pki.CertificatePEM(cert)
	if err != nil {
		t.Fatal(err)
	}
	for name, b := range map[string][]byte{"ca.pem": caPEM, "dev.pem": certPEM, "dev-key.pem": keyPEM} {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// runAgent runs `meteor agent` with args and returns its error.
func runAgent(args ...string) error {
	cmd := New("meteor agent")
	cmd.SetArgs(args)
	cmd.SetOut(os.Stderr)
	cmd.SetErr(os.Stderr)
	return cmd.Execute()
}

func TestAgentCmdRefusesForeignCertificate(t *testing.T) {
	dir := deviceMaterial(t)
	base := []string{"--servers", "127.0.0.1:1", "--data-dir", filepath.Join(dir, "data"),
		"--ca-file", filepath.Join(dir, "ca.pem"), "--cert-file", filepath.Join(dir, "dev.pem"), "--key-file", filepath.Join(dir, "dev-key.pem")}

	err := runAgent(append(base, "--device-id", "store-43")...)
	if err == nil || !strings.Contains(err.Error(), `--device-id "store-43" does not match`) || !strings.Contains(err.Error(), `"store-42"`) {
		t.Errorf("foreign certificate: %v", err)
	}
	if err := runAgent(base...); err == nil || !strings.Contains(err.Error(), "--device-id is required") {
		t.Errorf("no --device-id: %v", err)
	}
	if err := runAgent(append(base, "--device-id", "store-42", "--labels", "region")...); err == nil || !strings.Contains(err.Error(), "key=value") {
		t.Errorf("bad labels: %v", err)
	}
}

func TestParseLabelFlag(t *testing.T) {
	got, err := parseLabelFlag("region=eu, site=store-42,empty=")
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(map[string]string{"region": "eu", "site": "store-42", "empty": ""}, got); diff != "" {
		t.Error(diff)
	}
	if _, err := parseLabelFlag("a=1,a=2"); err == nil {
		t.Error("duplicate label accepted")
	}
}

func TestParseExecPolicy(t *testing.T) {
	p, err := parseExecPolicy("/bin/sh, /bin/true", "APP_MODE, SITE_*")
	if err != nil {
		t.Fatal(err)
	}
	want := driver.ExecPolicy{Programs: []string{"/bin/sh", "/bin/true"}, Env: []string{"APP_MODE", "SITE_*"}}
	if diff := cmp.Diff(want, p); diff != "" {
		t.Error(diff)
	}
	if p, err := parseExecPolicy("", ""); err != nil || len(p.Programs)+len(p.Env) != 0 {
		t.Errorf("empty flags = %+v, %v; want the zero policy", p, err)
	}
	for _, bad := range [][2]string{{"bin/sh", ""}, {"/no/such/program", ""}, {"", "A=B"}} {
		if _, err := parseExecPolicy(bad[0], bad[1]); err == nil {
			t.Errorf("parseExecPolicy(%q, %q) accepted", bad[0], bad[1])
		}
	}
}

// TestAgentConfigFile: `meteor agent --config FILE` takes its flags from
// the file, a flag on the command line wins over the file, and a mistake
// in the file is an error naming its line.
func TestAgentConfigFile(t *testing.T) {
	dir := deviceMaterial(t)
	config := func(content string) string {
		p := filepath.Join(t.TempDir(), "agent.yaml")
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	// Every flag from the file; the certificate is for store-42, so the
	// device ID shows which value won.
	file := config(`servers: [127.0.0.1:1, 127.0.0.1:2]
device-id: store-43
data-dir: ` + filepath.Join(dir, "data") + `
ca-file: ` + filepath.Join(dir, "ca.pem") + `
cert-file: ` + filepath.Join(dir, "dev.pem") + `
key-file: ` + filepath.Join(dir, "dev-key.pem") + `
labels: {region: eu, site: store-42}
pull-interval: 1m
`)
	if err := runAgent("--config", file); err == nil || !strings.Contains(err.Error(), `--device-id "store-43" does not match`) {
		t.Errorf("device-id from the file: %v", err)
	}
	if err := runAgent("--config", file, "--device-id", "store-44"); err == nil || !strings.Contains(err.Error(), `--device-id "store-44" does not match`) {
		t.Errorf("--device-id on the command line: %v", err)
	}
	if err := runAgent("--config", file, "--device-id", "store-42", "--labels", "region"); err == nil || !strings.Contains(err.Error(), `--labels: "region" is not key=value`) {
		t.Errorf("--labels on the command line: %v", err)
	}
	for _, tc := range []struct{ file, want string }{
		{"device-id: store-42\nservers: 127.0.0.1:1\nnode-id: s1\n", `line 3: unknown key "node-id"`},
		{"device-id: store-42\ndevice-id: store-43\n", `line 2: key "device-id" given twice (first on line 1)`},
		{"labels: [region=eu]\n", "line 1: labels: takes one value, not a list"},
		{"pull-interval: often\n", `line 1: pull-interval: invalid argument "often"`},
	} {
		p := config(tc.file)
		if err := runAgent("--config", p); err == nil || !strings.Contains(err.Error(), "config "+p+": "+tc.want) {
			t.Errorf("%q: %v, want %q", tc.file, err, tc.want)
		}
	}
}

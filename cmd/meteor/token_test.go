package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/meteor-edge/meteor/cluster"
	"github.com/meteor-edge/meteor/cluster/api"
	"github.com/meteor-edge/meteor/cluster/pki"
)

// writeCACert writes ca's certificate to a file for --ca-cert.
func writeCACert(t *testing.T, ca *pki.CA) string {
	t.Helper()
	certPEM, _, err := ca.PEM()
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(path, certPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// run runs the meteor command line with args and returns its output.
func run(t *testing.T, args ...string) (string, error) {
	t.Helper()
	var out bytes.Buffer
	root := newRootCmd()
	root.SetArgs(args)
	root.SetOut(&out)
	root.SetErr(io.Discard)
	err := root.ExecuteContext(context.Background())
	return out.String(), err
}

// TestTokenCommands: the admin token 'meteor tls init' writes works from a
// --token-file on a server started with its hash; it creates an operator
// token whose secret works from --token; the token is listed, shows in
// the audit log with what it did, and is revoked.
func TestTokenCommands(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "pki")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := writeAdminToken(io.Discard, dir); err != nil {
		t.Fatal(err)
	}
	hash, err := readAdminTokenHash(filepath.Join(dir, adminTokenHashFile))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	l, err := cluster.StartLocal(ctx, cluster.LocalOptions{Servers: 1, Dir: t.TempDir(), Configure: func(_ int, c *cluster.Config) {
		c.ClusterSecret = bytes.Repeat([]byte{7}, 32)
		c.ACL = &cluster.ACLConfig{BootstrapTokenHash: hash}
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	addr := l.HTTPAddr(0)
	caPath := writeCACert(t, l.CA())
	adminFile := filepath.Join(dir, adminTokenFile)

	// Without the CA the CLI speaks plain HTTP, and says what to give it.
	if _, err := run(t, "--addr", addr, "--token-file", adminFile, "token", "list"); err == nil || !strings.Contains(err.Error(), "speaks TLS") {
		t.Fatalf("token list without the CA: %v, want a hint about --ca-cert", err)
	}
	if _, err := run(t, "--addr", addr, "--ca-cert", caPath, "token", "list"); err == nil || !strings.Contains(err.Error(), "no token") {
		t.Fatalf("token list without a token: %v, want unauthenticated", err)
	}
	// The liveness probe needs no token (the containers' health check).
	if out, err := run(t, "--addr", addr, "--ca-cert", caPath, "health", "--live"); err != nil || out != "ok\n" {
		t.Fatalf("health --live without a token: %v, %q", err, out)
	}
	if _, err := run(t, "--addr", "127.0.0.1:1", "--ca-cert", caPath, "health", "--live"); err == nil {
		t.Fatal("health --live of no server succeeded")
	}
	var list api.TokenList
	deadline := time.Now().Add(10 * time.Second)
	for {
		out, err := run(t, "--addr", addr, "--ca-cert", caPath, "--token-file", adminFile, "-o", "json", "token", "list")
		if err == nil {
			if err := json.Unmarshal([]byte(out), &list); err != nil {
				t.Fatal(err)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("admin token from the file never worked: %v", err)
		}
		time.Sleep(50 * time.Millisecond) // the leader creates it just after the election
	}
	if len(list.Tokens) != 1 || list.Tokens[0].Name != cluster.BootstrapTokenName {
		t.Fatalf("tokens %+v, want the bootstrap admin token", list.Tokens)
	}

	out, err := run(t, "--addr", addr, "--ca-cert", caPath, "--token-file", adminFile, "-o", "json", "token", "create", "--policy", "operator", "--name", "ci", "--ttl", "1h")
	if err != nil {
		t.Fatal(err)
	}
	var created api.CreateTokenResponse
	if err := json.Unmarshal([]byte(out), &created); err != nil || created.Secret == "" || created.Token.ExpiresAt == nil {
		t.Fatalf("token create: %s (%v)", out, err)
	}
	if _, err := run(t, "--addr", addr, "--ca-cert", caPath, "--token", created.Secret, "token", "list"); err == nil || !strings.Contains(err.Error(), "manage-tokens") {
		t.Fatalf("operator lists tokens: %v, want forbidden", err)
	}
	out, err = run(t, "--addr", addr, "--ca-cert", caPath, "--token", created.Secret, "audit", "--actor", "ci")
	if err != nil {
		t.Fatal(err)
	}
	if strings.Count(out, "\n") != 1 {
		t.Fatalf("audit of ci before it did anything:\n%s", out)
	}
	out, err = run(t, "--addr", addr, "--ca-cert", caPath, "--token-file", adminFile, "audit", "--target", "token/"+created.Token.Accessor)
	if err != nil || !strings.Contains(out, "create-token") || !strings.Contains(out, cluster.BootstrapTokenName) {
		t.Fatalf("audit of the token: %v\n%s", err, out)
	}
	out, err = run(t, "--addr", addr, "--ca-cert", caPath, "--token-file", adminFile, "-o", "json", "token", "revoke", created.Token.Accessor)
	if want := `{"done":"revoke-token","target":"` + created.Token.Accessor + `"}`; err != nil || strings.Join(strings.Fields(out), "") != want {
		t.Fatalf("token revoke -o json: %v\n%s\nwant %s", err, out, want)
	}
	if _, err := run(t, "--addr", addr, "--ca-cert", caPath, "--token", created.Secret, "audit"); err == nil || !strings.Contains(err.Error(), "revoked") {
		t.Fatalf("revoked token: %v, want unauthenticated", err)
	}

	// --enroll is --policy enroll, and conflicts with another policy.
	out, err = run(t, "--addr", addr, "--ca-cert", caPath, "--token-file", adminFile, "-o", "json", "token", "create", "--enroll", "--labels", "site=store-42", "--uses", "1", "--ttl", "15m")
	if err != nil {
		t.Fatal(err)
	}
	var enroll api.CreateTokenResponse
	if err := json.Unmarshal([]byte(out), &enroll); err != nil || enroll.Token.Policy != "enroll" || enroll.Token.EnrollLabels["site"] != "store-42" {
		t.Fatalf("token create --enroll: %s (%v)", out, err)
	}
	for _, args := range [][]string{{"--enroll", "--policy", "admin"}, {"--name", "no-policy"}} {
		if _, err := run(t, append([]string{"--addr", addr, "--ca-cert", caPath, "--token-file", adminFile, "token", "create"}, args...)...); err == nil {
			t.Errorf("token create %v: accepted", args)
		}
	}
}

// TestHelpDoesNotShowTheToken: METEOR_TOKEN is the token's last source,
// and never printed as a flag's default by --help.
func TestHelpDoesNotShowTheToken(t *testing.T) {
	t.Setenv("METEOR_TOKEN", "mtk_do-not-print-me")
	root := newRootCmd()
	var out bytes.Buffer
	root.SetOut(&out)
	root.SetArgs([]string{"token", "list", "--help"})
	if err := root.Execute(); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(out.String(), "do-not-print-me") {
		t.Fatalf("--help shows the token:\n%s", out.String())
	}
}

// TestPrintDeviceShowsLabelSources: a device's labels are shown with
// where they come from, and what it reports apart from them.
func TestPrintDeviceShowsLabelSources(t *testing.T) {
	for _, tc := range []struct {
		d    api.Device
		want []string
	}{
		{api.Device{DeviceSummary: api.DeviceSummary{ID: "pos-1", Labels: map[string]string{"role": "pos"}}, LabelsControlled: true,
			ReportedLabels: map[string]string{"role": "pos-gateway"}},
			[]string{"Labels:     role=pos  (control plane)", "Reported:   role=pos-gateway  (the device's own word)"}},
		{api.Device{DeviceSummary: api.DeviceSummary{ID: "pos-2"}, ReportedLabels: map[string]string{"role": "pos-gateway"}},
			[]string{"Labels:     none  (the control plane has not labelled it", "Reported:   role=pos-gateway"}},
		{api.Device{DeviceSummary: api.DeviceSummary{ID: "pos-3", Labels: map[string]string{"region": "eu"}}, ReportedLabels: map[string]string{"region": "eu"}},
			[]string{"Labels:     region=eu  (reported by the device, trusted by this cluster)"}},
	} {
		var b bytes.Buffer
		printDevice(&b, &tc.d, false)
		for _, w := range tc.want {
			if !strings.Contains(b.String(), w) {
				t.Errorf("%s: output lacks %q:\n%s", tc.d.ID, w, b.String())
			}
		}
	}
}

package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

// run runs a command line as main does and returns its exit status,
// stdout and stderr.
func run(args ...string) (int, string, string) {
	var out, errOut bytes.Buffer
	code := execute(context.Background(), args, &out, &errOut)
	return code, out.String(), errOut.String()
}

// TestCommandLine: --help prints the agent's flags under the binary's own
// name; a flag that does not exist and an argument are usage errors (exit
// 2, the error and the usage on stderr); a missing required flag or a log
// level that does not exist is an error (exit 1) without the usage.
func TestCommandLine(t *testing.T) {
	code, out, errOut := run("--help")
	if code != exitOK || errOut != "" {
		t.Errorf("--help: exit %d, stderr %q", code, errOut)
	}
	for _, want := range []string{"Usage:\n  meteor-agent [flags]", "  meteor-agent --servers 10.0.0.1:8473", "--servers string", "--enroll-file string", "--log-json", "--exec-allow string"} {
		if !strings.Contains(out, want) {
			t.Errorf("--help does not show %q:\n%s", want, out)
		}
	}
	for _, args := range [][]string{{"--bogus"}, {"extra"}} {
		code, out, errOut := run(args...)
		if code != exitUsage || out != "" || !strings.HasPrefix(errOut, "Error: ") || !strings.Contains(errOut, "Usage:\n  meteor-agent [flags]") {
			t.Errorf("%v: exit %d, stdout %q, stderr %q; want exit %d, the error and the usage", args, code, out, errOut, exitUsage)
		}
	}
	dir := t.TempDir()
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--device-id", "d1"}, "Error: --servers is required\n"},
		{[]string{"--servers", "127.0.0.1:1", "--device-id", "d1", "--data-dir", dir, "--ca-file", dir + "/ca.pem", "--log-level", "loud"}, `Error: --log-level "loud"`},
		{[]string{"--servers", "127.0.0.1:1", "--device-id", "d1", "--data-dir", dir, "--ca-file", dir + "/ca.pem", "--cert-file", "c.pem"}, "Error: --cert-file and --key-file go together"},
	} {
		code, out, errOut := run(c.args...)
		if code != exitError || out != "" || !strings.HasPrefix(errOut, c.want) || strings.Contains(errOut, "Usage:") {
			t.Errorf("%v: exit %d, stdout %q, stderr %q; want exit %d and %q alone", c.args, code, out, errOut, exitError, c.want)
		}
	}
}

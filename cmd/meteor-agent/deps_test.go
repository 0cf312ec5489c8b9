package main

import (
	"os/exec"
	"strings"
	"testing"
)

// TestAgentBinaryDependencies enforces what the agent binary leaves out:
// the server and what only it runs (Raft, gossip, the state machine, the
// scheduler, the HTTP API and its client, the console, metrics), fault
// injection, the simulator and the benchmarks. A device gets the agent
// and nothing else; each of these would add megabytes and code that never
// runs there. A package that needs one of them belongs in cmd/meteor.
func TestAgentBinaryDependencies(t *testing.T) {
	const module = "github.com/meteor-edge/meteor"
	out, err := exec.Command("go", "list", "-deps", module+"/cmd/meteor-agent").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	deps := strings.Fields(string(out))
	if err := forbiddenDeps(deps); err != "" {
		t.Error(err)
	}
	// The agent itself is there: the list is the binary's, not empty.
	if !contains(deps, module+"/agent") || !contains(deps, module+"/cmd/internal/agentcmd") {
		t.Errorf("go list -deps names neither the agent nor its command:\n%s", out)
	}
}

// forbidden are the import paths (and the paths beneath them) the agent
// binary must not depend on.
var forbidden = []string{
	"github.com/meteor-edge/meteor/cluster", // but cluster/pki: the device's certificates
	"github.com/meteor-edge/meteor/cluster/api",
	"github.com/meteor-edge/meteor/cluster/ui",
	"github.com/meteor-edge/meteor/fsm", // but fsm/intent: the resources the agent applies
	"github.com/meteor-edge/meteor/fsm/acl",
	"github.com/meteor-edge/meteor/scheduler",
	"github.com/meteor-edge/meteor/chaos",
	"github.com/meteor-edge/meteor/bench",
	"github.com/meteor-edge/meteor/agent/sim",
	"github.com/hashicorp/raft",
	"github.com/hashicorp/raft-boltdb",
	"github.com/hashicorp/memberlist",
	"github.com/hashicorp/go-memdb",
	"github.com/hashicorp/go-metrics",
	"github.com/armon/go-metrics",
	"github.com/prometheus/client_golang",
	"github.com/anishathalye/porcupine",
	"go.uber.org/goleak",
	// The agent speaks QUIC only (sessions and enrollment); HTTP is the
	// servers' API.
	"net/http",
}

// exact are the entries of forbidden whose subpackages the agent may use.
var exact = map[string]bool{
	"github.com/meteor-edge/meteor/cluster": true,
	"github.com/meteor-edge/meteor/fsm":     true,
}

// forbiddenDeps returns a line for each of deps that is forbidden, or "".
func forbiddenDeps(deps []string) string {
	var b strings.Builder
	for _, dep := range deps {
		for _, f := range forbidden {
			if dep == f || (!exact[f] && strings.HasPrefix(dep, f+"/")) {
				b.WriteString("cmd/meteor-agent depends on " + dep + "\n")
			}
		}
	}
	return b.String()
}

func contains(list []string, s string) bool {
	for _, e := range list {
		if e == s {
			return true
		}
	}
	return false
}

// TestForbiddenDeps: the rule catches the server, subpackages of
// what is banned whole, and lets the agent's shared packages through.
func TestForbiddenDeps(t *testing.T) {
	for dep, want := range map[string]bool{
		"github.com/meteor-edge/meteor/cluster":          true,
		"github.com/meteor-edge/meteor/cluster/api":      true,
		"github.com/meteor-edge/meteor/chaos/scenario":   true,
		"github.com/meteor-edge/meteor/bench/fleet":      true,
		"github.com/meteor-edge/meteor/scheduler":        true,
		"github.com/hashicorp/raft":                      true,
		"github.com/hashicorp/raft-boltdb/v2":            true,
		"net/http/httptrace":                             true,
		"github.com/meteor-edge/meteor/cluster/pki":      false,
		"github.com/meteor-edge/meteor/fsm/intent":       false,
		"github.com/meteor-edge/meteor/agent":            false,
		"github.com/meteor-edge/meteor/clusterfoo":       false,
		"github.com/hashicorp/go-hclog":                  false,
		"github.com/meteor-edge/meteor/agent/simulation": false,
	} {
		if got := forbiddenDeps([]string{dep}) != ""; got != want {
			t.Errorf("%s forbidden = %v, want %v", dep, got, want)
		}
	}
}

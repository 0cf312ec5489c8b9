package fsm

import (
	"os/exec"
	"strings"
	"testing"
)

// TestNoNetworkDependencies enforces the layering rule: the state machine
// must stay deterministic and free of network code.
func TestNoNetworkDependencies(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "github.com/meteor-edge/meteor/fsm").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	forbidden := []string{
		// crypto/x509 (certificate validation) pulls in package net for
		// address parsing, so net itself cannot be banned; its users can.
		"net/http", "crypto/tls",
		"github.com/hashicorp/raft", "github.com/hashicorp/memberlist", "github.com/quic-go/quic-go",
		"github.com/meteor-edge/meteor/cluster", "github.com/meteor-edge/meteor/wire",
		"github.com/meteor-edge/meteor/agent", "github.com/meteor-edge/meteor/chaos",
	}
	for _, dep := range strings.Fields(string(out)) {
		for _, f := range forbidden {
			if dep == f || strings.HasPrefix(dep, f+"/") {
				t.Errorf("fsm depends on %s", dep)
			}
		}
	}
}

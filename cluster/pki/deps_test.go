package pki

import (
	"os/exec"
	"strings"
	"testing"
)

// TestDependencies enforces the package's rule: of Meteor's packages, pki
// depends on wire only. Above all it must not depend on cluster, which
// imports it.
func TestDependencies(t *testing.T) {
	const module = "github.com/meteor-edge/meteor"
	out, err := exec.Command("go", "list", "-deps", module+"/cluster/pki").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	for _, dep := range strings.Fields(string(out)) {
		if strings.HasPrefix(dep, module+"/") && dep != module+"/cluster/pki" && dep != module+"/wire" {
			t.Errorf("pki depends on %s", dep)
		}
	}
}

package main

import (
	"os/exec"
	"strings"
	"testing"
)

// TestChaosStaysOutOfProduction checks that no production package imports
// the fault-injection package; only tests (and the fleet simulator) may.
func TestChaosStaysOutOfProduction(t *testing.T) {
	out, err := exec.Command("go", "list", "-f", `{{.ImportPath}}: {{join .Imports " "}}`, "github.com/meteor-edge/meteor/...").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		pkg, imports, _ := strings.Cut(line, ": ")
		if strings.HasPrefix(pkg, "github.com/meteor-edge/meteor/chaos") || strings.HasPrefix(pkg, "github.com/meteor-edge/meteor/bench") {
			continue
		}
		for _, imp := range strings.Fields(imports) {
			if strings.HasPrefix(imp, "github.com/meteor-edge/meteor/chaos") {
				t.Errorf("%s imports %s: fault injection must not reach production code", pkg, imp)
			}
		}
	}
}

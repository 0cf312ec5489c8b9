package chaos

import (
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

const chaosImportPath = "github.com/meteor-edge/meteor/chaos"

// importerAllowed reports whether non-test code in dir (relative to the
// module root, slash-separated) may import chaos: the command (for `meteor
// chaos` and `meteor sim`), a simulator package, or chaos itself.
func importerAllowed(dir string) bool {
	if dir == "chaos" || strings.HasPrefix(dir, "chaos/") || dir == "cmd" || strings.HasPrefix(dir, "cmd/") ||
		dir == "bench" || strings.HasPrefix(dir, "bench/") {
		return true
	}
	for _, part := range strings.Split(dir, "/") {
		if part == "sim" || part == "simulator" {
			return true
		}
	}
	return false
}

// TestNothingImportsChaos enforces the layering rule of doc.go: production
// packages must not depend on fault injection. It parses imports only, so
// it does not need the other packages to build.
func TestNothingImportsChaos(t *testing.T) {
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		t.Skipf("module root not found above chaos: %v", err)
	}
	fset := token.NewFileSet()
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() {
			if path != root && (strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_") || name == "testdata" || name == "vendor") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
			return nil
		}
		rel, err := filepath.Rel(root, filepath.Dir(path))
		if err != nil {
			return err
		}
		rel = filepath.ToSlash(rel)
		if importerAllowed(rel) {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.ImportsOnly)
		if err != nil {
			return nil // a file being edited elsewhere; the build will say
		}
		for _, imp := range f.Imports {
			p, _ := strconv.Unquote(imp.Path.Value)
			if p == chaosImportPath || strings.HasPrefix(p, chaosImportPath+"/") {
				t.Errorf("%s imports %s: only tests, the simulator and cmd may", filepath.Join(rel, name), p)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func TestImporterAllowed(t *testing.T) {
	for dir, want := range map[string]bool{
		"chaos": true, "chaos/scenario": true, "cmd/meteor": true, "sim": true, "internal/sim": true, "bench/sessions": true,
		"fsm": false, "cluster": false, "agent": false, "wire": false, "simple": false,
	} {
		if got := importerAllowed(dir); got != want {
			t.Errorf("importerAllowed(%q) = %v, want %v", dir, got, want)
		}
	}
}

package intent

import (
	"go/parser"
	"go/token"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestImports keeps the package pure: nothing of Meteor's, no network, no
// file system or processes, no randomness (see doc.go).
func TestImports(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	forbidden := func(imp string) bool {
		switch {
		case strings.HasPrefix(imp, "github.com/meteor-edge/meteor"),
			imp == "net", strings.HasPrefix(imp, "net/"),
			imp == "os", strings.HasPrefix(imp, "os/"), imp == "syscall",
			imp == "crypto/rand", strings.HasPrefix(imp, "math/rand"),
			imp == "unsafe":
			return true
		}
		return false
	}
	for _, file := range files {
		if strings.HasSuffix(file, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(token.NewFileSet(), file, nil, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		for _, spec := range f.Imports {
			imp, _ := strconv.Unquote(spec.Path.Value)
			if forbidden(imp) {
				t.Errorf("%s imports %s", file, imp)
			}
		}
	}
}

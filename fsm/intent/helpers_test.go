package intent

import (
	"os"
	"strings"
	"testing"
)

// withPEM replaces the placeholder lines {{cert}}, {{key}} and {{other-key}}
// in doc with the test certificate and keys, indented as a block scalar at
// the placeholder's column.
func withPEM(t testing.TB, doc string) string {
	t.Helper()
	for _, name := range []string{"cert", "key", "other-key"} {
		file := map[string]string{"cert": "pos-cert.pem", "key": "pos-key.pem", "other-key": "other-key.pem"}[name]
		lines := strings.Split(doc, "\n")
		for i, line := range lines {
			trimmed := strings.TrimLeft(line, " ")
			if trimmed != "{{"+name+"}}" {
				continue
			}
			indent := line[:len(line)-len(trimmed)]
			pem := strings.TrimSuffix(readTestdata(t, file), "\n")
			lines[i] = indent + strings.ReplaceAll(pem, "\n", "\n"+indent)
		}
		doc = strings.Join(lines, "\n")
	}
	return doc
}

func readTestdata(t testing.TB, name string) string {
	t.Helper()
	b, err := os.ReadFile("testdata/" + name)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

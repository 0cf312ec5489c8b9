package ui

import (
	"io/fs"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
)

// TestHandlerServesFilesWithHeaders: every file of the console is served
// under Prefix with its type and the security headers; unknown paths are
// 404s.
func TestHandlerServesFilesWithHeaders(t *testing.T) {
	h := Handler()
	for path, wantType := range map[string]string{
		"/ui/":              "text/html",
		"/ui/style.css":     "text/css",
		"/ui/js/app.js":     "text/javascript",
		"/ui/js/live.js":    "text/javascript",
		"/ui/js/pages.js":   "text/javascript",
		"/ui/js/chart.js":   "text/javascript",
		"/ui/js/api.js":     "text/javascript",
		"/ui/js/dom.js":     "text/javascript",
		"/ui/no-such-file":  "",
		"/ui/js/nothing.js": "",
	} {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest(http.MethodGet, path, nil))
		if wantType == "" {
			if w.Code != http.StatusNotFound {
				t.Errorf("GET %s: %d, want 404", path, w.Code)
			}
			continue
		}
		if w.Code != http.StatusOK || !strings.HasPrefix(w.Header().Get("Content-Type"), wantType) {
			t.Errorf("GET %s: %d %q, want 200 %s", path, w.Code, w.Header().Get("Content-Type"), wantType)
		}
		for k, v := range map[string]string{
			"Content-Security-Policy": ContentSecurityPolicy,
			"X-Content-Type-Options":  "nosniff",
			"X-Frame-Options":         "DENY",
			"Referrer-Policy":         "no-referrer",
		} {
			if got := w.Header().Get(k); got != v {
				t.Errorf("GET %s: %s %q, want %q", path, k, got, v)
			}
		}
	}
	for _, want := range []string{"default-src 'self'", "frame-ancestors 'none'"} {
		if !strings.Contains(ContentSecurityPolicy, want) {
			t.Errorf("the policy %q lacks %q", ContentSecurityPolicy, want)
		}
	}
	if strings.Contains(ContentSecurityPolicy, "unsafe") {
		t.Errorf("the policy %q allows something unsafe", ContentSecurityPolicy)
	}
}

// TestFilesNeedNoInlineCode: the policy forbids inline script and style,
// so no file may rely on them (a <script> without src, a style attribute,
// an on* handler attribute, javascript: URLs, or innerHTML, through which
// data would become markup).
func TestFilesNeedNoInlineCode(t *testing.T) {
	bad := map[string]*regexp.Regexp{
		"inline script":      regexp.MustCompile(`<script(\s[^>]*)?>\s*[^<\s]`),
		"script without src": regexp.MustCompile(`<script(?:\s(?:[^>s]|s[^r]|sr[^c])*)?>`),
		"style element":      regexp.MustCompile(`<style`),
		"style attribute":    regexp.MustCompile(`\sstyle\s*=`),
		"handler attribute":  regexp.MustCompile(`<[^>]*\son[a-z]+\s*=`),
		"javascript: URL":    regexp.MustCompile(`javascript:`),
		"innerHTML":          regexp.MustCompile(`innerHTML|outerHTML|insertAdjacentHTML|document\.write`),
		"setting a style":    regexp.MustCompile(`setAttribute\(\s*['"]style`),
		"eval":               regexp.MustCompile(`\beval\(|new Function\(`),
	}
	n := 0
	err := fs.WalkDir(Files(), ".", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		n++
		data, err := fs.ReadFile(Files(), path)
		if err != nil {
			return err
		}
		for what, re := range bad {
			if what == "handler attribute" && !strings.HasSuffix(path, ".html") {
				continue
			}
			if loc := re.FindIndex(data); loc != nil {
				t.Errorf("%s: %s at byte %d: %q", path, what, loc[0], data[loc[0]:min(len(data), loc[1]+20)])
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if n < 3 {
		t.Fatalf("%d files embedded", n)
	}
}

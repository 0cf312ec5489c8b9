package ui

import (
	"embed"
	"io/fs"
	"net/http"
)

// Prefix is the path the console is served under.
const Prefix = "/ui/"

// ContentSecurityPolicy lets the console's pages load scripts, styles and
// images from the server that served them and talk only to its API; no
// inline script or style, no plugins, no framing, no <base> changes.
const ContentSecurityPolicy = "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; " +
	"object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"

//go:embed static
var static embed.FS

// Files returns the console's files, index.html at the root.
func Files() fs.FS {
	sub, err := fs.Sub(static, "static")
	if err != nil {
		panic(err) // the directory is embedded: it exists
	}
	return sub
}

// Handler serves the console's files under Prefix, with the security
// headers every response carries.
func Handler() http.Handler {
	files := http.StripPrefix(Prefix, http.FileServerFS(Files()))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", ContentSecurityPolicy)
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("X-Frame-Options", "DENY")
		h.Set("Referrer-Policy", "no-referrer")
		// The files change with the binary, which sets no modification
		// time on them: revalidate rather than keep an old console.
		h.Set("Cache-Control", "no-cache")
		files.ServeHTTP(w, r)
	})
}

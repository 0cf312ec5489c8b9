package cluster

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/hashicorp/go-hclog"

	"github.com/meteor-edge/meteor/cluster/ui"
)

// TestConsoleRoutes: the API serves the console at /ui/ with its security
// headers, sends / there, and answers other methods on them with 405.
func TestConsoleRoutes(t *testing.T) {
	cfg := DefaultConfig()
	cfg.NodeID = "s1"
	h := (&httpAPI{cfg: &cfg, logger: hclog.NewNullLogger(), clock: SystemClock{}, node: &fakeLeader{leads: true}}).handler()
	serve := func(method, path string) *httptest.ResponseRecorder {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest(method, path, nil))
		return w
	}
	if w := serve(http.MethodGet, "/"); w.Code != http.StatusFound || w.Header().Get("Location") != ui.Prefix {
		t.Errorf("GET /: %d to %q, want 302 to %s", w.Code, w.Header().Get("Location"), ui.Prefix)
	}
	w := serve(http.MethodGet, "/ui/")
	if w.Code != http.StatusOK || !strings.Contains(w.Body.String(), "Meteor console") || w.Header().Get("Content-Security-Policy") != ui.ContentSecurityPolicy {
		t.Errorf("GET /ui/: %d, CSP %q: %.200s", w.Code, w.Header().Get("Content-Security-Policy"), w.Body)
	}
	if w := serve(http.MethodGet, "/ui/js/app.js"); w.Code != http.StatusOK || w.Header().Get("X-Content-Type-Options") != "nosniff" {
		t.Errorf("GET /ui/js/app.js: %d %v", w.Code, w.Header())
	}
	for _, path := range []string{"/", "/ui/", "/ui/js/app.js"} {
		if w := serve(http.MethodPost, path); w.Code != http.StatusMethodNotAllowed || w.Header().Get("Allow") != "GET" {
			t.Errorf("POST %s: %d, Allow %q; want 405 allowing GET", path, w.Code, w.Header().Get("Allow"))
		}
	}
	if w := serve(http.MethodGet, "/nothing"); w.Code != http.StatusNotFound {
		t.Errorf("GET /nothing: %d, want 404", w.Code)
	}
}

package cluster

import (
	"net/http"

	"github.com/meteor-edge/meteor/cluster/ui"
)

// routeConsole serves the web console (package ui) at /ui/ on the API
// listener, and sends a browser that asks for / there. The console's files
// hold no fleet data and need no token; everything the console shows it
// reads from the API, whose endpoints check the token it sends.
func (h *httpAPI) routeConsole(mux *http.ServeMux) {
	mux.Handle("GET "+ui.Prefix, ui.Handler())
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, ui.Prefix, http.StatusFound)
	})
}

// Package ui is Meteor's web console: plain HTML, CSS and JavaScript
// embedded in the binary (no build step), which every server serves at
// /ui/ on its API listener (docs/operations.md, "The console").
//
// The files hold no fleet data, so they are served without a token; the
// page asks the operator for one and sends it on every API call, and every
// datum it shows comes from the token-checked HTTP API. Handler sends the
// files with a Content-Security-Policy that allows no inline script or
// style and no framing.
//
// The package imports nothing of Meteor's: package cluster mounts its
// Handler.
package ui

// Package api holds the types of Meteor's HTTP API and a Go client for it.
// The CLI, the benchmarks and the tests use this client; docs/api.md
// describes the same endpoints for everyone else.
package api

//go:build race

package main

// raceBuild is true when the tests run with the race detector. quic-go
// v0.65 races on a connection's transport parameters when a stream is
// opened in 0-RTT (quic-go/quic-go#4303, see agent/race.go), so race
// builds do not run the 0-RTT storm.
const raceBuild = true

//go:build race

package agent

// raceBuild is true in binaries built with the race detector. quic-go
// v0.65 writes a connection's peer transport parameters on its run loop
// while OpenStream reads them when a stream is opened in 0-RTT
// (quic-go/quic-go#4303, open): a data race inside quic-go that the race
// detector reports whenever the agent sends its Hello as early data. Race
// builds therefore open the control stream after the handshake completes
// (no early data); normal builds use 0-RTT.
const raceBuild = true

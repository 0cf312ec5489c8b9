//go:build race

package wire

// raceBuild is true in test binaries built with the race detector. quic-go
// v0.65 writes a connection's peer transport parameters on its run loop
// while OpenStream reads them when a stream is opened in 0-RTT
// (quic-go/quic-go#4303, open): a data race inside quic-go that the race
// detector reports, now and then, whenever a test opens a stream in early
// data. The 0-RTT test therefore runs without the race detector only
// (make test runs this package's tests a second time without -race).
const raceBuild = true

//go:build !linux

package agent

import "net"

// peerOf names the local user at the other end of a control connection.
// Outside Linux the socket's file mode is its only guard, and the user
// is not known.
func peerOf(*net.UnixConn) (string, error) { return "a local user", nil }

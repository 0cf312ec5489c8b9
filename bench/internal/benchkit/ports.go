package benchkit

import (
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
)

// FreePorts returns n distinct loopback ports that are free for TCP and,
// with udp, for UDP as well (memberlist gossips over both; agents use
// UDP). The ports are released before returning, so another process could
// take one first; server start-up then fails with a clear "address in
// use".
func FreePorts(n int, udp bool) ([]int, error) {
	var closers []io.Closer
	defer func() {
		for _, c := range closers {
			c.Close()
		}
	}()
	var ports []int
	for tries := 0; len(ports) < n; tries++ {
		if tries > 100*n {
			return nil, errors.New("cannot find free loopback ports")
		}
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("find a free port: %w", err)
		}
		closers = append(closers, ln)
		port := ln.Addr().(*net.TCPAddr).Port
		if udp {
			pc, err := net.ListenPacket("udp", Loopback(port))
			if err != nil {
				continue
			}
			closers = append(closers, pc)
		}
		ports = append(ports, port)
	}
	return ports, nil
}

// Loopback returns "127.0.0.1:port".
func Loopback(port int) string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(port)) }

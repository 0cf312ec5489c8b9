package main

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// udpDrops reads /proc/net/udp and returns, for each local port in ports,
// the datagrams the kernel dropped on that socket, mostly because its
// receive buffer was full.
func udpDrops(ports []int) (map[int]uint64, error) {
	b, err := os.ReadFile("/proc/net/udp")
	if err != nil {
		return nil, err
	}
	return parseUDPDrops(b, ports)
}

// parseUDPDrops parses /proc/net/udp's text: a header line, then one line
// per socket with the local address as hex "IP:PORT" in the second field
// and the drop count in the last.
func parseUDPDrops(text []byte, ports []int) (map[int]uint64, error) {
	want := make(map[int]bool, len(ports))
	for _, p := range ports {
		want[p] = true
	}
	out := make(map[int]uint64, len(ports))
	sc := bufio.NewScanner(bytes.NewReader(text))
	header := true
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if header {
			if len(f) == 0 || f[len(f)-1] != "drops" {
				return nil, fmt.Errorf("/proc/net/udp: unexpected header %q", sc.Text())
			}
			header = false
			continue
		}
		if len(f) < 3 {
			continue
		}
		_, hexPort, ok := strings.Cut(f[1], ":")
		if !ok {
			continue
		}
		port, err := strconv.ParseUint(hexPort, 16, 16)
		if err != nil || !want[int(port)] {
			continue
		}
		drops, err := strconv.ParseUint(f[len(f)-1], 10, 64)
		if err != nil {
			return nil, fmt.Errorf("/proc/net/udp: drops of port %d: %w", port, err)
		}
		out[int(port)] += drops
	}
	return out, sc.Err()
}

// sumDrops adds up the drops of ports between two readings.
func sumDrops(before, after map[int]uint64, ports []int) int64 {
	var n int64
	for _, p := range ports {
		n += int64(after[p] - before[p])
	}
	return n
}

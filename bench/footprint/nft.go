package main

import (
	"context"
	"fmt"
	"regexp"
	"strconv"

	"github.com/meteor-edge/meteor/bench/internal/benchkit"
)

// counterTablePrefix starts the name of every nft table this benchmark
// creates; the rest is the creating process's ID.
const counterTablePrefix = "meteorbench_footprint_"

// counterTable counts, in an nft table of this process's own
// (benchkit.NFTable), the loopback datagrams between the agent and each
// proxy, by the proxy's port.
type counterTable struct{ *benchkit.NFTable }

// openCounterTable creates the table. It returns nil and the reason when
// the cross-check cannot be made here (not root, no nft, the kernel
// refuses).
func openCounterTable(ctx context.Context) (*counterTable, string) {
	t, why := benchkit.OpenNFTable(ctx, counterTablePrefix)
	if t == nil {
		return nil, "counting with nftables: " + why
	}
	return &counterTable{t}, ""
}

// watch replaces the rules: for each proxy port i, a counter of the
// loopback UDP datagrams to it (up, from the agent) and from it (down, to
// the agent).
func (t *counterTable) watch(ctx context.Context, ports []int) error {
	if err := t.Flush(ctx); err != nil {
		return err
	}
	for i, p := range ports {
		for _, r := range [][2]string{{"dport", "up"}, {"sport", "down"}} {
			if err := t.AddRule(ctx, "iif", "lo", "udp", r[0], strconv.Itoa(p), "counter", "comment", fmt.Sprintf(`"%s%d"`, r[1], i)); err != nil {
				return err
			}
		}
	}
	return nil
}

// read returns the counts of each port watch was given, in its order.
// nft counts IP bytes (headers included).
func (t *counterTable) read(ctx context.Context, n int) ([]nftCount, error) {
	out, err := t.List(ctx)
	if err != nil {
		return nil, err
	}
	return parseCounters(out, n)
}

// nftCount is what the rules of one proxy port counted.
type nftCount struct {
	UpPackets   uint64 `json:"up_packets"`
	UpBytes     uint64 `json:"up_ip_bytes"`
	DownPackets uint64 `json:"down_packets"`
	DownBytes   uint64 `json:"down_ip_bytes"`
}

func (c nftCount) sub(d nftCount) nftCount {
	return nftCount{c.UpPackets - d.UpPackets, c.UpBytes - d.UpBytes, c.DownPackets - d.DownPackets, c.DownBytes - d.DownBytes}
}

func (c nftCount) add(d nftCount) nftCount {
	return nftCount{c.UpPackets + d.UpPackets, c.UpBytes + d.UpBytes, c.DownPackets + d.DownPackets, c.DownBytes + d.DownBytes}
}

var counterRE = regexp.MustCompile(`counter packets (\d+) bytes (\d+) comment "(up|down)(\d+)"`)

// parseCounters reads the counters of ports 0..n-1 from `nft list chain`.
func parseCounters(out string, n int) ([]nftCount, error) {
	counts := make([]nftCount, n)
	seen := 0
	for _, m := range counterRE.FindAllStringSubmatch(out, -1) {
		pk, _ := strconv.ParseUint(m[1], 10, 64)
		by, _ := strconv.ParseUint(m[2], 10, 64)
		i, _ := strconv.Atoi(m[4])
		if i >= n {
			return nil, fmt.Errorf("nft counter %s%s: only %d ports watched", m[3], m[4], n)
		}
		if m[3] == "up" {
			counts[i].UpPackets, counts[i].UpBytes = pk, by
		} else {
			counts[i].DownPackets, counts[i].DownBytes = pk, by
		}
		seen++
	}
	if seen != 2*n {
		return nil, fmt.Errorf("nft list: %d of %d counters", seen, 2*n)
	}
	return counts, nil
}

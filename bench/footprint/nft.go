package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// counterTablePrefix starts the name of every nft table this benchmark
// creates; the rest is the creating process's ID.
const counterTablePrefix = "meteorbench_footprint_"

// counterTable is an nft table of this process's own (inet family) with
// one chain at the input hook that only counts: loopback packets pass
// that hook once, so each datagram between the agent and a proxy is
// counted once, by the proxy's port. Its policy accepts everything; it
// matches loopback traffic only.
type counterTable struct {
	nft  string
	name string
}

func nftRun(ctx context.Context, nft string, args ...string) (string, error) {
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	out, err := exec.CommandContext(cctx, nft, args...).CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("nft %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return string(out), nil
}

// openCounterTable creates the table, after deleting any left by a run of
// this benchmark that was killed. It returns nil and the reason when the
// cross-check cannot be made here (not root, no nft, the kernel refuses).
func openCounterTable(ctx context.Context) (*counterTable, string) {
	if os.Geteuid() != 0 {
		return nil, "counting with nftables needs root"
	}
	nft, err := exec.LookPath("nft")
	if err != nil {
		if _, serr := os.Stat("/usr/sbin/nft"); serr != nil {
			return nil, "nft is not installed (apt-get install -y nftables)"
		}
		nft = "/usr/sbin/nft"
	}
	removeStaleTables(ctx, nft)
	t := &counterTable{nft: nft, name: counterTablePrefix + strconv.Itoa(os.Getpid())}
	if _, err := nftRun(ctx, nft, "add", "table", "inet", t.name); err != nil {
		return nil, fmt.Sprintf("cannot create an nft table: %v", err)
	}
	if _, err := nftRun(ctx, nft, "add", "chain", "inet", t.name, "input", "{ type filter hook input priority -10; policy accept; }"); err != nil {
		t.close()
		return nil, fmt.Sprintf("cannot create an nft input chain: %v", err)
	}
	return t, ""
}

// removeStaleTables deletes the tables of this benchmark whose process is
// gone.
func removeStaleTables(ctx context.Context, nft string) {
	out, err := nftRun(ctx, nft, "list", "tables", "inet")
	if err != nil {
		return
	}
	for line := range strings.SplitSeq(out, "\n") {
		pid, ok := strings.CutPrefix(strings.TrimSpace(line), "table inet "+counterTablePrefix)
		if !ok {
			continue
		}
		if _, err := strconv.Atoi(pid); err != nil {
			continue
		}
		if _, err := os.Stat("/proc/" + pid); err == nil && pid != strconv.Itoa(os.Getpid()) {
			continue // its process still runs
		}
		nftRun(ctx, nft, "delete", "table", "inet", counterTablePrefix+pid)
	}
}

// watch replaces the rules: for each proxy port i, a counter of the
// loopback UDP datagrams to it (up, from the agent) and from it (down, to
// the agent).
func (t *counterTable) watch(ctx context.Context, ports []int) error {
	if _, err := nftRun(ctx, t.nft, "flush", "chain", "inet", t.name, "input"); err != nil {
		return err
	}
	for i, p := range ports {
		for _, r := range [][2]string{{"dport", "up"}, {"sport", "down"}} {
			if _, err := nftRun(ctx, t.nft, "add", "rule", "inet", t.name, "input", "iif", "lo", "udp", r[0], strconv.Itoa(p),
				"counter", "comment", fmt.Sprintf(`"%s%d"`, r[1], i)); err != nil {
				return err
			}
		}
	}
	return nil
}

// read returns the counts of each port watch was given, in its order.
// nft counts IP bytes (headers included).
func (t *counterTable) read(ctx context.Context, n int) ([]nftCount, error) {
	out, err := nftRun(ctx, t.nft, "list", "chain", "inet", t.name, "input")
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

// close deletes the table.
func (t *counterTable) close() error {
	_, err := nftRun(context.Background(), t.nft, "delete", "table", "inet", t.name)
	return err
}

package main

import (
	"context"
	"fmt"
	"regexp"
	"strconv"
	"strings"

	"github.com/meteor-edge/meteor/bench/internal/benchkit"
)

// lossTablePrefix starts the name of every nft table this benchmark
// creates; the rest is the creating process's ID.
const lossTablePrefix = "meteorbench_fanout_"

// lossTable drops loopback packets at random in an nft table of this
// process's own (benchkit.NFTable), and counts them.
type lossTable struct{ *benchkit.NFTable }

// openLossTable creates the table. It returns nil and the reason when loss
// cannot be applied here (not root, no nft, or the kernel refuses).
func openLossTable(ctx context.Context) (*lossTable, string) {
	nt, why := benchkit.OpenNFTable(ctx, lossTablePrefix)
	if nt == nil {
		return nil, "applying packet loss: " + why
	}
	t := &lossTable{nt}
	// Check that the kernel takes the rule this benchmark needs.
	if err := t.set(ctx, "udp", []int{9}, 5); err != nil {
		t.Close()
		return nil, fmt.Sprintf("the kernel refuses a numgen drop rule: %v", err)
	}
	if err := t.clear(ctx); err != nil {
		t.Close()
		return nil, err.Error()
	}
	return t, ""
}

// set replaces the rules: every packet to or from one of ports (proto
// "udp" or "tcp") is counted, and pct percent of them, drawn at random
// for each packet, are dropped.
func (t *lossTable) set(ctx context.Context, proto string, ports []int, pct int) error {
	if err := t.clear(ctx); err != nil {
		return err
	}
	ps := make([]string, len(ports))
	for i, p := range ports {
		ps[i] = strconv.Itoa(p)
	}
	set := "{ " + strings.Join(ps, ", ") + " }"
	for _, dir := range []string{"dport", "sport"} {
		if err := t.AddRule(ctx, proto, dir, set, "counter", "comment", `"seen"`); err != nil {
			return err
		}
	}
	for _, dir := range []string{"dport", "sport"} {
		if err := t.AddRule(ctx, proto, dir, set,
			"numgen", "random", "mod", "100", "<", strconv.Itoa(pct), "counter", "drop", "comment", `"dropped"`); err != nil {
			return err
		}
	}
	return nil
}

// clear removes the rules.
func (t *lossTable) clear(ctx context.Context) error { return t.Flush(ctx) }

var counterRE = regexp.MustCompile(`counter packets (\d+) bytes \d+.*comment "(seen|dropped)"`)

// counters returns the packets the rules saw and dropped.
func (t *lossTable) counters(ctx context.Context) (seen, dropped uint64, err error) {
	out, err := t.List(ctx)
	if err != nil {
		return 0, 0, err
	}
	for _, m := range counterRE.FindAllStringSubmatch(out, -1) {
		n, _ := strconv.ParseUint(m[1], 10, 64)
		if m[2] == "seen" {
			seen += n
		} else {
			dropped += n
		}
	}
	return seen, dropped, nil
}

package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// lossTablePrefix starts the name of every nft table this benchmark
// creates; the rest is the creating process's ID.
const lossTablePrefix = "meteorbench_fanout_"

// lossTable is an nft table of this process's own (inet family) with one
// chain at the input hook: loopback packets pass that hook once, so a
// rule there drops each packet at most once, in either direction.
type lossTable struct {
	nft  string
	name string
}

// nftRun runs nft with args and returns its output.
func nftRun(ctx context.Context, nft string, args ...string) (string, error) {
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	out, err := exec.CommandContext(cctx, nft, args...).CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("nft %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return string(out), nil
}

// openLossTable creates the table, after deleting any left by a run of
// this benchmark that was killed. It returns nil and the reason when loss
// cannot be applied here (not root, no nft, or the kernel refuses).
func openLossTable(ctx context.Context) (*lossTable, string) {
	if os.Geteuid() != 0 {
		return nil, "applying packet loss with nft needs root"
	}
	nft, err := exec.LookPath("nft")
	if err != nil {
		if _, serr := os.Stat("/usr/sbin/nft"); serr != nil {
			return nil, "nft is not installed (apt-get install -y nftables)"
		}
		nft = "/usr/sbin/nft"
	}
	removeStaleTables(ctx, nft)
	t := &lossTable{nft: nft, name: lossTablePrefix + strconv.Itoa(os.Getpid())}
	if _, err := nftRun(ctx, nft, "add", "table", "inet", t.name); err != nil {
		return nil, fmt.Sprintf("cannot create an nft table: %v", err)
	}
	if _, err := nftRun(ctx, nft, "add", "chain", "inet", t.name, "input", "{ type filter hook input priority -10; policy accept; }"); err != nil {
		t.close()
		return nil, fmt.Sprintf("cannot create an nft input chain: %v", err)
	}
	// Check that the kernel takes the rule this benchmark needs.
	if err := t.set(ctx, "udp", []int{9}, 5); err != nil {
		t.close()
		return nil, fmt.Sprintf("the kernel refuses a numgen drop rule: %v", err)
	}
	if err := t.clear(ctx); err != nil {
		t.close()
		return nil, err.Error()
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
		name, ok := strings.CutPrefix(strings.TrimSpace(line), "table inet "+lossTablePrefix)
		if !ok {
			continue
		}
		pid, err := strconv.Atoi(name)
		if err != nil {
			continue
		}
		if _, err := os.Stat("/proc/" + name); err == nil && pid != os.Getpid() {
			continue // its process still runs
		}
		nftRun(ctx, nft, "delete", "table", "inet", lossTablePrefix+name)
	}
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
		if _, err := nftRun(ctx, t.nft, "add", "rule", "inet", t.name, "input", proto, dir, set, "counter", "comment", `"seen"`); err != nil {
			return err
		}
	}
	for _, dir := range []string{"dport", "sport"} {
		if _, err := nftRun(ctx, t.nft, "add", "rule", "inet", t.name, "input", proto, dir, set,
			"numgen", "random", "mod", "100", "<", strconv.Itoa(pct), "counter", "drop", "comment", `"dropped"`); err != nil {
			return err
		}
	}
	return nil
}

// clear removes the rules.
func (t *lossTable) clear(ctx context.Context) error {
	_, err := nftRun(ctx, t.nft, "flush", "chain", "inet", t.name, "input")
	return err
}

var counterRE = regexp.MustCompile(`counter packets (\d+) bytes \d+.*comment "(seen|dropped)"`)

// counters returns the packets the rules saw and dropped.
func (t *lossTable) counters(ctx context.Context) (seen, dropped uint64, err error) {
	out, err := nftRun(ctx, t.nft, "list", "chain", "inet", t.name, "input")
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

// close deletes the table.
func (t *lossTable) close() error {
	_, err := nftRun(context.Background(), t.nft, "delete", "table", "inet", t.name)
	if err != nil && strings.Contains(err.Error(), "No such file") {
		return errors.New("already gone")
	}
	return err
}

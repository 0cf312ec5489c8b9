package benchkit

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"
)

// NFTable is an nftables table of this process's own (inet family, named
// prefix + PID) with one chain, "input", at the input hook: loopback
// packets pass that hook once, so a rule there sees each datagram once,
// in either direction. Its policy accepts everything; the benchmarks add
// rules for loopback ports of their own only.
type NFTable struct {
	nft  string
	Name string
}

// OpenNFTable creates the table, after deleting any a killed run with the
// same prefix left. It returns nil and the reason when nftables cannot be
// used here (not root, no nft, the kernel refuses); what needs it then
// says so and goes on without.
func OpenNFTable(ctx context.Context, prefix string) (*NFTable, string) {
	if os.Geteuid() != 0 {
		return nil, "nftables needs root"
	}
	nft, err := exec.LookPath("nft")
	if err != nil {
		if _, serr := os.Stat("/usr/sbin/nft"); serr != nil {
			return nil, "nft is not installed (apt-get install -y nftables)"
		}
		nft = "/usr/sbin/nft"
	}
	t := &NFTable{nft: nft, Name: prefix + strconv.Itoa(os.Getpid())}
	t.removeStale(ctx, prefix)
	if _, err := t.Run(ctx, "add", "table", "inet", t.Name); err != nil {
		return nil, fmt.Sprintf("cannot create an nft table: %v", err)
	}
	if _, err := t.Run(ctx, "add", "chain", "inet", t.Name, "input", "{ type filter hook input priority -10; policy accept; }"); err != nil {
		t.Close()
		return nil, fmt.Sprintf("cannot create an nft input chain: %v", err)
	}
	return t, ""
}

// Run runs nft with args and returns its output.
func (t *NFTable) Run(ctx context.Context, args ...string) (string, error) {
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	out, err := exec.CommandContext(cctx, t.nft, args...).CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("nft %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return string(out), nil
}

// AddRule appends a rule to the input chain.
func (t *NFTable) AddRule(ctx context.Context, rule ...string) error {
	_, err := t.Run(ctx, append([]string{"add", "rule", "inet", t.Name, "input"}, rule...)...)
	return err
}

// Flush removes the chain's rules.
func (t *NFTable) Flush(ctx context.Context) error {
	_, err := t.Run(ctx, "flush", "chain", "inet", t.Name, "input")
	return err
}

// List returns `nft list chain` of the input chain (rules with counters).
func (t *NFTable) List(ctx context.Context) (string, error) {
	return t.Run(ctx, "list", "chain", "inet", t.Name, "input")
}

// Close deletes the table.
func (t *NFTable) Close() error {
	_, err := t.Run(context.Background(), "delete", "table", "inet", t.Name)
	if err != nil && strings.Contains(err.Error(), "No such file") {
		return errors.New("already gone")
	}
	return err
}

// removeStale deletes the tables of prefix whose process is gone.
func (t *NFTable) removeStale(ctx context.Context, prefix string) {
	out, err := t.Run(ctx, "list", "tables", "inet")
	if err != nil {
		return
	}
	for line := range strings.SplitSeq(out, "\n") {
		pid, ok := strings.CutPrefix(strings.TrimSpace(line), "table inet "+prefix)
		if !ok {
			continue
		}
		if _, err := strconv.Atoi(pid); err != nil {
			continue
		}
		if _, err := os.Stat("/proc/" + pid); err == nil && pid != strconv.Itoa(os.Getpid()) {
			continue // its process still runs
		}
		t.Run(ctx, "delete", "table", "inet", prefix+pid)
	}
}

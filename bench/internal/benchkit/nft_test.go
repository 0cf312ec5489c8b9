package benchkit

import (
	"context"
	"strings"
	"testing"
)

// TestNFTable creates a table of its own, adds a counting rule on a port
// nothing uses, lists it and deletes it; where nftables cannot be used it
// skips, saying why.
func TestNFTable(t *testing.T) {
	ctx := context.Background()
	tb, why := OpenNFTable(ctx, "meteorbench_test_")
	if tb == nil {
		t.Skip(why)
	}
	defer tb.Close()
	if err := tb.AddRule(ctx, "iif", "lo", "udp", "dport", "9", "counter", "comment", `"probe"`); err != nil {
		t.Fatal(err)
	}
	out, err := tb.List(ctx)
	if err != nil || !strings.Contains(out, `comment "probe"`) {
		t.Fatalf("list: %v\n%s", err, out)
	}
	if err := tb.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if err := tb.Close(); err != nil {
		t.Fatal(err)
	}
	if err := tb.Close(); err == nil || err.Error() != "already gone" {
		t.Fatalf("second close: %v", err)
	}
}

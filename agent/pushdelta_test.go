package agent

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// TestNotifyWithDeltaNeedsNoPull: a Notify that carries the Delta of the
// change (protocol 1.5) on the desired set the agent holds is journaled,
// acknowledged and applied without a Pull; one based on another set is
// answered with a Pull, which brings the agent to the same state.
func TestNotifyWithDeltaNeedsNoPull(t *testing.T) {
	c := newTestCluster(t)
	s1 := c.startServer("s1")
	a1 := upsert(t, "app", 3, fileRes("a", "/etc/app/a.conf", "A\n"))
	b1 := upsert(t, "app", 3, fileRes("b", "/etc/app/b.conf", "B\n"))
	c.setDesired(3, a1, b1)
	cfg := c.agentConfig(t, "dev-1", s1)
	ag := startAgent(t, cfg)
	c.wait(t, waitLong, "a converged report at revision 3", reportOf(c, 3, 2, StateConverged))
	pulls := func() int {
		c.mu.Lock()
		defer c.mu.Unlock()
		return len(c.pulls)
	}
	before := pulls()

	// b changes, a goes, c comes: the Notify carries it all.
	b2 := upsert(t, "app", 5, fileRes("b", "/etc/app/b.conf", "B2\n"))
	c5 := upsert(t, "app", 5, fileRes("c", "/etc/app/c.conf", "C\n"))
	c.pushDesired(5, false, b2, c5)
	c.wait(t, waitLong, "a converged report at revision 5", reportOf(c, 5, 2, StateConverged))
	if got := pulls(); got != before {
		t.Errorf("%d Pulls for a change the Notify carried, want none", got-before)
	}
	for file, want := range map[string]string{"b.conf": "B2\n", "c.conf": "C\n"} {
		if got, err := os.ReadFile(filepath.Join(cfg.Root, "/etc/app", file)); err != nil || string(got) != want {
			t.Errorf("%s = %q, %v; want %q", file, got, err, want)
		}
	}

	// A Delta on a set the agent does not hold is not applied: the agent
	// pulls, and converges on what the Pull brings.
	b6 := upsert(t, "app", 6, fileRes("b", "/etc/app/b.conf", "B3\n"))
	c.pushDesired(6, true, b6, c5)
	c.wait(t, waitLong, "a converged report at revision 6", reportOf(c, 6, 2, StateConverged))
	if got := pulls(); got != before+1 {
		t.Errorf("%d Pulls after a Delta on another set, want 1", got-before)
	}
	_, acks, _ := c.snapshot()
	if !slices.Equal(acks, []uint64{3, 5, 6}) {
		t.Errorf("acks = %v, want [3 5 6]", acks)
	}
	if s := ag.Status(); s.AckedRevision != 6 {
		t.Errorf("agent acknowledged revision %d, want 6", s.AckedRevision)
	}
}

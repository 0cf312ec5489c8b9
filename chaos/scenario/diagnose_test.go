package scenario

import (
	"context"
	"strings"
	"testing"
	"time"
)

// TestRaftDiagnosis reads a running cluster as a run that did not
// converge does: a line per server with its Raft figures, one of them the
// leader, and the stacks of Raft's loops, the leader's main loop and the
// followers' among them.
func TestRaftDiagnosis(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a real cluster")
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	h, err := NewHarness(ctx, HarnessConfig{Servers: 3, Dir: t.TempDir(), Seed: 41, Log: newTestWriter(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	if _, err := h.Leader(ctx); err != nil {
		t.Fatal(err)
	}
	states := raftStates(h)
	lines := strings.Split(strings.TrimSpace(states), "\n")
	if len(lines) != 3 || strings.Count(states, "state=Leader") != 1 || strings.Count(states, "state=Follower") != 2 {
		t.Fatalf("Raft states:\n%s", states)
	}
	for _, line := range lines {
		for _, k := range raftStats {
			if i := strings.Index(line, " "+k+"="); i < 0 || strings.HasPrefix(line[i+len(k)+2:]+" ", " ") {
				t.Errorf("no %s in %q", k, line)
			}
		}
	}
	all := allStacks()
	loops := raftLoopStacks(all)
	for _, fn := range []string{"(*Raft).leaderLoop", "(*Raft).runFollower", "(*Raft).runFSM", "(*Raft).heartbeat"} {
		if !strings.Contains(loops, fn) {
			t.Errorf("no %s among Raft's loops", fn)
		}
	}
	if len(loops) >= len(all) || strings.Contains(loops, "testing.tRunner") {
		t.Errorf("Raft's loops (%d bytes) are not a part of every stack (%d bytes)", len(loops), len(all))
	}
}

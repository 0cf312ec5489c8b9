package scenario

import (
	"bytes"
	"fmt"
	"runtime"
	"strings"
)

// raftStats are the figures of raft.Raft.Stats a stuck cluster is read
// by: who leads, how far each log and state machine got, how many
// committed batches wait for the state machine, and when each follower
// last heard from its leader.
var raftStats = []string{"state", "term", "last_log_index", "commit_index", "applied_index", "fsm_pending", "last_contact"}

// raftStates says, a line per running server, where its Raft stands.
func raftStates(h *Harness) string {
	var b strings.Builder
	for _, s := range h.Servers() {
		if s == nil {
			continue
		}
		st := s.Raft().Stats()
		fmt.Fprintf(&b, "%s:", s.ID())
		for _, k := range raftStats {
			fmt.Fprintf(&b, " %s=%s", k, st[k])
		}
		b.WriteByte('\n')
	}
	return b.String()
}

// allStacks returns the stacks of every goroutine of the process.
func allStacks() []byte {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			return buf[:n]
		}
		buf = make([]byte, 2*len(buf))
	}
}

// raftLoopStacks keeps, of a dump of every goroutine (allStacks), those
// running Raft's own loops (the main loop, the state machine's, the
// snapshots', each follower's replication and heartbeat): where a server
// that stopped making progress waits. The servers of a scenario run in
// this process, so their loops are here.
func raftLoopStacks(all []byte) string {
	var out []string
	for _, g := range bytes.Split(all, []byte("\n\n")) {
		if bytes.Contains(g, []byte("github.com/hashicorp/raft.(*Raft).")) {
			out = append(out, string(g))
		}
	}
	return strings.Join(out, "\n\n")
}

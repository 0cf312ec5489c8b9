package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/meteor-edge/meteor/cluster/api"
)

// TestPrintMembersShowsDivergence: 'meteor members' marks a diverged
// server with the index and both hashes, says why a server could not be
// compared, and shows a server that says it leads, but is not the leader
// this server's Raft follows, as only claiming it.
func TestPrintMembersShowsDivergence(t *testing.T) {
	var out bytes.Buffer
	printMembers(&out, &api.Members{Leader: "s1", Members: []api.Member{
		{ID: "s1", RaftRole: "leader", Leader: true},
		{ID: "s2", RaftRole: "follower", Diverged: true, StateCheck: &api.StateCheck{Server: "s2", Result: api.StateDiverged, Index: 48, Hash: "aaaa", LeaderHash: "bbbb"}},
		{ID: "s3", RaftRole: "leader", StateCheck: &api.StateCheck{Server: "s3", Result: api.StateSame, Index: 48, Hash: "bbbb", LeaderHash: "bbbb"}},
		{ID: "s4", RaftRole: "follower", StateCheck: &api.StateCheck{Server: "s4", Result: api.StateUnchecked, Note: "no checkpoint in common with the leader yet"}},
	}})
	lines := strings.Split(out.String(), "\n")
	for i, want := range [][]string{
		1: {"s1", "leader", " - "},
		2: {"s2", "DIVERGED@48", "state hash aaaa at index 48, the leader's bbbb"},
		3: {"s3", "leader (claimed)", "same@48"},
		4: {"s4", "unchecked", "no checkpoint in common"},
	} {
		for _, w := range want {
			if !strings.Contains(lines[i], w) {
				t.Errorf("line %d %q: no %q", i, lines[i], w)
			}
		}
	}
}

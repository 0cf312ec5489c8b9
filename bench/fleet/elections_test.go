package main

import (
	"errors"
	"strings"
	"testing"
)

// TestUnreadTermFailsTheLevel: a Raft term the servers did not answer for
// fails the level, not the run, and its elections print as unknown, never
// as 0.
func TestUnreadTermFailsTheLevel(t *testing.T) {
	l := &scaleLevel{Devices: 50000, ConnectElections: 0, ChangeRevision: 7}
	lvl, err := finishLevel(l, l.termUnread("the change", errors.New("read the Raft term: deadline exceeded")))
	if err != nil {
		t.Fatalf("finishLevel: %v, want the level failed and the run going on", err)
	}
	if !strings.Contains(lvl.Failure, "leader elections during the change unknown") || !lvl.ElectionsUnknown {
		t.Fatalf("failure %q (unknown %v)", lvl.Failure, lvl.ElectionsUnknown)
	}
	if got := lvl.electionPair(", "); got != "0, ?" {
		t.Errorf("elections printed %q, want \"0, ?\"", got)
	}
	connecting := &scaleLevel{Devices: 100000}
	connecting.termUnread("connecting", errors.New("x"))
	if got := connecting.electionPair(" / "); got != "? / -" {
		t.Errorf("elections printed %q, want \"? / -\"", got)
	}
	if got := (&scaleLevel{ConnectElections: 1, Elections: 2}).electionPair(", "); got != "1, 2" {
		t.Errorf("elections printed %q, want \"1, 2\"", got)
	}
}

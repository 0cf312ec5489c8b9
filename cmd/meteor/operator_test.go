package main

import (
	"strings"
	"testing"
)

// TestOperatorRaftCommands: list-peers shows the configuration and what it
// can stand; remove-peer and 'members remove' are one command; recover
// works on a stopped server's data dir and says what it did.
func TestOperatorRaftCommands(t *testing.T) {
	l, base := startACLCluster(t)
	cli := func(args ...string) (string, error) { return run(t, append(append([]string{}, base...), args...)...) }

	out, err := cli("operator", "raft", "list-peers")
	if err != nil || !strings.Contains(out, "s1") || !strings.Contains(out, "1 voters, 1 alive; a commit needs 1: 0 more may fail") {
		t.Fatalf("list-peers: %v\n%s", err, out)
	}
	for _, args := range [][]string{{"operator", "raft", "remove-peer", "nope"}, {"members", "remove", "nope", "--force"}} {
		if code, _, errOut := cliRun(t, append(append([]string{}, base...), args...)...); code != exitNotFound || !strings.Contains(errOut, "not in the Raft configuration") {
			t.Fatalf("%v: exit %d, %s", args, code, errOut)
		}
	}
	dataDir := l.Config(0).DataDir
	if err := l.Stop(0); err != nil {
		t.Fatal(err)
	}
	out, err = run(t, "operator", "raft", "recover", "--data-dir", dataDir)
	if err != nil || !strings.Contains(out, "recovered s1 in "+dataDir) || !strings.Contains(out, "configuration now: s1 at "+l.Config(0).RaftAddr) {
		t.Fatalf("recover: %v\n%s", err, out)
	}
	if _, err := run(t, "operator", "raft", "recover", "--data-dir", dataDir, "--peers", "s2=127.0.0.1:1"); err == nil || !strings.Contains(err.Error(), "leaves out this server") {
		t.Fatalf("recover without this server: %v", err)
	}
}

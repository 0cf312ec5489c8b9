package cluster

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/meteor-edge/meteor/cluster/api"
	"github.com/meteor-edge/meteor/fsm"
)

// TestDivergedReplicaIsShown applies a command to one follower's state
// machine directly, bypassing Raft, as the injected AppendEntries of issue
// 10 did: the follower then skips the real entry at that index and holds
// another state for good. Every server's members list must show exactly
// that follower as diverged, with both hashes at the same index, and
// every server's /v1/health must say it is not healthy because of it.
func TestDivergedReplicaIsShown(t *testing.T) {
	c := newTestCluster(t, 3, nil)
	c.propose(simpleIntent("motd", "v0"))
	c.waitConverged()
	bad := c.follower()
	evil, err := fsm.Encode(fsm.PutIntentType, &fsm.PutIntentRequest{Intent: simpleIntent("evil", "/bin/sh"), Time: time.Now().UnixNano()})
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, 5*time.Second, func() error {
		bad.fsm.Apply(bad.fsm.Read().Index()+1, evil)
		_, err := bad.fsm.Read().Intent(nil, "evil")
		return err // a Raft entry took the index first: again
	})
	for i := range 2*fsm.CheckpointInterval + 2 {
		c.propose(simpleIntent(fmt.Sprintf("w%d", i%4), fmt.Sprint(i)))
	}

	for _, s := range c.alive() {
		var ms api.Members
		waitFor(t, 10*time.Second, func() error {
			ms = s.Members()
			for _, m := range ms.Members {
				if m.ID != ms.Leader && m.StateCheck == nil {
					return fmt.Errorf("%s: no state check of %s", s.ID(), m.ID)
				}
				if m.ID != ms.Leader && m.StateCheck.Result == api.StateUnchecked {
					return fmt.Errorf("%s: %s unchecked: %s", s.ID(), m.ID, m.StateCheck.Note)
				}
			}
			return nil
		})
		for _, m := range ms.Members {
			switch {
			case m.ID == ms.Leader:
				if m.Diverged || m.StateCheck != nil {
					t.Errorf("%s shows the leader %s with %+v", s.ID(), m.ID, m.StateCheck)
				}
			case m.ID == bad.ID():
				sc := m.StateCheck
				if !m.Diverged || sc.Result != api.StateDiverged || sc.Hash == sc.LeaderHash || sc.Index == 0 || sc.Hash == "" || sc.LeaderHash == "" {
					t.Errorf("%s shows the diverged %s as %+v", s.ID(), m.ID, sc)
				}
			default:
				if m.Diverged || m.StateCheck.Result != api.StateSame || m.StateCheck.Hash != m.StateCheck.LeaderHash {
					t.Errorf("%s shows the sound %s as %+v", s.ID(), m.ID, m.StateCheck)
				}
			}
		}

		h, err := client(s).Health(context.Background())
		if err == nil || h == nil || h.Healthy || len(h.Diverged) != 1 || h.Diverged[0].Server != bad.ID() || !strings.Contains(h.Message, bad.ID()) {
			t.Errorf("%s health: %+v, %v; want unhealthy with %s diverged", s.ID(), h, err, bad.ID())
		}
	}
}

// TestNoDivergenceUnderWrites: while writers commit without pause, every
// server's members list and health, asked again and again, never show a
// replica as diverged; each follower is found the same as the leader at
// least once, so comparisons were made.
func TestNoDivergenceUnderWrites(t *testing.T) {
	c := newTestCluster(t, 3, nil)
	c.waitLeader()
	servers := c.alive()
	ctx, cancel := context.WithCancel(context.Background())
	var writers sync.WaitGroup
	for w := range 3 {
		writers.Go(func() {
			for i := 0; ctx.Err() == nil; i++ {
				for _, s := range servers {
					if s.IsLeader() {
						s.Propose(ctx, fsm.PutIntentType, &fsm.PutIntentRequest{Intent: simpleIntent(fmt.Sprintf("w%d", w), fmt.Sprint(i)), Time: time.Now().UnixNano()})
					}
				}
			}
		})
	}
	defer writers.Wait()
	defer cancel()

	// At least 3 s of writes, 4 checkpoints' worth, and each follower
	// found the same as the leader at least once.
	same := map[string]bool{}
	start := time.Now()
	enough := func() bool {
		return time.Since(start) > 3*time.Second && len(same) >= 2 && c.waitLeader().fsm.Read().Index() >= 4*fsm.CheckpointInterval
	}
	for rounds := 0; !enough(); rounds++ {
		if time.Since(start) > 30*time.Second {
			t.Fatalf("after %d rounds, followers found the same as the leader: %v", rounds, same)
		}
		for _, s := range servers {
			ms := s.Members()
			for _, m := range ms.Members {
				if m.Diverged {
					t.Fatalf("%s shows %s as diverged under writes: %+v", s.ID(), m.ID, m.StateCheck)
				}
				if m.StateCheck != nil && m.StateCheck.Result == api.StateSame {
					same[m.ID] = true
				}
			}
			if h, _ := client(s).Health(ctx); h != nil && len(h.Diverged) > 0 {
				t.Fatalf("%s health shows %+v as diverged under writes", s.ID(), h.Diverged)
			}
		}
	}
}

// TestVerifyLeader: the leader Raft follows is shown only if the Raft
// configuration has it as a voter at that address.
func TestVerifyLeader(t *testing.T) {
	conf := raft.Configuration{Servers: []raft.Server{
		{ID: "s1", Address: "10.0.0.1:7000", Suffrage: raft.Voter},
		{ID: "s2", Address: "10.0.0.2:7000", Suffrage: raft.Nonvoter},
	}}
	for _, tc := range []struct {
		addr raft.ServerAddress
		id   raft.ServerID
		want string
		note string
	}{
		{"10.0.0.1:7000", "s1", "s1", ""},
		{"10.0.0.9:7000", "evil", "", "not in the Raft configuration"},
		{"10.0.0.9:7000", "s1", "", "the Raft configuration has s1 at 10.0.0.1:7000"},
		{"10.0.0.2:7000", "s2", "", "not a voter"},
	} {
		got, note := verifyLeader(tc.addr, tc.id, conf)
		if got != tc.want || !strings.Contains(note, tc.note) || (tc.note == "") != (note == "") {
			t.Errorf("leader %s at %s: %q, %q; want %q, a note with %q", tc.id, tc.addr, got, note, tc.want, tc.note)
		}
	}
}

func TestHealthCheckAgeFor(t *testing.T) {
	for _, c := range []struct {
		cost    time.Duration
		servers int
		want    time.Duration
	}{
		{0, 3, healthCheckAge},                      // no hash yet
		{100 * time.Millisecond, 3, healthCheckAge}, // a small state: 6 s of hashing would do
		{2 * time.Second, 3, 120 * time.Second},     // 10,000 intents with their history
		{2 * time.Second, 5, 200 * time.Second},     // more servers compare
		{2 * time.Second, 0, 40 * time.Second},      // no configuration read: one
	} {
		if got := healthCheckAgeFor(c.cost, c.servers); got != c.want {
			t.Errorf("hash %v, %d servers: %v, want %v", c.cost, c.servers, got, c.want)
		}
	}
}

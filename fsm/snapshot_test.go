package fsm

import (
	"bytes"
	"errors"
	"fmt"
	"testing"

	"github.com/meteor-edge/meteor/fsm/intent"
)

// TestStateNeverGoesBack: a snapshot older than the state is not restored
// over it, and entries at or below the applied index (Raft replays those
// after installing a snapshot) change nothing.
func TestStateNeverGoesBack(t *testing.T) {
	leader, follower := newTestFSM(t, 0), newTestFSM(t, 0)
	var entries [][]byte
	for i := range 10 {
		in := &intent.Intent{Name: fmt.Sprintf("i%d", i%3), Selector: map[string]string{"region": "eu"},
			Resources: []intent.Resource{{ID: "motd", Type: "file", Spec: map[string]any{"path": "/etc/motd", "content": fmt.Sprint(i)}}}}
		entries = append(entries, mustEncode(t, PutIntentType, &PutIntentRequest{Intent: in, Time: int64(i)}))
	}
	var old bytes.Buffer
	for i, e := range entries {
		leader.Apply(uint64(i+1), e)
		follower.Apply(uint64(i+1), e)
		if i == 4 {
			if _, err := leader.Snapshot().WriteTo(&old); err != nil {
				t.Fatal(err)
			}
		}
	}
	want, err := follower.Hash()
	if err != nil {
		t.Fatal(err)
	}
	if err := follower.Restore(bytes.NewReader(old.Bytes())); !errors.Is(err, ErrOlderSnapshot) {
		t.Fatalf("restore of the snapshot at index 5 over index 10: %v, want ErrOlderSnapshot", err)
	}
	for i, e := range entries[5:] {
		follower.Apply(uint64(i+6), e) // replayed after the snapshot
	}
	if got, _ := follower.Hash(); got != want || follower.Read().Index() != 10 || follower.Read().Revision() != leader.Read().Revision() {
		t.Fatalf("state moved: index %d revision %d (leader %d), hash changed %v",
			follower.Read().Index(), follower.Read().Revision(), leader.Read().Revision(), got != want)
	}
	// A fresh replica restores the same snapshot and catches up.
	fresh := newTestFSM(t, 0)
	if err := fresh.Restore(bytes.NewReader(old.Bytes())); err != nil {
		t.Fatal(err)
	}
	for i, e := range entries[5:] {
		fresh.Apply(uint64(i+6), e)
	}
	if got, _ := fresh.Hash(); got != want {
		t.Fatal("a fresh replica from the snapshot and the log differs")
	}
}

package fsm

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/meteor-edge/meteor/fsm/intent"
)

// putEntries returns n put-intent commands over three intents.
func putEntries(t *testing.T, n int) [][]byte {
	var out [][]byte
	for i := range n {
		in := &intent.Intent{Name: fmt.Sprintf("i%d", i%3), Selector: map[string]string{"region": "eu"},
			Resources: []intent.Resource{{ID: "motd", Type: "file", Spec: map[string]any{"path": "/etc/motd", "content": fmt.Sprint(i)}}}}
		out = append(out, mustEncode(t, PutIntentType, &PutIntentRequest{Intent: in, Time: int64(i)}))
	}
	return out
}

// operatorRestore writes backup (snapshot bytes) as an operator restore
// over a state at index and revision with mark cur, as a leader does:
// through a scratch replica that reads the backup in full.
func operatorRestore(t *testing.T, backup []byte, index, revision uint64, cur RestoreMark, id uint64) []byte {
	t.Helper()
	scratch := newTestFSM(t, 0)
	if err := scratch.Restore(bytes.NewReader(backup)); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if _, err := scratch.Snapshot().WriteOperatorRestore(&out, OperatorRestore{
		Index: index, Revision: max(revision, scratch.Read().Revision()) + 1, Mark: NewRestoreMark(cur, id),
	}); err != nil {
		t.Fatal(err)
	}
	return out.Bytes()
}

func intentRecords(t *testing.T, f *FSM) []*IntentRecord {
	t.Helper()
	recs, err := f.Read().Intents(nil)
	if err != nil {
		t.Fatal(err)
	}
	return recs
}

// TestOperatorRestoreGoesBack: a backup older than the state, restored by
// an operator, replaces it on every replica, however far each got; the
// restored state then never goes back either: neither to the restore
// snapshot sent again after later entries, nor to a snapshot from before
// the restore, whatever its index.
func TestOperatorRestoreGoesBack(t *testing.T) {
	entries := putEntries(t, 12)
	leader, behind := newTestFSM(t, 0), newTestFSM(t, 0)
	var backup, preRestore []byte
	for i, e := range entries[:10] {
		leader.Apply(uint64(i+1), e)
		if i < 7 {
			behind.Apply(uint64(i+1), e)
		}
		if i == 4 {
			backup = snapshotBytes(t, leader)
		}
	}
	preRestore = snapshotBytes(t, leader)
	backupState := newTestFSM(t, 0)
	if err := backupState.Restore(bytes.NewReader(backup)); err != nil {
		t.Fatal(err)
	}
	// Raft's own install of the backup is refused: it is older.
	if err := leader.Restore(bytes.NewReader(backup)); !errors.Is(err, ErrOlderSnapshot) {
		t.Fatalf("install of the backup at index 5 over index 10: %v, want ErrOlderSnapshot", err)
	}

	rev := leader.Read().Revision()
	restore := operatorRestore(t, backup, 10, rev, leader.Read().RestoreMark(), 0xabc)
	for _, r := range []*FSM{leader, behind, newTestFSM(t, 0)} {
		if err := r.Restore(bytes.NewReader(restore)); err != nil {
			t.Fatalf("operator restore over index %d: %v", r.Read().Index(), err)
		}
		if diff := cmp.Diff(intentRecords(t, backupState), intentRecords(t, r)); diff != "" {
			t.Fatalf("restored intents differ from the backup's:\n%s", diff)
		}
		read := r.Read()
		if read.Index() != 10 || read.Revision() != rev+1 || read.RestoreMark() != (RestoreMark{Seq: 1, ID: "0000000000000abc"}) {
			t.Fatalf("restored state at index %d revision %d mark %v, want 10, %d, 1 (abc)", read.Index(), read.Revision(), read.RestoreMark(), rev+1)
		}
	}
	// Entries after the restore apply; the restore sent again does not
	// undo them, nor does any snapshot from before it.
	leader.Apply(12, entries[10])
	want, _ := leader.Hash()
	for _, snap := range [][]byte{restore, preRestore, backup} {
		if err := leader.Restore(bytes.NewReader(snap)); !errors.Is(err, ErrOlderSnapshot) {
			t.Fatalf("install over the restored state and a later entry: %v, want ErrOlderSnapshot", err)
		}
	}
	if got, _ := leader.Hash(); got != want {
		t.Fatal("a refused install changed the state")
	}
	// The restored state's own snapshots carry its mark (version 2, or 3
	// with the active level 3 of these replicas) and install on a replica
	// that missed the restore.
	later := snapshotBytes(t, leader)
	if !bytes.Contains(later, []byte(`"version":3`)) || !bytes.Contains(later, []byte(`"restore":{"seq":1,"id":"0000000000000abc"}`)) {
		t.Fatalf("snapshot of a restored state: %s", later[:bytes.IndexByte(later, '\n')])
	}
	// Its own index (13) is past the snapshot's (12): the mark decides.
	missed := newTestFSM(t, 0)
	for i, e := range entries {
		missed.Apply(uint64(i+1), e)
	}
	missed.Apply(13, entries[11])
	if err := missed.Restore(bytes.NewReader(later)); err != nil {
		t.Fatalf("a replica that missed the restore refuses a later snapshot of the restored state: %v", err)
	}
	if got, _ := missed.Hash(); got != want {
		t.Fatal("the replica that missed the restore holds another state")
	}
	// A second restore of the same Seq by another leader (the first
	// restore's leader failed before its followers took it) wins over the
	// first.
	sibling := operatorRestore(t, preRestore, 12, leader.Read().Revision(), RestoreMark{}, 0xdef)
	if err := leader.Restore(bytes.NewReader(sibling)); err != nil {
		t.Fatalf("a sibling restore: %v", err)
	}
	if m := leader.Read().RestoreMark(); m.ID != "0000000000000def" {
		t.Fatalf("mark %v after the sibling restore", m)
	}
}

// TestRestoreRefusesBadMarks: a snapshot with a malformed
// restore mark is refused and changes nothing.
func TestRestoreRefusesBadMarks(t *testing.T) {
	f := newTestFSM(t, 0)
	f.Apply(1, putEntries(t, 1)[0])
	for _, tc := range []struct{ name, hdr, want string }{
		{"mark in version 1", `{"format":"meteor-fsm","version":1,"index":9,"restore":{"seq":1,"id":"0000000000000001"}}`, "carries no restore mark"},
		{"seq 0", `{"format":"meteor-fsm","version":2,"index":9,"restore":{"seq":0,"id":"0000000000000001"}}`, "bad restore mark"},
		{"bad id", `{"format":"meteor-fsm","version":2,"index":9,"restore":{"seq":1,"id":"xyz"}}`, "bad restore mark"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := f.Restore(strings.NewReader(tc.hdr + "\n"))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Restore = %v, want %q", err, tc.want)
			}
			if f.Read().Index() != 1 {
				t.Fatal("a refused restore changed the state")
			}
		})
	}
	var buf bytes.Buffer
	if _, err := f.Snapshot().WriteOperatorRestore(&buf, OperatorRestore{Index: 1, Revision: 2}); err == nil {
		t.Fatal("an operator restore without a mark was written")
	}
}

// TestFeatureLevels: every command type has the level that introduced it,
// and a replica of an earlier level behaves as that release did: a later
// type stops it unless flagged ignorable, and it refuses snapshots of a
// later version.
func TestFeatureLevels(t *testing.T) {
	for typ := range handlers {
		if l := typ.Level(); l < 1 || l > FeatureLevel {
			t.Errorf("%s: level %d, want 1 to %d", typ, l, FeatureLevel)
		}
	}
	for typ := range commandLevels {
		if _, ok := handlers[typ]; !ok {
			t.Errorf("%s has a level but no handler", typ)
		}
	}
	if AuditOperationType.Level() != 2 || (AuditOperationType|IgnoreUnknownTypeFlag).Level() != 2 || MessageType(99).Level() != 0 {
		t.Fatal("levels of audit-operation or of an unknown type")
	}
	if _, err := New(Config{FeatureLevel: FeatureLevel + 1}); err == nil {
		t.Fatal("a replica of a level this code does not implement was created")
	}

	old, err := New(Config{FeatureLevel: 1})
	if err != nil {
		t.Fatal(err)
	}
	op := mustEncode(t, AuditOperationType, &OperationRequest{Action: "snapshot-save", Target: "snapshot/ab", Time: 1})
	func() {
		defer func() {
			if r := recover(); r == nil || !strings.Contains(fmt.Sprint(r), "unknown command type 20") {
				t.Fatalf("a level 1 replica applying audit-operation: panic %v", r)
			}
		}()
		old.Apply(1, op)
	}()
	flagged := append([]byte{byte(AuditOperationType | IgnoreUnknownTypeFlag)}, op[1:]...)
	old.Apply(2, flagged)
	if old.Read().Index() != 2 {
		t.Fatal("a flagged unknown command did not advance the index")
	}
	cur, err := New(Config{}) // a cluster whose active level is still 2
	if err != nil {
		t.Fatal(err)
	}
	restore := operatorRestore(t, snapshotBytes(t, cur), 5, 0, RestoreMark{}, 1)
	if err := old.Restore(bytes.NewReader(restore)); err == nil || !strings.Contains(err.Error(), "version 2 is not supported by this server (it reads 1 to 1)") {
		t.Fatalf("a level 1 replica restoring a version 2 snapshot: %v", err)
	}

	// The current level applies it, with its own action in the audit log.
	if res := cur.Apply(1, op); res.Err != nil {
		t.Fatal(res.Err)
	}
	recs, err := cur.Read().Audit(nil, AuditQuery{})
	if err != nil || len(recs) != 1 || recs[0].Action != "snapshot-save" || recs[0].Target != "snapshot/ab" {
		t.Fatalf("audit after audit-operation: %v %+v", err, recs)
	}
	if res := cur.Apply(2, mustEncode(t, AuditOperationType, &OperationRequest{Target: "x"})); res.Err == nil {
		t.Fatal("an operation without an action was recorded")
	}
}

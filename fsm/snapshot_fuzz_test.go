package fsm

import (
	"bytes"
	"testing"
)

// FuzzRestore restores arbitrary bytes over a replica's state. Restore
// must return an error or restore, never panic. On an error the state is
// left as it was; a restored state must write itself out as a snapshot
// that restores to the same state, as a replica installing it from the
// leader would hold it.
func FuzzRestore(f *testing.F) {
	src := newTestFSM(f, 4)
	for j, e := range randomLog(f, 11, 60) {
		src.Apply(uint64(j+100), e)
	}
	full := snapshotBytes(f, src)
	f.Add(full)
	for _, n := range []int{0, 1, 40, len(full) / 2, len(full) - 1} {
		f.Add(full[:n])
	}
	f.Add([]byte(`{"format":"meteor-fsm","version":1,"index":500,"revision":3,"history_limit":4}` + "\n" + `{}`))
	f.Add([]byte(`{"format":"meteor-fsm","version":1,"index":500,"revision":3,"history_limit":4}` + "\n" + `{"intent":{"name":"a","intent":null}}`))
	f.Add([]byte(`{"format":"meteor-fsm","version":1,"index":500,"revision":3,"history_limit":4}` + "\n" + `{"device":{"id":"d","labels":{"a":"b"}},"token":{}}`))
	f.Add([]byte(`{"format":"meteor-fsm","version":99}`))
	// An operator restore (version 2, with its restore mark).
	var restore bytes.Buffer
	if _, err := src.Snapshot().WriteOperatorRestore(&restore, OperatorRestore{Index: 900, Revision: 999, Mark: NewRestoreMark(RestoreMark{}, 42)}); err != nil {
		f.Fatal(err)
	}
	f.Add(restore.Bytes())
	f.Add([]byte(`{"format":"meteor-fsm","version":2,"index":500,"restore":{"seq":3,"id":"00000000000000ff"}}` + "\n"))

	// The replica restored over: behind the snapshot, so Restore does
	// not refuse it as older than the state.
	cur := newTestFSM(f, 4)
	for j, e := range randomLog(f, 12, 20) {
		cur.Apply(uint64(j+1), e)
	}
	before := snapshotBytes(f, cur)
	f.Fuzz(func(t *testing.T, data []byte) {
		r := newTestFSM(t, 4)
		if err := r.Restore(bytes.NewReader(before)); err != nil {
			t.Fatal(err)
		}
		if err := r.Restore(bytes.NewReader(data)); err != nil {
			if after := snapshotBytes(t, r); !bytes.Equal(after, before) {
				t.Fatalf("a failed restore (%v) changed the state", err)
			}
			return
		}
		out := snapshotBytes(t, r)
		again := newTestFSM(t, 4)
		if err := again.Restore(bytes.NewReader(out)); err != nil {
			t.Fatalf("the restored state's own snapshot does not restore: %v", err)
		}
		if got := snapshotBytes(t, again); !bytes.Equal(got, out) {
			t.Fatalf("the restored state's snapshot restores to another state")
		}
		// Reads of what was restored must not panic either.
		read := r.Read()
		if _, err := read.Intents(nil); err != nil {
			t.Fatal(err)
		}
		if _, err := read.Devices(nil); err != nil {
			t.Fatal(err)
		}
		if _, err := read.Tokens(nil); err != nil {
			t.Fatal(err)
		}
	})
}

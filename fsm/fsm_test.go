package fsm

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/hashicorp/go-memdb"

	"github.com/meteor-edge/meteor/fsm/intent"
)

func testIntent(name string, value string) *intent.Intent {
	return &intent.Intent{
		Name:     name,
		Selector: map[string]string{"region": "eu"},
		Resources: []intent.Resource{{
			ID: "motd", Type: "file",
			Spec: map[string]any{"path": "/etc/motd", "content": value},
		}},
	}
}

func mustEncode(t testing.TB, typ MessageType, req any) []byte {
	t.Helper()
	b, err := Encode(typ, req)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// newTestFSM returns a replica whose cluster runs this release's feature
// level (as the leader raises it at once in a new cluster), without an
// entry for it: the tests' entries start at index 1.
func newTestFSM(t testing.TB, limit int) *FSM {
	t.Helper()
	return newTestFSMWith(t, Config{HistoryLimit: limit})
}

// newTestFSMWith is newTestFSM with the configuration cfg.
func newTestFSMWith(t testing.TB, cfg Config) *FSM {
	t.Helper()
	f, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	db, _ := f.current()
	txn := db.Txn(true)
	if err := setMeta(txn, metaActiveLevel, uint64(FeatureLevel)); err != nil {
		t.Fatal(err)
	}
	txn.Commit()
	return f
}

func u64(v uint64) *uint64 { return &v }

func TestPutGetDeleteRevisions(t *testing.T) {
	f := newTestFSM(t, 0)
	res := f.Apply(1, mustEncode(t, PutIntentType, &PutIntentRequest{Intent: testIntent("a", "one"), Time: 10}))
	if res.Err != nil || res.Revision != 1 {
		t.Fatalf("first put: got %+v, want revision 1", res)
	}
	res = f.Apply(2, mustEncode(t, PutIntentType, &PutIntentRequest{Intent: testIntent("b", "x"), Time: 11}))
	if res.Revision != 2 {
		t.Fatalf("second put: revision %d, want 2", res.Revision)
	}
	res = f.Apply(3, mustEncode(t, PutIntentType, &PutIntentRequest{Intent: testIntent("a", "two"), IfMatch: u64(1), Time: 12}))
	if res.Err != nil || res.Revision != 3 {
		t.Fatalf("conditional put: got %+v, want revision 3", res)
	}
	rec, err := f.Read().Intent(nil, "a")
	if err != nil {
		t.Fatal(err)
	}
	if rec.Revision != 3 || rec.CreateRevision != 1 || rec.CreateIndex != 1 || rec.ModifyIndex != 3 || rec.UpdatedAt != 12 {
		t.Errorf("record = %+v", rec)
	}
	// Stale If-Match is rejected and does not bump the revision.
	res = f.Apply(4, mustEncode(t, PutIntentType, &PutIntentRequest{Intent: testIntent("a", "three"), IfMatch: u64(1)}))
	var ce *ConflictError
	if !errors.As(res.Err, &ce) || ce.Current != 3 || ce.Expected != 1 || res.Revision != 3 {
		t.Fatalf("stale if-match: got %+v", res)
	}
	// If-Match 0 means "must not exist".
	res = f.Apply(5, mustEncode(t, PutIntentType, &PutIntentRequest{Intent: testIntent("a", "x"), IfMatch: u64(0)}))
	if !errors.As(res.Err, &ce) {
		t.Fatalf("create-only on existing: got %+v", res)
	}
	res = f.Apply(6, mustEncode(t, DeleteIntentType, &DeleteIntentRequest{Name: "a", Time: 13}))
	if res.Err != nil || res.Revision != 4 {
		t.Fatalf("delete: got %+v, want revision 4", res)
	}
	if _, err := f.Read().Intent(nil, "a"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("deleted intent: err %v, want ErrNotFound", err)
	}
	res = f.Apply(7, mustEncode(t, DeleteIntentType, &DeleteIntentRequest{Name: "a"}))
	if !errors.Is(res.Err, ErrNotFound) || res.Revision != 4 {
		t.Fatalf("second delete: got %+v", res)
	}
	// History answers "what did revision N say".
	r := f.Read()
	for rev, want := range map[uint64]string{1: "one", 2: "one", 3: "two"} {
		h, err := r.IntentAt("a", rev)
		if err != nil {
			t.Fatalf("IntentAt(%d): %v", rev, err)
		}
		in, err := h.Intent()
		if err != nil {
			t.Fatal(err)
		}
		if got := in.Resources[0].Spec["content"]; got != want {
			t.Errorf("IntentAt(%d) content = %v, want %s", rev, got, want)
		}
	}
	if _, err := r.IntentAt("a", 4); !errors.Is(err, ErrNotFound) || !strings.Contains(err.Error(), "deleted at revision 4") {
		t.Errorf("IntentAt(4) after delete: %v", err)
	}
	if _, err := r.IntentAt("b", 1); !errors.Is(err, ErrNotFound) {
		t.Errorf("IntentAt before creation: %v", err)
	}
	if r.Index() != 7 || r.Revision() != 4 {
		t.Errorf("index %d revision %d, want 7 and 4", r.Index(), r.Revision())
	}
}

func TestHistoryIsBounded(t *testing.T) {
	f := newTestFSM(t, 3)
	for i := 1; i <= 10; i++ {
		f.Apply(uint64(i), mustEncode(t, PutIntentType, &PutIntentRequest{Intent: testIntent("a", fmt.Sprint(i))}))
	}
	hist, err := f.Read().History("a")
	if err != nil {
		t.Fatal(err)
	}
	var revs []uint64
	for _, h := range hist {
		revs = append(revs, h.Revision)
	}
	if diff := cmp.Diff([]uint64{8, 9, 10}, revs); diff != "" {
		t.Fatalf("retained revisions (-want +got):\n%s", diff)
	}
	if _, err := f.Read().IntentAt("a", 5); !errors.Is(err, ErrCompacted) {
		t.Fatalf("IntentAt(5) = %v, want ErrCompacted", err)
	}
	h, err := f.Read().IntentAt("a", 9)
	if err != nil {
		t.Fatal(err)
	}
	if in, err := h.Intent(); err != nil || in.Resources[0].Spec["content"] != "9" {
		t.Fatalf("IntentAt(9) = %+v, %v", in, err)
	}
}

// TestReplicasDoNotValidateAgain: a replica applies the document its
// proposer validated as it is, so that an entry a later release's rules
// would refuse still replays alike on every replica; only a document the
// state cannot hold (no name) is refused, on every replica alike.
func TestReplicasDoNotValidateAgain(t *testing.T) {
	f := newTestFSM(t, 0)
	stricter := testIntent("a", "x")
	stricter.Resources[0].Spec["path"] = "relative/path" // refused by intent.Parse today
	if res := f.Apply(1, mustEncode(t, PutIntentType, &PutIntentRequest{Intent: stricter})); res.Err != nil || res.Revision != 1 {
		t.Fatalf("a committed document the rules of today refuse: %+v", res)
	}
	nameless := testIntent("", "x")
	if res := f.Apply(2, mustEncode(t, PutIntentType, &PutIntentRequest{Intent: nameless})); res.Err == nil || res.Revision != 1 {
		t.Fatalf("a nameless intent: %+v, want refused and no revision", res)
	}
	// The same document again changes nothing, whether the replica
	// stored it itself or took it from a snapshot.
	if res := f.Apply(3, mustEncode(t, PutIntentType, &PutIntentRequest{Intent: stricter})); !res.Unchanged {
		t.Fatalf("the same document again: %+v", res)
	}
	g := newTestFSM(t, 0)
	if err := g.Restore(bytes.NewReader(snapshotBytes(t, f))); err != nil {
		t.Fatal(err)
	}
	if res := g.Apply(4, mustEncode(t, PutIntentType, &PutIntentRequest{Intent: stricter})); !res.Unchanged {
		t.Fatalf("the same document on a restored replica: %+v", res)
	}
}

func TestUnknownCommand(t *testing.T) {
	f := newTestFSM(t, 0)
	res := f.Apply(1, []byte{byte(IgnoreUnknownTypeFlag | 77), '{', '}'})
	if res.Err != nil || f.Read().Index() != 1 {
		t.Fatalf("ignorable unknown command: %+v", res)
	}
	defer func() {
		if recover() == nil {
			t.Fatal("unknown command without the ignore flag did not panic")
		}
	}()
	f.Apply(2, []byte{77, '{', '}'})
}

// randomLog builds a reproducible sequence of commands touching a handful of
// intents, devices and tokens, including rejected ones.
func randomLog(t testing.TB, seed uint64, n int) [][]byte {
	rng := rand.New(rand.NewPCG(seed, 1))
	var log [][]byte
	for i := range n {
		name := fmt.Sprintf("intent-%d", rng.IntN(6))
		switch rng.IntN(13) {
		case 0, 1:
			in := testIntent(name, fmt.Sprintf("v%d", i))
			in.Selector = map[string]string{"region": []string{"eu", "us"}[rng.IntN(2)]}
			if rng.IntN(2) == 0 {
				in.Rollout = map[string]any{"waves": []any{int64(1), "50%", "100%"}}
			}
			req := &PutIntentRequest{Intent: in, Time: int64(i)}
			if rng.IntN(4) == 0 {
				req.IfMatch = u64(uint64(rng.IntN(i + 1)))
			}
			log = append(log, mustEncode(t, PutIntentType, req))
		case 2:
			log = append(log, mustEncode(t, DeleteIntentType, &DeleteIntentRequest{Name: name, Time: int64(i)}))
		case 3:
			// A worker step on a guessed record: some apply, most are stale.
			log = append(log, mustEncode(t, RolloutStepType, &RolloutStepRequest{
				Intent: name, Revision: uint64(rng.IntN(i + 1)), Basis: uint64(1 + rng.IntN(3)), Time: int64(i),
				Release: []string{fmt.Sprintf("dev-%d", rng.IntN(20))}, State: RolloutProgressing,
				Waves: make([]WaveState, 3), Complete: rng.IntN(4) == 0,
			}))
		case 4:
			log = append(log, mustEncode(t, RolloutControlType, &RolloutControlRequest{
				Intent: name, Action: []string{RolloutApprove, RolloutPause, RolloutResume, RolloutAbort}[rng.IntN(4)], Time: int64(i),
			}))
		case 5:
			log = append(log, mustEncode(t, StatusBatchType, &StatusBatchRequest{Owner: "s1", Transitions: []StatusTransition{{
				Device: fmt.Sprintf("dev-%d", rng.IntN(20)), Seq: uint64(rng.IntN(i + 1)), Time: int64(i),
				Status: []string{"pending", "converged", "failed"}[rng.IntN(3)], Full: true,
				Resources: []ResourceStatus{{Key: name + "/motd", AppliedDigest: fmt.Sprint(i), Effective: "ok"}},
				Traffic:   randomTraffic(i),
			}}}))
		case 7, 8, 9, 10, 11, 12:
			log = append(log, securityCommand(t, rng, i))
		default:
			log = append(log, mustEncode(t, UpsertDeviceType, &UpsertDeviceRequest{
				ID: fmt.Sprintf("dev-%d", rng.IntN(20)), Labels: map[string]string{"site": fmt.Sprint(rng.IntN(3)), "region": "eu"}, Time: int64(i),
			}))
		}
	}
	return log
}

// mustApplier returns a function that applies a command to f at the next
// index (from 1), failing the test if the state machine rejects it.
func mustApplier(t testing.TB, f *FSM) func(MessageType, any) {
	idx := uint64(0)
	return func(typ MessageType, req any) {
		t.Helper()
		idx++
		if res := f.Apply(idx, mustEncode(t, typ, req)); res.Err != nil {
			t.Fatal(res.Err)
		}
	}
}

// restored returns a new FSM restored from a snapshot of f.
func restored(t testing.TB, f *FSM) *FSM {
	t.Helper()
	g := newTestFSM(t, 0)
	if err := g.Restore(bytes.NewReader(snapshotBytes(t, f))); err != nil {
		t.Fatal(err)
	}
	return g
}

func snapshotBytes(t testing.TB, f *FSM) []byte {
	t.Helper()
	var buf bytes.Buffer
	if _, err := f.Snapshot().WriteTo(&buf); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// applyInBatches applies log from index 1 in batches of 1 to most
// commands, their sizes varying.
func applyInBatches(f *FSM, log [][]byte, most int) {
	for i := 0; i < len(log); {
		n := min(1+i%most, len(log)-i)
		idx := make([]uint64, n)
		for j := range idx {
			idx[j] = uint64(i + j + 1)
		}
		f.ApplyBatch(idx, log[i:i+n])
		i += n
	}
}

func TestDeterminism(t *testing.T) {
	for seed := uint64(1); seed <= 5; seed++ {
		log := randomLog(t, seed, 400)
		a, b := newTestFSM(t, 4), newTestFSM(t, 4)
		for i, cmd := range log {
			a.Apply(uint64(i+1), cmd)
		}
		// The same log in batches of varying size gives the same state.
		applyInBatches(b, log, 7)
		sa, sb := snapshotBytes(t, a), snapshotBytes(t, b)
		if !bytes.Equal(sa, sb) {
			t.Fatalf("seed %d: snapshots differ:\n%s", seed, cmp.Diff(string(sa), string(sb)))
		}
	}
}

func TestSnapshotRoundTrip(t *testing.T) {
	a := newTestFSM(t, 4)
	for i, cmd := range randomLog(t, 42, 300) {
		a.Apply(uint64(i+1), cmd)
	}
	snap := snapshotBytes(t, a)

	b := newTestFSM(t, 4)
	b.Apply(1, mustEncode(t, PutIntentType, &PutIntentRequest{Intent: testIntent("stale", "x")}))
	ws := memdb.NewWatchSet()
	if _, err := b.Read().Intent(ws, "stale"); err != nil {
		t.Fatal(err)
	}
	if err := b.Restore(bytes.NewReader(snap)); err != nil {
		t.Fatal(err)
	}
	if ws.Watch(time.After(10 * time.Second)) {
		t.Fatal("a watcher of the replaced state was not woken by Restore")
	}
	if got := snapshotBytes(t, b); !bytes.Equal(snap, got) {
		t.Fatalf("restored state differs:\n%s", cmp.Diff(string(snap), string(got)))
	}
	if _, err := b.Read().Intent(nil, "stale"); !errors.Is(err, ErrNotFound) {
		t.Fatal("state from before the restore survived it")
	}
	// Applying the same further commands to both keeps them equal.
	more := randomLog(t, 43, 50)
	for i, cmd := range more {
		a.Apply(uint64(1000+i), cmd)
		b.Apply(uint64(1000+i), cmd)
	}
	ha, _ := a.Hash()
	hb, _ := b.Hash()
	if ha != hb {
		t.Fatal("replicas diverged after restore")
	}
}

func TestRestoreRejectsBadSnapshots(t *testing.T) {
	f := newTestFSM(t, 0)
	f.Apply(1, mustEncode(t, PutIntentType, &PutIntentRequest{Intent: testIntent("keep", "x")}))
	for _, tc := range []struct{ name, data, want string }{
		{"newer version", `{"format":"meteor-fsm","version":99}`, "version 99 is not supported by this server (it reads 1 to 3)"},
		{"foreign format", `{"format":"etcd","version":1}`, `format "etcd" is not a Meteor state snapshot`},
		{"truncated", `{"format":"meteor-fsm","version":1,"index":3,"revision":2}` + "\n" + `{"intent":{"name":"x"`, "entry 0"},
		{"empty entry", `{"format":"meteor-fsm","version":1,"index":3}` + "\n{}", "empty or of an unknown kind"},
		{"empty", ``, "read snapshot header"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := f.Restore(strings.NewReader(tc.data))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Restore = %v, want an error containing %q", err, tc.want)
			}
			if _, err := f.Read().Intent(nil, "keep"); err != nil {
				t.Fatal("failed restore changed the state")
			}
		})
	}
}

// randomTraffic is the traffic of the i-th command of randomLog: none for
// every third, so that records keep the counts of an earlier report.
func randomTraffic(i int) *DeviceTraffic {
	if i%3 == 0 {
		return nil
	}
	return &DeviceTraffic{AsOf: int64(i), Day: 20789 + uint32(i/50), Servers: []ServerTraffic{
		{Server: "s1:7443", TrafficCounts: TrafficCounts{SentBytes: uint64(100 * i), RecvBytes: uint64(80 * i), SentPackets: uint64(i), RecvPackets: uint64(i)}},
	}, Previous: TrafficCounts{SentBytes: uint64(i)}}
}

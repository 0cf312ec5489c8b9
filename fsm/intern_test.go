package fsm

import (
	"fmt"
	"maps"
	"reflect"
	"strings"
	"testing"
	"unsafe"
)

// same says whether a and b share their bytes.
func same(a, b string) bool { return unsafe.StringData(a) == unsafe.StringData(b) }

func TestInternerSharesAndAges(t *testing.T) {
	in := &Interner{Limit: 2}
	a := in.String(strings.Clone("alpha"))
	if b := in.String(strings.Clone("alpha")); b != "alpha" || !same(a, b) {
		t.Fatal("a second alpha did not get the first one's bytes")
	}
	if in.String("") != "" {
		t.Fatal("the empty string changed")
	}
	// beta and gamma fill the generation alpha is in; delta starts a new
	// one. alpha, still asked for, is carried into it.
	in.String("beta")
	in.String("gamma")
	in.String("delta")
	if b := in.String(strings.Clone("alpha")); !same(a, b) {
		t.Fatal("alpha was forgotten one generation on")
	}
	// Two more generations without beta: it ages out.
	for _, s := range []string{"e", "f", "g", "h", "i", "j"} {
		in.String(s)
	}
	beta := strings.Clone("beta")
	if b := in.String(beta); !same(b, beta) {
		t.Fatal("beta outlived two generations unasked for")
	}
	if n := len(in.strs.cur) + len(in.strs.prev); n > 2*in.Limit {
		t.Fatalf("%d strings held, limit %d a generation", n, in.Limit)
	}
}

// TestStatusBatchSharesRepeatedStrings: two devices reporting the same
// resources in two status batches keep one copy of the key and the digest
// between their records, and of the resource states between their
// timelines; the values are those reported.
func TestStatusBatchSharesRepeatedStrings(t *testing.T) {
	f := newTestFSM(t, 0)
	apply := mustApplier(t, f)
	digest := fmt.Sprintf("%064x", 7)
	for _, id := range []string{"dev-a", "dev-b"} {
		apply(DeviceSessionType, &DeviceSessionRequest{ID: id, SessionID: "s", Server: "s1", Connected: true, Time: 1})
	}
	// In two entries with many other devices' strings between them, as
	// in a fleet: the decoder's own small cache (256 strings) has let go
	// of the first entry's by the second, which brings its own copies.
	var others []StatusTransition
	for i := range 2000 {
		others = append(others, StatusTransition{Device: fmt.Sprintf("other-%04d", i), Seq: 1, Status: "converged", Reason: fmt.Sprintf("reason %d", i)})
	}
	for _, id := range []string{"dev-a", "dev-b"} {
		apply(StatusBatchType, &StatusBatchRequest{Owner: "s1", Transitions: others})
		apply(StatusBatchType, &StatusBatchRequest{Owner: "s1", Transitions: []StatusTransition{{
			Device: id, Seq: 1, Full: true, Time: 2, Revision: 1, Status: "converged", Reason: "every resource converged",
			Resources:      []ResourceStatus{{Key: "app/cfg", AppliedDigest: digest, AppliedRevision: 1, Effective: "ok", State: "converged"}},
			ResourceStates: map[string]string{"app/cfg": "converged"},
		}}})
	}

	read := f.Read()
	a, err := read.Device(nil, "dev-a")
	if err != nil {
		t.Fatal(err)
	}
	b, err := read.Device(nil, "dev-b")
	if err != nil {
		t.Fatal(err)
	}
	ra, rb := a.Resources[0], b.Resources[0]
	if ra.Key != "app/cfg" || ra.AppliedDigest != digest || rb.AppliedDigest != digest || a.StatusReason != "every resource converged" {
		t.Fatalf("records changed: %+v, %+v", ra, rb)
	}
	for what, pair := range map[string][2]string{
		"key": {ra.Key, rb.Key}, "digest": {ra.AppliedDigest, rb.AppliedDigest}, "state": {ra.State, rb.State},
		"reason": {a.StatusReason, b.StatusReason}, "owner": {a.StatusOwner, b.StatusOwner},
	} {
		if !same(pair[0], pair[1]) {
			t.Errorf("the two records keep two copies of their %s", what)
		}
	}
	var keys []string
	for _, id := range []string{"dev-a", "dev-b"} {
		tl, err := read.Timeline(nil, id)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range tl {
			for k, v := range e.Resources {
				if v != "converged" {
					t.Fatalf("timeline of %s: %s %s", id, k, v)
				}
				keys = append(keys, k)
			}
		}
	}
	if len(keys) != 2 || !same(keys[0], keys[1]) {
		t.Errorf("timeline keys %q: want two sharing their bytes", keys)
	}

	// A snapshot restored shares them too.
	g := restored(t, f)
	a, _ = g.Read().Device(nil, "dev-a")
	b, _ = g.Read().Device(nil, "dev-b")
	if a == nil || b == nil || a.Resources[0].AppliedDigest != digest || !same(a.Resources[0].AppliedDigest, b.Resources[0].AppliedDigest) {
		t.Error("restored records keep two copies of their digest")
	}
	// And a batch applied after the restore shares them with its records.
	idx := g.Read().Index()
	for _, cmd := range [][]byte{
		mustEncode(t, DeviceSessionType, &DeviceSessionRequest{ID: "dev-c", SessionID: "s", Server: "s1", Connected: true, Time: 3}),
		mustEncode(t, StatusBatchType, &StatusBatchRequest{Owner: "s1", Transitions: []StatusTransition{{
			Device: "dev-c", Seq: 1, Full: true, Time: 4, Revision: 1, Status: "converged",
			Resources: []ResourceStatus{{Key: "app/cfg", AppliedDigest: digest, AppliedRevision: 1, Effective: "ok", State: "converged"}},
		}}}),
	} {
		idx++
		if res := g.Apply(idx, cmd); res.Err != nil {
			t.Fatal(res.Err)
		}
	}
	c, _ := g.Read().Device(nil, "dev-c")
	if c == nil || len(c.Resources) != 1 || !same(c.Resources[0].AppliedDigest, a.Resources[0].AppliedDigest) {
		t.Error("a record applied after the restore keeps its own copy of the restored records' digest")
	}
}

// TestInternerSharesSmallMaps: equal maps of up to maxSharedMap entries
// come back as one map, equal to them and none of them; unequal ones as
// different maps; larger ones as copies of their own; and a map shared
// from the older generation is carried into the newer.
func TestInternerSharesSmallMaps(t *testing.T) {
	in := &Interner{}
	for _, n := range []int{1, 2, maxSharedMap} {
		mk := func(state string) map[string]string {
			m := map[string]string{}
			for i := range n {
				m[fmt.Sprintf("app/r%d", i)] = state
			}
			return m
		}
		a, b, c := mk("converged"), mk("converged"), mk("failed")
		ia, ib, ic := in.Map(a), in.Map(b), in.Map(c)
		if !maps.Equal(ia, a) || !maps.Equal(ic, c) {
			t.Fatalf("%d entries: interned %v and %v, from %v and %v", n, ia, ic, a, c)
		}
		if reflect.ValueOf(ia).Pointer() != reflect.ValueOf(ib).Pointer() {
			t.Errorf("%d entries: equal maps not shared", n)
		}
		if reflect.ValueOf(ia).Pointer() == reflect.ValueOf(a).Pointer() || reflect.ValueOf(ia).Pointer() == reflect.ValueOf(ic).Pointer() {
			t.Errorf("%d entries: the caller's map, or an unequal one's, returned", n)
		}
	}
	big := map[string]string{}
	for i := range maxSharedMap + 1 {
		big[fmt.Sprint(i)] = "x"
	}
	if x, y := in.Map(big), in.Map(big); !maps.Equal(x, big) || reflect.ValueOf(x).Pointer() == reflect.ValueOf(y).Pointer() {
		t.Errorf("a map above maxSharedMap entries shared, or changed")
	}

	small := &Interner{Limit: 2}
	first := small.Map(map[string]string{"k": "0"})
	small.Map(map[string]string{"k": "1"})
	small.Map(map[string]string{"k": "2"}) // a new generation: "0" is in the older
	if again := small.Map(map[string]string{"k": "0"}); reflect.ValueOf(again).Pointer() != reflect.ValueOf(first).Pointer() {
		t.Error("a map of the older generation not shared")
	}
}

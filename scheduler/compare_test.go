package scheduler

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"pgregory.net/rapid"

	"github.com/meteor-edge/meteor/fsm"
)

// TestCompareSortedIsByMap checks Compare's walk of two sorted lists
// against the comparison through a map, on random desired states and
// reports (resources intended and reported, intended only, reported only,
// with the intended digest or another, effective or not): and that a
// record whose resources come in another order gets the same view.
func TestCompareSortedIsByMap(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		f, _ := fsm.New(fsm.DefaultConfig())
		files := map[string]string{}
		for _, k := range rapid.SliceOfDistinct(rapid.SampledFrom([]string{"a", "b", "c", "d", "e", "f"}), rapid.ID[string]).Draw(rt, "intended") {
			files[k] = k
		}
		in := fileIntent("net", nil, files)
		b, _ := fsm.Encode(fsm.PutIntentType, &fsm.PutIntentRequest{Intent: in})
		if res := f.Apply(1, b); res.Err != nil {
			rt.Fatal(res.Err)
		}
		d, err := NewPlanner().Desired(f.Read(), "d1", nil)
		if err != nil {
			rt.Fatal(err)
		}
		digest := map[string]string{}
		for _, r := range d.Resources {
			digest[r.Key] = fmt.Sprintf("%x", r.Digest)
		}
		rec := &fsm.DeviceRecord{ID: "d1", AckedRevision: rapid.Uint64Range(0, 2).Draw(rt, "acked")}
		for _, k := range rapid.SliceOfDistinct(rapid.SampledFrom([]string{"net/a", "net/b", "net/c", "net/x", "old/y", "zzz/z"}), rapid.ID[string]).Draw(rt, "reported") {
			rs := fsm.ResourceStatus{Key: k, AppliedDigest: "other", Effective: rapid.SampledFrom([]string{"ok", "mismatch", "unknown", ""}).Draw(rt, "effective")}
			if dg, ok := digest[k]; ok && rapid.Bool().Draw(rt, "applied") {
				rs.AppliedDigest = dg
			}
			if rapid.Bool().Draw(rt, "failed") {
				rs.LastError = "exit status 1"
			}
			rec.Resources = append(rec.Resources, rs)
		}
		slices.SortFunc(rec.Resources, func(a, b fsm.ResourceStatus) int { return strings.Compare(a.Key, b.Key) })

		got := Compare(d, rec)
		want := compareByMap(nil, d, rec)
		if diff := cmp.Diff(want, got.Resources); diff != "" {
			rt.Fatalf("sorted walk (-by map +walk):\n%s", diff)
		}
		shuffled := *rec
		shuffled.Resources = slices.Clone(rec.Resources)
		rand.New(rand.NewPCG(rapid.Uint64().Draw(rt, "seed"), 1)).Shuffle(len(shuffled.Resources), func(i, j int) {
			shuffled.Resources[i], shuffled.Resources[j] = shuffled.Resources[j], shuffled.Resources[i]
		})
		if diff := cmp.Diff(got, Compare(d, &shuffled)); diff != "" {
			rt.Fatalf("another order (-sorted +shuffled):\n%s", diff)
		}
	})
}

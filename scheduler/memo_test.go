package scheduler

import (
	"fmt"
	"testing"

	"github.com/google/go-cmp/cmp"
	"pgregory.net/rapid"

	"github.com/meteor-edge/meteor/fsm"
)

// TestDesiredMemoIsDesired checks that a DesiredMemo gives every device
// what Planner.Desired gives it, over random fleets of intents with
// selectors, some rolled out to part of the fleet (a released revision,
// the stable one for the others), and devices whose labels include one of
// their own: and that devices with the same picks share one state.
func TestDesiredMemoIsDesired(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		f, err := fsm.New(fsm.DefaultConfig())
		if err != nil {
			rt.Fatal(err)
		}
		idx := uint64(0)
		apply := func(typ fsm.MessageType, req any) fsm.ApplyResult {
			idx++
			b, err := fsm.Encode(typ, req)
			if err != nil {
				rt.Fatal(err)
			}
			res := f.Apply(idx, b)
			if res.Err != nil {
				rt.Fatalf("apply %d: %v", typ, res.Err)
			}
			return res
		}
		regions := []string{"eu", "us", "apac"}
		devices := rapid.IntRange(1, 60).Draw(rt, "devices")
		ids := make([]string, devices)
		labels := make([]map[string]string, devices)
		for i := range ids {
			ids[i] = fmt.Sprintf("d%02d", i)
			labels[i] = map[string]string{"store": ids[i]}
			if r := rapid.IntRange(-1, len(regions)-1).Draw(rt, "region"); r >= 0 {
				labels[i]["region"] = regions[r]
			}
			if rapid.Bool().Draw(rt, "tier") {
				labels[i]["tier"] = "gold"
			}
		}
		intents := rapid.IntRange(0, 4).Draw(rt, "intents")
		for n := range intents {
			name := fmt.Sprintf("in%d", n)
			sel := map[string]string{}
			if r := rapid.IntRange(-1, len(regions)-1).Draw(rt, "selector region"); r >= 0 {
				sel["region"] = regions[r]
			}
			if rapid.Bool().Draw(rt, "selector tier") {
				sel["tier"] = "gold"
			}
			apply(fsm.PutIntentType, &fsm.PutIntentRequest{Intent: fileIntent(name, sel, map[string]string{"a": "1", "b": "1"}), Time: int64(idx)})
			if !rapid.Bool().Draw(rt, "rolled out") {
				continue
			}
			// A new revision under a rollout, released to some devices;
			// perhaps selecting other devices than the stable one.
			in := fileIntent(name, sel, map[string]string{"a": "2"})
			if rapid.Bool().Draw(rt, "new selector") {
				in.Selector = map[string]string{"region": regions[rapid.IntRange(0, len(regions)-1).Draw(rt, "new region")]}
			}
			in.Rollout = map[string]any{"waves": []any{int64(1), "100%"}}
			apply(fsm.PutIntentType, &fsm.PutIntentRequest{Intent: in, Time: int64(idx)})
			// Two steps, so that released devices differ in since when.
			release := [2][]string{}
			for _, id := range ids {
				if s := rapid.IntRange(-1, 1).Draw(rt, "release"); s >= 0 {
					release[s] = append(release[s], id)
				}
			}
			for _, rel := range release {
				ro, err := f.Read().Rollout(nil, name)
				if err != nil {
					rt.Fatal(err)
				}
				apply(fsm.RolloutStepType, &fsm.RolloutStepRequest{Intent: name, Revision: ro.Revision, Basis: ro.Seq, Time: int64(idx),
					Release: rel, State: fsm.RolloutProgressing, Wave: ro.Wave, Waves: ro.Waves})
			}
		}

		read := f.Read()
		p := NewPlanner()
		m, err := p.Memo(read)
		if err != nil {
			rt.Fatal(err)
		}
		for i, id := range ids {
			want, err := p.Desired(read, id, labels[i])
			if err != nil {
				rt.Fatal(err)
			}
			got, err := m.Desired(id, labels[i])
			if err != nil {
				rt.Fatal(err)
			}
			if diff := cmp.Diff(want, got); diff != "" {
				rt.Fatalf("device %s %v (-Desired +memo):\n%s", id, labels[i], diff)
			}
		}
		// Each intent gives a device one of at most: nothing, its stable
		// revision or the one released in either step, each selecting the
		// device or not.
		if most := pow(7, intents); len(m.states) > most {
			rt.Fatalf("%d states for %d intents, at most %d distinct", len(m.states), intents, most)
		}
	})
}

func pow(b, n int) int {
	out := 1
	for range n {
		out *= b
	}
	return out
}

// TestDesiredMemoSharesAcrossUniqueLabels checks the point of the memo: a
// fleet whose every device carries a label of its own, and which one
// intent's selector splits in two, costs two desired states, not one a
// device.
func TestDesiredMemoSharesAcrossUniqueLabels(t *testing.T) {
	f, _ := fsm.New(fsm.DefaultConfig())
	put(t, f, 1, fileIntent("net", map[string]string{"region": "eu"}, map[string]string{"a": "1"}))
	put(t, f, 2, fileIntent("all", nil, map[string]string{"motd": "hi"}))
	p := NewPlanner()
	m, err := p.Memo(f.Read())
	if err != nil {
		t.Fatal(err)
	}
	var first [2]*DesiredState
	for i := range 100 {
		region := []string{"eu", "us"}[i%2]
		d, err := m.Desired(fmt.Sprint("d", i), map[string]string{"region": region, "store": fmt.Sprint(i)})
		if err != nil {
			t.Fatal(err)
		}
		if first[i%2] == nil {
			first[i%2] = d
		} else if d != first[i%2] {
			t.Fatalf("device %d in %s has a state of its own", i, region)
		}
	}
	if len(m.states) != 2 {
		t.Fatalf("%d states, want 2", len(m.states))
	}
	if diff := cmp.Diff([]string{"all/motd", "net/a"}, keys(first[0].Resources)); diff != "" {
		t.Fatalf("eu keys (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"all/motd"}, keys(first[1].Resources)); diff != "" {
		t.Fatalf("us keys (-want +got):\n%s", diff)
	}
}

package agent

import (
	"errors"
	"fmt"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/meteor-edge/meteor/agent/journal"
	"github.com/meteor-edge/meteor/wire"
)

func TestPlanDelta(t *testing.T) {
	a1 := desired(t, "app", 1, fileRes("a", "/a", "1"))
	a2 := desired(t, "app", 2, fileRes("a", "/a", "2"))
	b1 := desired(t, "app", 1, fileRes("b", "/b", "1"))
	c3 := desired(t, "app", 3, fileRes("c", "/c", "3"))
	inv := func(ds ...journal.DesiredResource) map[string]wire.AppliedResource {
		m := map[string]wire.AppliedResource{}
		for _, d := range ds {
			m[d.Key] = wire.AppliedResource{Key: d.Key, Digest: digestFromHex(d.Digest), Revision: d.Revision}
		}
		return m
	}
	cur := func(ds ...journal.DesiredResource) map[string]journal.DesiredResource {
		m := map[string]journal.DesiredResource{}
		for _, d := range ds {
			m[d.Key] = d
		}
		return m
	}
	up := func(d journal.DesiredResource) wire.Upsert {
		return wire.Upsert{Key: d.Key, Digest: digestFromHex(d.Digest), Revision: d.Revision, Body: d.Body}
	}
	bodies := map[string]journal.AppliedBody{a1.Key: {Digest: a1.Digest, Revision: 1, Body: a1.Body}}
	appliedBody := func(k string) (journal.AppliedBody, bool, error) { b, ok := bodies[k]; return b, ok, nil }

	for _, tc := range []struct {
		name  string
		delta wire.Delta
		cur   map[string]journal.DesiredResource
		inv   map[string]wire.AppliedResource
		want  desiredPatch
	}{{
		name:  "new resource, applied ones unchanged",
		delta: wire.Delta{TargetRevision: 3, Upserts: []wire.Upsert{up(c3)}},
		cur:   cur(a1, b1), inv: inv(a1, b1),
		want: desiredPatch{upserts: []journal.DesiredResource{c3}},
	}, {
		name:  "delete and a key neither applied nor upserted leave",
		delta: wire.Delta{TargetRevision: 3, Deletes: []string{b1.Key}},
		cur:   cur(a1, b1, c3), inv: inv(a1, b1),
		want: desiredPatch{removes: []string{b1.Key, c3.Key}},
	}, {
		// a2 was desired but never applied (failing); the operator rolled
		// back to a1, which is applied, so the server sends nothing for a.
		name:  "rollback to the applied body",
		delta: wire.Delta{TargetRevision: 4},
		cur:   cur(a2), inv: inv(a1),
		want: desiredPatch{upserts: []journal.DesiredResource{a1}},
	}, {
		name:  "body unknown: keep and pull again",
		delta: wire.Delta{TargetRevision: 4},
		cur:   cur(a1), inv: inv(b1),
		want: desiredPatch{removes: []string{a1.Key}, unresolved: []string{b1.Key}},
	}, {
		name:  "no inventory: a patch on the journaled set",
		delta: wire.Delta{TargetRevision: 3, Upserts: []wire.Upsert{up(c3)}, Deletes: []string{a1.Key}},
		cur:   cur(a1, b1),
		want:  desiredPatch{upserts: []journal.DesiredResource{c3}, removes: []string{a1.Key}},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := planDelta(&tc.delta, tc.cur, tc.inv, appliedBody)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got, cmp.AllowUnexported(desiredPatch{})); diff != "" {
				t.Errorf("patch (-want +got):\n%s", diff)
			}
		})
	}

	for name, d := range map[string]wire.Delta{
		"upsert newer than target": {TargetRevision: 2, Upserts: []wire.Upsert{up(c3)}},
		"upsert twice":             {TargetRevision: 3, Upserts: []wire.Upsert{up(c3), up(c3)}},
		"upsert and delete":        {TargetRevision: 3, Upserts: []wire.Upsert{up(c3)}, Deletes: []string{c3.Key}},
	} {
		if _, err := planDelta(&d, cur(), inv(), appliedBody); !errors.Is(err, wire.ErrProtocol) {
			t.Errorf("%s: err = %v, want a protocol error", name, err)
		}
	}
}

func TestFitReport(t *testing.T) {
	long := string(make([]byte, wire.MaxTextLen))
	rep := &wire.Report{Full: true, Status: StateFailed}
	for i := range 400 {
		rep.Resources = append(rep.Resources, wire.ResourceReport{Key: fmt.Sprintf("app/r%d", i), Detail: long, LastError: long})
	}
	if wire.FrameLen(rep) <= wire.DefaultMaxFrameSize {
		t.Fatal("test report fits already")
	}
	if !fitReport(rep) || wire.FrameLen(rep) > wire.DefaultMaxFrameSize {
		t.Fatalf("fitReport: %d bytes", wire.FrameLen(rep))
	}
	if got := len(rep.Resources[0].LastError); got != 1024 {
		t.Errorf("texts cut to %d bytes, want 1024", got)
	}
}

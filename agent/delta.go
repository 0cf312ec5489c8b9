package agent

import (
	"encoding/hex"
	"fmt"
	"maps"
	"slices"

	"github.com/meteor-edge/meteor/agent/journal"
	"github.com/meteor-edge/meteor/wire"
)

// desiredPatch moves the journaled desired set to a Delta's target.
type desiredPatch struct {
	upserts []journal.DesiredResource
	removes []string
	// unresolved lists inventory keys the server left untouched (so they
	// are desired at the inventory's digest) whose body the agent no
	// longer has: the applied state changed between the Pull and the
	// Delta. Their journaled entry is kept and the agent pulls again.
	unresolved []string
}

// planDelta computes the desired set a complete Delta stands for and the
// patch from cur (the journaled desired set) to it.
//
// With inv, the inventory the answered Pull carried, the Delta is read as
// a diff against that inventory (docs/agent.md, "Desired state"): an
// inventory key neither upserted nor deleted is desired at the
// inventory's digest, and a key that is neither in the inventory nor
// upserted is not desired. The body of a key kept that way is the
// journaled desired one if its digest matches, else the body that was
// applied (journal.AppliedBody); so a rollback to what is applied, while a
// newer body was still failing, needs no upsert. Without an inventory
// (nil inv) the Delta is a patch on cur.
func planDelta(d *wire.Delta, cur map[string]journal.DesiredResource, inv map[string]wire.AppliedResource,
	appliedBody func(key string) (journal.AppliedBody, bool, error)) (desiredPatch, error) {
	var p desiredPatch
	want := make(map[string]journal.DesiredResource, len(d.Upserts)+len(inv))
	for _, u := range d.Upserts {
		switch {
		case u.Key == "":
			return p, protocolErrorf("Delta upsert with an empty key")
		case u.Revision > d.TargetRevision:
			return p, protocolErrorf("Delta upsert %q at revision %d is newer than the target %d", u.Key, u.Revision, d.TargetRevision)
		}
		if _, dup := want[u.Key]; dup {
			return p, protocolErrorf("Delta upserts %q twice", u.Key)
		}
		want[u.Key] = journal.DesiredResource{Key: u.Key, Digest: hex.EncodeToString(u.Digest[:]), Revision: u.Revision, Body: u.Body}
	}
	deleted := make(map[string]bool, len(d.Deletes))
	for _, k := range d.Deletes {
		if _, ok := want[k]; ok {
			return p, protocolErrorf("Delta both upserts and deletes %q", k)
		}
		deleted[k] = true
	}
	if inv == nil {
		for k, c := range cur {
			if _, ok := want[k]; !ok && !deleted[k] {
				want[k] = c
			}
		}
	} else {
		for _, k := range slices.Sorted(maps.Keys(inv)) {
			if _, ok := want[k]; ok || deleted[k] {
				continue
			}
			ik := inv[k]
			digest := hex.EncodeToString(ik.Digest[:])
			if c, ok := cur[k]; ok && c.Digest == digest {
				want[k] = c
				continue
			}
			b, ok, err := appliedBody(k)
			if err != nil {
				return p, err
			}
			if ok && b.Digest == digest {
				want[k] = journal.DesiredResource{Key: k, Digest: digest, Revision: min(b.Revision, d.TargetRevision), Body: b.Body}
				continue
			}
			p.unresolved = append(p.unresolved, k)
			if c, ok := cur[k]; ok {
				want[k] = c
			}
		}
	}
	for _, k := range slices.Sorted(maps.Keys(want)) {
		w := want[k]
		if c, ok := cur[k]; !ok || c.Digest != w.Digest || c.Revision != w.Revision {
			p.upserts = append(p.upserts, w)
		}
	}
	for _, k := range slices.Sorted(maps.Keys(cur)) {
		if _, ok := want[k]; !ok {
			p.removes = append(p.removes, k)
		}
	}
	return p, nil
}

// protocolErrorf returns an error matching wire.ErrProtocol, which closes
// the connection with CloseProtocolError.
func protocolErrorf(format string, args ...any) error {
	return fmt.Errorf("%w: %s", wire.ErrProtocol, fmt.Sprintf(format, args...))
}

package scheduler

import (
	"encoding/binary"
	"encoding/hex"
	"slices"
	"strings"
	"sync"

	"github.com/meteor-edge/meteor/fsm"
	"github.com/meteor-edge/meteor/fsm/intent"
	"github.com/meteor-edge/meteor/wire"
)

// Resource is one resource of a device's desired state.
type Resource struct {
	// Key is intent.ResourceKey(Intent, Resource.ID), unique on a device.
	Key    string
	Intent string
	// Revision is the revision of the intent version it comes from.
	Revision uint64
	Resource intent.Resource
	// Body is the canonical encoding of the intent.ResourceBody sent to
	// the agent; Digest is wire.DigestOf(Body), what the device compares
	// to decide whether it holds this version.
	Body   []byte
	Digest wire.Digest
	// DigestHex is Digest in hex, as agents report what they applied
	// (the planner sets it once for every device that shares the
	// resource); empty means not computed.
	DigestHex string
}

// hexDigest is Digest in hex.
func (r *Resource) hexDigest() string {
	if r.DigestHex != "" {
		return r.DigestHex
	}
	return hex.EncodeToString(r.Digest[:])
}

// DesiredState is everything a device should hold, at one cluster revision.
type DesiredState struct {
	// Revision is the cluster revision the state was computed at.
	Revision uint64
	// Resources are sorted by key.
	Resources []*Resource
	// Since maps an intent whose revision was released to the device by a
	// rollout to the cluster revision from which the device's desired
	// state includes it: an agent that acknowledged less has not received
	// it (fsm.Read.Assignment).
	Since map[string]uint64
}

// Fingerprint summarises the state's keys and digests, to tell cheaply
// whether a device's desired state changed between two revisions.
func (d *DesiredState) Fingerprint() wire.Digest {
	f := wire.NewSetFingerprint()
	for _, r := range d.Resources {
		f.Add(r.Key, r.Digest)
	}
	return f.Sum()
}

// Planner computes desired states. It caches encoded resources per intent
// revision, so thousands of devices sharing intents encode each once. It
// is safe for concurrent use.
type Planner struct {
	mu    sync.Mutex
	cache map[cacheKey]*cacheEntry // guarded by mu
}

type cacheKey struct {
	name     string
	revision uint64
}

// NewPlanner returns a planner with an empty cache.
func NewPlanner() *Planner { return &Planner{cache: map[cacheKey]*cacheEntry{}} }

// Desired returns the desired state of a device with the given ID and
// labels: every resource of every intent at the revision the device is
// assigned (fsm.Read.AssignedRevision: its current one, or what its
// rollout released to the device) whose selector at that revision
// matches, as of the read view's revision. Resources are shared with the
// cache: do not modify.
func (p *Planner) Desired(read *fsm.Read, device string, labels map[string]string) (*DesiredState, error) {
	recs, err := read.Intents(nil)
	if err != nil {
		return nil, err
	}
	picks := make([]pick, 0, len(recs))
	for _, rec := range recs {
		rev, since, err := read.Assignment(rec, device)
		if err != nil {
			return nil, err
		}
		pk, err := p.pick(read, rec, rev, since, labels, p.entry)
		if err != nil {
			return nil, err
		}
		picks = append(picks, pk)
	}
	return assemble(read.Revision(), picks), nil
}

// pick is what one intent gives a device's desired state: the revision
// the device is assigned (0: none) and since when (fsm.Read.Assignment),
// and whether that revision's selector matches the device.
type pick struct {
	name       string
	rev, since uint64
	matched    bool
	e          *cacheEntry
}

// pick reads intent rec's part of the desired state of a device with
// labels that is assigned rev since since (fsm.Read.Assignment), the
// encoded revision through entry.
func (p *Planner) pick(read *fsm.Read, rec *fsm.IntentRecord, rev, since uint64, labels map[string]string, entry func(*fsm.Read, *fsm.IntentRecord, uint64) (*cacheEntry, error)) (pick, error) {
	if rev == 0 {
		return pick{}, nil
	}
	e, err := entry(read, rec, rev)
	if err != nil {
		return pick{}, err
	}
	return pick{name: rec.Name, rev: rev, since: since, matched: e.doc.Matches(labels), e: e}, nil
}

// assemble is the desired state at revision that picks make.
func assemble(revision uint64, picks []pick) *DesiredState {
	out := &DesiredState{Revision: revision}
	for _, pk := range picks {
		if pk.rev == 0 {
			continue
		}
		if pk.since != 0 {
			if out.Since == nil {
				out.Since = map[string]uint64{}
			}
			out.Since[pk.name] = pk.since
		}
		if pk.matched {
			out.Resources = append(out.Resources, pk.e.resources...)
		}
	}
	slices.SortFunc(out.Resources, func(a, b *Resource) int { return strings.Compare(a.Key, b.Key) })
	return out
}

// Resources returns the resources intent rec asks of a device with the
// given labels at revision rev: none unless the selector of that revision
// matches. Resources are shared with the cache: do not modify.
func (p *Planner) Resources(read *fsm.Read, rec *fsm.IntentRecord, rev uint64, labels map[string]string) ([]*Resource, error) {
	e, err := p.entry(read, rec, rev)
	if err != nil {
		return nil, err
	}
	if !e.doc.Matches(labels) {
		return nil, nil
	}
	return e.resources, nil
}

// DesiredMemo computes the desired states of many devices from one read,
// as Planner.Desired would, once for each distinct set of picks: the
// devices that have the same revision of each intent assigned, and whose
// labels each of those revisions' selectors matches or not alike, share
// one desired state. A fleet has few such sets, so a pass over every
// device (GET /v1/status, device queries, plans, metrics) computes a
// handful of states and not one a device. The memo reads the intents once
// and serves one goroutine.
type DesiredMemo struct {
	p    *Planner
	read *fsm.Read
	recs []*fsm.IntentRecord
	// assign[i] is fsm.Read.Assigner of recs[i], byName its index.
	assign  []func(string) (uint64, uint64, error)
	byName  map[string]int
	rev     uint64
	entries map[cacheKey]*cacheEntry
	states  map[string]*DesiredState
	picks   []pick
	key     []byte
}

// Memo returns a DesiredMemo of read.
func (p *Planner) Memo(read *fsm.Read) (*DesiredMemo, error) {
	recs, err := read.Intents(nil)
	if err != nil {
		return nil, err
	}
	m := &DesiredMemo{p: p, read: read, recs: recs, rev: read.Revision(), assign: make([]func(string) (uint64, uint64, error), len(recs)),
		byName: make(map[string]int, len(recs)), entries: map[cacheKey]*cacheEntry{}, states: map[string]*DesiredState{}}
	for i, rec := range recs {
		if m.assign[i], err = read.Assigner(rec); err != nil {
			return nil, err
		}
		m.byName[rec.Name] = i
	}
	return m, nil
}

// Assignment is fsm.Read.Assignment of the memo's read, for an intent
// record of that read.
func (m *DesiredMemo) Assignment(rec *fsm.IntentRecord, device string) (rev, since uint64, err error) {
	if i, ok := m.byName[rec.Name]; ok && m.recs[i] == rec {
		return m.assign[i](device)
	}
	return m.read.Assignment(rec, device)
}

// Desired is Planner.Desired of the memo's read. The state returned may
// be another device's as well: do not modify any of it.
func (m *DesiredMemo) Desired(device string, labels map[string]string) (*DesiredState, error) {
	m.picks, m.key = m.picks[:0], m.key[:0]
	for i, rec := range m.recs {
		rev, since, err := m.assign[i](device)
		if err != nil {
			return nil, err
		}
		pk, err := m.p.pick(m.read, rec, rev, since, labels, m.entry)
		if err != nil {
			return nil, err
		}
		m.picks = append(m.picks, pk)
		if pk.rev == 0 {
			continue
		}
		m.key = binary.AppendUvarint(m.key, uint64(i))
		m.key = binary.AppendUvarint(m.key, pk.rev)
		m.key = binary.AppendUvarint(m.key, pk.since)
		if pk.matched {
			m.key = append(m.key, 1)
		} else {
			m.key = append(m.key, 0)
		}
	}
	if d, ok := m.states[string(m.key)]; ok {
		return d, nil
	}
	d := assemble(m.rev, m.picks)
	m.states[string(m.key)] = d
	return d, nil
}

// entry is Planner.entry, kept in the memo.
func (m *DesiredMemo) entry(read *fsm.Read, rec *fsm.IntentRecord, rev uint64) (*cacheEntry, error) {
	k := cacheKey{rec.Name, rev}
	if e, ok := m.entries[k]; ok {
		return e, nil
	}
	e, err := m.p.entry(read, rec, rev)
	if err != nil {
		return nil, err
	}
	m.entries[k] = e
	return e, nil
}

// cacheEntry is one intent revision, encoded.
type cacheEntry struct {
	doc       *intent.Intent
	resources []*Resource
}

// revisionsCached is how many revisions of one intent the planner keeps:
// a rollout has devices on its stable revision, the one it rolls out and
// perhaps one it superseded.
const revisionsCached = 4

func (p *Planner) entry(read *fsm.Read, rec *fsm.IntentRecord, rev uint64) (*cacheEntry, error) {
	k := cacheKey{rec.Name, rev}
	p.mu.Lock()
	e, ok := p.cache[k]
	p.mu.Unlock()
	if ok {
		return e, nil
	}
	doc, err := read.IntentDoc(rec, rev)
	if err != nil {
		return nil, err
	}
	e = &cacheEntry{doc: doc, resources: make([]*Resource, 0, len(doc.Resources))}
	for _, r := range doc.Resources {
		b := intent.ResourceBody{Intent: rec.Name, Resource: r}
		body, err := b.Canonical()
		if err != nil {
			return nil, err
		}
		dg := wire.DigestOf(body)
		e.resources = append(e.resources, &Resource{
			Key: b.Key(), Intent: rec.Name, Revision: rev,
			Resource: r, Body: body, Digest: dg, DigestHex: hex.EncodeToString(dg[:]),
		})
	}
	p.mu.Lock()
	// Keep the newest revisionsCached revisions of the intent; an older
	// one asked for again is encoded again.
	var revs []uint64
	for ck := range p.cache {
		if ck.name == rec.Name {
			revs = append(revs, ck.revision)
		}
	}
	if len(revs) >= revisionsCached {
		slices.Sort(revs)
		for _, r := range revs[:len(revs)-revisionsCached+1] {
			delete(p.cache, cacheKey{rec.Name, r})
		}
	}
	p.cache[k] = e
	p.mu.Unlock()
	return e, nil
}

// Applied is what a device reports holding for one resource.
type Applied struct {
	Key    string
	Digest wire.Digest
}

// Delta is the minimum corrective action for a device: the resources it
// lacks or holds in another version, and the keys it holds that are no
// longer desired. It never replays history: its size follows the
// difference, not the number of revisions the device missed.
type Delta struct {
	Revision uint64
	Upserts  []*Resource
	Deletes  []string
}

// PatchDelta is the Delta that takes a device holding exactly the desired
// state from to the desired state to: the resources of to that from lacks
// or holds with another digest, and the keys of from that to lacks.
func PatchDelta(from, to *DesiredState) Delta {
	out := Delta{Revision: to.Revision}
	i, j := 0, 0
	for i < len(from.Resources) || j < len(to.Resources) {
		switch {
		case j == len(to.Resources) || i < len(from.Resources) && from.Resources[i].Key < to.Resources[j].Key:
			out.Deletes = append(out.Deletes, from.Resources[i].Key)
			i++
		case i == len(from.Resources) || to.Resources[j].Key < from.Resources[i].Key:
			out.Upserts = append(out.Upserts, to.Resources[j])
			j++
		default:
			if from.Resources[i].Digest != to.Resources[j].Digest {
				out.Upserts = append(out.Upserts, to.Resources[j])
			}
			i++
			j++
		}
	}
	return out
}

// ComputeDelta compares a desired state with what the device holds.
func ComputeDelta(d *DesiredState, applied []Applied) Delta {
	have := make(map[string]wire.Digest, len(applied))
	for _, a := range applied {
		have[a.Key] = a.Digest
	}
	out := Delta{Revision: d.Revision}
	for _, r := range d.Resources {
		if dg, ok := have[r.Key]; !ok || dg != r.Digest {
			out.Upserts = append(out.Upserts, r)
		}
		delete(have, r.Key)
	}
	for k := range have {
		out.Deletes = append(out.Deletes, k)
	}
	slices.Sort(out.Deletes)
	return out
}

package scheduler

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/meteor-edge/meteor/fsm"
	"github.com/meteor-edge/meteor/fsm/intent"
)

// Digest is the SHA-256 of a resource's body: what the device compares to
// decide whether it holds the desired version.
type Digest [32]byte

// Resource is one resource of a device's desired state.
type Resource struct {
	// Key is "<intent>/<resource id>", unique on a device.
	Key    string
	Intent string
	// Revision is the revision of the intent version it comes from.
	Revision uint64
	Resource intent.Resource
	// Body is the canonical JSON {"intent": name, "resource": resource}
	// sent to the agent; Digest is its SHA-256.
	Body   []byte
	Digest Digest
}

// Key returns the device-wide key of resource id of intent name.
func Key(intentName, resourceID string) string { return intentName + "/" + resourceID }

// Body is what a resource's wire body decodes to.
type Body struct {
	Intent   string          `json:"intent"`
	Resource intent.Resource `json:"resource"`
}

// DesiredState is everything a device should hold, at one cluster revision.
type DesiredState struct {
	// Revision is the cluster revision the state was computed at.
	Revision uint64
	// Resources are sorted by key.
	Resources []*Resource
}

// Fingerprint summarises the state's keys and digests, to tell cheaply
// whether a device's desired state changed between two revisions.
func (d *DesiredState) Fingerprint() Digest {
	h := sha256.New()
	for _, r := range d.Resources {
		h.Write([]byte(r.Key))
		h.Write(r.Digest[:])
	}
	var out Digest
	h.Sum(out[:0])
	return out
}

// Planner computes desired states. It caches encoded resources per intent
// revision, so thousands of devices sharing intents encode each once. It
// is safe for concurrent use.
type Planner struct {
	mu    sync.Mutex
	cache map[cacheKey][]*Resource // guarded by mu
}

type cacheKey struct {
	name     string
	revision uint64
}

// NewPlanner returns a planner with an empty cache.
func NewPlanner() *Planner { return &Planner{cache: map[cacheKey][]*Resource{}} }

// Desired returns the desired state of a device with the given labels:
// every resource of every current intent whose selector matches, as of the
// read view's revision. Resources are shared with the cache: do not modify.
func (p *Planner) Desired(read *fsm.Read, labels map[string]string) (*DesiredState, error) {
	recs, err := read.IntentsFor(nil, labels)
	if err != nil {
		return nil, err
	}
	out := &DesiredState{Revision: read.Revision()}
	for _, rec := range recs {
		rs, err := p.resources(rec)
		if err != nil {
			return nil, err
		}
		out.Resources = append(out.Resources, rs...)
	}
	slices.SortFunc(out.Resources, func(a, b *Resource) int { return strings.Compare(a.Key, b.Key) })
	return out, nil
}

func (p *Planner) resources(rec *fsm.IntentRecord) ([]*Resource, error) {
	k := cacheKey{rec.Name, rec.Revision}
	p.mu.Lock()
	rs, ok := p.cache[k]
	p.mu.Unlock()
	if ok {
		return rs, nil
	}
	rs = make([]*Resource, 0, len(rec.Intent.Resources))
	for _, r := range rec.Intent.Resources {
		body, err := encodeBody(rec.Name, r)
		if err != nil {
			return nil, fmt.Errorf("intent %q resource %q: %w", rec.Name, r.ID, err)
		}
		rs = append(rs, &Resource{
			Key: Key(rec.Name, r.ID), Intent: rec.Name, Revision: rec.Revision,
			Resource: r, Body: body, Digest: sha256.Sum256(body),
		})
	}
	p.mu.Lock()
	// Drop older revisions of the same intent: they are not asked for again.
	for ck := range p.cache {
		if ck.name == rec.Name && ck.revision < rec.Revision {
			delete(p.cache, ck)
		}
	}
	p.cache[k] = rs
	p.mu.Unlock()
	return rs, nil
}

func encodeBody(name string, r intent.Resource) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(Body{Intent: name, Resource: r}); err != nil {
		return nil, err
	}
	return bytes.TrimRight(buf.Bytes(), "\n"), nil
}

// DecodeBody decodes a resource body as sent to agents.
func DecodeBody(b []byte) (*Body, error) {
	var out Body
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&out); err != nil {
		return nil, fmt.Errorf("decode resource body: %w", err)
	}
	return &out, nil
}

// Applied is what a device reports holding for one resource.
type Applied struct {
	Key    string
	Digest Digest
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

// ComputeDelta compares a desired state with what the device holds.
func ComputeDelta(d *DesiredState, applied []Applied) Delta {
	have := make(map[string]Digest, len(applied))
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

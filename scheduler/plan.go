package scheduler

import (
	"fmt"
	"slices"
	"strings"

	"github.com/meteor-edge/meteor/fsm"
	"github.com/meteor-edge/meteor/fsm/intent"
	"github.com/meteor-edge/meteor/wire"
)

// Plan actions on an intent (IntentPlan.Action) and on a resource
// (ResourceChange.Action).
const (
	PlanCreate    = "create"
	PlanUpdate    = "update"
	PlanUnchanged = "unchanged"

	ChangeAdd    = "add"
	ChangeChange = "change"
	ChangeRemove = "remove"
)

// PlanTarget is one device a plan looks at.
type PlanTarget struct {
	ID string
	// Labels are the labels intents select the device by.
	Labels map[string]string
	// Record is the device's record: what it last reported (Resources).
	Record *fsm.DeviceRecord
	// Desired is its committed desired state (Planner.Desired).
	Desired *DesiredState
	// Released says the device holds a release of the intent (of a
	// rollout in progress): a rollout of a new revision targets it.
	Released bool
}

// PlanInput is what the plan of one intent document is made from.
type PlanInput struct {
	// Doc is the document to apply.
	Doc *intent.Intent
	// Current is the intent's current document; nil for a new intent.
	// Stable is the document devices not released to hold, which a new
	// rollout starts from: the current one, or the stable revision of a
	// rollout in progress (nil: none).
	Current, Stable *intent.Intent
	// Devices are the devices the cluster knows, in any order.
	Devices []PlanTarget
	// Others are the other documents of the same plan, by intent name:
	// their resources replace the committed ones of those intents when
	// conflicts are looked for.
	Others map[string]*intent.Intent
}

// ResourceChange is what applying the document changes of one resource
// on a device. Digests are hex; DigestFrom is what the device reports
// applied, DigestTo the new document's (empty when the resource goes),
// DigestDesired what the committed desired state asks now ("" when that
// is DigestFrom, "none" when it asks for nothing).
type ResourceChange struct {
	Key           string
	Action        string
	DigestFrom    string
	DigestTo      string
	DigestDesired string
}

// DevicePlan is one device whose resources change.
type DevicePlan struct {
	ID string
	// Wave is the index of the wave the device falls in (-1 without
	// waves).
	Wave    int
	Changes []ResourceChange
}

// PlanWave is one wave of the document's rollout.
type PlanWave struct {
	Name    string
	Devices int
}

// Conflict is another intent that manages the same target as a resource
// of the document on some devices the document selects.
type Conflict struct {
	Key, OtherIntent, OtherKey string
	// Target is what both manage (ManagedTargets).
	Target string
	// Devices counts the devices; Sample names the first five by ID.
	Devices int
	Sample  []string
}

// IntentPlan is what applying one document would do.
type IntentPlan struct {
	Action string
	// Rollout is intent.StrategyWaves or intent.StrategyImmediate (no
	// rollout block: every device at once).
	Rollout string
	// Targeted counts the devices a rollout of the document targets: those
	// the document selects, those the stable document selects, and those
	// holding a release.
	Targeted int
	// Devices are the targeted devices whose resources change, by ID.
	Devices   []DevicePlan
	Waves     []PlanWave
	Conflicts []Conflict
}

// Plan compares a document with the committed state, changing nothing:
// which devices a rollout of it targets, the wave each falls in (Assign,
// as the rollout will), which of their resources change and how, and
// which other intents manage the same targets on them. A resource
// changes on a device when the document's digest differs from what the
// device reports applied; one the device applied that the document no
// longer asks of it is removed. An unchanged document (equal to the
// current one) changes nothing: applying it makes no revision.
func Plan(in PlanInput) (*IntentPlan, error) {
	doc := in.Doc
	name := doc.Name
	out := &IntentPlan{Action: PlanUpdate, Rollout: intent.StrategyWaves}
	switch {
	case in.Current == nil:
		out.Action = PlanCreate
	case sameDocument(in.Current, doc):
		out.Action = PlanUnchanged
	}
	spec, err := doc.RolloutSpec()
	if err != nil {
		return nil, err
	}
	if spec == nil || spec.Strategy == intent.StrategyImmediate {
		out.Rollout, spec = intent.StrategyImmediate, nil
	}
	devices := slices.Clone(in.Devices)
	slices.SortFunc(devices, func(a, b PlanTarget) int { return strings.Compare(a.ID, b.ID) })
	var targets []PlanTarget
	for _, d := range devices {
		if doc.Matches(d.Labels) || (in.Stable != nil && in.Stable.Matches(d.Labels)) || d.Released {
			targets = append(targets, d)
		}
	}
	out.Targeted = len(targets)
	if out.Action == PlanUnchanged {
		return out, nil
	}
	waves := make([]int, len(targets))
	if spec != nil {
		ts := make([]Target, len(targets))
		for i, t := range targets {
			ts[i] = Target{ID: t.ID, Labels: t.Labels}
		}
		waves = Assign(name, spec, ts)
		out.Waves = make([]PlanWave, max(len(spec.Waves), 1))
		for w := range out.Waves {
			out.Waves[w].Name = waveName(spec, w)
		}
		for _, w := range waves {
			out.Waves[w].Devices++
		}
	} else {
		for i := range waves {
			waves[i] = -1
		}
	}
	want, err := EncodeResources(name, doc)
	if err != nil {
		return nil, err
	}
	others := map[string][]*Resource{}
	for other, od := range in.Others {
		if other == name {
			continue
		}
		if others[other], err = EncodeResources(other, od); err != nil {
			return nil, err
		}
	}
	conflicts := map[conflictKey]*Conflict{}
	for i, t := range targets {
		var asks []*Resource
		if doc.Matches(t.Labels) {
			asks = want
			noteConflicts(conflicts, t, asks, othersOn(t, name, in.Others, others))
		}
		if ch := changes(name, asks, t); len(ch) > 0 {
			out.Devices = append(out.Devices, DevicePlan{ID: t.ID, Wave: waves[i], Changes: ch})
		}
	}
	// With a rollout, in the order it releases them: wave by wave, and
	// within a wave in release order; without one, by ID.
	slices.SortStableFunc(out.Devices, func(a, b DevicePlan) int {
		if spec == nil {
			return 0
		}
		if a.Wave != b.Wave {
			return a.Wave - b.Wave
		}
		return releaseCmp(name, a.ID, b.ID)
	})
	for _, c := range conflicts {
		out.Conflicts = append(out.Conflicts, *c)
	}
	slices.SortFunc(out.Conflicts, func(a, b Conflict) int {
		return strings.Compare(a.Key+"\x00"+a.OtherKey+"\x00"+a.Target, b.Key+"\x00"+b.OtherKey+"\x00"+b.Target)
	})
	return out, nil
}

// changes compares what intent name would ask of a device (asks) with
// what the device reports applied.
func changes(name string, asks []*Resource, t PlanTarget) []ResourceChange {
	applied := map[string]string{}
	if t.Record != nil {
		for _, r := range t.Record.Resources {
			if n, _, ok := intent.SplitResourceKey(r.Key); ok && n == name && r.AppliedDigest != "" {
				applied[r.Key] = r.AppliedDigest
			}
		}
	}
	desired := map[string]string{}
	if t.Desired != nil {
		for _, r := range t.Desired.Resources {
			if r.Intent == name {
				desired[r.Key] = r.hexDigest()
			}
		}
	}
	desiredNote := func(key, from string) string {
		switch d, ok := desired[key]; {
		case !ok:
			return "none"
		case d == from:
			return ""
		default:
			return d
		}
	}
	var out []ResourceChange
	for _, r := range asks {
		to := r.hexDigest()
		from, ok := applied[r.Key]
		delete(applied, r.Key)
		switch {
		case !ok:
			out = append(out, ResourceChange{Key: r.Key, Action: ChangeAdd, DigestTo: to, DigestDesired: desiredNote(r.Key, "")})
		case from != to:
			out = append(out, ResourceChange{Key: r.Key, Action: ChangeChange, DigestFrom: from, DigestTo: to, DigestDesired: desiredNote(r.Key, from)})
		}
	}
	for key, from := range applied {
		out = append(out, ResourceChange{Key: key, Action: ChangeRemove, DigestFrom: from, DigestDesired: desiredNote(key, from)})
	}
	slices.SortFunc(out, func(a, b ResourceChange) int { return strings.Compare(a.Key, b.Key) })
	return out
}

// othersOn returns the resources intents other than name ask of a device:
// the committed ones, or those of the plan's other documents for the
// intents the plan names.
func othersOn(t PlanTarget, name string, docs map[string]*intent.Intent, encoded map[string][]*Resource) []*Resource {
	var out []*Resource
	if t.Desired != nil {
		for _, r := range t.Desired.Resources {
			if _, replaced := docs[r.Intent]; r.Intent != name && !replaced {
				out = append(out, r)
			}
		}
	}
	for other, od := range docs {
		if other != name && od.Matches(t.Labels) {
			out = append(out, encoded[other]...)
		}
	}
	return out
}

type conflictKey struct{ key, otherKey, target string }

func noteConflicts(acc map[conflictKey]*Conflict, t PlanTarget, asks, others []*Resource) {
	for _, r := range asks {
		for _, mine := range ManagedTargets(r.Resource) {
			for _, o := range others {
				if !slices.Contains(ManagedTargets(o.Resource), mine) {
					continue
				}
				k := conflictKey{r.Key, o.Key, mine}
				c := acc[k]
				if c == nil {
					c = &Conflict{Key: r.Key, OtherIntent: o.Intent, OtherKey: o.Key, Target: mine}
					acc[k] = c
				}
				c.Devices++
				if len(c.Sample) < 5 {
					c.Sample = append(c.Sample, t.ID)
				}
			}
		}
	}
}

// ManagedTargets returns what a resource manages on a device that a
// resource of another intent could manage too: "file PATH" for a file's
// path and for a certificate's certPath and keyPath (both are files), and
// "sim ID" for a simulated resource, which stands for the device state of
// that name. An exec resource changes whatever its commands change, which
// cannot be told from its spec: it has none.
func ManagedTargets(r intent.Resource) []string {
	var out []string
	file := func(key string) {
		if p, ok := r.Spec[key].(string); ok && p != "" {
			out = append(out, "file "+p)
		}
	}
	switch r.Type {
	case intent.TypeFile:
		file("path")
	case intent.TypeCertificate:
		file("certPath")
		file("keyPath")
	case intent.TypeSim:
		out = append(out, "sim "+r.ID)
	}
	return out
}

// EncodeResources returns the resources of a document as the planner
// sends them to devices: keys, canonical bodies and digests.
func EncodeResources(name string, doc *intent.Intent) ([]*Resource, error) {
	out := make([]*Resource, 0, len(doc.Resources))
	for _, r := range doc.Resources {
		b := intent.ResourceBody{Intent: name, Resource: r}
		body, err := b.Canonical()
		if err != nil {
			return nil, fmt.Errorf("encode %s: %w", b.Key(), err)
		}
		out = append(out, &Resource{Key: b.Key(), Intent: name, Resource: r, Body: body, Digest: wire.DigestOf(body)})
	}
	return out, nil
}

// sameDocument reports whether two documents are the same intent: equal
// canonical encodings, as the state machine compares them.
func sameDocument(a, b *intent.Intent) bool {
	ca, err := a.Canonical()
	if err != nil {
		return false
	}
	cb, err := b.Canonical()
	return err == nil && string(ca) == string(cb)
}

package fsm

// Interner shares one copy of the strings that the records of a fleet
// repeat: every device under an intent reports the same resource keys,
// the same applied digests once it has converged, the same states and
// mostly the same reasons, and each decoded report and transition brings
// its own copy of each (the JSON decoder shares only among the last 256
// strings it saw, which a fleet's device IDs push out). Kept in the
// replica's record, the owner's copy and the timeline, those copies came
// to 2 KiB of an idle session's heap at 10,000 sessions
// (docs/performance.md, "Agent sessions").
//
// It remembers what it saw in two generations of at most Limit strings
// each: a string is found in either, and one found in the older is
// carried into the newer, so what a fleet keeps repeating stays while
// what it stopped saying (digests of older contents) ages out with the
// older generation. Interning changes no value, only where the bytes are
// stored, so replicas need not agree on what they intern.
//
// An Interner is not safe for concurrent use; its owner's lock guards it.
type Interner struct {
	strs generations[string, string]
	// Small maps are shared whole (Map), in generations of their own:
	// those of one entry by the entry, the others by MapKey.
	one  generations[[2]string, map[string]string]
	many generations[string, map[string]string]
	// Limit bounds each generation; 0 means DefaultInternLimit.
	Limit int
}

// generations keeps values by key in two generations of at most a limit
// each: a key is found in either, and one found in the older is carried
// into the newer; once the newer is full it becomes the older, and the
// older is let go.
type generations[K comparable, V any] struct{ cur, prev map[K]V }

// find returns the value kept for key, if any.
func (g *generations[K, V]) find(key K, limit int) (V, bool) {
	if v, ok := g.cur[key]; ok {
		return v, true
	}
	v, ok := g.prev[key]
	if ok {
		g.keep(key, v, limit)
	}
	return v, ok
}

// keep keeps v for key in the newer generation.
func (g *generations[K, V]) keep(key K, v V, limit int) {
	if g.cur == nil || len(g.cur) >= limit {
		g.prev, g.cur = g.cur, make(map[K]V, min(limit, 1024))
	}
	g.cur[key] = v
}

// maxSharedMap is the most entries a map Map shares whole may have.
const maxSharedMap = 4

// DefaultInternLimit is the size of an Interner's generation unless its
// Limit says otherwise: enough for the keys, digests and reasons of a few
// thousand resources.
const DefaultInternLimit = 16384

// String returns s, or an equal string the Interner already holds.
func (in *Interner) String(s string) string {
	if s == "" {
		return s
	}
	if v, ok := in.strs.find(s, in.limit()); ok {
		return v
	}
	in.strs.keep(s, s, in.limit())
	return s
}

// Resources interns the strings of rs in place.
func (in *Interner) Resources(rs []ResourceStatus) {
	for i := range rs {
		r := &rs[i]
		r.Key = in.String(r.Key)
		r.AppliedDigest = in.String(r.AppliedDigest)
		r.Effective = in.String(r.Effective)
		r.State = in.String(r.State)
		r.Detail = in.String(r.Detail)
		r.LastError = in.String(r.LastError)
		if h := r.Hold; h != nil {
			h.Kind, h.Holder, h.Note = in.String(h.Kind), in.String(h.Holder), in.String(h.Note)
		}
	}
}

// Map returns m with its keys and values interned: m itself when it is
// empty, else a copy (a map's keys cannot be replaced in place). A map of
// at most maxSharedMap entries is shared whole: Map returns the copy it
// returned for an equal map lately, if any. A change's transitions name
// the same resource states on every device (a timeline entry's map, about
// 320 bytes, is most of what the entry costs beside the index: "What a
// device's record costs a server" in docs/performance.md), and a stored
// record is never changed, so what Map returns must not be either.
func (in *Interner) Map(m map[string]string) map[string]string {
	switch {
	case len(m) == 0:
		return m
	case len(m) == 1:
		var key [2]string
		for k, v := range m {
			key = [2]string{k, v}
		}
		return shareMap(in, &in.one, key, m)
	case len(m) <= maxSharedMap:
		return shareMap(in, &in.many, MapKey(m), m)
	}
	return in.copyMap(m)
}

// shareMap returns the map g keeps for key, or keeps and returns an
// interned copy of m.
func shareMap[K comparable](in *Interner, g *generations[K, map[string]string], key K, m map[string]string) map[string]string {
	if v, ok := g.find(key, in.limit()); ok {
		return v
	}
	out := in.copyMap(m)
	g.keep(key, out, in.limit())
	return out
}

// copyMap returns a copy of m with its keys and values interned.
func (in *Interner) copyMap(m map[string]string) map[string]string {
	out := make(map[string]string, len(m))
	for k, v := range m {
		out[in.String(k)] = in.String(v)
	}
	return out
}

func (in *Interner) limit() int {
	if in.Limit <= 0 {
		return DefaultInternLimit
	}
	return in.Limit
}

// transition interns the strings of tr that its device's record and
// timeline keep.
func (in *Interner) transition(tr *StatusTransition) {
	in.Resources(tr.Resources)
	tr.Status, tr.Reason = in.String(tr.Status), in.String(tr.Reason)
	tr.AgentStatus, tr.BlockedReason = in.String(tr.AgentStatus), in.String(tr.BlockedReason)
	tr.ResourceStates = in.Map(tr.ResourceStates)
}

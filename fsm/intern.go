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
	cur, prev map[string]string
	// Small maps are shared whole (Map), in generations of their own:
	// those of one entry by the entry, the others by a key of their
	// sorted entries.
	one, prevOne   map[[2]string]map[string]string
	many, prevMany map[string]map[string]string
	// Limit bounds each generation; 0 means DefaultInternLimit.
	Limit int
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
	if v, ok := in.cur[s]; ok {
		return v
	}
	if v, ok := in.prev[s]; ok {
		in.add(v)
		return v
	}
	in.add(s)
	return s
}

func (in *Interner) add(s string) {
	limit := in.limit()
	if in.cur == nil || len(in.cur) >= limit {
		in.prev, in.cur = in.cur, make(map[string]string, min(limit, 1024))
	}
	in.cur[s] = s
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
		if v, ok := in.one[key]; ok {
			return v
		}
		out, ok := in.prevOne[key]
		if !ok {
			out = in.copyMap(m)
		}
		if in.one == nil || len(in.one) >= in.limit() {
			in.prevOne, in.one = in.one, make(map[[2]string]map[string]string)
		}
		in.one[key] = out
		return out
	case len(m) <= maxSharedMap:
		key := MapKey(m)
		if v, ok := in.many[key]; ok {
			return v
		}
		out, ok := in.prevMany[key]
		if !ok {
			out = in.copyMap(m)
		}
		if in.many == nil || len(in.many) >= in.limit() {
			in.prevMany, in.many = in.many, make(map[string]map[string]string)
		}
		in.many[key] = out
		return out
	}
	return in.copyMap(m)
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

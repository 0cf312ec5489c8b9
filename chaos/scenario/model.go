package scenario

import (
	"fmt"
	"sort"

	"github.com/anishathalye/porcupine"
)

// Input is one operation on one intent, as issued by a client.
type Input struct {
	Name string `json:"name"`
	// Op is OpPut or OpGet.
	Op string `json:"op"`
	// Value is what a put writes (unique per put).
	Value string `json:"value,omitempty"`
	// IfMatch, when set, makes the put conditional on the intent's
	// revision (0: only if the intent does not exist).
	IfMatch *uint64 `json:"if_match,omitempty"`
}

// Output is what an operation answered.
type Output struct {
	// Unknown: the operation may or may not have taken effect (its return
	// time is then the end of the history).
	Unknown bool `json:"unknown,omitempty"`
	// Conflict: a conditional put was refused (409); Current is the
	// revision the server reported, if any.
	Conflict bool    `json:"conflict,omitempty"`
	Current  *uint64 `json:"current,omitempty"`
	// Found, Revision and Value: the intent a get read (Found false: it did
	// not exist), or the revision a put was given.
	Found    bool   `json:"found,omitempty"`
	Revision uint64 `json:"revision,omitempty"`
	Value    string `json:"value,omitempty"`
}

// Operation kinds.
const (
	OpPut = "put"
	OpGet = "get"
)

// intentState is the model's state of one intent: the last written value
// and its revision. A put whose outcome was unknown leaves the revision
// unknown, bounded below by Min, until an observation (a get, a matching
// If-Match, a conflict's current revision) pins it.
type intentState struct {
	Exists bool
	Value  string
	Rev    uint64 // valid when Known
	Known  bool
	Min    uint64 // when !Known: the revision is at least Min
}

// Model is the sequential specification of one intent, partitioned by
// name. Revisions are cluster-wide, so a put's revision is only required to
// be greater than the intent's previous one, not one more.
var Model = porcupine.Model{
	Partition: func(history []porcupine.Operation) [][]porcupine.Operation {
		byName := map[string][]porcupine.Operation{}
		for _, op := range history {
			n := op.Input.(Input).Name
			byName[n] = append(byName[n], op)
		}
		names := make([]string, 0, len(byName))
		for n := range byName {
			names = append(names, n)
		}
		sort.Strings(names)
		out := make([][]porcupine.Operation, 0, len(names))
		for _, n := range names {
			out = append(out, byName[n])
		}
		return out
	},
	Init: func() any { return intentState{Known: true} },
	Step: func(state, input, output any) (bool, any) {
		return step(state.(intentState), input.(Input), output.(Output))
	},
	DescribeOperation: func(input, output any) string { return describe(input.(Input), output.(Output)) },
	DescribeState: func(state any) string {
		s := state.(intentState)
		switch {
		case !s.Exists:
			return "absent"
		case s.Known:
			return fmt.Sprintf("rev %d = %s", s.Rev, s.Value)
		default:
			return fmt.Sprintf("rev >= %d = %s", s.Min, s.Value)
		}
	},
}

// revIs reports whether the state's revision can be r, and the state with
// the revision pinned to r.
func (s intentState) revIs(r uint64) (bool, intentState) {
	if s.Known {
		return s.Rev == r, s
	}
	if r < s.Min {
		return false, s
	}
	s.Known, s.Rev, s.Min = true, r, 0
	return true, s
}

// lowest is the smallest revision the state can have.
func (s intentState) lowest() uint64 {
	if s.Known {
		return s.Rev
	}
	return s.Min
}

func step(s intentState, in Input, out Output) (bool, intentState) {
	switch in.Op {
	case OpGet:
		if !out.Found {
			return !s.Exists, s
		}
		if !s.Exists || out.Value != s.Value {
			return false, s
		}
		return s.revIs(out.Revision)
	case OpPut:
		if out.Unknown {
			// Its return time is after every other operation, so the
			// checker can always linearize it last, where it has no
			// visible effect: that is the "did not happen" case. Here it
			// happened. It must never be refused.
			if in.IfMatch != nil {
				ok, pinned := s.revIs(*in.IfMatch)
				if !ok {
					// Refused by If-Match: no effect.
					return true, s
				}
				s = pinned
			}
			return true, intentState{Exists: true, Value: in.Value, Min: s.lowest() + 1}
		}
		if out.Conflict {
			if in.IfMatch == nil {
				return false, s
			}
			if out.Current != nil {
				ok, pinned := s.revIs(*out.Current)
				if !ok {
					return false, s
				}
				s = pinned
			}
			if s.Known && s.Rev == *in.IfMatch {
				return false, s
			}
			return true, s
		}
		if in.IfMatch != nil {
			ok, pinned := s.revIs(*in.IfMatch)
			if !ok {
				return false, s
			}
			s = pinned
		}
		if out.Revision <= s.lowest() {
			return false, s
		}
		return true, intentState{Exists: true, Value: in.Value, Rev: out.Revision, Known: true}
	}
	return false, s
}

func describe(in Input, out Output) string {
	var call string
	switch in.Op {
	case OpPut:
		call = fmt.Sprintf("put(%s", in.Value)
		if in.IfMatch != nil {
			call += fmt.Sprintf(", if-match %d", *in.IfMatch)
		}
		call += ")"
	default:
		call = "get()"
	}
	switch {
	case out.Unknown:
		return call + " -> ?"
	case out.Conflict:
		if out.Current != nil {
			return fmt.Sprintf("%s -> conflict (current %d)", call, *out.Current)
		}
		return call + " -> conflict"
	case in.Op == OpGet && !out.Found:
		return call + " -> absent"
	case in.Op == OpGet:
		return fmt.Sprintf("%s -> rev %d = %s", call, out.Revision, out.Value)
	default:
		return fmt.Sprintf("%s -> rev %d", call, out.Revision)
	}
}

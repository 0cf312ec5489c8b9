package agent

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/meteor-edge/meteor/agent/journal"
	"github.com/meteor-edge/meteor/fsm/intent"
)

// errBadBody marks a desired resource the agent cannot decode. It is
// terminal: the same body fails the same way every time.
var errBadBody = errors.New("undecodable resource body")

// item is one desired resource, decoded for the planner.
type item struct {
	key      string
	digest   string // hex SHA-256 of body
	revision uint64
	res      intent.Resource
	// requires are the keys of the resources this one requires, sorted;
	// pre its preconditions on the device (locks, labels, disk space).
	requires []string
	pre      []intent.Requirement
	// err is set when the body cannot be used; the resource is then
	// failed without any step.
	err error
}

// decodeItem decodes a journaled desired resource.
func decodeItem(d journal.DesiredResource) *item {
	it := &item{key: d.Key, digest: d.Digest, revision: d.Revision}
	b, err := intent.DecodeResourceBody(d.Body)
	if err != nil {
		it.err = fmt.Errorf("resource %q: %w: %v", d.Key, errBadBody, err)
		return it
	}
	name, id, ok := intent.SplitResourceKey(d.Key)
	switch {
	case !ok:
		it.err = fmt.Errorf("resource key %q: %w: want <intent>/<resource id>", d.Key, errBadBody)
	case b.Intent != name || b.Resource.ID != id:
		it.err = fmt.Errorf("resource %q: %w: body is intent %q resource %q", d.Key, errBadBody, b.Intent, b.Resource.ID)
	}
	it.res = b.Resource
	for _, r := range b.Resource.Requires {
		q, err := intent.ParseRequirement(r)
		switch {
		case err != nil:
			it.err = fmt.Errorf("resource %q: %w: %v", d.Key, errBadBody, err)
		case q.Kind == intent.RequireResource:
			it.requires = append(it.requires, intent.ResourceKey(name, r))
		default:
			it.pre = append(it.pre, q)
		}
	}
	slices.Sort(it.requires)
	it.requires = slices.Compact(it.requires)
	return it
}

// order returns the items so that every resource comes after the ones it
// requires, visiting keys in sorted order so the plan is deterministic.
// Items on a requirement cycle (which intent validation rules out, but
// the agent does not trust) are returned too, in cycles, with an entry
// naming the cycle.
func order(items map[string]*item) (ordered []*item, cycles map[string]string) {
	keys := make([]string, 0, len(items))
	for k := range items {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	const (
		unvisited = iota
		visiting
		done
	)
	state := make(map[string]int, len(items))
	cycles = map[string]string{}
	var stack []string
	var visit func(k string)
	visit = func(k string) {
		it, ok := items[k]
		if !ok {
			return // a missing requirement: the planner blocks on it
		}
		switch state[k] {
		case done:
			return
		case visiting:
			i := slices.Index(stack, k)
			cycle := append(slices.Clone(stack[i:]), k)
			for _, c := range stack[i:] {
				cycles[c] = "requirement cycle " + strings.Join(cycle, " -> ")
			}
			return
		}
		state[k] = visiting
		stack = append(stack, k)
		for _, r := range it.requires {
			visit(r)
		}
		stack = stack[:len(stack)-1]
		state[k] = done
		ordered = append(ordered, it)
	}
	for _, k := range keys {
		visit(k)
	}
	return ordered, cycles
}

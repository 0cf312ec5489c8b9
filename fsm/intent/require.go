package intent

import (
	"fmt"
	pathpkg "path"
	"strconv"
	"strings"
)

// A resource's requires entries name what must hold before the agent
// takes a step for it. Most name a resource of the same intent (its ID),
// which must be applied and effective first. An entry with a prefix is a
// precondition on the device:
//
//	lock:NAME        no workload holds the lock NAME (meteor agent lock,
//	                 or a lock file in the agent's lock directory)
//	label:KEY=VALUE  the device's control-plane label KEY is VALUE
//	disk:PATH>=SIZE  the file system holding PATH has SIZE free (bytes,
//	                 or with a unit: 500MB, 2GiB)
//
// A step whose preconditions do not hold is blocked, saying which and
// what the device has, while the rest of the plan goes on.

// Requirement kinds.
const (
	RequireResource = "resource"
	RequireLock     = "lock"
	RequireLabel    = "label"
	RequireDisk     = "disk"
)

// Requirement is one requires entry, parsed.
type Requirement struct {
	Kind string
	// Name is the resource ID, the lock's name, the label's key or the
	// path, by Kind.
	Name string
	// Value is a label requirement's value; Bytes a disk requirement's
	// free space.
	Value string
	Bytes uint64
}

// String writes the requirement as it is written in requires.
func (q Requirement) String() string {
	switch q.Kind {
	case RequireLock:
		return "lock:" + q.Name
	case RequireLabel:
		return "label:" + q.Name + "=" + q.Value
	case RequireDisk:
		return "disk:" + q.Name + ">=" + FormatBytes(q.Bytes)
	}
	return q.Name
}

// ParseRequirement parses a requires entry.
func ParseRequirement(s string) (Requirement, error) {
	kind, rest, ok := strings.Cut(s, ":")
	if !ok {
		return Requirement{Kind: RequireResource, Name: s}, nil
	}
	switch kind {
	case RequireLock:
		if !isLabel(rest, 128, isLabelChar) {
			return Requirement{}, fmt.Errorf("lock:%s: a lock name is 1-128 of A-Z, a-z, 0-9, '.', '_' and '-', starting and ending with a letter or digit", rest)
		}
		return Requirement{Kind: RequireLock, Name: rest}, nil
	case RequireLabel:
		k, v, ok := strings.Cut(rest, "=")
		if !ok {
			return Requirement{}, fmt.Errorf("label:%s: want label:KEY=VALUE", rest)
		}
		if err := CheckLabel(k, v); err != nil || v == "*" || v == "" {
			return Requirement{}, fmt.Errorf("label:%s: want label:KEY=VALUE with a label key and a value (not * or empty)", rest)
		}
		return Requirement{Kind: RequireLabel, Name: k, Value: v}, nil
	case RequireDisk:
		p, size, ok := strings.Cut(rest, ">=")
		if !ok || p == "" || p[0] != '/' || pathpkg.Clean(p) != p {
			return Requirement{}, fmt.Errorf("disk:%s: want disk:/ABSOLUTE/PATH>=SIZE, such as disk:/var>=2GiB", rest)
		}
		n, err := ParseBytes(size)
		if err != nil {
			return Requirement{}, fmt.Errorf("disk:%s: %v", rest, err)
		}
		return Requirement{Kind: RequireDisk, Name: p, Bytes: n}, nil
	}
	return Requirement{}, fmt.Errorf("%s: unknown requirement %q; a requirement is a resource ID, lock:NAME, label:KEY=VALUE or disk:PATH>=SIZE", s, kind)
}

var byteUnits = []struct {
	suffix string
	n      uint64
}{
	{"TiB", 1 << 40}, {"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10},
	{"TB", 1e12}, {"GB", 1e9}, {"MB", 1e6}, {"KB", 1e3}, {"B", 1},
}

// ParseBytes reads a size: a whole number of bytes, or one with a unit
// (KB, MB, GB, TB of 1000; KiB, MiB, GiB, TiB of 1024; B).
func ParseBytes(s string) (uint64, error) {
	mult := uint64(1)
	for _, u := range byteUnits {
		if strings.HasSuffix(s, u.suffix) {
			s, mult = strings.TrimSuffix(s, u.suffix), u.n
			break
		}
	}
	n, err := strconv.ParseUint(s, 10, 64)
	if err != nil || n == 0 || n > (1<<63)/mult {
		return 0, fmt.Errorf("size %q: want a positive whole number with a unit such as 500MB or 2GiB", s)
	}
	return n * mult, nil
}

// FormatBytes writes a size with the largest binary unit that divides it
// (2GiB), else in bytes.
func FormatBytes(n uint64) string {
	for _, u := range byteUnits[:4] {
		if n >= u.n && n%u.n == 0 {
			return strconv.FormatUint(n/u.n, 10) + u.suffix
		}
	}
	for _, u := range byteUnits[4:8] {
		if n >= u.n && n%u.n == 0 {
			return strconv.FormatUint(n/u.n, 10) + u.suffix
		}
	}
	return strconv.FormatUint(n, 10) + "B"
}

package intent

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// Class is a reconcile class: the cadence and risk profile of one kind of
// state. Resources name their class (Resource.Class); the servers judge a
// device's silence and progress by the strictest class among its
// resources, and push the classes to agents (protocol 1.4), which
// reconcile each resource on its class's cadence.
//
// Classes are replicated configuration (meteor class apply): the
// cluster's classes are the built-in set (BuiltinClasses) with the
// committed ones in place of the built-in of the same name.
type Class struct {
	Name string `json:"name"`
	// Description says what the class is for, for people.
	Description string `json:"description,omitempty"`
	// PullInterval is how often an agent pulls its desired state without
	// a push; an agent pulls at the shortest interval among the classes of
	// its resources. A push brings changes at once: the pull is the check
	// that none was missed.
	PullInterval time.Duration `json:"pull_interval"`
	// ProbeInterval is how often an agent re-reads a resource of the
	// class (drift) and probes it (effective state).
	ProbeInterval time.Duration `json:"probe_interval"`
	// ReportInterval bounds the time between two full reports of an agent
	// (the shortest among its classes); reports in between carry what
	// changed, and an idle device sends none.
	ReportInterval time.Duration `json:"report_interval"`
	// RetryBase and RetryMax bound the exponential backoff between failed
	// attempts to apply a resource of the class (RetryDelay), and
	// RetryJitter, in [0, 1], the fraction of each wait an agent draws at
	// random (a wait d becomes one in [d*(1-jitter), d]), so that devices
	// failing together do not retry in step.
	RetryBase   time.Duration `json:"retry_base"`
	RetryMax    time.Duration `json:"retry_max"`
	RetryJitter float64       `json:"retry_jitter,omitempty"`
	// UnreachableAfter is how long a disconnected device may stay silent
	// before the silence is a comms gap (status unreachable).
	UnreachableAfter time.Duration `json:"unreachable_after"`
	// ProgressDeadline is how long a connected device may go without
	// progress while it has work left before it is stuck.
	ProgressDeadline time.Duration `json:"progress_deadline"`
}

// Bounds of class cadences. Below the floors an agent would keep a
// device's CPU and link busy; above the ceilings a class stops meaning
// anything.
const (
	MinClassInterval  = time.Second
	MaxClassInterval  = 24 * time.Hour
	MaxReportInterval = 7 * 24 * time.Hour
	MaxClasses        = 256
)

// RetryDelay is the wait after the attempts-th failed attempt, before
// jitter: RetryBase, doubled for every attempt after the first, capped at
// RetryMax.
func (c Class) RetryDelay(attempts int) time.Duration {
	d := c.RetryBase
	for i := 1; i < attempts && d < c.RetryMax; i++ {
		d *= 2
	}
	return min(d, c.RetryMax)
}

// Validate reports what is wrong with the class, naming every field:
// every duration positive and within its ceiling. Classes an operator
// writes are held to more (ValidateWritten).
func (c Class) Validate() error { return c.validate(time.Nanosecond) }

// ValidateWritten is Validate with the floor an operator's class must
// respect: no cadence or retry below MinClassInterval, which would keep a
// device's CPU and link busy. A server's built-in set (in tests, say) may
// go below it.
func (c Class) ValidateWritten() error { return c.validate(MinClassInterval) }

func (c Class) validate(floor time.Duration) error {
	var errs []string
	if msg := dnsLabelMsg(c.Name); msg != "" {
		errs = append(errs, "name "+msg)
	}
	for _, f := range []struct {
		what   string
		d, max time.Duration
	}{
		{"pullInterval", c.PullInterval, MaxClassInterval},
		{"probeInterval", c.ProbeInterval, MaxClassInterval},
		{"reportInterval", c.ReportInterval, MaxReportInterval},
		{"retry.base", c.RetryBase, MaxClassInterval},
		{"retry.max", c.RetryMax, MaxClassInterval},
		{"unreachableAfter", c.UnreachableAfter, MaxReportInterval},
		{"progressDeadline", c.ProgressDeadline, MaxReportInterval},
	} {
		switch {
		case f.d < floor:
			errs = append(errs, fmt.Sprintf("%s must be at least %v, got %v", f.what, floor, f.d))
		case f.d > f.max:
			errs = append(errs, fmt.Sprintf("%s must be at most %v, got %v", f.what, f.max, f.d))
		}
	}
	if c.RetryBase > c.RetryMax {
		errs = append(errs, fmt.Sprintf("retry.base %v above retry.max %v", c.RetryBase, c.RetryMax))
	}
	if !(c.RetryJitter >= 0 && c.RetryJitter <= 1) {
		errs = append(errs, fmt.Sprintf("retry.jitter must be in [0, 1], got %v", c.RetryJitter))
	}
	if len(c.Description) > 1024 {
		errs = append(errs, fmt.Sprintf("description must be at most 1024 bytes, got %d", len(c.Description)))
	}
	if len(errs) > 0 {
		return fmt.Errorf("class %q: %s", c.Name, strings.Join(errs, "; "))
	}
	return nil
}

// BuiltinClasses returns the classes every cluster has until an operator
// replaces them:
//
//	class           pull  probe  report  retry        unreachable  progress
//	default         30m   1m     6h      1s..5m       5m           15m
//	config          30m   1m     6h      1s..5m       5m           5m
//	network-policy  10m   15s    1h      1s..30s      2m           5m
//	logging         30m   1m     6h      5s..5m       10m          15m
//	certificate     30m   5m     6h      30s..1h      15m          30m
//	package         1h    10m    6h      1m..1h       30m          1h
//
// A pull is the check that no push was missed (servers push every change
// at once, over a connection the agent keeps alive): it costs an idle
// device three datagrams, about 200 bytes, on a metered link, so even the
// fast class pulls only every 10 minutes; what makes a class fast is how
// often the device probes what is effective (a local check, no traffic)
// and how soon it retries. network-policy is fast (a policy gap is a
// security gap), package slow (large downloads over slow links), and
// certificate deadline-aware: its resources carry rotation windows
// (Resource.Rotation). Every retry is jittered by a tenth.
func BuiltinClasses() map[string]Class {
	out := map[string]Class{}
	for _, c := range []Class{
		{Name: DefaultClass, Description: "resources that name no class, or one the cluster does not have",
			PullInterval: 30 * time.Minute, ProbeInterval: time.Minute, ReportInterval: 6 * time.Hour,
			RetryBase: time.Second, RetryMax: 5 * time.Minute, UnreachableAfter: 5 * time.Minute, ProgressDeadline: 15 * time.Minute},
		{Name: "config", Description: "configuration files",
			PullInterval: 30 * time.Minute, ProbeInterval: time.Minute, ReportInterval: 6 * time.Hour,
			RetryBase: time.Second, RetryMax: 5 * time.Minute, UnreachableAfter: 5 * time.Minute, ProgressDeadline: 5 * time.Minute},
		{Name: "network-policy", Description: "firewall and network policy: a gap is a security gap",
			PullInterval: 10 * time.Minute, ProbeInterval: 15 * time.Second, ReportInterval: time.Hour,
			RetryBase: time.Second, RetryMax: 30 * time.Second, UnreachableAfter: 2 * time.Minute, ProgressDeadline: 5 * time.Minute},
		{Name: "logging", Description: "log shipping and retention",
			PullInterval: 30 * time.Minute, ProbeInterval: time.Minute, ReportInterval: 6 * time.Hour,
			RetryBase: 5 * time.Second, RetryMax: 5 * time.Minute, UnreachableAfter: 10 * time.Minute, ProgressDeadline: 15 * time.Minute},
		{Name: "certificate", Description: "certificates and keys, rotated inside their windows before their deadlines",
			PullInterval: 30 * time.Minute, ProbeInterval: 5 * time.Minute, ReportInterval: 6 * time.Hour,
			RetryBase: 30 * time.Second, RetryMax: time.Hour, UnreachableAfter: 15 * time.Minute, ProgressDeadline: 30 * time.Minute},
		{Name: "package", Description: "software packages: large downloads over slow links",
			PullInterval: time.Hour, ProbeInterval: 10 * time.Minute, ReportInterval: 6 * time.Hour,
			RetryBase: time.Minute, RetryMax: time.Hour, UnreachableAfter: 30 * time.Minute, ProgressDeadline: time.Hour},
	} {
		c.RetryJitter = 0.1
		out[c.Name] = c
	}
	return out
}

// classDoc is a class as written in a file: durations as Go duration
// strings, every field optional but the name.
type classDoc struct {
	Kind             string `yaml:"kind"`
	Name             string `yaml:"name"`
	Description      string `yaml:"description"`
	PullInterval     string `yaml:"pullInterval"`
	ProbeInterval    string `yaml:"probeInterval"`
	ReportInterval   string `yaml:"reportInterval"`
	UnreachableAfter string `yaml:"unreachableAfter"`
	ProgressDeadline string `yaml:"progressDeadline"`
	Retry            struct {
		Base   string   `yaml:"base"`
		Max    string   `yaml:"max"`
		Jitter *float64 `yaml:"jitter"`
	} `yaml:"retry"`
}

// ParseClasses parses a stream of class documents (YAML or JSON,
// separated by "---"):
//
//	name: network-policy
//	description: firewall rules
//	pullInterval: 1m
//	probeInterval: 15s
//	reportInterval: 1h
//	retry: {base: 1s, max: 30s, jitter: 0.1}
//	unreachableAfter: 2m
//	progressDeadline: 5m
//
// A field left out takes the value of base's class of the same name, or
// of its default class when base has no class of that name (base is
// usually the classes in effect, or BuiltinClasses). kind, if given,
// must be "class". Every class is validated; names must be unique.
func ParseClasses(data []byte, base map[string]Class) ([]Class, error) {
	return parseConfigDocs(data, "class", func(doc *classDoc) (Class, string, error) {
		if *doc == (classDoc{}) {
			return Class{}, "", nil
		}
		c, err := doc.class(base)
		return c, c.Name, err
	})
}

// parseConfigDocs parses a stream of YAML documents of kind what, each
// decoded into a D (unknown fields are errors) and turned into a T named
// name by conv; conv returns an empty name for an empty document, which is
// skipped. Names must be unique, and at least one document given.
func parseConfigDocs[D, T any](data []byte, what string, conv func(*D) (T, string, error)) ([]T, error) {
	if len(data) > MaxDocumentSize {
		return nil, fmt.Errorf("parse %ss: %w: %d bytes, limit %d", what, ErrTooLarge, len(data), MaxDocumentSize)
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	var out []T
	seen := map[string]bool{}
	for n := 1; ; n++ {
		var doc D
		err := dec.Decode(&doc)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("%s document %d: %w", what, n, err)
		}
		v, name, err := conv(&doc)
		switch {
		case err != nil:
			return nil, fmt.Errorf("%s document %d: %w", what, n, err)
		case name == "":
			continue
		case seen[name]:
			return nil, fmt.Errorf("%s document %d: %s %q given twice", what, n, what, name)
		}
		seen[name] = true
		out = append(out, v)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no %s in the document", what)
	}
	return out, nil
}

func (d *classDoc) class(base map[string]Class) (Class, error) {
	if d.Kind != "" && d.Kind != "class" {
		return Class{}, fmt.Errorf("kind %q, want class", d.Kind)
	}
	if d.Name == "" {
		return Class{}, errors.New("name is required")
	}
	c, ok := base[d.Name]
	if !ok {
		c = base[DefaultClass]
		if c.Name == "" {
			c = BuiltinClasses()[DefaultClass]
		}
		c.Description = ""
	}
	c.Name = d.Name
	if d.Description != "" {
		c.Description = d.Description
	}
	var errs []string
	for _, f := range []struct {
		what string
		s    string
		to   *time.Duration
	}{
		{"pullInterval", d.PullInterval, &c.PullInterval},
		{"probeInterval", d.ProbeInterval, &c.ProbeInterval},
		{"reportInterval", d.ReportInterval, &c.ReportInterval},
		{"retry.base", d.Retry.Base, &c.RetryBase},
		{"retry.max", d.Retry.Max, &c.RetryMax},
		{"unreachableAfter", d.UnreachableAfter, &c.UnreachableAfter},
		{"progressDeadline", d.ProgressDeadline, &c.ProgressDeadline},
	} {
		if f.s == "" {
			continue
		}
		v, err := time.ParseDuration(f.s)
		if err != nil {
			errs = append(errs, fmt.Sprintf("%s: %q is not a duration such as 30s or 5m", f.what, f.s))
			continue
		}
		*f.to = v
	}
	if d.Retry.Jitter != nil {
		c.RetryJitter = *d.Retry.Jitter
	}
	if len(errs) > 0 {
		return Class{}, fmt.Errorf("class %q: %s", d.Name, strings.Join(errs, "; "))
	}
	return c, c.ValidateWritten()
}

// SortedClassNames returns the names of classes in order.
func SortedClassNames(classes map[string]Class) []string {
	return slices.Sorted(maps.Keys(classes))
}

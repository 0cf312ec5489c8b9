package driver

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sort"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/meteor-edge/meteor/fsm/intent"
)

// Driver reads, compares, applies and probes one type of resource.
// Implementations are safe for concurrent use on different resources; the
// agent never runs two operations on the same resource at once.
type Driver interface {
	// Current reads what is on the device now for r. State.Present is
	// false when nothing exists at r's location.
	Current(ctx context.Context, r intent.Resource) (State, error)
	// Diff says whether the current state differs from r's desired state,
	// and how. It does no I/O.
	Diff(r intent.Resource, cur State) (Diff, error)
	// Apply brings the device to r's desired state. It is idempotent:
	// applying an already converged resource changes nothing.
	Apply(ctx context.Context, r intent.Resource) error
	// Probe checks the effective state: is the live system using it?
	// Failing to observe (a port that does not answer, a probe command
	// that cannot start) is reported as EffectiveUnknown, not as an error;
	// errors are for invalid specs, policy refusals and cancellation.
	Probe(ctx context.Context, r intent.Resource) (Effective, error)
}

// Budgeted is implemented by a driver whose Apply runs processes that may
// outlive the agent (exec): StepBudget bounds how long an Apply of r may
// take.
type Budgeted interface {
	StepBudget(r intent.Resource) time.Duration
}

// State is what a driver observed on the device for one resource.
type State struct {
	// Present is false when nothing exists at the resource's location
	// (no file, a failing exec check, no value in the simulated device).
	Present bool
	// Attrs are the observed attributes, driver-specific and human
	// readable: "sha256", "mode", "fingerprint", "notAfter", "value", …
	Attrs map[string]string
}

// Diff is the result of comparing an observed State with a desired one.
type Diff struct {
	// Changed is true when Apply would change the device.
	Changed bool
	// Reasons says what differs, one short phrase per difference, e.g.
	// `mode 0600, want 0644`. Empty when Changed is false.
	Reasons []string
}

// EffectiveResult is the outcome of a probe.
type EffectiveResult int

const (
	// EffectiveUnknown means the probe could not observe the live system.
	EffectiveUnknown EffectiveResult = iota
	// EffectiveOK means the live system uses the desired state.
	EffectiveOK
	// EffectiveMismatch means the live system does not use the desired
	// state, whatever is on disk.
	EffectiveMismatch
)

// String returns "ok", "mismatch" or "unknown".
func (e EffectiveResult) String() string {
	switch e {
	case EffectiveOK:
		return "ok"
	case EffectiveMismatch:
		return "mismatch"
	default:
		return "unknown"
	}
}

// Effective is the result of a probe of the live system.
type Effective struct {
	Result EffectiveResult
	// Detail explains the result for operators, e.g.
	// `served fingerprint ab12… (not after 2026-01-02T15:04:05Z), want cd34…`.
	Detail string
}

var (
	// ErrInvalidSpec marks a resource spec or probe the driver cannot use.
	// It is terminal: retrying the same resource cannot succeed.
	ErrInvalidSpec = errors.New("invalid resource spec")
	// ErrUnknownType is returned by Registry.Lookup for an unregistered type.
	ErrUnknownType = errors.New("unknown resource type")
	// ErrNotAllowed is returned when the exec policy refuses a command or
	// an env variable. It is terminal, like ErrInvalidSpec.
	ErrNotAllowed = errors.New("not allowed by exec policy")
)

// Clock is the time source of the drivers. The sim driver waits on it and
// the certificate driver judges validity with it.
type Clock interface {
	Now() time.Time
	// After behaves like time.After.
	After(d time.Duration) <-chan time.Time
}

type systemClock struct{}

func (systemClock) Now() time.Time                         { return time.Now() }
func (systemClock) After(d time.Duration) <-chan time.Time { return time.After(d) }

// SystemClock returns the wall clock. Inside a testing/synctest bubble it
// is the bubble's fake clock.
func SystemClock() Clock { return systemClock{} }

// Config carries the dependencies of the built-in drivers.
type Config struct {
	// Clock is the time source of the sim and certificate drivers; nil
	// means SystemClock. Exec timeouts always use the system clock, since
	// they bound real processes.
	Clock Clock
	// Root prefixes the absolute paths of file and certificate resources:
	// path "/etc/x" becomes Root+"/etc/x". Empty means the real paths.
	// Paths are resolved beneath Root (os.Root): a symbolic link inside
	// it may lead elsewhere inside it, but one leading out of it (or any
	// absolute link) makes the read or write fail. Exec commands are not
	// confined by Root.
	Root string
	// Logger receives debug logs of each driver, named "driver.<type>";
	// nil means no logs.
	Logger hclog.Logger
	// ExecPolicy narrows what the exec driver runs: which programs, and
	// which variables a spec's env may set. The zero value allows every
	// program and no spec variable (commands get the base environment
	// only). See ExecPolicy and docs/security.md.
	ExecPolicy ExecPolicy
	// Sim is the simulated device the sim driver acts on; nil means a
	// fresh empty device seeded with 1. The fleet simulator passes one
	// SimDevice per device.
	Sim *SimDevice
}

// DefaultConfig returns a Config for a real device: system clock, real
// paths, no logs, every program allowed, no spec env variables.
func DefaultConfig() Config { return Config{} }

// Validate reports whether the config is usable.
func (c Config) Validate() error {
	if c.Root != "" && !filepath.IsAbs(c.Root) {
		return fmt.Errorf("driver config: root %q must be absolute", c.Root)
	}
	if err := c.ExecPolicy.Validate(); err != nil {
		return fmt.Errorf("driver config: %w", err)
	}
	return nil
}

// withDefaults fills the nil dependencies with their documented defaults.
func (c Config) withDefaults() Config {
	if c.Clock == nil {
		c.Clock = SystemClock()
	}
	if c.Logger == nil {
		c.Logger = hclog.NewNullLogger()
	}
	if c.Sim == nil {
		c.Sim = NewSimDevice(1)
	}
	return c
}

// Registry maps resource type names to drivers. It is safe for concurrent
// use.
type Registry struct {
	mu      sync.RWMutex
	drivers map[string]Driver // guarded by mu
}

// NewRegistry returns a registry holding the built-in drivers "file",
// "exec", "certificate" and "sim", configured by cfg.
func NewRegistry(cfg Config) (*Registry, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	return &Registry{drivers: map[string]Driver{
		"file":        NewFile(cfg),
		"exec":        NewExec(cfg),
		"certificate": NewCertificate(cfg),
		"sim":         NewSim(cfg),
	}}, nil
}

// Register adds or replaces the driver for typ.
func (g *Registry) Register(typ string, d Driver) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.drivers[typ] = d
}

// Lookup returns the driver for typ, or an error wrapping ErrUnknownType.
func (g *Registry) Lookup(typ string) (Driver, error) {
	g.mu.RLock()
	defer g.mu.RUnlock()
	d, ok := g.drivers[typ]
	if !ok {
		return nil, fmt.Errorf("%w %q", ErrUnknownType, typ)
	}
	return d, nil
}

// Types returns the registered type names, sorted.
func (g *Registry) Types() []string {
	g.mu.RLock()
	defer g.mu.RUnlock()
	types := make([]string, 0, len(g.drivers))
	for t := range g.drivers {
		types = append(types, t)
	}
	sort.Strings(types)
	return types
}

package driver

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/meteor-edge/meteor/fsm/intent"
)

// SimDevice is the in-memory state of one simulated device: a map from
// resource ID to value, shared by that device's sim resources. It is cheap
// (no goroutines, maps allocated on first use) so that a simulator can
// hold thousands in one process. It is safe for concurrent use.
type SimDevice struct {
	mu        sync.Mutex
	rng       *rand.Rand        // guarded by mu
	values    map[string]string // applied values; guarded by mu
	effective map[string]string // effective overrides; guarded by mu
	applies   uint64            // applies that changed a value; guarded by mu
}

// NewSimDevice returns an empty simulated device whose failures are drawn
// from a source seeded with seed, so that runs are reproducible.
func NewSimDevice(seed uint64) *SimDevice {
	return &SimDevice{rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))}
}

// Get returns the applied value of key, rendered as a string.
func (s *SimDevice) Get(key string) (string, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	v, ok := s.values[key]
	return v, ok
}

// Set changes the applied value of key behind the agent's back, as a local
// operator would: the simulator's way to cause drift.
func (s *SimDevice) Set(key string, value any) error {
	v, err := scalarString(value)
	if err != nil {
		return fmt.Errorf("sim set %q: %w", key, err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.setLocked(key, v)
	return nil
}

func (s *SimDevice) setLocked(key, v string) {
	if s.values == nil {
		s.values = make(map[string]string)
	}
	s.values[key] = v
}

// Delete removes key, as if the state vanished from the device.
func (s *SimDevice) Delete(key string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.values, key)
}

// SetEffective makes the live system use value for key whatever was
// applied, until ClearEffective: the simulator's way to model "applied but
// not effective" (a service that was not reloaded).
func (s *SimDevice) SetEffective(key string, value any) error {
	v, err := scalarString(value)
	if err != nil {
		return fmt.Errorf("sim set effective %q: %w", key, err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.effective == nil {
		s.effective = make(map[string]string)
	}
	s.effective[key] = v
	return nil
}

// ClearEffective removes an override set by SetEffective.
func (s *SimDevice) ClearEffective(key string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.effective, key)
}

// Applies returns how many sim applies changed a value on this device.
func (s *SimDevice) Applies() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.applies
}

// effectiveLocked returns what the live system uses for key.
func (s *SimDevice) effectiveLocked(key string) (string, bool) {
	if v, ok := s.effective[key]; ok {
		return v, true
	}
	v, ok := s.values[key]
	return v, ok
}

// Sim is the "sim" driver: resources of a simulated device.
//
// Spec: value (string, number or bool; numbers compare by value whether
// decoded as int or float), optional applyTime (Go duration, waited on
// Config.Clock; cancellation interrupts it and changes nothing) and
// optional failureRate (0..1: the probability that an apply fails, drawn
// from the device's seeded source). The key in the SimDevice is the
// resource ID. The default and only probe compares the effective value.
type Sim struct {
	dev   *SimDevice
	clock Clock
}

// NewSim returns the sim driver acting on cfg.Sim.
func NewSim(cfg Config) *Sim {
	cfg = cfg.withDefaults()
	return &Sim{dev: cfg.Sim, clock: cfg.Clock}
}

// Device returns the simulated device the driver acts on.
func (d *Sim) Device() *SimDevice { return d.dev }

type simSpec struct {
	value       string
	applyTime   time.Duration
	failureRate float64
}

func (d *Sim) parse(r intent.Resource) (simSpec, error) {
	var s simSpec
	v, ok := r.Spec["value"]
	if !ok || v == nil {
		return s, specErr(r, "value is required")
	}
	var err error
	if s.value, err = scalarString(v); err != nil {
		return s, specErr(r, "%v", err)
	}
	if s.applyTime, err = getDuration(r, r.Spec, "applyTime", 0); err != nil {
		return s, err
	}
	if s.failureRate, err = getFloat(r, r.Spec, "failureRate", 0); err != nil {
		return s, err
	}
	if s.failureRate < 0 || s.failureRate > 1 {
		return s, specErr(r, "failureRate %v must be between 0 and 1", s.failureRate)
	}
	return s, nil
}

// Current returns the applied value in Attrs["value"].
func (d *Sim) Current(ctx context.Context, r intent.Resource) (State, error) {
	if _, err := d.parse(r); err != nil {
		return State{}, err
	}
	v, ok := d.dev.Get(r.ID)
	if !ok {
		return State{}, nil
	}
	return State{Present: true, Attrs: map[string]string{"value": v}}, nil
}

// Diff compares the applied value with the desired one.
func (d *Sim) Diff(r intent.Resource, cur State) (Diff, error) {
	s, err := d.parse(r)
	if err != nil {
		return Diff{}, err
	}
	switch {
	case !cur.Present:
		return Diff{Changed: true, Reasons: []string{"value absent"}}, nil
	case cur.Attrs["value"] != s.value:
		return Diff{Changed: true, Reasons: []string{fmt.Sprintf("value %q, want %q", cur.Attrs["value"], s.value)}}, nil
	}
	return Diff{}, nil
}

// Apply sets the value after applyTime, failing with probability
// failureRate. An already converged resource returns at once.
func (d *Sim) Apply(ctx context.Context, r intent.Resource) error {
	s, err := d.parse(r)
	if err != nil {
		return err
	}
	if v, ok := d.dev.Get(r.ID); ok && v == s.value {
		return nil
	}
	if s.applyTime > 0 {
		select {
		case <-d.clock.After(s.applyTime):
		case <-ctx.Done():
			return fmt.Errorf("sim resource %q: apply interrupted: %w", r.ID, ctx.Err())
		}
	}
	dev := d.dev
	dev.mu.Lock()
	defer dev.mu.Unlock()
	if s.failureRate > 0 && dev.rng.Float64() < s.failureRate {
		return fmt.Errorf("sim resource %q: simulated apply failure (failureRate %v)", r.ID, s.failureRate)
	}
	dev.setLocked(r.ID, s.value)
	dev.applies++
	return nil
}

// Probe compares the value the live system uses with the desired one.
func (d *Sim) Probe(ctx context.Context, r intent.Resource) (Effective, error) {
	s, err := d.parse(r)
	if err != nil {
		return Effective{}, err
	}
	d.dev.mu.Lock()
	v, ok := d.dev.effectiveLocked(r.ID)
	d.dev.mu.Unlock()
	switch {
	case !ok:
		return Effective{Result: EffectiveMismatch, Detail: "no value in effect"}, nil
	case v != s.value:
		return Effective{Result: EffectiveMismatch, Detail: fmt.Sprintf("effective value %q, want %q", v, s.value)}, nil
	}
	return Effective{Result: EffectiveOK, Detail: "value in effect"}, nil
}

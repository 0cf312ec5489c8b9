package chaos

import (
	"errors"
	"fmt"
	"sort"
	"time"
)

// Direction selects which packets of a link a [LinkProfile] applies to.
type Direction uint8

const (
	// DirDefault applies a profile where the component naturally injects
	// faults: on packets written (PacketConn), in both directions (UDPProxy).
	DirDefault Direction = iota
	// DirOut applies a profile to packets a PacketConn writes, or to the
	// client→target direction of a UDPProxy.
	DirOut
	// DirIn applies a profile to packets a PacketConn reads, or to the
	// target→client direction of a UDPProxy.
	DirIn
	// DirBoth applies a profile in both directions.
	DirBoth
)

// String returns "default", "out", "in" or "both".
func (d Direction) String() string {
	switch d {
	case DirDefault:
		return "default"
	case DirOut:
		return "out"
	case DirIn:
		return "in"
	case DirBoth:
		return "both"
	}
	return fmt.Sprintf("Direction(%d)", uint8(d))
}

// covers reports whether a profile with direction d applies to packets
// travelling in dir (DirOut or DirIn); def is what DirDefault means.
func (d Direction) covers(dir, def Direction) bool {
	if d == DirDefault {
		d = def
	}
	return d == DirBoth || d == dir
}

// DefaultBurstLen is the mean burst length used when LinkProfile.BurstLen is 0.
const DefaultBurstLen = 4

// DefaultReorderHold is the longest a reordered packet waits for a successor
// when LinkProfile.ReorderHold is 0.
const DefaultReorderHold = 20 * time.Millisecond

// LinkProfile describes how a link misbehaves. The zero value is a perfect
// link. Probabilities are in [0, 1] and are drawn per packet; faults compose
// in this order: outage, burst loss, random loss (a dropped packet suffers
// nothing else), then duplication, delay and jitter, corruption (each copy
// separately) and reordering.
type LinkProfile struct {
	// Loss is the probability that a packet is dropped, independently of
	// every other packet.
	Loss float64
	// BurstLoss is the probability that a packet starts a loss burst
	// (Gilbert–Elliott model): it and the following packets are dropped
	// until the burst ends.
	BurstLoss float64
	// BurstLen is the mean number of packets a burst drops (geometrically
	// distributed); 0 means DefaultBurstLen.
	BurstLen int
	// OutageEvery and OutageFor describe periodic outages: in every period
	// of OutageEvery, counted from the component's creation, the link is
	// up for OutageEvery-OutageFor and then down for OutageFor. Both zero
	// means no outages; OutageFor must be below OutageEvery.
	OutageEvery, OutageFor time.Duration
	// Delay is the one-way latency added to every packet.
	Delay time.Duration
	// Jitter varies the latency uniformly within ±Jitter (never below zero).
	// Jitter larger than the gap between packets reorders them, as on a
	// real network.
	Jitter time.Duration
	// Duplicate is the probability that a packet is delivered twice; each
	// copy gets its own delay.
	Duplicate float64
	// Reorder is the probability that a packet is held back and delivered
	// right after the next packet of the same link (or after ReorderHold if
	// no packet follows).
	Reorder float64
	// ReorderHold bounds how long a held-back packet waits for a successor;
	// 0 means DefaultReorderHold.
	ReorderHold time.Duration
	// Corrupt is the probability that one random byte of a packet is
	// flipped.
	Corrupt float64
	// Dir selects the direction(s) the profile applies to.
	Dir Direction
}

// Validate reports whether every field is in range.
func (p LinkProfile) Validate() error {
	var errs []error
	prob := func(name string, v float64) {
		if !(v >= 0 && v <= 1) { // also rejects NaN
			errs = append(errs, fmt.Errorf("%s %v not in [0,1]", name, v))
		}
	}
	prob("Loss", p.Loss)
	prob("BurstLoss", p.BurstLoss)
	prob("Duplicate", p.Duplicate)
	prob("Reorder", p.Reorder)
	prob("Corrupt", p.Corrupt)
	nonNeg := func(name string, d time.Duration) {
		if d < 0 {
			errs = append(errs, fmt.Errorf("%s %v is negative", name, d))
		}
	}
	nonNeg("Delay", p.Delay)
	nonNeg("Jitter", p.Jitter)
	nonNeg("ReorderHold", p.ReorderHold)
	nonNeg("OutageEvery", p.OutageEvery)
	nonNeg("OutageFor", p.OutageFor)
	if p.BurstLen < 0 {
		errs = append(errs, fmt.Errorf("BurstLen %d is negative", p.BurstLen))
	}
	if p.OutageFor > 0 && p.OutageFor >= p.OutageEvery {
		errs = append(errs, fmt.Errorf("OutageFor %v must be below OutageEvery %v", p.OutageFor, p.OutageEvery))
	}
	if p.Dir > DirBoth {
		errs = append(errs, fmt.Errorf("unknown Dir %v", p.Dir))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("chaos: invalid link profile: %w", err)
	}
	return nil
}

// perfect reports whether the profile never alters a packet.
func (p LinkProfile) perfect() bool {
	return p.Loss == 0 && p.BurstLoss == 0 && p.OutageFor == 0 && p.Delay == 0 &&
		p.Jitter == 0 && p.Duplicate == 0 && p.Reorder == 0 && p.Corrupt == 0
}

func (p LinkProfile) burstLen() int {
	if p.BurstLen <= 0 {
		return DefaultBurstLen
	}
	return p.BurstLen
}

func (p LinkProfile) reorderHold() time.Duration {
	if p.ReorderHold <= 0 {
		return DefaultReorderHold
	}
	return p.ReorderHold
}

// inOutage reports whether elapsed time since the start falls in an outage.
func (p LinkProfile) inOutage(elapsed time.Duration) bool {
	if p.OutageFor <= 0 || p.OutageEvery <= 0 || elapsed < 0 {
		return false
	}
	return elapsed%p.OutageEvery >= p.OutageEvery-p.OutageFor
}

// Named profiles for `meteor chaos` and the simulator. Each is one direction
// of a link; apply it to both ends (or Dir: DirBoth) for a symmetric link.
var profiles = map[string]LinkProfile{
	"perfect":   {},
	"lan":       {Delay: 500 * time.Microsecond, Jitter: 200 * time.Microsecond},
	"wan":       {Delay: 30 * time.Millisecond, Jitter: 5 * time.Millisecond, Loss: 0.001},
	"cellular":  {Delay: 60 * time.Millisecond, Jitter: 30 * time.Millisecond, Loss: 0.02, BurstLoss: 0.005, BurstLen: 8, Reorder: 0.01, Duplicate: 0.002},
	"satellite": {Delay: 300 * time.Millisecond, Jitter: 20 * time.Millisecond, Loss: 0.01},
	"flaky":     {Delay: 40 * time.Millisecond, Jitter: 40 * time.Millisecond, Loss: 0.05, BurstLoss: 0.01, BurstLen: 20, Duplicate: 0.01, Reorder: 0.05, Corrupt: 0.005, OutageEvery: 30 * time.Second, OutageFor: 3 * time.Second},
}

// ProfileNames lists the names ProfileByName accepts, sorted.
func ProfileNames() []string {
	names := make([]string, 0, len(profiles))
	for n := range profiles {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// ProfileByName returns a named link profile: "perfect", "lan", "wan",
// "cellular", "satellite" or "flaky".
func ProfileByName(name string) (LinkProfile, error) {
	p, ok := profiles[name]
	if !ok {
		return LinkProfile{}, fmt.Errorf("chaos: unknown link profile %q (known: %v)", name, ProfileNames())
	}
	return p, nil
}

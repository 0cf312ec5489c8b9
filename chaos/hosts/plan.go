package hosts

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"time"
)

// Fault is a kind of fault a plan injects: one or more actions on servers
// chosen when it starts, held for a while, then undone.
type Fault string

// Faults. A fault that names the leader targets the server leading when it
// starts; followers are picked by the plan's seed.
const (
	// IsolateLeader cuts the leader off the network.
	IsolateLeader Fault = "isolate-leader"
	// IsolateFollower cuts a follower off the network.
	IsolateFollower Fault = "isolate-follower"
	// KillLeader kills the leader and starts it again.
	KillLeader Fault = "kill-leader"
	// KillFollower kills a follower and starts it again.
	KillFollower Fault = "kill-follower"
	// PauseLeader freezes the leader; it wakes believing it leads.
	PauseLeader Fault = "pause-leader"
	// PartitionMinority splits the servers in two with the leader on the
	// minority side: every link across is cut (with Cut), or, for a
	// driver that cannot cut links, each server of the minority is
	// isolated.
	PartitionMinority Fault = "partition-minority"
	// CutPair cuts the link between two servers; both still reach the
	// others (a partial partition).
	CutPair Fault = "cut-pair"
)

// AllFaults returns every fault kind.
func AllFaults() []Fault {
	return []Fault{IsolateLeader, IsolateFollower, KillLeader, KillFollower, PauseLeader, PartitionMinority, CutPair}
}

// ParseFaults parses a comma-separated list of fault kinds.
func ParseFaults(s string) ([]Fault, error) {
	var out []Fault
	for _, name := range strings.Split(s, ",") {
		name = strings.TrimSpace(name)
		if name == "" {
			continue
		}
		if !slices.Contains(AllFaults(), Fault(name)) {
			return nil, fmt.Errorf("hosts: unknown fault %q (known: %v)", name, AllFaults())
		}
		out = append(out, Fault(name))
	}
	return out, nil
}

// possible reports whether a driver supporting the given actions can
// inject f.
func (f Fault) possible(supports func(Action) bool) bool {
	both := func(a Action) bool { return supports(a) && supports(a.Undo()) }
	switch f {
	case IsolateLeader, IsolateFollower:
		return both(Isolate)
	case KillLeader, KillFollower:
		return both(Kill)
	case PauseLeader:
		return both(Pause)
	case PartitionMinority:
		return both(Cut) || both(Isolate)
	case CutPair:
		return both(Cut)
	}
	return false
}

// Episode is one fault of a plan.
type Episode struct {
	// Start is when the fault starts, from the start of the run.
	Start time.Duration `json:"start"`
	// Hold is how long it lasts before it is undone.
	Hold  time.Duration `json:"hold"`
	Fault Fault         `json:"fault"`
	// Pick seeds the choice of followers.
	Pick uint64 `json:"pick"`
}

// Step is one action of an episode.
type Step struct {
	Action Action `json:"action"`
	Server int    `json:"server"`
	// Peer is the other end of a Cut or Mend, -1 otherwise.
	Peer int `json:"peer"`
}

// PlanConfig configures NewPlan.
type PlanConfig struct {
	// Seed decides every choice of the plan.
	Seed uint64
	// Duration is the run's length: every fault is undone by then.
	Duration time.Duration
	// Faults are the kinds to choose from; empty means every kind the
	// driver can inject.
	Faults []Fault
	// GapMin and GapMax bound the wait before each fault; 0 means 1 s and
	// 2 s.
	GapMin, GapMax time.Duration
	// HoldMin and HoldMax bound how long each fault lasts; 0 means 2 s
	// and 4 s.
	HoldMin, HoldMax time.Duration
}

// Plan is a seeded fault schedule.
type Plan struct {
	Seed     uint64    `json:"seed"`
	Episodes []Episode `json:"episodes"`
}

// NewPlan draws a schedule of faults from cfg.Seed: a gap, a fault held
// for a while, and so on, every fault ending before cfg.Duration. Only
// kinds the driver can inject are drawn (it fails if none is left), in
// rounds: each round is a shuffle of them all, so that a run long enough
// for one round injects every kind.
func NewPlan(cfg PlanConfig, d Driver) (Plan, error) {
	if cfg.GapMin <= 0 {
		cfg.GapMin = time.Second
	}
	if cfg.GapMax < cfg.GapMin {
		cfg.GapMax = max(cfg.GapMin, 2*time.Second)
	}
	if cfg.HoldMin <= 0 {
		cfg.HoldMin = 2 * time.Second
	}
	if cfg.HoldMax < cfg.HoldMin {
		cfg.HoldMax = max(cfg.HoldMin, 4*time.Second)
	}
	kinds := cfg.Faults
	if len(kinds) == 0 {
		kinds = AllFaults()
	}
	var usable []Fault
	for _, f := range kinds {
		if f.possible(d.Supports) {
			usable = append(usable, f)
		}
	}
	if len(usable) == 0 {
		return Plan{}, fmt.Errorf("hosts: the driver can inject none of %v", kinds)
	}
	rng := rand.New(rand.NewPCG(cfg.Seed, 0x686f737473)) // "hosts"
	between := func(lo, hi time.Duration) time.Duration {
		if hi <= lo {
			return lo
		}
		return lo + time.Duration(rng.Int64N(int64(hi-lo)))
	}
	p := Plan{Seed: cfg.Seed}
	at := time.Duration(0)
	var round []Fault
	for {
		if len(round) == 0 {
			round = slices.Clone(usable)
			rng.Shuffle(len(round), func(i, j int) { round[i], round[j] = round[j], round[i] })
		}
		at += between(cfg.GapMin, cfg.GapMax)
		ep := Episode{Start: at, Hold: between(cfg.HoldMin, cfg.HoldMax), Fault: round[0], Pick: rng.Uint64()}
		round = round[1:]
		if ep.Start+ep.Hold > cfg.Duration {
			return p, nil
		}
		p.Episodes = append(p.Episodes, ep)
		at += ep.Hold
	}
}

// String lists the episodes, one a line.
func (p Plan) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "plan (seed %d): %d faults\n", p.Seed, len(p.Episodes))
	for i, e := range p.Episodes {
		fmt.Fprintf(&b, "  #%d at %6s for %5s: %s\n", i+1, e.Start.Round(time.Millisecond), e.Hold.Round(time.Millisecond), e.Fault)
	}
	return b.String()
}

// Steps returns the actions that inject e into n servers of which leader
// leads (-1: unknown; a server picked by the seed stands in for it).
// canCut says whether the driver cuts single links. The result depends
// only on its arguments.
func (e Episode) Steps(n, leader int, canCut bool) []Step {
	rng := rand.New(rand.NewPCG(e.Pick, uint64(n)))
	all := make([]int, n)
	for i := range all {
		all[i] = i
	}
	rng.Shuffle(n, func(i, j int) { all[i], all[j] = all[j], all[i] })
	if leader < 0 || leader >= n {
		leader = all[0]
	}
	var followers []int
	for _, i := range all {
		if i != leader {
			followers = append(followers, i)
		}
	}
	one := func(a Action, i int) []Step { return []Step{{Action: a, Server: i, Peer: -1}} }
	switch e.Fault {
	case IsolateLeader:
		return one(Isolate, leader)
	case IsolateFollower:
		return one(Isolate, followers[0])
	case KillLeader:
		return one(Kill, leader)
	case KillFollower:
		return one(Kill, followers[0])
	case PauseLeader:
		return one(Pause, leader)
	case PartitionMinority:
		// The largest minority: 1 of 3, 2 of 5.
		m := max((n-1)/2, 1)
		minority := append([]int{leader}, followers[:m-1]...)
		majority := followers[m-1:]
		var steps []Step
		for _, a := range minority {
			if !canCut {
				steps = append(steps, one(Isolate, a)...)
				continue
			}
			for _, b := range majority {
				steps = append(steps, Step{Action: Cut, Server: a, Peer: b})
			}
		}
		return steps
	case CutPair:
		if n < 2 {
			return nil
		}
		return []Step{{Action: Cut, Server: all[0], Peer: all[1]}}
	}
	return nil
}

// Undo returns the steps that undo steps, in reverse order.
func Undo(steps []Step) []Step {
	out := make([]Step, 0, len(steps))
	for i := len(steps) - 1; i >= 0; i-- {
		s := steps[i]
		out = append(out, Step{Action: s.Action.Undo(), Server: s.Server, Peer: s.Peer})
	}
	return out
}

package scenario

import (
	"context"
	"fmt"
	"math/rand/v2"
	"time"
)

// Fault kinds the harness records besides the chaos package's.
const (
	// KindCrash is a server stopped without leaving (Harness.Kill).
	KindCrash = "crash"
	// KindRestart is a server started again from its data dir.
	KindRestart = "restart"
	// KindClockSkew is a server's wall clock set ahead or behind.
	KindClockSkew = "clock-skew"
)

// Scenario is a named fault schedule for a cluster of a given size.
type Scenario struct {
	Name        string
	Description string
	// Servers is the cluster size.
	Servers int
	// Inject runs the fault schedule until ctx ends. It need not heal: Run
	// heals the network and restarts stopped servers afterwards.
	Inject func(ctx context.Context, f *Injector)
	// Fleet, when set, runs simulated devices against the servers during
	// the scenario and checks them afterwards (see FleetSpec).
	Fleet *FleetSpec
}

// Injector is what a scenario's schedule acts through: the harness, a
// random source seeded by the run's seed, and a count of the faults
// injected.
type Injector struct {
	H   *Harness
	Rng *rand.Rand
	n   int
}

// Count returns the number of faults injected so far.
func (f *Injector) Count() int { return f.n }

// Sleep waits a random duration in [lo, hi), or until ctx ends; it
// reports whether ctx is still live.
func (f *Injector) Sleep(ctx context.Context, lo, hi time.Duration) bool {
	d := lo
	if hi > lo {
		d += time.Duration(f.Rng.Int64N(int64(hi - lo)))
	}
	sleep(ctx, d)
	return ctx.Err() == nil
}

// Leader returns the ID of the server that currently believes it leads,
// waiting up to 2 s for one, or "".
func (f *Injector) Leader(ctx context.Context) string {
	deadline := time.Now().Add(2 * time.Second)
	for ctx.Err() == nil && time.Now().Before(deadline) {
		if i := f.H.CurrentLeader(); i >= 0 {
			return f.H.ID(i)
		}
		sleep(ctx, 20*time.Millisecond)
	}
	return ""
}

// IDs returns every server's ID, in index order.
func (f *Injector) IDs() []string {
	ids := make([]string, f.H.Size())
	for i := range ids {
		ids[i] = f.H.ID(i)
	}
	return ids
}

// Others returns the IDs other than those given, shuffled.
func (f *Injector) Others(except ...string) []string {
	var out []string
	for _, id := range f.IDs() {
		skip := false
		for _, e := range except {
			skip = skip || id == e
		}
		if !skip {
			out = append(out, id)
		}
	}
	f.Rng.Shuffle(len(out), func(i, j int) { out[i], out[j] = out[j], out[i] })
	return out
}

// Partition, Isolate, CutOneWay and Heal change the network (the network
// records each change in the fault log).
func (f *Injector) Partition(groups ...[]string) { f.n++; f.H.Network().Partition(groups...) }
func (f *Injector) Isolate(ids ...string)        { f.n++; f.H.Network().Isolate(ids...) }
func (f *Injector) CutOneWay(from, to string)    { f.n++; f.H.Network().CutOneWay(from, to) }
func (f *Injector) Heal()                        { f.H.Network().Heal() }

// Kill crashes a server; Restart starts it again. Errors are recorded in
// the fault log and otherwise ignored: the checkers judge the outcome.
func (f *Injector) Kill(id string) {
	f.n++
	if err := f.H.Kill(f.H.Index(id)); err != nil {
		f.H.Faults().Record(KindCrash, id, "", fmt.Sprintf("error: %v", err))
	}
}

func (f *Injector) Restart(id string) {
	if err := f.H.Restart(f.H.Index(id)); err != nil {
		f.H.Faults().Record(KindRestart, id, "", fmt.Sprintf("error: %v", err))
	}
}

// Crash kills the servers, waits lo to hi (cut short if ctx ends), and
// restarts them from their data dirs.
func (f *Injector) Crash(ctx context.Context, lo, hi time.Duration, ids ...string) {
	for _, id := range ids {
		f.Kill(id)
	}
	f.Sleep(ctx, lo, hi)
	for _, id := range ids {
		f.Restart(id)
	}
}

// Skew sets a server's wall clock d ahead (behind if negative).
func (f *Injector) Skew(id string, d time.Duration) {
	if i := f.H.Index(id); i >= 0 {
		f.n++
		f.H.Skew(i, d)
	}
}

// All returns the scenarios, in the order the tests run them.
func All() []Scenario {
	return []Scenario{LeaderIsolated, MinorityPartition, MajorityPartition, Flapping, KillLeader, Ring,
		KillRandom, WholeClusterRestart, FollowerBehindCompaction, ClockSkew, LossyAgents, AgentPowerLoss}
}

// ByName returns the scenario with the given name.
func ByName(name string) (Scenario, bool) {
	for _, s := range All() {
		if s.Name == name {
			return s, true
		}
	}
	return Scenario{}, false
}

// LeaderIsolated cuts the leader off from everyone, both ways, for 1.5-2.5
// s, then heals, over and over.
var LeaderIsolated = Scenario{
	Name:        "leader-isolated",
	Description: "3 servers; isolate the current leader for 1.5-2.5 s, heal, wait about 1 s, repeat",
	Servers:     3,
	Inject: func(ctx context.Context, f *Injector) {
		for f.Sleep(ctx, 800*time.Millisecond, 1200*time.Millisecond) {
			l := f.Leader(ctx)
			if l == "" {
				continue
			}
			f.Isolate(l)
			f.Sleep(ctx, 1500*time.Millisecond, 2500*time.Millisecond)
			f.Heal()
		}
	},
}

// MinorityPartition puts the leader in the minority side of a 2/3 split.
var MinorityPartition = Scenario{
	Name:        "minority-partition",
	Description: "5 servers; split 2/3 with the leader on the 2 side for 1.5-2.5 s, heal, repeat",
	Servers:     5,
	Inject: func(ctx context.Context, f *Injector) {
		for f.Sleep(ctx, 800*time.Millisecond, 1200*time.Millisecond) {
			l := f.Leader(ctx)
			if l == "" {
				continue
			}
			f.Partition([]string{l, f.Others(l)[0]})
			f.Sleep(ctx, 1500*time.Millisecond, 2500*time.Millisecond)
			f.Heal()
		}
	},
}

// MajorityPartition cuts two followers off: the leader keeps its majority.
var MajorityPartition = Scenario{
	Name:        "majority-partition",
	Description: "5 servers; split 2/3 with the leader on the 3 side for 1.5-2.5 s, heal, repeat",
	Servers:     5,
	Inject: func(ctx context.Context, f *Injector) {
		for f.Sleep(ctx, 800*time.Millisecond, 1200*time.Millisecond) {
			l := f.Leader(ctx)
			if l == "" {
				continue
			}
			f.Partition(f.Others(l)[:2])
			f.Sleep(ctx, 1500*time.Millisecond, 2500*time.Millisecond)
			f.Heal()
		}
	},
}

// Flapping alternates random 2/3 splits and heals about every second.
var Flapping = Scenario{
	Name:        "flapping",
	Description: "5 servers; a random 2/3 split for 0.7-1.3 s, healed for 0.7-1.3 s, repeat",
	Servers:     5,
	Inject: func(ctx context.Context, f *Injector) {
		for f.Sleep(ctx, 700*time.Millisecond, 1300*time.Millisecond) {
			f.Partition(f.Others()[:2])
			f.Sleep(ctx, 700*time.Millisecond, 1300*time.Millisecond)
			f.Heal()
		}
	},
}

// KillLeader crashes the leader during writes and restarts it later.
var KillLeader = Scenario{
	Name:        "kill-leader",
	Description: "3 servers; crash the leader (no leave), restart it from its data dir 1.5-2.5 s later, repeat",
	Servers:     3,
	Inject: func(ctx context.Context, f *Injector) {
		for f.Sleep(ctx, 800*time.Millisecond, 1200*time.Millisecond) {
			l := f.Leader(ctx)
			if l == "" {
				continue
			}
			f.Crash(ctx, 1500*time.Millisecond, 2500*time.Millisecond, l)
		}
	},
}

// Ring arranges the 5 servers in a random ring where each reaches only its
// two neighbours: every server sees a majority (itself and its
// neighbours), each a different one, and no two non-adjacent servers can
// talk.
var Ring = Scenario{
	Name:        "ring",
	Description: "5 servers in a random ring, each reaching only its two neighbours (each sees a different majority) for 2-3 s, heal, repeat",
	Servers:     5,
	Inject: func(ctx context.Context, f *Injector) {
		for f.Sleep(ctx, 800*time.Millisecond, 1200*time.Millisecond) {
			ring := f.Others()
			n := len(ring)
			for i := range ring {
				for _, d := range []int{2, n - 2} { // the non-neighbours
					if d > 1 && d < n-1 {
						f.CutOneWay(ring[i], ring[(i+d)%n])
					}
				}
			}
			f.Sleep(ctx, 2*time.Second, 3*time.Second)
			f.Heal()
		}
	},
}

// KillRandom crashes random servers, never more than a minority at once,
// and restarts them.
var KillRandom = Scenario{
	Name:        "kill-random",
	Description: "5 servers; crash one or two random servers (no leave), restart them 1-2 s later, repeat",
	Servers:     5,
	Inject: func(ctx context.Context, f *Injector) {
		for f.Sleep(ctx, 500*time.Millisecond, 1000*time.Millisecond) {
			victims := f.Others()[:1+f.Rng.IntN(2)]
			f.Crash(ctx, time.Second, 2*time.Second, victims...)
		}
	},
}

// WholeClusterRestart crashes every server at once and starts them all
// again from their data dirs: no acknowledged write may be lost.
var WholeClusterRestart = Scenario{
	Name:        "whole-cluster-restart",
	Description: "3 servers; crash all of them at once, restart all from their data dirs 0.5-1 s later, repeat",
	Servers:     3,
	Inject: func(ctx context.Context, f *Injector) {
		for f.Sleep(ctx, 1500*time.Millisecond, 2500*time.Millisecond) {
			ids := f.IDs()
			f.Crash(ctx, 500*time.Millisecond, time.Second, ids...)
		}
	},
}

// FollowerBehindCompaction cuts a follower off while the others commit
// enough writes to compact their logs past it (the harness snapshots every
// 256 entries and keeps 64), so when it returns it must install a snapshot.
var FollowerBehindCompaction = Scenario{
	Name:        "follower-behind-compaction",
	Description: "3 servers; isolate a follower for 2-3 s while the leader compacts its log past it, heal (the follower installs a snapshot), repeat",
	Servers:     3,
	Inject: func(ctx context.Context, f *Injector) {
		for f.Sleep(ctx, 500*time.Millisecond, 1000*time.Millisecond) {
			l := f.Leader(ctx)
			if l == "" {
				continue
			}
			follower := f.Others(l)[0]
			f.Isolate(follower)
			f.Sleep(ctx, 2*time.Second, 3*time.Second)
			if i := f.H.Index(l); i >= 0 {
				if srv := f.H.Servers()[i]; srv != nil {
					// Compact now, whatever the thresholds say.
					if err := srv.Raft().Snapshot().Error(); err != nil {
						f.H.Faults().Record("snapshot", l, "", fmt.Sprintf("error: %v", err))
					} else {
						f.H.Faults().Record("snapshot", l, "", "leader compacted its log")
					}
				}
			}
			f.Heal()
		}
	},
}

// skewBy returns a seeded skew of 2 to 9 minutes.
func skewBy(f *Injector) time.Duration {
	return 2*time.Minute + time.Duration(f.Rng.Int64N(int64(7*time.Minute)))
}

// ClockSkew sets one server's wall clock minutes ahead and another's
// minutes behind, then crashes each in turn, so that devices resume
// sessions (tokens, tickets) sealed by a skewed server on the others and
// owners judge last-seen times stamped by skewed clocks. Key epochs are ten
// minutes, so some seeds cross an epoch boundary. Raft and gossip must not
// care; no device on its fiber link may ever be called unreachable.
var ClockSkew = Scenario{
	Name:        "clock-skew",
	Description: "3 servers, 30 devices on fiber; the leader's clock 2-9 min ahead, a follower's 2-9 min behind; crash and restart each",
	Servers:     3,
	Fleet:       &FleetSpec{Devices: 30, Link: "fiber", NeverUnreachable: true},
	Inject: func(ctx context.Context, f *Injector) {
		l := f.Leader(ctx)
		if l == "" {
			return
		}
		behind := f.Others(l)[0]
		f.Skew(l, skewBy(f))
		f.Skew(behind, -skewBy(f))
		for _, id := range []string{behind, l} {
			if !f.Sleep(ctx, 800*time.Millisecond, 1200*time.Millisecond) {
				return
			}
			f.Crash(ctx, time.Second, 1500*time.Millisecond, id)
		}
	},
}

// LossyAgents puts devices on cellular links with 20 % loss each way and
// outages of about two seconds, while a random server is cut off now and
// then, so that sessions resume on other servers across lossy links.
var LossyAgents = Scenario{
	Name:        "lossy-agents",
	Description: "3 servers, 30 devices on cellular links with 20% loss and ~2 s outages; a random server isolated for 1-2 s, repeat",
	Servers:     3,
	Fleet:       &FleetSpec{Devices: 30, Link: "cellular", Loss: 0.2, TimeScale: 0.25, Converge: 45 * time.Second},
	Inject: func(ctx context.Context, f *Injector) {
		for f.Sleep(ctx, time.Second, 2*time.Second) {
			ids := f.IDs()
			f.Isolate(ids[f.Rng.IntN(len(ids))])
			f.Sleep(ctx, time.Second, 2*time.Second)
			f.Heal()
		}
	},
}

// AgentPowerLoss runs pop-up sites whose devices go offline for seconds at
// a time, half of those times by losing power, while applies take long
// enough (a second each) that many power losses land mid-apply. Restarted
// agents must recover from their journals and converge; a follower crashes
// and comes back meanwhile.
var AgentPowerLoss = Scenario{
	Name:        "agent-power-loss",
	Description: "3 servers, 20 pop-up devices offline ~9 s of every ~15 s (half by power loss), 1 s applies; a follower crashed for 2 s",
	Servers:     3,
	Fleet:       &FleetSpec{Devices: 20, Link: "popup", TimeScale: 0.005, ApplyTime: time.Second, Converge: 90 * time.Second},
	Inject: func(ctx context.Context, f *Injector) {
		if !f.Sleep(ctx, time.Second, 2*time.Second) {
			return
		}
		l := f.Leader(ctx)
		if l == "" {
			return
		}
		victim := f.Others(l)[f.Rng.IntN(len(f.Others(l)))]
		f.Crash(ctx, 2*time.Second, 2*time.Second, victim)
	},
}

package hosts

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/meteor-edge/meteor/chaos"
)

// Runner carries a Plan out through a Driver. Its methods are safe for
// concurrent use: checkers ask it which servers are down while it runs.
type Runner struct {
	// Driver performs the actions.
	Driver Driver
	// Servers names the servers in the fault log; len(Servers) is the
	// number of servers.
	Servers []Server
	// Leader returns the index of the server leading now, or -1; nil
	// means always -1 (a server picked by the plan stands in).
	Leader func(ctx context.Context) int
	// Faults receives every action, its command and its error; nil
	// discards them.
	Faults *chaos.FaultLog
	// Logger receives a line per action; nil discards them.
	Logger hclog.Logger

	mu       sync.Mutex
	down     map[int]Action  // guarded by mu; server -> Kill, Pause or Isolate in force
	cuts     map[[2]int]bool // guarded by mu; cut links in force, {server, peer}
	gen      map[int]uint64  // guarded by mu; starts per server
	injected int             // guarded by mu; episodes begun
	errs     []error         // guarded by mu; failed actions
}

// Run injects plan's faults, each at its time, until the plan ends or ctx
// does, then undoes every fault still in force (even if ctx ended). It
// returns the failed actions joined; an action that fails is logged and
// the plan goes on.
func (r *Runner) Run(ctx context.Context, plan Plan) error {
	start := time.Now()
	for k, ep := range plan.Episodes {
		if !sleepUntil(ctx, start.Add(ep.Start)) {
			break
		}
		leader := -1
		if r.Leader != nil {
			leader = r.Leader(ctx)
		}
		steps := ep.Steps(len(r.Servers), leader, r.Driver.Supports(Cut) && r.Driver.Supports(Mend))
		label := fmt.Sprintf("#%d %s", k+1, ep.Fault)
		if leader < 0 && (ep.Fault == IsolateLeader || ep.Fault == KillLeader || ep.Fault == PauseLeader || ep.Fault == PartitionMinority) {
			label += " (leader unknown: a server picked by the seed stands in)"
		}
		r.mu.Lock()
		r.injected++
		r.mu.Unlock()
		for _, s := range steps {
			r.Do(ctx, s, label)
		}
		sleepUntil(ctx, start.Add(ep.Start+ep.Hold))
		for _, s := range Undo(steps) {
			r.Do(context.WithoutCancel(ctx), s, label)
		}
	}
	r.Restore(context.WithoutCancel(ctx))
	r.mu.Lock()
	defer r.mu.Unlock()
	return errors.Join(r.errs...)
}

// Do performs one step, records it in the fault log with label, and keeps
// track of what is down. It reports whether the action succeeded.
func (r *Runner) Do(ctx context.Context, s Step, label string) bool {
	from, to := r.name(s.Server), ""
	if s.Peer >= 0 {
		to = r.name(s.Peer)
	}
	line, err := r.Driver.Do(ctx, s.Action, s.Server, s.Peer)
	detail := label + ": " + line
	if err != nil {
		detail = fmt.Sprintf("%s: error: %v", label, err)
	}
	r.Faults.Record(string(s.Action), from, to, detail)
	if r.Logger != nil {
		if err != nil {
			r.Logger.Warn("fault action failed", "action", s.Action, "server", from, "peer", to, "error", err)
		} else {
			r.Logger.Info("fault", "action", s.Action, "server", from, "peer", to, "fault", label)
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if err != nil {
		r.errs = append(r.errs, err)
		return false
	}
	if r.down == nil {
		r.down, r.cuts, r.gen = map[int]Action{}, map[[2]int]bool{}, map[int]uint64{}
	}
	switch s.Action {
	case Kill, Pause, Isolate:
		r.down[s.Server] = s.Action
	case Start:
		r.gen[s.Server]++
		delete(r.down, s.Server)
	case Unpause, Heal:
		delete(r.down, s.Server)
	case Cut:
		r.cuts[[2]int{s.Server, s.Peer}] = true
	case Mend:
		delete(r.cuts, [2]int{s.Server, s.Peer})
	}
	return true
}

// Restore undoes every fault in force: mends cuts, unpauses, heals and
// starts servers. Actions that fail are retried a few times.
func (r *Runner) Restore(ctx context.Context) {
	for attempt := 0; attempt < 3; attempt++ {
		r.mu.Lock()
		var steps []Step
		for c := range r.cuts {
			steps = append(steps, Step{Action: Mend, Server: c[0], Peer: c[1]})
		}
		for i, a := range r.down {
			steps = append(steps, Step{Action: a.Undo(), Server: i, Peer: -1})
		}
		r.mu.Unlock()
		if len(steps) == 0 {
			return
		}
		slices.SortFunc(steps, func(a, b Step) int {
			return cmp.Or(cmp.Compare(a.Action, b.Action), cmp.Compare(a.Server, b.Server), cmp.Compare(a.Peer, b.Peer))
		})
		for _, s := range steps {
			r.Do(ctx, s, "restore")
		}
		if ctx.Err() != nil {
			return
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// Unavailable reports whether server i is killed, paused or isolated.
func (r *Runner) Unavailable(i int) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	_, ok := r.down[i]
	return ok
}

// Generation counts the times server i was started again: a new process
// whose state is rebuilt from its data dir.
func (r *Runner) Generation(i int) uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.gen[i]
}

// Injected returns the number of faults begun.
func (r *Runner) Injected() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.injected
}

func (r *Runner) name(i int) string {
	if i >= 0 && i < len(r.Servers) {
		if s := r.Servers[i]; s.ID != "" {
			return s.ID
		}
		if s := r.Servers[i]; s.Host != "" {
			return s.Host
		}
	}
	return fmt.Sprintf("server-%d", i)
}

// sleepUntil waits until t or ctx ends; it reports whether ctx is live.
func sleepUntil(ctx context.Context, t time.Time) bool {
	d := time.Until(t)
	if d <= 0 {
		return ctx.Err() == nil
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-timer.C:
		return true
	}
}

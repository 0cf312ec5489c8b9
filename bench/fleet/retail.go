package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/meteor-edge/meteor/agent"
	"github.com/meteor-edge/meteor/agent/sim"
	"github.com/meteor-edge/meteor/bench/internal/benchkit"
	"github.com/meteor-edge/meteor/cluster/api"
	"github.com/meteor-edge/meteor/fsm/intent"
)

// retailResult is the retail part.
type retailResult struct {
	Devices   int            `json:"devices"`
	TimeScale float64        `json:"time_scale"`
	Links     map[string]int `json:"links"`
	// WarmupSec is the time from starting the fleet to the first change.
	WarmupSec float64         `json:"warmup_s"`
	Connected int             `json:"connected_at_first_change"`
	Changes   []*retailChange `json:"changes"`
	WallSec   float64         `json:"wall_s"`
}

// retailChange is one change of the retail scenario.
type retailChange struct {
	Name     string `json:"name"`
	File     string `json:"file"`
	Revision uint64 `json:"revision"`
	// Targeted devices match the change's selector; Converged of them
	// converged on it (as their agents see it) within WaitedSec of the
	// commit. Reachable targeted devices are those that converged or had
	// a session when the wait ended; the others were offline throughout.
	Targeted  int     `json:"targeted"`
	Converged int     `json:"converged"`
	Reachable int     `json:"reachable"`
	WaitedSec float64 `json:"waited_s"`
	// Elections counts the leader elections the cluster held, won or
	// not, from writing the change until the wait for it ended.
	Elections int `json:"leader_elections"`
	// All is timed over every targeted device, OfReachable over the
	// reachable ones only; Links per link profile (over its targeted
	// devices).
	All         percentiles            `json:"time_to_converged_s"`
	OfReachable percentiles            `json:"time_to_converged_reachable_s"`
	Links       map[string]*retailLink `json:"links"`
	// ServerTargeted and ServerConverged are the change's progress as the
	// servers see it when the wait ended.
	Server api.IntentCounts `json:"server"`
}

// retailLink is one link profile's figures for one change.
type retailLink struct {
	Targeted  int         `json:"targeted"`
	Converged int         `json:"converged"`
	Reachable int         `json:"reachable"`
	Times     percentiles `json:"time_to_converged_s"`
}

// readChanges reads the change files of dir in name order.
func readChanges(dir string) ([]string, []*intent.Intent, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, nil, err
	}
	var files []string
	var ins []*intent.Intent
	for _, e := range entries {
		if e.IsDir() || !slices.Contains([]string{".yaml", ".yml", ".json"}, filepath.Ext(e.Name())) {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			return nil, nil, err
		}
		in, err := intent.Parse(b)
		if err != nil {
			return nil, nil, fmt.Errorf("%s: %w", e.Name(), err)
		}
		files, ins = append(files, e.Name()), append(ins, in)
	}
	if len(ins) == 0 {
		return nil, nil, fmt.Errorf("no intents in %s", dir)
	}
	return files, ins, nil
}

// quietFor is how long a change's wait goes on without a new convergence
// once every targeted device with a session has converged.
const quietFor = 15 * time.Second

func runRetail(ctx context.Context, cfg *config, g *benchkit.Group, bin, self, pkiDir, dir, simDir string, elections *benchkit.ElectionLog, out, log io.Writer) (*retailResult, error) {
	start := time.Now()
	files, changes, err := readChanges(cfg.changesDir)
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(log, "retail: starting a %d-server cluster\n", serverCount)
	cl, err := startCluster(ctx, g, bin, pkiDir, filepath.Join(dir, "cluster"), cfg.raftMultiplier)
	if err != nil {
		return nil, err
	}
	defer elections.Record(context.WithoutCancel(ctx), "retail", cl.MeteorCluster)
	n := cfg.retailDevices
	if n == 0 {
		n = sim.RetailDevices
	}
	spec := fleetSpec{
		devices: n, profile: sim.MixRetail, seed: cfg.seed, prefix: "r", timeScale: cfg.retailTimeScale,
		rampBatch: 50, rampEvery: 250 * time.Millisecond, sampleEvery: 200 * time.Millisecond,
		rttProbe: agent.DefaultRTTProbeInterval, perWorker: n,
	}
	fmt.Fprintf(log, "retail: starting %d devices\n", n)
	sh, err := startShards(ctx, g, self, simDir, filepath.Join(dir, "fleet"), cl.AgentAddrs(), pkiDir, spec)
	if err != nil {
		return nil, err
	}
	res := &retailResult{Devices: n, TimeScale: cfg.retailTimeScale, Links: map[string]int{}}
	defer func() { res.WallSec = time.Since(start).Seconds() }()

	// Warm up: every device started, every fiber and cellular device
	// connected (cellular outages aside), at most 2 minutes; or the fixed
	// -retail-warmup.
	bound := 2 * time.Minute
	if cfg.retailWarmup > 0 {
		bound = cfg.retailWarmup
	}
	summary := func(ctx context.Context) (sim.Summary, error) {
		s, _, err := sh.Summary(ctx)
		return s, err
	}
	err = watch(ctx, cl, summary, nil, cfg.memFloorMiB<<10, bound, "retail warm-up", log, func(s sim.Summary) bool {
		res.Connected = s.Connected
		if cfg.retailWarmup > 0 {
			return false
		}
		f, c := s.Links[sim.LinkFiber], s.Links[sim.LinkCellular]
		return s.Started == s.Devices && f.Connected == f.Devices && c.Connected*100 >= c.Devices*95
	})
	var lerr *errLevel
	if err != nil && !(asLevel(err, &lerr) && cfg.retailWarmup > 0 && cl.Exited() == nil) {
		return nil, fmt.Errorf("warm-up: %w", err)
	}
	res.WarmupSec = time.Since(start).Seconds()

	for i, in := range changes {
		doc, err := json.Marshal(in)
		if err != nil {
			return nil, err
		}
		term, err := cl.RaftTerm(ctx)
		if err != nil {
			return nil, err
		}
		rev, err := cl.put(ctx, in.Name, doc)
		if err != nil {
			return nil, err
		}
		commit := time.Now()
		if err := sh.Mark(ctx, rev); err != nil {
			return nil, err
		}
		ch := &retailChange{Name: in.Name, File: files[i], Revision: rev}
		fmt.Fprintf(log, "retail: %s committed at revision %d\n", in.Name, rev)
		var lastNew time.Time
		for {
			select {
			case <-ctx.Done():
				return nil, ctx.Err()
			case <-time.After(time.Second):
			}
			if err := cl.Exited(); err != nil {
				return nil, err
			}
			reps, err := sh.Reports(ctx)
			if err != nil {
				return nil, err
			}
			devs := devicesSince(reps, commit)
			if len(res.Links) == 0 {
				for _, d := range devs {
					res.Links[d.Link]++
				}
			}
			prev := ch.Converged
			fillChange(ch, in, devs)
			ch.WaitedSec = time.Since(commit).Seconds()
			if ch.Converged > prev || lastNew.IsZero() {
				lastNew = time.Now()
			}
			fmt.Fprintf(log, "retail %s %5.0fs  targeted %d  converged %d  reachable %d\n", in.Name, ch.WaitedSec, ch.Targeted, ch.Converged, ch.Reachable)
			settled := ch.Converged == ch.Reachable && time.Since(lastNew) >= quietFor
			if ch.Converged == ch.Targeted || settled || time.Since(commit) >= cfg.retailTimeout {
				break
			}
		}
		if ch.Elections, err = cl.ElectionsSince(ctx, term); err != nil {
			return nil, err
		}
		if p, err := cl.Servers[0].API.IntentProgress(ctx, in.Name, apiStale); err == nil {
			ch.Server = p.IntentCounts
		} else {
			fmt.Fprintf(log, "retail: progress of %s: %v\n", in.Name, err)
		}
		res.Changes = append(res.Changes, ch)
		retailLine(out, ch)
	}
	return res, nil
}

// fillChange computes ch's counts and times from the devices' outcomes.
func fillChange(ch *retailChange, in *intent.Intent, devs []deviceTimes) {
	ch.Targeted, ch.Converged, ch.Reachable = 0, 0, 0
	ch.Links = map[string]*retailLink{}
	var all, reach []float64
	times := map[string][]float64{}
	for _, d := range devs {
		if !in.Matches(d.Labels) {
			continue
		}
		l := ch.Links[d.Link]
		if l == nil {
			l = &retailLink{}
			ch.Links[d.Link] = l
		}
		ch.Targeted++
		l.Targeted++
		if d.After != nil {
			ch.Converged++
			l.Converged++
			all = append(all, *d.After)
			times[d.Link] = append(times[d.Link], *d.After)
		}
		if d.After != nil || d.Connected {
			ch.Reachable++
			l.Reachable++
		}
	}
	reach = append(reach, all...)
	ch.All = percentilesOf(all, ch.Targeted)
	ch.OfReachable = percentilesOf(reach, ch.Reachable)
	for name, l := range ch.Links {
		l.Times = percentilesOf(times[name], l.Targeted)
	}
}

func asLevel(err error, target **errLevel) bool {
	e, ok := err.(*errLevel)
	if ok {
		*target = e
	}
	return ok
}

func secs(v *float64) string {
	if v == nil {
		return "-"
	}
	return fmt.Sprintf("%.1f", *v)
}

func retailHeader(out io.Writer) {
	fmt.Fprintln(out, "\nRetail fleet: time to converged per change (s after the commit; agents' view)")
	fmt.Fprintln(out, "change                       targeted  converged  reachable   50%    90%    99%   100%   99% of reachable  elections  links (99%)")
}

func retailLine(out io.Writer, c *retailChange) {
	var links []string
	for _, name := range sortedKeys(c.Links) {
		l := c.Links[name]
		links = append(links, fmt.Sprintf("%s %d/%d %s", name, l.Converged, l.Targeted, secs(l.Times.P99)))
	}
	fmt.Fprintf(out, "%-28s %8d  %9d  %9d  %5s  %5s  %5s  %5s  %16s  %9d  %s\n", c.Name, c.Targeted, c.Converged, c.Reachable,
		secs(c.All.P50), secs(c.All.P90), secs(c.All.P99), secs(c.All.P100), secs(c.OfReachable.P99), c.Elections, strings.Join(links, ", "))
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

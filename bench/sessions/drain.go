package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"sync"
	"syscall"
	"time"

	"github.com/meteor-edge/meteor/bench/internal/benchkit"
	"github.com/meteor-edge/meteor/wire"
)

// drainGoal is the issue's goal: a server with 1,000 sessions stops
// within 10 s of SIGTERM and every session moves to another server.
const drainGoal = 10 * time.Second

// drainResult is part 5: `meteor server` gets SIGTERM with Agents devices
// on it (the leader, unless -drain-server follower). Times are from the
// SIGTERM.
type drainResult struct {
	Agents int    `json:"agents"`
	Server string `json:"server"`
	// WasLeader says the stopped server led; LeaderAfter is the leader
	// among the others once it exited, Elections the elections held
	// meanwhile (a hand-over is one term: 1).
	WasLeader   bool   `json:"was_leader"`
	LeaderAfter string `json:"leader_after"`
	Elections   int    `json:"elections"`
	// ExitSec is the time until the process exited; ExitError its exit
	// status if not 0, or why it had to be killed.
	ExitSec   float64 `json:"exit_s"`
	ExitError string  `json:"exit_error,omitempty"`
	// GoAways devices received a GoAway (shutting down), Redirected of
	// them with the other servers' addresses; ClosedOnly had their
	// connection closed without one, and Silent neither (their old
	// connection was still open when they gave up waiting).
	GoAways    int `json:"goaways"`
	Redirected int `json:"redirected"`
	ClosedOnly int `json:"closed_without_goaway"`
	Silent     int `json:"silent"`
	// GoAway50ms and GoAwayMaxms: when the devices heard (GoAway or
	// close).
	GoAway50ms  float64 `json:"told_p50_ms"`
	GoAwayMaxms float64 `json:"told_max_ms"`
	// Moved is how the devices resumed their sessions on the other
	// servers (Opened, Resumed, Used0RTT, percentiles of the first Delta).
	Moved *stormMode `json:"moved"`
}

// met reports whether the run met drainGoal.
func (r *drainResult) met() bool {
	return r.ExitError == "" && r.ExitSec <= drainGoal.Seconds() && r.Moved.allResumed() && r.Moved.Resumed == r.Moved.Opened
}

// runDrain measures part 5 on a fresh three-server cluster.
func runDrain(ctx context.Context, cfg *config, bin string, p *pki, dir string, out, log io.Writer) (*drainResult, error) {
	res := &drainResult{Agents: cfg.drainAgents}
	ids := make([]string, cfg.drainAgents)
	for i := range ids {
		ids[i] = fmt.Sprintf("drain-%05d", i)
	}
	fmt.Fprintf(log, "drain: issuing %d device certificates\n", len(ids))
	certs, err := p.issueDevices(ids)
	if err != nil {
		return nil, err
	}
	g := &benchkit.Group{}
	defer g.StopAll(3 * time.Second)
	c, err := benchkit.StartMeteor(ctx, g, benchkit.MeteorOptions{
		Bin: bin, Dir: dir, IDs: benchkit.MeteorIDs("drain", stormServers), Regions: []string{"bench"}, Agents: true, PKI: p.dir,
	})
	if err != nil {
		return nil, err
	}
	li, err := c.WaitLeader(ctx)
	if err != nil {
		return nil, err
	}
	target := li
	if cfg.drainServer == "follower" {
		target = (li + 1) % stormServers
	}
	res.Server, res.WasLeader = c.Servers[target].ID, target == li
	if err := putFleetIntent(ctx, cfg, c, li, target); err != nil {
		return nil, err
	}
	m := &stormMode{Key: "drain", Mode: "graceful shutdown", Agents: len(ids), Victim: res.Server, PerServer: map[string]int{}}
	fl, live, err := connectStormFleet(ctx, cfg, c.Servers[target].AgentAddr, p, storm0RTT, ids, certs, 7, m, log)
	if err != nil {
		return nil, err
	}
	defer fl.close()
	res.Moved = m
	if _, err := c.Settle(ctx, time.Second, 2*time.Minute); err != nil {
		return nil, err
	}
	term0, err := c.RaftTerm(ctx)
	if err != nil {
		return nil, err
	}
	byAddr := map[string]stormTarget{}
	for i, s := range c.Servers {
		addr, err := net.ResolveUDPAddr("udp", s.AgentAddr)
		if err != nil {
			return nil, err
		}
		byAddr[s.AgentAddr] = stormTarget{id: c.Servers[i].ID, addr: addr}
	}

	// Every device reads its control stream until the server tells it to
	// go (GoAway) or closes, then resumes its session elsewhere: the
	// redirects first, the stopping server last and in penalty.
	dctx, cancel := context.WithTimeout(ctx, cfg.drainTimeout)
	defer cancel()
	var t0 time.Time
	start := make(chan struct{})
	watches := make([]drainWatch, len(live))
	outcomes := make([]stormOutcome, len(live))
	var wg sync.WaitGroup
	for i, sd := range live {
		wg.Go(func() {
			w := sd.watchDrain(dctx)
			<-start
			watches[i] = w
			outcomes[i].detected = w.at.Sub(t0)
			go sd.conn.CloseWithError(wire.CloseNormal, "moving")
			if w.silent {
				outcomes[i].err = errors.New("never told to go")
				return
			}
			sd.reconnect(dctx, t0, drainTargets(w.goAway, byAddr, c.Servers[target].AgentAddr), &outcomes[i])
		})
	}
	fmt.Fprintf(log, "drain: SIGTERM to %s with %d devices on it\n", res.Server, len(live))
	t0 = time.Now()
	close(start)
	proc := c.Servers[target].Proc
	if err := proc.Signal(syscall.SIGTERM); err != nil {
		return nil, err
	}
	select {
	case <-proc.Done():
		res.ExitSec = time.Since(t0).Seconds()
		if err := proc.Err(); err != nil {
			res.ExitError = err.Error()
		}
	case <-time.After(cfg.drainTimeout):
		// Where it is stuck: Go prints every goroutine on SIGQUIT.
		proc.Signal(syscall.SIGQUIT)
		<-proc.Done()
		res.ExitSec = time.Since(t0).Seconds()
		res.ExitError = fmt.Sprintf("still running %s after SIGTERM; goroutines dumped to %s", cfg.drainTimeout, proc.LogPath)
	}
	fmt.Fprintf(log, "drain: %s exited after %.2f s\n", res.Server, res.ExitSec)
	wg.Wait()
	var told []time.Duration
	for _, w := range watches {
		switch {
		case w.goAway != nil:
			res.GoAways++
			if len(w.goAway.Redirect) > 0 {
				res.Redirected++
			}
		case w.silent:
			res.Silent++
			continue
		default:
			res.ClosedOnly++
		}
		told = append(told, w.at.Sub(t0))
	}
	slices.Sort(told)
	res.GoAway50ms, res.GoAwayMaxms = benchkit.MS(benchkit.Percentile(told, 50)), benchkit.MS(benchkit.Percentile(told, 100))
	summarizeStorm(m, outcomes)
	if term1, err := c.RaftTerm(ctx); err == nil {
		res.Elections = benchkit.Elections(term0, term1)
	}
	if i, err := c.WaitLeader(ctx); err == nil {
		res.LeaderAfter = c.Servers[i].ID
	}
	drainLine(out, res)
	return res, nil
}

// drainWatch is what a device heard from its stopping server.
type drainWatch struct {
	goAway *wire.GoAway
	at     time.Time // when the GoAway or the close came
	silent bool      // neither came before the deadline
}

// watchDrain reads the device's control stream until a GoAway or the
// connection's end, skipping pushes.
func (sd *stormDev) watchDrain(ctx context.Context) drainWatch {
	dl, _ := ctx.Deadline()
	sd.sess.str.SetReadDeadline(dl)
	for {
		m, err := sd.sess.r.Read()
		if err != nil {
			return drainWatch{at: time.Now(), silent: ctx.Err() != nil}
		}
		if g, ok := m.(*wire.GoAway); ok {
			return drainWatch{goAway: g, at: time.Now()}
		}
	}
}

// drainTargets orders the servers a device tries after its server told
// it to go: the GoAway's redirects, then the other servers, then the
// stopping one (stormDev.reconnect puts the last in penalty).
func drainTargets(g *wire.GoAway, byAddr map[string]stormTarget, stopping string) []stormTarget {
	var out []stormTarget
	seen := map[string]bool{stopping: true}
	if g != nil {
		for _, a := range g.Redirect {
			if t, ok := byAddr[a]; ok && !seen[a] {
				out, seen[a] = append(out, t), true
			}
		}
	}
	for a, t := range byAddr {
		if !seen[a] {
			out, seen[a] = append(out, t), true
		}
	}
	return append(out, byAddr[stopping])
}

func drainLine(out io.Writer, r *drainResult) {
	m := r.Moved
	role := "a follower"
	if r.WasLeader {
		role = "the leader"
	}
	fmt.Fprintf(out, "\nGraceful shutdown: SIGTERM to %s (%s) with %d sessions on it\n", r.Server, role, m.Opened+m.NotOpened)
	fmt.Fprintf(out, "  exited after %.2f s%s; leader afterwards %s, %d election(s)\n", r.ExitSec, map[bool]string{true: " (" + r.ExitError + ")", false: ""}[r.ExitError != ""], r.LeaderAfter, r.Elections)
	fmt.Fprintf(out, "  told to go: %d GoAway (%d with redirects), %d closed without one, %d never told; p50 %.0f ms, last %.0f ms\n",
		r.GoAways, r.Redirected, r.ClosedOnly, r.Silent, r.GoAway50ms, r.GoAwayMaxms)
	fmt.Fprintf(out, "  moved: %d of %d resumed elsewhere (%d the same session, %d resyncs, %d with 0-RTT), first Delta p50 %.0f ms, p99 %.0f ms, last %s\n",
		m.Opened, m.Opened+m.NotOpened, m.Resumed, m.Resyncs, m.Used0RTT, m.Resumed50ms, m.Resumed99ms, m.timeText())
}

// drainVerdict is the one-line answer for part 5's goal.
func drainVerdict(r *drainResult) string {
	m := r.Moved
	return fmt.Sprintf("graceful shutdown goal %s: SIGTERM to %s with %s sessions: exited after %.2f s (goal <= %.0f s), %d of %d sessions resumed elsewhere, %d the same session (goal: all)",
		verdictState(r.met()), r.Server, benchkit.Thousands(r.Agents), r.ExitSec, drainGoal.Seconds(), m.Opened, m.Opened+m.NotOpened, m.Resumed)
}

// drainNotes say how to read part 5.
func drainNotes(r *drainResult) []string {
	if r == nil {
		return nil
	}
	return []string{
		"Graceful shutdown: a fresh three-server cluster (`meteor server` processes); " + benchkit.Thousands(r.Agents) + " wire-level devices with session tickets connect to one server and converge, then that server gets SIGTERM. " +
			"Each device reads its control stream until a GoAway or the connection's end, then resumes its session as the agent does: the GoAway's redirects first, the stopping server last and in penalty, with 0-RTT (Hello with session ID, resume token and inventory, and Pull, at once). Times are from the SIGTERM.",
	}
}

package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"github.com/meteor-edge/meteor/bench/internal/benchkit"
	"github.com/meteor-edge/meteor/bench/internal/wiredev"
	"github.com/meteor-edge/meteor/cluster/api"
	clusterpki "github.com/meteor-edge/meteor/cluster/pki"
)

// meteorCluster is three `meteor server` processes serving agents, and
// the CA that issued their certificates.
type meteorCluster struct {
	*benchkit.MeteorCluster
	ca *clusterpki.CA
}

// startMeteor creates the PKI with the meteor CLI (`meteor ca init`; the
// servers' certificates are issued as they start) and starts three
// servers that form a cluster, each serving agents on its own UDP port
// (benchkit.StartMeteor), then waits until every one reports a leader.
func startMeteor(ctx context.Context, g *benchkit.Group, bin, dir string) (*meteorCluster, error) {
	pki := filepath.Join(dir, "pki")
	if err := benchkit.InitMeteorCA(ctx, bin, pki); err != nil {
		return nil, err
	}
	caPEM, err1 := os.ReadFile(filepath.Join(pki, "ca.pem"))
	caKey, err2 := os.ReadFile(filepath.Join(pki, "ca-key.pem"))
	if err := errors.Join(err1, err2); err != nil {
		return nil, fmt.Errorf("read the CA: %w", err)
	}
	mc := &meteorCluster{}
	var err error
	if mc.ca, err = clusterpki.LoadCA(caPEM, caKey); err != nil {
		return nil, err
	}
	if mc.MeteorCluster, err = benchkit.StartMeteor(ctx, g, benchkit.MeteorOptions{Bin: bin, Dir: dir, Agents: true, PKI: pki}); err != nil {
		return nil, err
	}
	return mc, nil
}

// meteorSide is the cluster with its fleet connected.
type meteorSide struct {
	mc  *meteorCluster
	fl  *wiredev.Fleet
	doc *desired
}

func (s *meteorSide) apply(ctx context.Context, version int) (uint64, error) {
	doc, err := s.doc.intentDoc(version)
	if err != nil {
		return 0, err
	}
	// Round-robin over the servers, as an operator's writes would land.
	res, err := s.mc.Servers[version%len(s.mc.Servers)].API.PutIntent(ctx, intentName, doc, nil)
	if err != nil {
		return 0, fmt.Errorf("put intent %q: %w", intentName, err)
	}
	return res.Revision, nil
}

func (s *meteorSide) logs() []*benchkit.TargetLog { return s.fl.ReportedLogs() }

func (s *meteorSide) appliedLogs() []*benchkit.TargetLog { return s.fl.AppliedLogs() }

func (s *meteorSide) serverCPU() (time.Duration, error) { return s.mc.CPUTime() }

func (s *meteorSide) udpPorts() (servers, devices []int) { return s.mc.AgentPorts(), s.fl.Ports() }

// durablePoll is the least time between two reads of the fleet status
// while a change is watched: each read has the server compare every
// device's desired state with its report, and its CPU is the measured
// system's.
const durablePoll = 50 * time.Millisecond

// watchDurable reads the fleet status (GET /v1/status: every intent's
// progress, without the per-status series the intent's own progress
// endpoint builds) from a follower's own replica (?stale=true: the
// leader is not asked) with blocking reads, at most one every
// durablePoll, and notes when it first showed 50, 99 and 100 % of n
// devices converged at target: their reports committed through Raft and
// applied to that replica.
func (s *meteorSide) watchDurable(ctx context.Context, target uint64, n int, start time.Time) func(time.Time) durableTimes {
	wctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	var mu sync.Mutex
	var out durableTimes // guarded by mu
	need := func(p float64) int { return max(int(math.Ceil(p/100*float64(n))), 1) }
	server := s.mc.Servers[0].API
	if li, err := s.mc.Leader(ctx); err == nil {
		server = s.mc.Servers[(li+1)%len(s.mc.Servers)].API
	}
	go func() {
		defer close(done)
		var index uint64
		for wctx.Err() == nil {
			t0 := time.Now()
			st, err := server.Status(wctx, api.ReadOptions{Stale: true, WaitIndex: index, Wait: 10 * time.Second})
			at := time.Since(start).Seconds()
			mu.Lock()
			switch {
			case err != nil && wctx.Err() != nil:
				mu.Unlock()
				return
			case err != nil:
				out.Err = err
			default:
				out.Reads++
				index = st.Index
				if p := intentOf(st, intentName); p != nil && p.Revision >= target {
					out.Last = p.Converged
					for _, t := range []struct {
						pct float64
						at  **float64
					}{{50, &out.P50}, {99, &out.P99}, {100, &out.P100}} {
						if *t.at == nil && p.Converged >= need(t.pct) {
							*t.at = &at
						}
					}
				}
			}
			full := out.P100 != nil
			mu.Unlock()
			if full || benchkit.Sleep(wctx, durablePoll-time.Since(t0)) != nil {
				return
			}
		}
	}()
	return func(deadline time.Time) durableTimes {
		t := time.NewTimer(time.Until(deadline))
		select {
		case <-done:
		case <-t.C:
		}
		t.Stop()
		cancel()
		<-done
		mu.Lock()
		defer mu.Unlock()
		return out
	}
}

func (s *meteorSide) raftTerm(ctx context.Context) (uint64, error) { return s.mc.RaftTerm(ctx) }

func (s *meteorSide) commitIndex(ctx context.Context) (uint64, error) {
	return s.mc.CommitIndex(ctx)
}

func (s *meteorSide) reconnects() int64 { return s.fl.Reconnects() }

func (s *meteorSide) deltas() (notified, pulled int64) { return s.fl.Deltas() }

func (s *meteorSide) unreported(target uint64, n int) []string { return s.fl.Unreported(target, n) }

func (s *meteorSide) ports() (string, []int) { return "udp", s.mc.AgentPorts() }

// intentOf returns the progress of the intent name in st, or nil.
func intentOf(st *api.FleetStatus, name string) *api.IntentProgress {
	for i := range st.Intents {
		if st.Intents[i].Name == name {
			return &st.Intents[i]
		}
	}
	return nil
}

// serverCounts reads the intent's progress from the cluster (a
// linearizable read): how many devices it targets, and how many the
// cluster's committed records show acknowledged and converged at the
// intent's current revision.
func (s *meteorSide) serverCounts(ctx context.Context) (*api.IntentProgress, error) {
	p, err := s.mc.Servers[0].API.IntentProgress(ctx, intentName, api.ReadOptions{})
	if err != nil {
		return nil, fmt.Errorf("intent progress: %w", err)
	}
	return p, nil
}

// runMeteor starts the cluster, connects the fleet, converges it on
// version 1, and measures cfg.changes changes per loss level, of which
// the median is the level's result (medianChange).
func runMeteor(ctx context.Context, cfg *config, g *benchkit.Group, bin, dir string, lossy *lossTable, levels []int, rep *report, out, log io.Writer) ([]*levelResult, string, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, "", err
	}
	doc, err := newDesired(cfg.bodySize)
	if err != nil {
		return nil, "", err
	}
	fmt.Fprintln(log, "meteor: starting 3 servers")
	mc, err := startMeteor(ctx, g, bin, dir)
	if err != nil {
		return nil, "", err
	}
	s := &meteorSide{mc: mc, doc: doc}
	// Version 1 exists before the devices connect: each one's first
	// session brings it.
	rev1, err := s.apply(ctx, 1)
	if err != nil {
		return nil, "", err
	}
	// Connect only once every replica has it: a session that registers
	// while its server applies the intent can miss the Notify, and would
	// then wait for its 30 s pull.
	if err := mc.WaitRevision(ctx, rev1); err != nil {
		return nil, "", err
	}

	fmt.Fprintf(log, "meteor: issuing %d device certificates\n", cfg.devices)
	ids := make([]string, cfg.devices)
	for i := range ids {
		ids[i] = deviceID(i, cfg.devices)
	}
	certs, err := wiredev.Issue(mc.ca, ids)
	if err != nil {
		return nil, "", err
	}
	fcfg := wiredev.Config{Roots: mc.ca.Pool(), Sockets: cfg.sockets, Dials: cfg.concurrency, DialTimeout: 30 * time.Second}
	for _, a := range mc.AgentAddrs() {
		ua, err := net.ResolveUDPAddr("udp", a)
		if err != nil {
			return nil, "", err
		}
		fcfg.Servers = append(fcfg.Servers, ua)
	}
	labels := make([]map[string]string, cfg.groups)
	for g := range labels {
		labels[g] = deviceLabels(g, cfg.groups)
	}
	devs := make([]*wiredev.Device, cfg.devices)
	for i := range devs {
		devs[i] = wiredev.NewDevice(ids[i], certs[i], labels[i%cfg.groups])
	}
	fl, err := wiredev.NewFleet(fcfg, devs)
	if err != nil {
		return nil, "", err
	}
	s.fl = fl
	defer fl.Close()

	fleetCtx, stopFleet := context.WithCancel(ctx)
	defer func() {
		stopFleet()
		fl.Wait()
	}()
	fmt.Fprintf(log, "meteor: connecting %d devices, %d at a time over %d sockets\n", cfg.devices, cfg.concurrency, cfg.sockets)
	t0 := time.Now()
	fl.Start(fleetCtx)
	if err := waitAll(ctx, s.logs(), rev1, cfg.timeout, "meteor: converging on version 1", log); err != nil {
		return nil, "", fmt.Errorf("%w (last device error: %v)", err, fl.LastErr())
	}
	if n := fl.DialFailures(); n > 0 {
		fmt.Fprintf(log, "meteor: %d dials failed and were retried, e.g. %v\n", n, fl.LastErr())
	}
	fmt.Fprintf(log, "meteor: %d devices connected and converged on version 1 in %.1f s\n", cfg.devices, time.Since(t0).Seconds())
	rep.UDPBuffers.read(ctx, mc.AgentPorts(), fl.Ports(), log)

	var results []*levelResult
	version := 1
	for _, loss := range levels {
		var changes []*levelResult
		for range cfg.changes {
			if _, err := mc.Rest(ctx, cfg.settle); err != nil {
				return nil, "", err
			}
			version++
			res, err := measure(ctx, s, sysMeteor, version, loss, lossy, cfg.timeout, log)
			if err != nil {
				return nil, "", err
			}
			// Cross-check with the cluster's own records once the last
			// commits are in.
			if _, err := mc.Rest(ctx, 0); err != nil {
				return nil, "", err
			}
			p, err := s.serverCounts(ctx)
			if err != nil {
				return nil, "", err
			}
			res.Server = &serverCounts{Revision: p.Revision, Targeted: p.Targeted, Acknowledged: p.Acknowledged, Converged: p.Converged}
			resultRow(out, res)
			changes = append(changes, res)
		}
		results = append(results, medianChange(changes))
	}
	rep.Elections.Record(ctx, "fanout: meteor", mc.MeteorCluster)
	return results, mc.Version, nil
}

func deviceID(i, n int) string { return fmt.Sprintf("dev-%0*d", len(strconv.Itoa(n-1)), i) }

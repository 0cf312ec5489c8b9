package main

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"slices"
	"time"

	"github.com/meteor-edge/meteor/bench/internal/benchkit"
)

// side is one system with its fleet connected and converged, ready for
// changes.
type side interface {
	// apply submits the change to version (1, 2, ...) and returns once
	// the system has accepted it, with the target a device must report
	// (Meteor: the revision of the write; Mosquitto: version).
	apply(ctx context.Context, version int) (target uint64, err error)
	// logs returns every device's confirmed reports, appliedLogs the
	// versions each device applied.
	logs() []*benchkit.TargetLog
	appliedLogs() []*benchkit.TargetLog
	// serverCPU returns the CPU time the system's servers have used.
	serverCPU() (time.Duration, error)
	// reconnects counts the devices' reconnects so far.
	reconnects() int64
	// deltas counts the changes the devices took so far, carried by a
	// Notify and pulled (Meteor; zero for Mosquitto).
	deltas() (notified, pulled int64)
	// ports are the device-facing ports the loss rules match.
	ports() (proto string, ports []int)
}

// durableWatcher is a side whose API shows when the devices' reports are
// durable (Meteor: GET /v1/status counts, per intent, the devices whose
// converged status at its revision is committed through Raft).
type durableWatcher interface {
	// watchDurable starts watching, from start, for n devices converged at
	// target; the returned stop ends the watch, waiting at most until
	// deadline for every device, and returns what it saw.
	watchDurable(ctx context.Context, target uint64, n int, start time.Time) (stop func(deadline time.Time) durableTimes)
}

// durableTimes is what a durableWatcher saw: when the API first showed
// 50, 99 and 100 % of the devices durable (nil where it did not), after
// how many reads, and the last count read.
type durableTimes struct {
	P50, P99, P100 *float64
	Reads          int
	Last           int
	Err            error
}

// udpSide is a side whose devices and servers speak UDP: the drops of
// its sockets' receive buffers are counted during each change.
type udpSide interface {
	udpPorts() (servers, devices []int)
}

// unreportedSide is a side that can name the devices whose report of a
// change did not come back.
type unreportedSide interface {
	unreported(target uint64, n int) []string
}

// electionCounter is a side whose servers elect leaders.
type electionCounter interface {
	// raftTerm returns the servers' highest Raft term: the elections
	// held in a period are its growth (benchkit.Elections).
	raftTerm(ctx context.Context) (uint64, error)
	// commitIndex returns the servers' highest Raft commit index: the
	// entries committed in a period are its growth.
	commitIndex(ctx context.Context) (uint64, error)
}

// levelResult is one measured change: the median of a loss level's
// changes, with the others' figures in Others (medianChange).
type levelResult struct {
	System  string `json:"system"`
	LossPct int    `json:"loss_pct"`
	Devices int    `json:"devices"`
	// Reached counts the devices whose report of the change reached the
	// control plane within the timeout.
	Reached int `json:"reached"`
	// SubmitMs is how long submitting the change took (Meteor: the PUT
	// until its answer, committed; Mosquitto: the retained publishes until
	// their PUBACKs).
	SubmitMs float64 `json:"submit_ms"`
	// P50s, P99s and P100s are the times from submitting the change until
	// that share of all devices had applied it and reported back; nil
	// when that share was not reached.
	P50s  *float64 `json:"p50_s"`
	P99s  *float64 `json:"p99_s"`
	P100s *float64 `json:"p100_s"`
	// AppliedP50s and AppliedP99s are the same for the devices having
	// applied the change (Meteor: a complete Delta taken; Mosquitto: the
	// retained message handled), before their report left.
	AppliedP50s *float64 `json:"applied_p50_s"`
	AppliedP99s *float64 `json:"applied_p99_s"`
	// DurableP50s, DurableP99s and DurableP100s are, for Meteor, the
	// times until the API showed that share of the devices converged at
	// the change's revision: their reports committed through Raft
	// (blocking reads of the fleet status on a follower, at most one
	// every durablePoll); DurableReads counts the reads.
	DurableP50s  *float64 `json:"durable_p50_s,omitempty"`
	DurableP99s  *float64 `json:"durable_p99_s,omitempty"`
	DurableP100s *float64 `json:"durable_p100_s,omitempty"`
	DurableReads int      `json:"durable_reads,omitempty"`
	DurableError string   `json:"durable_error,omitempty"`
	// Server is what Meteor's cluster itself recorded, read after the
	// change: the devices targeted, acknowledged and converged at the
	// intent's revision.
	Server *serverCounts `json:"server_view,omitempty"`
	// ServerCPUs is the servers' CPU time (all three Meteor servers, or
	// the broker) and DriverCPUs this process's (devices, collector)
	// from submitting the change until the last device or the timeout.
	ServerCPUs float64 `json:"server_cpu_s"`
	DriverCPUs float64 `json:"driver_cpu_s"`
	// Reconnects counts device reconnects during the change; Elections
	// the leader elections Meteor's cluster held meanwhile, won or not
	// (nil for Mosquitto, which has none).
	Reconnects int64 `json:"reconnects"`
	Elections  *int  `json:"elections,omitempty"`
	// RaftEntries counts the Raft entries Meteor's cluster committed from
	// submitting the change until the last device was durable (or the
	// timeout): the intent, the status batches, the session batches.
	RaftEntries *uint64 `json:"raft_entries,omitempty"`
	// Others are the figures of the loss level's other changes, in the
	// order measured, when more than one was (-changes).
	Others []changeFigures `json:"other_changes,omitempty"`
	// NotifyDeltas and PulledDeltas count the Deltas Meteor's devices took
	// during the change: from the Notify itself (protocol 1.5), and
	// answering a Pull.
	NotifyDeltas int64 `json:"notify_deltas,omitempty"`
	PulledDeltas int64 `json:"pulled_deltas,omitempty"`
	// Unreported names some of the devices whose report of the change
	// did not come back (Meteor), with what each held at the end.
	Unreported []string `json:"unreported,omitempty"`
	// Packets and Dropped count the packets on the device ports that the
	// loss rules saw and dropped (both directions).
	Packets uint64 `json:"packets,omitempty"`
	Dropped uint64 `json:"dropped,omitempty"`
	// UDP counts the datagrams dropped by full socket receive buffers
	// during the change (Meteor).
	UDP   *benchkit.UDPDrops `json:"udp_drops,omitempty"`
	Load1 float64            `json:"load1"`
}

// serverCounts is the intent's progress as the cluster records it.
type serverCounts struct {
	Revision     uint64 `json:"revision"`
	Targeted     int    `json:"targeted"`
	Acknowledged int    `json:"acknowledged"`
	Converged    int    `json:"converged"`
}

func seconds(d time.Duration, ok bool) *float64 {
	if !ok {
		return nil
	}
	s := d.Seconds()
	return &s
}

// measure submits the change to version on s, with loss percent applied
// through lossy (nil: none), and waits until every device has reported
// it back or timeout passes.
func measure(ctx context.Context, s side, system string, version, loss int, lossy *lossTable, timeout time.Duration, log io.Writer) (*levelResult, error) {
	logs := s.logs()
	res := &levelResult{System: system, LossPct: loss, Devices: len(logs)}
	if loss > 0 {
		proto, ports := s.ports()
		if err := lossy.set(ctx, proto, ports, loss); err != nil {
			return nil, err
		}
		defer func() {
			if err := lossy.clear(context.WithoutCancel(ctx)); err != nil {
				fmt.Fprintf(log, "clear the loss rules: %v\n", err)
			}
		}()
	}
	cpu0, err := s.serverCPU()
	if err != nil {
		return nil, err
	}
	self0, err := benchkit.CPUTime("self")
	if err != nil {
		return nil, err
	}
	re0 := s.reconnects()
	nd0, pd0 := s.deltas()
	ec, counts := s.(electionCounter)
	var term0, index0 uint64
	if counts {
		if term0, err = ec.raftTerm(ctx); err != nil {
			return nil, err
		}
		if index0, err = ec.commitIndex(ctx); err != nil {
			return nil, err
		}
	}
	var udp *benchkit.UDPWatch
	if us, ok := s.(udpSide); ok {
		udp = benchkit.WatchUDP(us.udpPorts())
	}
	start := time.Now()
	target, err := s.apply(ctx, version)
	if err != nil {
		return nil, fmt.Errorf("apply version %d: %w", version, err)
	}
	res.SubmitMs = benchkit.MS(time.Since(start))
	var stopDurable func(time.Time) durableTimes
	if dw, ok := s.(durableWatcher); ok {
		stopDurable = dw.watchDurable(ctx, target, len(logs), start)
	}

	deadline := start.Add(timeout)
	var times []time.Duration
	lastLog := time.Now()
	for {
		times = times[:0]
		for _, l := range logs {
			if at, ok := l.First(target); ok {
				times = append(times, at.Sub(start))
			}
		}
		if len(times) == len(logs) || time.Now().After(deadline) {
			break
		}
		if time.Since(lastLog) > 5*time.Second {
			fmt.Fprintf(log, "%s %d%% loss: %d/%d devices reported after %.0f s\n", system, loss, len(times), len(logs), time.Since(start).Seconds())
			lastLog = time.Now()
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
	if stopDurable != nil {
		d := stopDurable(deadline)
		res.DurableP50s, res.DurableP99s, res.DurableP100s, res.DurableReads = d.P50, d.P99, d.P100, d.Reads
		if d.Err != nil {
			res.DurableError = d.Err.Error()
		}
	}
	if udp != nil {
		drops := udp.Drops()
		res.UDP = &drops
	}
	cpu1, err := s.serverCPU()
	if err != nil {
		return nil, err
	}
	self1, err := benchkit.CPUTime("self")
	if err != nil {
		return nil, err
	}
	if loss > 0 {
		if res.Packets, res.Dropped, err = lossy.counters(ctx); err != nil {
			return nil, err
		}
	}
	res.ServerCPUs, res.DriverCPUs = (cpu1 - cpu0).Seconds(), (self1 - self0).Seconds()
	res.Reconnects = s.reconnects() - re0
	nd1, pd1 := s.deltas()
	res.NotifyDeltas, res.PulledDeltas = nd1-nd0, pd1-pd0
	if counts {
		term1, err := ec.raftTerm(ctx)
		if err != nil {
			return nil, err
		}
		res.Elections = new(benchkit.Elections(term0, term1))
		index1, err := ec.commitIndex(ctx)
		if err != nil {
			return nil, err
		}
		res.RaftEntries = new(index1 - min(index0, index1))
	}
	res.Load1 = benchkit.Load1()
	slices.Sort(times)
	res.Reached = len(times)
	if u, ok := s.(unreportedSide); ok && res.Reached < len(logs) {
		res.Unreported = u.unreported(target, 5)
	}
	res.P50s = seconds(benchkit.PercentileOf(times, len(logs), 50))
	res.P99s = seconds(benchkit.PercentileOf(times, len(logs), 99))
	res.P100s = seconds(benchkit.PercentileOf(times, len(logs), 100))
	var applied []time.Duration
	for _, l := range s.appliedLogs() {
		if at, ok := l.First(target); ok {
			applied = append(applied, at.Sub(start))
		}
	}
	slices.Sort(applied)
	res.AppliedP50s = seconds(benchkit.PercentileOf(applied, len(logs), 50))
	res.AppliedP99s = seconds(benchkit.PercentileOf(applied, len(logs), 99))
	return res, nil
}

// waitAll waits until every log has a confirm of target, or timeout.
func waitAll(ctx context.Context, logs []*benchkit.TargetLog, target uint64, timeout time.Duration, what string, log io.Writer) error {
	start := time.Now()
	lastLog := start
	for {
		n := 0
		for _, l := range logs {
			if _, ok := l.First(target); ok {
				n++
			}
		}
		if n == len(logs) {
			return nil
		}
		if time.Since(start) > timeout {
			return fmt.Errorf("%s: only %d of %d devices reported back after %s", what, n, len(logs), timeout)
		}
		if time.Since(lastLog) > 5*time.Second {
			fmt.Fprintf(log, "%s: %d/%d devices reported\n", what, n, len(logs))
			lastLog = time.Now()
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// changeFigures are the headline figures of one measured change.
type changeFigures struct {
	AppliedP99s *float64 `json:"applied_p99_s"`
	P99s        *float64 `json:"p99_s"`
	DurableP99s *float64 `json:"durable_p99_s,omitempty"`
	ServerCPUs  float64  `json:"server_cpu_s"`
}

// medianChange returns the median of a loss level's changes by 99 %
// applied (a change that did not reach 99 % counts as the slowest), with
// the others' figures in its Others. A single change is its own median.
// One change's figures against the peer's one change swing with this
// shared machine by up to a factor of two between runs of one build
// (docs/performance.md); the median of a few is a steadier row.
func medianChange(changes []*levelResult) *levelResult {
	sorted := slices.Clone(changes)
	slices.SortStableFunc(sorted, func(a, b *levelResult) int {
		switch {
		case a.AppliedP99s == nil && b.AppliedP99s == nil:
			return 0
		case a.AppliedP99s == nil:
			return 1
		case b.AppliedP99s == nil:
			return -1
		}
		return cmp.Compare(*a.AppliedP99s, *b.AppliedP99s)
	})
	m := sorted[(len(sorted)-1)/2]
	m.Others = nil
	for _, c := range changes {
		if c != m {
			m.Others = append(m.Others, changeFigures{AppliedP99s: c.AppliedP99s, P99s: c.P99s, DurableP99s: c.DurableP99s, ServerCPUs: c.ServerCPUs})
		}
	}
	return m
}

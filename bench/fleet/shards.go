package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"github.com/meteor-edge/meteor/agent/sim"
	"github.com/meteor-edge/meteor/bench/internal/benchkit"
)

// maxPerWorker is the most devices one worker process runs. A simulated
// device holds two file descriptors (its UDP socket and its journal), and
// a process may not raise RLIMIT_NOFILE above the hard limit, 20,000 here;
// sharing out the fleet keeps each worker well under it.
const maxPerWorker = 8000

// shards is one simulated fleet run by worker processes, each a sim.Fleet
// of its own devices bound to its own loopback address (so that the
// fleet is not limited to one address's ephemeral ports).
type shards struct {
	workers []*worker
	hc      *http.Client
}

// worker is one worker process.
type worker struct {
	cfg  workerConfig
	proc *benchkit.Proc
	base string // http://addr
}

// fleetSpec says what fleet to start.
type fleetSpec struct {
	devices     int
	profile     string
	seed        uint64
	prefix      string // device IDs start with prefix and the worker's number
	timeScale   float64
	rampBatch   int // per worker
	rampEvery   time.Duration
	sampleEvery time.Duration
	rttProbe    time.Duration
	perWorker   int
}

// workerCount returns how many workers spec needs.
func (s fleetSpec) workerCount() int {
	per := s.perWorker
	if per <= 0 {
		per = maxPerWorker
	}
	return (s.devices + per - 1) / per
}

// startShards starts the workers of spec, with bin as the worker binary
// (this driver's own executable), the devices' data under dataDir and the
// workers' logs in logDir, and waits until every control API answers.
func startShards(ctx context.Context, g *benchkit.Group, bin, dataDir, logDir string, servers []string, pkiDir string, spec fleetSpec) (*shards, error) {
	n := spec.workerCount()
	ports, err := benchkit.FreePorts(n, false)
	if err != nil {
		return nil, err
	}
	sh := &shards{hc: &http.Client{Timeout: 2 * time.Minute}}
	for k := range n {
		devs := spec.devices / n
		if k < spec.devices%n {
			devs++
		}
		wdir := filepath.Join(dataDir, fmt.Sprintf("w%02d", k))
		for _, d := range []string{wdir, logDir} {
			if err := os.MkdirAll(d, 0o700); err != nil {
				return nil, err
			}
		}
		w := &worker{cfg: workerConfig{
			listen: benchkit.Loopback(ports[k]), servers: servers, pkiDir: pkiDir,
			baseDir: wdir, devices: devs, profile: spec.profile, seed: spec.seed + uint64(k),
			prefix: fmt.Sprintf("%s%02d", spec.prefix, k), localIP: net.IPv4(127, 0, 1, byte(k+1)),
			timeScale: spec.timeScale, rampBatch: spec.rampBatch, rampEvery: spec.rampEvery,
			sampleEvery: spec.sampleEvery, rttProbe: spec.rttProbe, logLevel: "warn",
		}}
		w.base = "http://" + w.cfg.listen
		w.proc, err = g.Start(fmt.Sprintf("fleet-worker-%d", k), bin, w.cfg.args(), []string{workerEnv + "=1", "QUIC_GO_DISABLE_RECEIVE_BUFFER_WARNING=true"}, wdir, filepath.Join(logDir, fmt.Sprintf("worker-%02d.log", k)))
		if err != nil {
			return nil, err
		}
		sh.workers = append(sh.workers, w)
	}
	for _, w := range sh.workers {
		if err := benchkit.WaitFor(ctx, time.Minute, 50*time.Millisecond, w.proc, func(ctx context.Context) error {
			_, err := w.summary(ctx, sh.hc)
			return err
		}); err != nil {
			return nil, fmt.Errorf("%s: %w", w.proc.Name, err)
		}
	}
	return sh, nil
}

func (w *worker) get(ctx context.Context, hc *http.Client, path string, out any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, w.base+path, nil)
	if err != nil {
		return err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		return fmt.Errorf("GET %s: %s: %s", path, resp.Status, b)
	}
	return json.NewDecoder(resp.Body).Decode(out)
}

func (w *worker) post(ctx context.Context, hc *http.Client, path string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, w.base+path, nil)
	if err != nil {
		return err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		b, _ := io.ReadAll(resp.Body)
		return fmt.Errorf("POST %s: %s: %s", path, resp.Status, b)
	}
	return nil
}

func (w *worker) summary(ctx context.Context, hc *http.Client) (*workerSummary, error) {
	var s workerSummary
	if err := w.get(ctx, hc, "/summary", &s); err != nil {
		return nil, err
	}
	if !s.Running {
		return nil, fmt.Errorf("%s: fleet stopped: %s", w.proc.Name, s.Err)
	}
	return &s, nil
}

// each runs fn on every worker concurrently and joins the errors.
func (sh *shards) each(fn func(i int, w *worker) error) error {
	errs := make([]error, len(sh.workers))
	var wg sync.WaitGroup
	for i, w := range sh.workers {
		wg.Go(func() { errs[i] = fn(i, w) })
	}
	wg.Wait()
	return errors.Join(errs...)
}

// Summary adds up the workers' summaries.
func (sh *shards) Summary(ctx context.Context) (sim.Summary, int, error) {
	sums := make([]*workerSummary, len(sh.workers))
	err := sh.each(func(i int, w *worker) error {
		var err error
		sums[i], err = w.summary(ctx, sh.hc)
		return err
	})
	if err != nil {
		return sim.Summary{}, 0, err
	}
	total := sim.Summary{Links: map[string]sim.Counts{}}
	goroutines := 0
	for _, s := range sums {
		total.Elapsed = max(total.Elapsed, s.Summary.Elapsed)
		total.Devices += s.Summary.Devices
		total.Started += s.Summary.Started
		total.Connected += s.Summary.Connected
		total.Converged += s.Summary.Converged
		for name, c := range s.Summary.Links {
			t := total.Links[name]
			t.Devices += c.Devices
			t.Started += c.Started
			t.Connected += c.Connected
			t.Converged += c.Converged
			total.Links[name] = t
		}
		goroutines += s.Goroutines
	}
	return total, goroutines, nil
}

// Mark marks revision on every worker; convergence is timed from the
// caller's own clock (see Reports), not from the workers' marks.
func (sh *shards) Mark(ctx context.Context, revision uint64) error {
	return sh.each(func(_ int, w *worker) error {
		return w.post(ctx, sh.hc, "/mark?revision="+strconv.FormatUint(revision, 10))
	})
}

// Reports returns every worker's report.
func (sh *shards) Reports(ctx context.Context) ([]*sim.Report, error) {
	reps := make([]*sim.Report, len(sh.workers))
	err := sh.each(func(i int, w *worker) error {
		reps[i] = &sim.Report{}
		return w.get(ctx, sh.hc, "/report", reps[i])
	})
	return reps, err
}

// Procs returns the worker processes.
func (sh *shards) Procs() []*benchkit.Proc {
	var ps []*benchkit.Proc
	for _, w := range sh.workers {
		ps = append(ps, w.proc)
	}
	return ps
}

// deviceTimes is one device's outcome for a change, in seconds from the
// commit.
type deviceTimes struct {
	ID        string
	Link      string
	Labels    map[string]string
	Converged bool
	Connected bool
	After     *float64 // nil if it did not converge since the mark
}

// devicesSince flattens reports into per-device outcomes, timed from
// commit: a device's convergence time is its worker's mark plus its own
// time after that mark, minus commit.
func devicesSince(reps []*sim.Report, commit time.Time) []deviceTimes {
	var out []deviceTimes
	for _, r := range reps {
		for _, d := range r.DeviceReports {
			dt := deviceTimes{ID: d.ID, Link: d.Link, Labels: d.Labels, Converged: d.Converged, Connected: d.Connected}
			if d.ConvergedAfter != nil {
				at := r.Mark.Add(time.Duration(*d.ConvergedAfter * float64(time.Second)))
				s := max(at.Sub(commit).Seconds(), 0)
				dt.After = &s
			}
			out = append(out, dt)
		}
	}
	return out
}

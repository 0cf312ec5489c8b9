package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/meteor-edge/meteor/bench/internal/benchkit"
)

// levelParams describe one measured run of a system.
type levelParams struct {
	clients  int
	warmup   time.Duration
	duration time.Duration
}

// clientResult is what one simulated client saw inside the window.
type clientResult struct {
	latencies []time.Duration // successful writes only
	errors    map[string]int  // error kind -> count
	samples   map[string]string
}

// levelResult is one row of the results.
type levelResult struct {
	System  string `json:"system"`
	Clients int    `json:"clients"`

	Writes       int     `json:"writes"`
	Errors       int     `json:"errors"`
	WindowSec    float64 `json:"window_s"`
	WritesPerSec float64 `json:"writes_per_s"`
	P50ms        float64 `json:"p50_ms"`
	P90ms        float64 `json:"p90_ms"`
	P99ms        float64 `json:"p99_ms"`
	Maxms        float64 `json:"max_ms"`

	// ErrorKinds counts errors by kind; ErrorSamples holds one message
	// of each kind.
	ErrorKinds   map[string]int    `json:"error_kinds,omitempty"`
	ErrorSamples map[string]string `json:"error_samples,omitempty"`

	// ServerCPUms is the CPU time all three servers used in the window,
	// per successful write; DriverCPUms the same for this process (the
	// load generator), which shares the machine.
	ServerCPUms   float64            `json:"server_cpu_ms_per_write"`
	ServerCPUmsBy map[string]float64 `json:"server_cpu_ms_per_write_by_server"`
	DriverCPUms   float64            `json:"driver_cpu_ms_per_write"`
	// Elections counts the leader elections held during the window: the
	// growth of the servers' highest Raft term.
	Elections int `json:"leader_elections"`
	// Load1 is the 1-minute load average when the level started.
	Load1 float64 `json:"load1_at_start"`
	// Rounds is the number of measured windows pooled into the figures
	// above (-rounds), taken in turn with the other system's;
	// RoundWritesPerSec are the writes/s of each.
	Rounds            int       `json:"rounds"`
	RoundWritesPerSec []float64 `json:"round_writes_per_s"`
}

// window is what one measured window of a system at a level saw: the
// raw material levelResult pools (pool).
type window struct {
	duration  time.Duration
	clients   []clientResult           // what each client saw in the window
	serverCPU map[string]time.Duration // CPU each server used in the window
	driverCPU time.Duration            // this process's CPU in the window
	elections int
	load1     float64
}

// runWindow drives w with p.clients closed-loop clients: each sends a
// write, waits for the answer, and sends the next, round-robin over the
// servers. Writes that complete during the window [warmup,
// warmup+duration) count; the rest is warm-up or drain.
func runWindow(ctx context.Context, hc *http.Client, w *workload, sys *system, p levelParams) (*window, error) {
	procs := sys.procs
	keys := w.keys()
	if keys < p.clients {
		return nil, fmt.Errorf("%d keys cannot give %d clients distinct keys", keys, p.clients)
	}
	begin := time.Now()
	start := begin.Add(p.warmup)
	end := start.Add(p.duration)
	results := make([]clientResult, p.clients)
	var wg sync.WaitGroup
	for c := range p.clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[c] = runClient(ctx, hc, w, c, p.clients, start, end)
		}()
	}

	win := &window{duration: p.duration, load1: benchkit.Load1()}
	cpuAtStart, drvAtStart, werr := sleepThenCPU(ctx, start, procs)
	var termAtStart, termAtEnd uint64
	if werr == nil {
		termAtStart, werr = sys.term(ctx)
	}
	var cpuAtEnd map[string]time.Duration
	var drvAtEnd time.Duration
	if werr == nil {
		cpuAtEnd, drvAtEnd, werr = sleepThenCPU(ctx, end, procs)
	}
	if werr == nil {
		termAtEnd, werr = sys.term(ctx)
		win.elections = benchkit.Elections(termAtStart, termAtEnd)
	}
	wg.Wait()
	if werr != nil {
		return nil, werr
	}
	win.clients = results
	win.serverCPU = map[string]time.Duration{}
	for name, t := range cpuAtEnd {
		win.serverCPU[name] = t - cpuAtStart[name]
	}
	win.driverCPU = drvAtEnd - drvAtStart
	return win, nil
}

// pool makes one row of a system's windows at a level, as if they were
// one window as long as all of them: writes/s over their summed length,
// percentiles over all their writes, CPU per write over all their writes,
// elections summed.
func pool(system string, clients int, wins []*window) *levelResult {
	res := &levelResult{System: system, Clients: clients, Rounds: len(wins)}
	var all []time.Duration
	var length, driver time.Duration
	cpu := map[string]time.Duration{}
	for i, w := range wins {
		if i == 0 {
			res.Load1 = w.load1
		}
		length += w.duration
		driver += w.driverCPU
		res.Elections += w.elections
		for name, t := range w.serverCPU {
			cpu[name] += t
		}
		writes := 0
		for _, c := range w.clients {
			all = append(all, c.latencies...)
			writes += len(c.latencies)
			for k, n := range c.errors {
				if res.ErrorKinds == nil {
					res.ErrorKinds, res.ErrorSamples = map[string]int{}, map[string]string{}
				}
				res.ErrorKinds[k] += n
				res.Errors += n
				res.ErrorSamples[k] = c.samples[k]
			}
		}
		res.RoundWritesPerSec = append(res.RoundWritesPerSec, float64(writes)/w.duration.Seconds())
	}
	slices.Sort(all)
	res.Writes = len(all)
	res.WindowSec = length.Seconds()
	if length > 0 {
		res.WritesPerSec = float64(len(all)) / length.Seconds()
	}
	res.P50ms = benchkit.MS(benchkit.Percentile(all, 50))
	res.P90ms = benchkit.MS(benchkit.Percentile(all, 90))
	res.P99ms = benchkit.MS(benchkit.Percentile(all, 99))
	res.Maxms = benchkit.MS(benchkit.Percentile(all, 100))
	if res.Writes > 0 {
		res.ServerCPUmsBy = map[string]float64{}
		for name, t := range cpu {
			used := benchkit.MS(t) / float64(res.Writes)
			res.ServerCPUmsBy[name] = used
			res.ServerCPUms += used
		}
		res.DriverCPUms = benchkit.MS(driver) / float64(res.Writes)
	}
	return res
}

// sleepThenCPU waits until t, then returns the CPU time each server and
// this process have used so far.
func sleepThenCPU(ctx context.Context, t time.Time, procs []*benchkit.Proc) (servers map[string]time.Duration, driver time.Duration, err error) {
	timer := time.NewTimer(time.Until(t))
	defer timer.Stop()
	select {
	case <-ctx.Done():
		return nil, 0, ctx.Err()
	case <-timer.C:
	}
	servers = map[string]time.Duration{}
	for _, p := range procs {
		d, err := p.CPUTime()
		if err != nil {
			return nil, 0, fmt.Errorf("%s: read CPU time: %w (did it exit? log: %s)", p.Name, err, p.LogPath)
		}
		servers[p.Name] = d
	}
	driver, err = benchkit.CPUTime("self")
	return servers, driver, err
}

// runClient is one closed-loop client.
func runClient(ctx context.Context, hc *http.Client, w *workload, c, clients int, start, end time.Time) clientResult {
	r := clientResult{latencies: make([]time.Duration, 0, 1024)}
	keys := w.keys()
	server := c % len(w.urls)
	for j := 0; ; j++ {
		if ctx.Err() != nil || !time.Now().Before(end) {
			return r
		}
		k := clientKey(c, clients, j, keys)
		t0 := time.Now()
		err := send(ctx, hc, w.method, w.contentType, w.urls[server][k], w.next(k))
		t1 := time.Now()
		server = (server + 1) % len(w.urls)
		if ctx.Err() != nil {
			return r // interrupted: the outcome of this write says nothing
		}
		inWindow := !t1.Before(start) && t1.Before(end)
		if err == nil {
			if inWindow {
				r.latencies = append(r.latencies, t1.Sub(t0))
			}
			continue
		}
		if inWindow {
			kind, msg := classify(err)
			if r.errors == nil {
				r.errors, r.samples = map[string]int{}, map[string]string{}
			}
			r.errors[kind]++
			r.samples[kind] = msg
		}
		// Do not spin on a server that refuses connections.
		select {
		case <-ctx.Done():
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// statusError is a write answered with a status other than 200.
type statusError struct {
	status int
	code   string // the body's error code, if it has one
	body   string
}

func (e *statusError) Error() string {
	return fmt.Sprintf("HTTP %d: %s", e.status, e.body)
}

// send performs one write and reads the whole answer, so the connection
// goes back to the pool for the next request.
func send(ctx context.Context, hc *http.Client, method, contentType, url string, body []byte) error {
	req, err := http.NewRequestWithContext(ctx, method, url, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", contentType)
	resp, err := hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusOK {
		_, err = io.Copy(io.Discard, resp.Body)
		return err
	}
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	_, _ = io.Copy(io.Discard, resp.Body)
	e := &statusError{status: resp.StatusCode, body: strings.TrimSpace(string(b))}
	// Meteor answers {"code": "no_leader", ...}; etcd's gateway
	// {"error": ..., "code": 14, "message": ...}.
	var v struct {
		Code any `json:"code"`
	}
	if json.Unmarshal(b, &v) == nil && v.Code != nil {
		e.code = fmt.Sprint(v.Code)
	}
	return e
}

// classify returns a short, stable kind for err and a sample message.
func classify(err error) (kind, msg string) {
	msg = strings.Join(strings.Fields(err.Error()), " ")
	if len(msg) > 300 {
		msg = msg[:300] + "..."
	}
	var se *statusError
	switch {
	case errors.As(err, &se):
		kind = fmt.Sprintf("HTTP %d", se.status)
		if se.code != "" {
			kind += " " + se.code
		}
	case isTimeout(err):
		kind = "timeout"
	case errors.Is(err, syscall.ECONNREFUSED):
		kind = "connection refused"
	case errors.Is(err, syscall.ECONNRESET):
		kind = "connection reset"
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		kind = "connection closed"
	default:
		kind = "transport error"
	}
	return kind, msg
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.Is(err, context.DeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout())
}

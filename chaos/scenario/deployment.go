package scenario

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/meteor-edge/meteor/chaos"
	"github.com/meteor-edge/meteor/cluster/api"
)

// DeploymentOptions configure CheckDeployment.
type DeploymentOptions struct {
	// Seed drives the clients' choices and names the intents written.
	Seed uint64
	// Duration is how long the workload runs.
	Duration time.Duration
	// Dir receives the report folder if a check fails.
	Dir string
	// Clients and Intents as in Options (0: 4 each).
	Clients, Intents int
	// CheckTimeout bounds the linearizability check (0: 30 s).
	CheckTimeout time.Duration
	// Log receives progress lines; nil discards them.
	Log io.Writer
}

// staticTargets are a deployment's servers: every one is tried; errors
// become unknown or dropped operations like any other.
type staticTargets []string

func (t staticTargets) Alive() []int {
	out := make([]int, len(t))
	for i := range out {
		out[i] = i
	}
	return out
}

func (t staticTargets) HTTPAddr(i int) string { return t[i] }

// CheckDeployment runs the scenarios' workload against a running cluster
// (the HTTP addresses of its servers) while the operator injects faults
// by any means (killing processes, firewall rules, docker network
// disconnect), then checks the history for linearizability and that every
// server, once the cluster has converged, serves the last acknowledged
// value of every intent. It writes and, at the end, deletes intents named
// meteor-chaos-<seed>-<n>; nothing else in the cluster is touched.
func CheckDeployment(ctx context.Context, addrs []string, opts DeploymentOptions) (Result, error) {
	if len(addrs) == 0 {
		return Result{}, errors.New("no servers to check")
	}
	if opts.Duration <= 0 {
		return Result{}, errors.New("duration must be positive")
	}
	if opts.Clients == 0 {
		opts.Clients = 4
	}
	if opts.Intents == 0 {
		opts.Intents = 4
	}
	if opts.CheckTimeout == 0 {
		opts.CheckTimeout = 30 * time.Second
	}
	logf := func(format string, args ...any) {
		if opts.Log != nil {
			fmt.Fprintf(opts.Log, format+"\n", args...)
		}
	}
	names := make([]string, opts.Intents)
	for i := range names {
		names[i] = fmt.Sprintf("meteor-chaos-%d-%d", opts.Seed, i)
	}
	res := Result{Scenario: "deployment", Seed: opts.Seed}
	wl := newWorkload(staticTargets(addrs), opts.Seed, opts.Clients, names)
	defer wl.close()
	wctx, cancel := context.WithTimeout(ctx, opts.Duration)
	logf("running %d clients on %d intents against %d servers for %s; inject faults now", opts.Clients, opts.Intents, len(addrs), opts.Duration)
	wl.run(wctx)
	cancel()
	if ctx.Err() != nil {
		return res, ctx.Err()
	}

	// Wait until every server has applied the same revision, then read
	// every intent linearizably (into the history) and from each server.
	logf("workload done; waiting for the servers to converge")
	healed := time.Now()
	cctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	err := waitSameRevision(cctx, addrs, wl.hc)
	cancel()
	res.Reconverge = time.Since(healed)
	if err != nil {
		res.Violations = append(res.Violations, fmt.Sprintf("servers did not converge within 60 s: %v", err))
	} else {
		var ferr error
		for _, addr := range addrs {
			if ferr = wl.finalReads(ctx, addr); ferr == nil {
				break
			}
		}
		if ferr != nil {
			res.Violations = append(res.Violations, fmt.Sprintf("after convergence: %v", ferr))
		}
		res.Violations = append(res.Violations, checkServersAgree(ctx, addrs, names, wl.hc)...)
	}
	ops, unknown, dropped := wl.history()
	res.Ops, res.Unknown, res.Dropped = len(ops), unknown, dropped
	verdict, info := checkLinearizable(ops, opts.CheckTimeout)
	res.Linearizability = verdict
	if verdict == porcupine.Illegal {
		res.Violations = append(res.Violations, "history is not linearizable (see linearizability.html)")
	}
	for _, name := range names {
		cl := api.NewClient(addrs[0], wl.hc)
		cl.DeleteIntent(ctx, name, nil)
	}
	if len(res.Violations) > 0 {
		dir := filepath.Join(opts.Dir, fmt.Sprintf("report-deployment-%d", opts.Seed))
		faults := chaos.NewFaultLog()
		faults.Record("external", "", "", "faults were injected by the operator, not recorded here")
		if err := writeReport(dir, res, faults, ops, verdict, info); err != nil {
			return res, fmt.Errorf("write report: %w", err)
		}
		res.Report = dir
	}
	logf("checked %d operations (%d unknown, %d dropped): %s, %d violations", res.Ops, res.Unknown, res.Dropped, verdict, len(res.Violations))
	return res, nil
}

// waitSameRevision waits until every server answers its health with the
// same cluster revision and a known leader.
func waitSameRevision(ctx context.Context, addrs []string, hc *http.Client) error {
	var last error
	for {
		var rev uint64
		same := true
		for i, addr := range addrs {
			cl := api.NewClient(addr, hc)
			cl.RetryNoLeader = 0
			h, err := cl.Health(ctx)
			if err != nil || !h.Healthy {
				last, same = fmt.Errorf("%s: %v", addr, err), false
				break
			}
			if i == 0 {
				rev = h.Revision
			} else if h.Revision != rev {
				last, same = fmt.Errorf("%s at revision %d, %s at %d", addrs[0], rev, addr, h.Revision), false
				break
			}
		}
		if same {
			return nil
		}
		select {
		case <-ctx.Done():
			return last
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// checkServersAgree reads every intent from each server's own replica:
// all must hold the same revision.
func checkServersAgree(ctx context.Context, addrs, names []string, hc *http.Client) []string {
	var out []string
	for _, name := range names {
		var want uint64
		for i, addr := range addrs {
			cl := api.NewClient(addr, hc)
			got, err := cl.GetIntent(ctx, name, api.ReadOptions{Stale: true})
			var rev uint64
			if err == nil {
				rev = got.Revision
			} else if apiErr := (*api.Error)(nil); !errors.As(err, &apiErr) || apiErr.StatusCode != http.StatusNotFound {
				out = append(out, fmt.Sprintf("%s: read %s: %v", addr, name, err))
				continue
			}
			if i == 0 {
				want = rev
			} else if rev != want {
				out = append(out, fmt.Sprintf("%s holds %s at revision %d, %s at %d", addr, name, rev, addrs[0], want))
			}
		}
	}
	return out
}

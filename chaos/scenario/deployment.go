package scenario

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/meteor-edge/meteor/chaos"
	"github.com/meteor-edge/meteor/chaos/hosts"
	"github.com/meteor-edge/meteor/cluster/api"
)

// DeploymentOptions configure CheckDeployment and RunDeployment.
type DeploymentOptions struct {
	// Seed drives the fault plan, the clients' choices and names the
	// intents written.
	Seed uint64
	// Duration is how long the workload runs (and the faults with it).
	Duration time.Duration
	// MinOps and MaxDuration as in Options: the workload goes on past
	// Duration, without faults (the plan has ended), until it has
	// completed MinOps operations (0: 50) or MaxDuration has passed (0:
	// Duration plus 30 s).
	MinOps      int
	MaxDuration time.Duration
	// Dir receives the report folder if a check fails.
	Dir string
	// Clients and Intents as in Options (0: 4 each).
	Clients, Intents int
	// CheckTimeout and RecheckTimeout as in Options (0: 30 s, and 4
	// times CheckTimeout for a second check when the first ran out of
	// time).
	CheckTimeout, RecheckTimeout time.Duration
	// Log receives progress lines; nil discards them.
	Log io.Writer

	// TLS, if set, is the client configuration for servers whose HTTP
	// API speaks TLS (cluster.OperatorTLS of the cluster CA), and Token
	// the operator token sent to servers with the ACL on (the checks
	// read every server's state hash: a read token suffices, writes need
	// operator).
	TLS   *tls.Config
	Token string

	// Name is the scenario name in the Result and the report folder's
	// name; "" means "deployment".
	Name string
	// Driver, when set, injects faults: a plan drawn from Seed (see Plan)
	// carried out by a hosts.Runner while the workload runs, every fault
	// undone before the checks. Nil: the operator injects faults by hand.
	Driver hosts.Driver
	// Servers name the servers for the driver's command templates and the
	// fault log, in the order of the addresses; empty: each server's node
	// ID from its health, and the host of its address.
	Servers []hosts.Server
	// Plan configures the fault schedule; its Seed and Duration are
	// replaced by Seed and Duration above.
	Plan hosts.PlanConfig
	// ConvergeTimeout bounds the wait for the servers to agree once the
	// faults are undone; 0 means 60 s.
	ConvergeTimeout time.Duration
	// DeviceBounds, when set, requires every device the cluster knows to
	// be converged, within the bound given for its class (the value of its
	// ClassLabel label; "*" for any other class), counted from when the
	// faults were undone.
	DeviceBounds map[string]time.Duration
	// ClassLabel is the device label naming its class; "" means "link".
	ClassLabel string
}

// DeploymentResult is what RunDeployment found.
type DeploymentResult struct {
	Result
	// Plan is the fault schedule carried out (empty without a driver).
	Plan hosts.Plan
	// FaultLog is the run's fault log.
	FaultLog *chaos.FaultLog
	// Index is the Raft index at which every server's replicated state
	// was compared, and Digest that state's digest (see stateDigest).
	Index  uint64
	Digest string
	// Unverified counts acknowledged writes (times servers) that could
	// not be checked because the server no longer keeps their revision
	// (its --history-limit).
	Unverified int
	// WatchSamples counts the revision samples taken while faults ran.
	WatchSamples int
}

// deploymentTargets are a deployment's servers: every one is tried except
// those the runner has killed, paused or isolated (their requests could
// only time out). Errors become unknown or dropped operations.
type deploymentTargets struct {
	addrs  []string
	runner *hosts.Runner // nil: all are tried
}

func (t deploymentTargets) Alive() []int {
	out := make([]int, 0, len(t.addrs))
	for i := range t.addrs {
		if t.runner == nil || !t.runner.Unavailable(i) {
			out = append(out, i)
		}
	}
	return out
}

func (t deploymentTargets) HTTPURL(i int) string { return api.BaseURL(t.addrs[i]) }

// CheckDeployment runs the scenarios' workload against a running cluster
// (the HTTP addresses of its servers) while the operator injects faults
// by any means (killing processes, firewall rules, docker network
// disconnect), then checks the history for linearizability and, once the
// cluster has converged, that every server holds every acknowledged write
// and the same replicated state. It writes and, at the end, deletes
// intents named meteor-chaos-<seed>-<n>; nothing else in the cluster is
// touched.
func CheckDeployment(ctx context.Context, addrs []string, opts DeploymentOptions) (Result, error) {
	opts.Driver = nil
	res, err := RunDeployment(ctx, addrs, opts)
	return res.Result, err
}

// RunDeployment is CheckDeployment with the faults injected by
// opts.Driver on a plan drawn from opts.Seed. While the faults run it
// also samples every server's revision and every device's acknowledged
// revision, which must never go backwards on one server process. The
// error reports a run that could not be carried out; failed checks are
// Result.Violations.
func RunDeployment(ctx context.Context, addrs []string, opts DeploymentOptions) (DeploymentResult, error) {
	if len(addrs) == 0 {
		return DeploymentResult{}, errors.New("no servers to check")
	}
	if opts.Duration <= 0 {
		return DeploymentResult{}, errors.New("duration must be positive")
	}
	if opts.TLS != nil {
		// With TLS, an address without a scheme is an https:// one.
		addrs = slices.Clone(addrs)
		for i, a := range addrs {
			if !strings.Contains(a, "://") {
				addrs[i] = "https://" + a
			}
		}
	}
	if opts.Clients <= 0 {
		opts.Clients = 4
	}
	if opts.Intents <= 0 {
		opts.Intents = 4
	}
	length := newRunLength(opts.Duration, opts.MaxDuration, opts.MinOps)
	if opts.CheckTimeout <= 0 {
		opts.CheckTimeout = 30 * time.Second
	}
	if opts.RecheckTimeout == 0 {
		opts.RecheckTimeout = 4 * opts.CheckTimeout
	}
	if opts.ConvergeTimeout <= 0 {
		opts.ConvergeTimeout = 60 * time.Second
	}
	if opts.Name == "" {
		opts.Name = "deployment"
	}
	if opts.ClassLabel == "" {
		opts.ClassLabel = "link"
	}
	if opts.Log == nil {
		opts.Log = io.Discard
	}
	logger := hclog.New(&hclog.LoggerOptions{Name: "chaos", Level: hclog.Info, Output: opts.Log}).
		With("scenario", opts.Name, "seed", opts.Seed)
	names := make([]string, opts.Intents)
	for i := range names {
		names[i] = fmt.Sprintf("meteor-chaos-%d-%d", opts.Seed, i)
	}
	faults := chaos.NewFaultLog()
	dres := DeploymentResult{Result: Result{Scenario: opts.Name, Seed: opts.Seed}, FaultLog: faults}
	res := &dres.Result
	wl := newWorkload(deploymentTargets{addrs: addrs}, opts.TLS, opts.Token, opts.Seed, opts.Clients, names)
	defer wl.close()

	var runner *hosts.Runner
	if opts.Driver != nil {
		servers, err := DescribeServers(ctx, addrs, opts.Servers, opts.TLS, opts.Token)
		if err != nil {
			return dres, err
		}
		pc := opts.Plan
		pc.Seed, pc.Duration = opts.Seed, opts.Duration
		if dres.Plan, err = hosts.NewPlan(pc, opts.Driver); err != nil {
			return dres, err
		}
		runner = &hosts.Runner{
			Driver: opts.Driver, Servers: servers, Faults: faults, Logger: logger,
			Leader: func(ctx context.Context) int { return leaderIndex(ctx, addrs, wl) },
		}
		wl.h = deploymentTargets{addrs: addrs, runner: runner}
		for k, e := range dres.Plan.Episodes {
			logger.Info("planned fault", "n", k+1, "at", e.Start.Round(time.Millisecond), "hold", e.Hold.Round(time.Millisecond), "fault", e.Fault)
		}
	} else {
		faults.Record("external", "", "", "faults were injected by the operator, not recorded here")
	}

	watch := &deploymentWatch{addrs: addrs, wl: wl, runner: runner}
	watchCtx, stopWatch := context.WithCancel(ctx)
	var watchWG sync.WaitGroup
	if runner != nil {
		watchWG.Go(func() { watch.run(watchCtx) })
	}
	defer func() { stopWatch(); watchWG.Wait() }()

	logger.Info("running", "clients", opts.Clients, "intents", opts.Intents, "servers", len(addrs), "duration", opts.Duration, "min_ops", length.minOps)
	runCtx, stopRun := context.WithCancel(ctx)
	var wg sync.WaitGroup
	if runner != nil {
		wg.Go(func() {
			if err := runner.Run(runCtx, dres.Plan); err != nil {
				res.Violations = append(res.Violations, "fault actions failed: "+strings.ReplaceAll(err.Error(), "\n", "; "))
			}
		})
	}
	wg.Go(func() { wl.run(runCtx) })
	res.Ran = length.wait(runCtx, logger, wl.completedOps)
	stopRun()
	wg.Wait()
	res.Completed = wl.completedOps()
	if runner != nil {
		res.Faults = runner.Injected()
	}
	if ctx.Err() != nil {
		return dres, ctx.Err()
	}

	// The faults are undone: wait until the servers agree on one state,
	// then read every intent linearizably (into the history).
	healed := time.Now()
	logger.Info("faults undone; waiting for the servers to agree")
	cctx, cancel := context.WithTimeout(ctx, opts.ConvergeTimeout)
	index, digest, err := waitAgreed(cctx, addrs, wl)
	cancel()
	res.Reconverge = time.Since(healed)
	dres.Index, dres.Digest = index, digest
	stopWatch()
	watchWG.Wait()
	if err != nil {
		res.Violations = append(res.Violations, fmt.Sprintf("servers did not agree within %s: %v", opts.ConvergeTimeout, err))
	} else {
		var ferr error
		if l := leaderIndex(ctx, addrs, wl); l >= 0 {
			ferr = wl.finalReads(ctx, addrs[l])
		} else {
			ferr = errors.New("no leader")
		}
		if ferr != nil {
			res.Violations = append(res.Violations, fmt.Sprintf("after convergence: %v", ferr))
		}
	}
	ops, unknown, dropped := wl.history()
	res.Ops, res.Unknown, res.Dropped = len(ops), unknown, dropped
	wv, samples := watch.result()
	res.Violations = append(res.Violations, wv...)
	dres.WatchSamples = samples
	// The devices are timed while the writes are checked.
	var devices sync.WaitGroup
	var deviceViolations []string
	if opts.DeviceBounds != nil {
		devices.Go(func() {
			// Result.Devices and FleetConverge: the devices checked, and
			// how long after the faults were undone the last class
			// converged.
			res.Devices, res.FleetConverge, deviceViolations = checkDevices(ctx, addrs, wl, healed, opts.DeviceBounds, opts.ClassLabel, logger)
		})
	}
	if err == nil {
		v, unverified := checkAcknowledgedHTTP(ctx, addrs, wl, ops)
		res.Violations = append(res.Violations, v...)
		dres.Unverified = unverified
	}
	devices.Wait()
	res.Violations = append(res.Violations, deviceViolations...)
	lin := checkLinearizable(porcupineCheck, ops, opts.CheckTimeout, opts.RecheckTimeout)
	lin.record(res, logger)
	for _, name := range names {
		for _, addr := range addrs {
			dctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			_, derr := wl.apiClient(addr).DeleteIntent(dctx, name, nil)
			cancel()
			if derr == nil || apiCode(derr) == api.CodeNotFound {
				break
			}
		}
	}
	logger.Info("checked", "ops", res.Ops, "unknown", res.Unknown, "dropped", res.Dropped,
		"linearizability", res.Linearizability, "faults", res.Faults, "reconverge", res.Reconverge,
		"devices", res.Devices, "violations", len(res.Violations))
	if len(res.Violations) > 0 {
		dir := filepath.Join(opts.Dir, fmt.Sprintf("report-%s-%d", opts.Name, opts.Seed))
		if err := writeReport(dir, *res, faults, ops, lin.verdict, lin.info, nil); err != nil {
			return dres, fmt.Errorf("write report: %w", err)
		}
		if err := writeJSONFile(filepath.Join(dir, "plan.json"), dres.Plan); err != nil {
			return dres, fmt.Errorf("write report: %w", err)
		}
		res.Report = dir
		for _, v := range res.Violations {
			logger.Error("violation", "detail", v)
		}
		logger.Error("run failed", "report", dir)
	}
	return dres, nil
}

func writeJSONFile(path string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, b, 0o644)
}

// DescribeServers names a deployment's servers for drivers and the fault
// log: those given (one per address, or none), with a missing node ID
// taken from the server's health, a missing host from its address.
//
// tlsConf and token reach servers whose HTTP API speaks TLS and wants a
// token, as in DeploymentOptions.
func DescribeServers(ctx context.Context, addrs []string, given []hosts.Server, tlsConf *tls.Config, token string) ([]hosts.Server, error) {
	if len(given) > 0 && len(given) != len(addrs) {
		return nil, fmt.Errorf("%d servers described for %d addresses", len(given), len(addrs))
	}
	hc := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: tlsConf}}
	defer hc.CloseIdleConnections()
	out := make([]hosts.Server, len(addrs))
	for i, addr := range addrs {
		if len(given) > 0 {
			out[i] = given[i]
		}
		out[i].Addr = addr
		if out[i].Host == "" {
			_, hostPort, ok := strings.Cut(addr, "://")
			if !ok {
				hostPort = addr
			}
			host, _, err := net.SplitHostPort(strings.TrimRight(hostPort, "/"))
			if err != nil {
				return nil, fmt.Errorf("server %q: %w", addr, err)
			}
			out[i].Host = host
		}
		if out[i].ID != "" {
			continue
		}
		hctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		cl := api.NewClient(addr, hc)
		cl.Token = token
		h, err := cl.Health(hctx)
		cancel()
		if h == nil || h.Node == "" { // an unhealthy server still names itself
			return nil, fmt.Errorf("server %s: %w", addr, err)
		}
		out[i].ID = h.Node
	}
	return out, nil
}

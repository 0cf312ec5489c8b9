package docker

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"flag"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"text/tabwriter"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/meteor-edge/meteor/agent/sim"
	"github.com/meteor-edge/meteor/chaos/hosts"
	"github.com/meteor-edge/meteor/chaos/scenario"
	"github.com/meteor-edge/meteor/cluster"
	"github.com/meteor-edge/meteor/cluster/api"
	meteorpki "github.com/meteor-edge/meteor/cluster/pki"
	"github.com/meteor-edge/meteor/fsm/intent"
)

var (
	dockerFlag   = flag.Bool("chaos.docker", false, "run the multi-host suite on Docker (make chaos)")
	seedFlag     = flag.Uint64("chaos.seed", 1, "seed of the multi-host fault plan and workload")
	durationFlag = flag.Duration("chaos.duration", 30*time.Second, "how long the multi-host faults and workload run")
	devicesFlag  = flag.Int("chaos.devices", 300, "simulated devices in the fleet simulator container")
	reportFlag   = flag.String("chaos.report", "", "where a failing run's report folder goes (default: a temporary dir, kept on failure)")
	logsFlag     = flag.String("chaos.logs", "", "save every container's whole log into this folder, failing or not")
	simLogFlag   = flag.String("chaos.sim-log-level", "warn", "log level of the fleet simulator's agents")
)

// Ports every server container listens on.
const (
	httpPort   = 8470
	raftPort   = 8471
	gossipPort = 8472
	agentPort  = 8473
)

// fleetBound is how long, after the faults are undone, every device of the
// simulator's fiber fleet has to converge in the servers' view. In every
// run so far about 70 of the 300 devices showed as not converged for 21-22
// s after the faults were undone (their last reports not yet committed),
// then all at once as converged; the bound leaves room for a loaded 2-core
// machine.
const fleetBound = 45 * time.Second

// dockerCluster is a Meteor cluster of containers on a private network.
type dockerCluster struct {
	t       *testing.T
	tag     string // unique suffix of every Docker object
	image   string
	network string
	names   []string // server containers
	ips     []string
	sim     string // fleet simulator container, "" until started
	dir     string // build context (the static binary), pki, data dirs
	// hc reaches the servers' HTTP APIs, which speak TLS: it trusts
	// the cluster CA (cluster.OperatorTLS).
	hc *http.Client
	// gossipKey encrypts the servers' gossip (base64).
	gossipKey string
}

func docker(args ...string) (string, error) {
	var out bytes.Buffer
	cmd := exec.Command("docker", args...)
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	if err != nil {
		return out.String(), fmt.Errorf("docker %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(out.String()))
	}
	return strings.TrimSpace(out.String()), nil
}

func (c *dockerCluster) must(args ...string) string {
	c.t.Helper()
	out, err := docker(args...)
	if err != nil {
		fatalf(c.t, "%v", err)
	}
	return out
}

func (c *dockerCluster) meteor(args ...string) {
	c.t.Helper()
	if out, err := exec.Command(filepath.Join(c.dir, "meteor"), args...).CombinedOutput(); err != nil {
		fatalf(c.t, "meteor %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

func skipUnlessDocker(t *testing.T) {
	t.Helper()
	if !*dockerFlag {
		t.Skip("multi-host suite: run it with make chaos (go test ./chaos/docker -chaos.docker)")
	}
	if _, err := exec.LookPath("docker"); err != nil {
		t.Skip("docker is not installed: the multi-host suite needs a Docker daemon")
	}
	if _, err := docker("info"); err != nil {
		t.Skipf("the Docker daemon is not reachable: %v", err)
	}
}

// startDockerCluster builds the static binary and the image FROM scratch
// around it as make image does (deploy/build-image.sh, the repository's
// Dockerfile), a CA with a certificate per server, then starts n servers
// on a private network, each serving agents over QUIC, with the PKI
// mounted read-only and a data dir of the host each, as the user running
// the test (the image's own user could not read the 0600 key files).
func startDockerCluster(t *testing.T, n int) *dockerCluster {
	t.Helper()
	b := make([]byte, 4)
	rand.Read(b)
	c := &dockerCluster{t: t, tag: hex.EncodeToString(b), dir: t.TempDir()}
	c.image, c.network = "meteor-chaos:"+c.tag, "meteor-chaos-"+c.tag
	t.Cleanup(c.cleanup)

	if out, err := exec.Command("../../deploy/build-image.sh", c.image, c.dir).CombinedOutput(); err != nil {
		fatalf(t, "build the image: %v\n%s", err, out)
	}
	subnet := fmt.Sprintf("172.29.%d", 16+int(b[0])%200)
	pki := filepath.Join(c.dir, "pki")
	c.meteor("ca", "init", "--dir", pki)
	gk := make([]byte, 32)
	rand.Read(gk)
	c.gossipKey = base64.StdEncoding.EncodeToString(gk)
	caPEM, err := os.ReadFile(filepath.Join(pki, "ca.pem"))
	if err != nil {
		fatalf(t, "%v", err)
	}
	pool, err := meteorpki.PoolFromPEM(caPEM)
	if err != nil {
		fatalf(t, "%v", err)
	}
	c.hc = &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{TLSClientConfig: cluster.OperatorTLS(pool)}}
	var gossip []string
	for i := range n {
		c.names = append(c.names, fmt.Sprintf("meteor-%s-%d", c.tag, i+1))
		c.ips = append(c.ips, fmt.Sprintf("%s.%d", subnet, 10+i))
		gossip = append(gossip, fmt.Sprintf("%s:%d", c.ips[i], gossipPort))
		c.meteor("ca", "issue-server", "--dir", pki, "--id", fmt.Sprintf("s%d", i+1), "--hosts", c.ips[i])
	}
	c.must("network", "create", "--driver", "bridge", "--subnet", subnet+".0/24", "--label", "meteor-chaos="+c.tag, c.network)
	regions := sim.Regions() // the simulator takes server i to be in regions[i%3]
	for i, name := range c.names {
		ip, id := c.ips[i], fmt.Sprintf("s%d", i+1)
		data := filepath.Join(c.dir, "data-"+id)
		if err := os.Mkdir(data, 0o700); err != nil {
			fatalf(t, "%v", err)
		}
		c.must("run", "-d", "--name", name, "--network", c.network, "--ip", ip, "--label", "meteor-chaos="+c.tag,
			"--user", c.user(), "-v", pki+":/pki:ro", "-v", data+":/var/lib/meteor", c.image,
			"server", "--node-id", id, "--region", regions[i%len(regions)], "--data-dir", "/var/lib/meteor",
			"--http-addr", fmt.Sprintf("%s:%d", ip, httpPort), "--raft-addr", fmt.Sprintf("%s:%d", ip, raftPort),
			"--gossip-addr", fmt.Sprintf("%s:%d", ip, gossipPort), "--agent-addr", fmt.Sprintf("%s:%d", ip, agentPort),
			"--ca-file", "/pki/ca.pem", "--cert-file", "/pki/server-"+id+".pem", "--key-file", "/pki/server-"+id+"-key.pem",
			"--cluster-secret-file", "/pki/cluster.secret", "--trust-reported-labels", "--encrypt", c.gossipKey,
			"--join", strings.Join(gossip, ","), "--bootstrap-expect", fmt.Sprint(n),
			// Keep every revision, so that every acknowledged write can be
			// checked; give up on a commit before the checker's clients do.
			"--history-limit", "100000", "--apply-timeout", "3s", "--log-level", "warn")
	}
	c.waitHealthy(60 * time.Second)
	return c
}

// startSim starts the fleet simulator in its own container on the
// network: devices real agents over QUIC to every server's agent address,
// their journals on a tmpfs.
func (c *dockerCluster) startSim(devices int, seed uint64) {
	c.t.Helper()
	var agents []string
	for _, ip := range c.ips {
		agents = append(agents, fmt.Sprintf("%s:%d", ip, agentPort))
	}
	c.sim = fmt.Sprintf("meteor-%s-sim", c.tag)
	ip := c.ips[0][:strings.LastIndex(c.ips[0], ".")] + ".50"
	c.must("run", "-d", "--name", c.sim, "--network", c.network, "--ip", ip, "--label", "meteor-chaos="+c.tag,
		"--user", c.user(), "-v", filepath.Join(c.dir, "pki")+":/pki:ro", "--tmpfs", "/sim", c.image,
		"sim", "--servers", strings.Join(agents, ","), "--pki", "/pki", "--profile", sim.LinkFiber,
		"--devices", fmt.Sprint(devices), "--seed", fmt.Sprint(seed), "--base-dir", "/sim", "--ramp", "100",
		"--log-level", *simLogFlag, "--log-file", simLogFile())
}

// user is the --user the containers run as: the test's own, which owns
// the PKI's key files and the data dirs.
func (c *dockerCluster) user() string { return fmt.Sprintf("%d:%d", os.Getuid(), os.Getgid()) }

// simLogFile is where the simulated agents log: into the container's own
// log when -chaos.logs keeps it, else beside their journals.
func simLogFile() string {
	if *logsFlag != "" {
		return "-"
	}
	return "/sim/sim.log"
}

func (c *dockerCluster) containers() []string {
	out := append([]string(nil), c.names...)
	if c.sim != "" {
		out = append(out, c.sim)
	}
	return out
}

// saveLogs writes every container's log into dir.
func (c *dockerCluster) saveLogs(dir string) {
	for _, name := range c.containers() {
		logs, _ := docker("logs", name)
		os.WriteFile(filepath.Join(dir, name+".log"), []byte(logs), 0o644)
	}
}

func (c *dockerCluster) cleanup() {
	if *logsFlag != "" {
		if err := os.MkdirAll(*logsFlag, 0o755); err == nil {
			c.saveLogs(*logsFlag)
			c.t.Logf("container logs saved in %s", *logsFlag)
		}
	}
	for _, name := range c.containers() {
		if c.t.Failed() {
			if logs, err := docker("logs", "--tail", "30", name); err == nil {
				c.t.Logf("logs of %s:\n%s", name, logs)
			}
		}
		docker("rm", "-f", name)
	}
	docker("network", "rm", c.network)
	docker("rmi", "-f", c.image)
}

func (c *dockerCluster) addrs() []string {
	out := make([]string, len(c.ips))
	for i, ip := range c.ips {
		out[i] = fmt.Sprintf("https://%s:%d", ip, httpPort)
	}
	return out
}

func (c *dockerCluster) client(i int) *api.Client {
	cl := api.NewClient(c.addrs()[i], c.hc)
	cl.RetryNoLeader = 0
	return cl
}

func (c *dockerCluster) waitHealthy(limit time.Duration) {
	c.t.Helper()
	deadline := time.Now().Add(limit)
	for {
		ok := 0
		for i := range c.ips {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			h, err := c.client(i).Health(ctx)
			cancel()
			if err == nil && h.Healthy {
				ok++
			}
		}
		if ok == len(c.ips) {
			return
		}
		if time.Now().After(deadline) {
			fatalf(c.t, "%d of %d servers healthy after %s", ok, len(c.ips), limit)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// putFleetIntent writes revision v of the intent every simulated device
// takes, through whichever server accepts it.
func (c *dockerCluster) putFleetIntent(ctx context.Context, v int) error {
	in := &intent.Intent{Name: "fleet-config", Selector: map[string]string{"region": "*"}, Resources: []intent.Resource{{
		ID: "config", Type: "sim", Class: "config", Spec: map[string]any{"value": fmt.Sprintf("v%d", v), "applyTime": "50ms"},
	}}}
	doc, err := in.Canonical()
	if err != nil {
		return err
	}
	// Under faults a write may fail on every server for a while: try
	// again every 200 ms, for a minute at most.
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	var last error
	for ctx.Err() == nil {
		for i := range c.ips {
			wctx, cancel := context.WithTimeout(ctx, 3*time.Second)
			_, last = c.client(i).PutIntent(wctx, in.Name, doc, nil)
			cancel()
			if last == nil {
				return nil
			}
		}
		select {
		case <-ctx.Done():
		case <-time.After(200 * time.Millisecond):
		}
	}
	return fmt.Errorf("write fleet intent v%d: %w", v, last)
}

// TestMultiHost runs `meteor chaos attack`'s machinery against five
// servers in containers: a plan of faults drawn from -chaos.seed (leader
// and followers cut off the network, killed and started again, the leader
// paused, a minority partitioned and pairs of servers cut from each other
// with nftables in their network namespaces) while clients write and read
// intents and a fleet simulator in a sixth container keeps a few hundred
// agents connected and takes two changes. Then: the history must be
// linearizable, every acknowledged write on every server, every server
// holding the same state at the same index, no revision going backwards,
// and every device converged within fleetBound.
func TestMultiHost(t *testing.T) {
	skipUnlessDocker(t)
	recapFailures(t)
	began := time.Now()
	const n = 5
	seed := *seedFlag
	t.Logf("multi-host chaos: seed %d (rerun with -chaos.seed=%d), %s of faults", seed, seed, *durationFlag)
	c := startDockerCluster(t, n)
	ctx := context.Background()
	if err := c.putFleetIntent(ctx, 1); err != nil {
		fatalf(t, "%v", err)
	}
	c.startSim(*devicesFlag, seed)
	t.Logf("cluster and simulator up in %s", time.Since(began).Round(time.Millisecond))

	driver, err := hosts.NewDocker(ctx, c.network, c.names)
	if err != nil {
		fatalf(t, "%v", err)
	}
	reportDir := *reportFlag
	if reportDir == "" {
		if reportDir, err = os.MkdirTemp("", "meteor-chaos-docker-"); err != nil {
			fatalf(t, "%v", err)
		}
		t.Cleanup(func() {
			if !t.Failed() {
				os.RemoveAll(reportDir)
			}
		})
	}
	// Two changes reach the fleet while the faults run.
	changes := make(chan error, 1)
	go func() {
		var err error
		for v := 2; v <= 3 && err == nil; v++ {
			// Spaced over the run, so that each change lands amid the
			// faults: the wait is the schedule, nothing is waited for.
			time.Sleep(*durationFlag / 3)
			err = c.putFleetIntent(ctx, v)
		}
		changes <- err
	}()
	res, err := scenario.RunDeployment(ctx, c.addrs(), scenario.DeploymentOptions{
		TLS:  c.hc.Transport.(*http.Transport).TLSClientConfig,
		Seed: seed, Duration: *durationFlag, MinOps: 100, Dir: reportDir, Log: logWriter{t}, Name: "docker-multi-host",
		Driver: driver,
		Plan: hosts.PlanConfig{
			// Drawn in rounds, so 30 s inject each of them.
			Faults: []hosts.Fault{hosts.IsolateLeader, hosts.KillFollower, hosts.PauseLeader, hosts.PartitionMinority, hosts.CutPair},
			GapMin: time.Second, GapMax: 1500 * time.Millisecond,
			HoldMin: 3 * time.Second, HoldMax: 4 * time.Second,
		},
		ConvergeTimeout: 60 * time.Second,
		DeviceBounds:    map[string]time.Duration{sim.LinkFiber: fleetBound},
	})
	if err != nil {
		fatalf(t, "%v", err)
	}
	if err := <-changes; err != nil {
		errorf(t, "%v", err)
	}
	t.Logf("%s", res.Plan)
	t.Logf("faults: %s", res.FaultLog)
	t.Logf("%d ops (%d unknown outcome, %d certainly not applied), linearizability %s; state agreed at index %d (%.12s) %s after the faults were undone; %d devices converged %s after (bound %s); %d revision samples",
		res.Ops, res.Unknown, res.Dropped, res.Linearizability, res.Index, res.Digest, res.Reconverge.Round(time.Millisecond),
		res.Devices, res.FleetConverge.Round(time.Millisecond), fleetBound, res.WatchSamples)
	for _, v := range res.Violations {
		errorf(t, "violation: %s", v)
	}
	if res.Report != "" {
		c.saveLogs(res.Report)
		errorf(t, "report written to %s (seed %d)", res.Report, seed)
	}
	if res.Faults == 0 || res.Completed < 100 || res.Linearizability == porcupine.Unknown {
		errorf(t, "%d faults injected, %d operations completed in %s (%d checked), linearizability %s: the run proves little",
			res.Faults, res.Completed, res.Ran.Round(time.Millisecond), res.Ops, res.Linearizability)
	}
	if res.Devices != *devicesFlag {
		errorf(t, "%d devices checked, the simulator runs %d", res.Devices, *devicesFlag)
	}

	checkCut(t, c, driver)

	violations := len(res.Violations)
	tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SCENARIO\tSEEDS\tFAULTS\tOPS CHECKED\tVIOLATIONS\tRECONVERGE P50\tRECONVERGE MAX")
	fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%s\t%s\n", "docker-multi-host", 1, res.Faults, res.Ops, violations,
		res.Reconverge.Round(time.Millisecond), res.Reconverge.Round(time.Millisecond))
	tw.Flush()
	t.Logf("multi-host suite took %s", time.Since(began).Round(time.Millisecond))
}

// failures remembers why the run failed, so that the last lines of the
// output (all CI keeps) say it again after the containers' logs.
var failures struct {
	sync.Mutex
	lines []string
}

func remember(msg string) {
	failures.Lock()
	defer failures.Unlock()
	failures.lines = append(failures.lines, msg)
}

func fatalf(t testing.TB, format string, args ...any) {
	t.Helper()
	msg := fmt.Sprintf(format, args...)
	remember(msg)
	t.Fatal(msg)
}

func errorf(t testing.TB, format string, args ...any) {
	t.Helper()
	msg := fmt.Sprintf(format, args...)
	remember(msg)
	t.Error(msg)
}

// recapFailures, registered before any other cleanup, runs last.
func recapFailures(t *testing.T) {
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		failures.Lock()
		defer failures.Unlock()
		for _, l := range failures.lines {
			if len(l) > 400 {
				l = l[:400] + "..."
			}
			t.Logf("failed: %s", l)
		}
	})
}

// logWriter sends the run's log lines to t.Log.
type logWriter struct{ t *testing.T }

func (w logWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// checkCut checks that the driver's nftables cut between two servers
// stops exactly their link, both ways, and that mending restores it:
// connections are tried from inside the containers' network namespaces
// (nsenter and bash's /dev/tcp on the host; the images have no shell).
func checkCut(t *testing.T, c *dockerCluster, d *hosts.Docker) {
	t.Helper()
	if _, err := exec.LookPath("bash"); err != nil {
		t.Log("no bash on the host: the cut itself is not probed")
		return
	}
	ctx := context.Background()
	reach := func(from, to int) bool {
		pid, err := docker("inspect", "-f", "{{.State.Pid}}", c.names[from])
		if err != nil {
			fatalf(t, "%v", err)
		}
		probe := fmt.Sprintf("exec 3<>/dev/tcp/%s/%d", c.ips[to], httpPort)
		return exec.Command("timeout", "2", "nsenter", "-t", pid, "-n", "bash", "-c", probe).Run() == nil
	}
	if !reach(0, 1) || !reach(1, 0) {
		fatalf(t, "s1 and s2 cannot reach each other before the cut")
	}
	if _, err := d.Do(ctx, hosts.Cut, 0, 1); err != nil {
		fatalf(t, "%v", err)
	}
	cutAB, cutBA, other := !reach(0, 1), !reach(1, 0), reach(0, 2)
	if _, err := d.Do(ctx, hosts.Mend, 0, 1); err != nil {
		fatalf(t, "%v", err)
	}
	if !cutAB || !cutBA || !other {
		errorf(t, "cut s1-s2: s1->s2 cut %v, s2->s1 cut %v, s1->s3 open %v; want true, true, true", cutAB, cutBA, other)
	}
	if !reach(0, 1) {
		errorf(t, "s1 cannot reach s2 after the mend")
	}
}

package deploy

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/meteor-edge/meteor/cluster"
	"github.com/meteor-edge/meteor/cluster/api"
	"github.com/meteor-edge/meteor/cluster/pki"
	"github.com/meteor-edge/meteor/fsm/acl"
	"github.com/meteor-edge/meteor/scheduler"
)

var (
	dockerFlag  = flag.Bool("deploy.docker", false, "run the three-region compose test on Docker (make test-docker)")
	devicesFlag = flag.Int("deploy.devices", 30, "simulated devices per region")
	keepFlag    = flag.Bool("deploy.keep", false, "leave the cluster running after the test (deploy/cluster.sh down and purge with its METEOR_STATE, METEOR_PROJECT and METEOR_NET remove it)")
)

// The cluster of deploy/compose.yaml, as cluster.sh names its parts.
var (
	servers = []string{"eu-1", "us-1", "ap-1"}
	regions = []string{"eu-west", "us-east", "ap-south"}
)

// composeCluster is a cluster brought up by cluster.sh for one test, with
// its own project name, subnets, state dir and image tag, so that it
// stands beside a cluster of make cluster-up.
type composeCluster struct {
	t     *testing.T
	env   []string
	state string
	wan   string // first three octets of the servers' network
	hc    *http.Client
	admin string // the admin token
	token string // the operator token the test writes with
}

func skipUnlessDocker(t *testing.T) {
	t.Helper()
	if !*dockerFlag {
		t.Skip("three-region compose test: run it with make test-docker (go test ./deploy -deploy.docker)")
	}
	if _, err := exec.LookPath("docker"); err != nil {
		t.Skip("docker is not installed: the compose test needs a Docker daemon and docker-compose")
	}
	if out, err := exec.Command("docker", "info").CombinedOutput(); err != nil {
		t.Skipf("the Docker daemon is not reachable: %v: %s", err, bytes.TrimSpace(out))
	}
	if _, err := exec.LookPath("docker-compose"); err != nil && exec.Command("docker", "compose", "version").Run() != nil {
		t.Skip("neither docker-compose nor the docker compose plugin is installed: the compose test needs one")
	}
}

// run runs cluster.sh with args, its output going to the test's log.
func (c *composeCluster) run(args ...string) error {
	c.t.Helper()
	cmd := exec.Command("./cluster.sh", args...)
	cmd.Env = c.env
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	c.t.Logf("cluster.sh %s:\n%s", strings.Join(args, " "), strings.TrimRight(out.String(), "\n"))
	if err != nil {
		return fmt.Errorf("cluster.sh %s: %w", strings.Join(args, " "), err)
	}
	return nil
}

func (c *composeCluster) must(args ...string) {
	c.t.Helper()
	if err := c.run(args...); err != nil {
		c.t.Fatal(err)
	}
}

// startCompose brings the cluster up through cluster.sh up, as make
// cluster-up does, on subnets of its own drawn at random.
func startCompose(t *testing.T) *composeCluster {
	t.Helper()
	b := make([]byte, 4)
	rand.Read(b)
	tag := hex.EncodeToString(b)
	// 172.30.4.0/22 ... 172.30.240.0/22: never make cluster-up's
	// 172.30.0.0/22, nor the chaos suite's 172.29.x.
	wan := fmt.Sprintf("172.30.%d", 4*(1+int(b[0])%60))
	state := t.TempDir()
	c := &composeCluster{t: t, state: state, wan: wan}
	image := "meteor-deploy-test:" + tag
	c.env = append(os.Environ(),
		"METEOR_STATE="+state, "METEOR_PROJECT=meteor-test-"+tag, "METEOR_NET="+wan, "METEOR_IMAGE="+image,
		"METEOR_BUILD_DIR="+filepath.Join(state, "build"), fmt.Sprintf("METEOR_SIM_DEVICES=%d", *devicesFlag))
	t.Cleanup(func() {
		if t.Failed() {
			c.run("compose", "ps")
			c.run("compose", "logs", "--no-color", "--tail", "40")
		}
		if *keepFlag {
			t.Logf("cluster kept: METEOR_STATE=%s METEOR_PROJECT=meteor-test-%s METEOR_NET=%s deploy/cluster.sh purge removes it", state, tag, wan)
			return
		}
		c.run("purge")
		exec.Command("docker", "rmi", "-f", image).Run()
	})
	c.must("up")

	caPEM, err := os.ReadFile(filepath.Join(state, "pki", "ca.pem"))
	if err != nil {
		t.Fatal(err)
	}
	pool, err := pki.PoolFromPEM(caPEM)
	if err != nil {
		t.Fatal(err)
	}
	c.hc = &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{TLSClientConfig: cluster.OperatorTLS(pool)}}
	admin, err := os.ReadFile(filepath.Join(state, "pki", "admin.token"))
	if err != nil {
		t.Fatal(err)
	}
	c.admin = strings.TrimSpace(string(admin))
	// Writes go with an operator token, as automation's would.
	tok, err := c.client(0, c.admin).CreateToken(context.Background(), api.CreateTokenRequest{Name: "compose-test", Policy: acl.PolicyOperator})
	if err != nil {
		t.Fatal(err)
	}
	c.token = tok.Secret
	return c
}

// addr is server i's HTTP API, on the servers' network.
func (c *composeCluster) addr(i int) string { return fmt.Sprintf("https://%s.%d:8470", c.wan, 11+i) }

// client talks to server i with token; it retries no_leader and
// shutting_down for 10 s, as the CLI does.
func (c *composeCluster) client(i int, token string) *api.Client {
	cl := api.NewClient(c.addr(i), c.hc)
	cl.Token = token
	return cl
}

// up lists the servers not stopped by the test.
type upSet map[int]bool

func allUp() upSet { return upSet{0: true, 1: true, 2: true} }

// query asks the first server of up that answers.
func (c *composeCluster) query(ctx context.Context, up upSet, q api.DeviceQuery) (*api.DeviceList, error) {
	var errs []error
	for i := range servers {
		if !up[i] {
			continue
		}
		l, err := c.client(i, c.token).QueryDevices(ctx, q, api.ReadOptions{})
		if err == nil {
			return l, nil
		}
		errs = append(errs, err)
	}
	return nil, errors.Join(errs...)
}

// groups counts the devices of a query per value of groupBy.
func (c *composeCluster) groups(ctx context.Context, up upSet, q api.DeviceQuery, groupBy string) (map[string]int, error) {
	q.GroupBy = groupBy
	l, err := c.query(ctx, up, q)
	if err != nil {
		return nil, err
	}
	out := map[string]int{}
	for _, g := range l.Groups {
		out[g.Value] = g.Count
	}
	return out, nil
}

// waitFor polls cond every second until it holds or limit passes.
func waitFor(t *testing.T, limit time.Duration, what string, cond func() (bool, string, error)) time.Duration {
	t.Helper()
	start := time.Now()
	last := ""
	for {
		ok, state, err := cond()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if ok {
			took := time.Since(start)
			t.Logf("%s: %s (%s)", what, took.Round(100*time.Millisecond), state)
			return took
		}
		if state != last {
			t.Logf("%s: %s", what, state)
			last = state
		}
		if time.Since(start) > limit {
			t.Fatalf("%s: not within %s; last: %s", what, limit, state)
		}
		time.Sleep(time.Second)
	}
}

// putFleetIntent writes revision value of the intent every simulated
// device takes (the token's label fleet=sim), through a server of up.
func (c *composeCluster) putFleetIntent(ctx context.Context, up upSet, value string) uint64 {
	c.t.Helper()
	doc := []byte(`name: fleet-config
selector:
  fleet: sim
resources:
  - id: config
    type: sim
    class: network-policy
    spec:
      value: ` + value + "\n")
	var errs []error
	for i := range servers {
		if !up[i] {
			continue
		}
		res, err := c.client(i, c.token).PutIntent(ctx, "fleet-config", doc, nil)
		if err == nil {
			return res.Revision
		}
		errs = append(errs, err)
	}
	c.t.Fatalf("write fleet-config %s: %v", value, errors.Join(errs...))
	return 0
}

// waitConverged waits until want devices of region (every region if "")
// have converged on the fleet intent's current revision.
func (c *composeCluster) waitConverged(ctx context.Context, up upSet, region string, want int, limit time.Duration) time.Duration {
	c.t.Helper()
	what := fmt.Sprintf("%d devices converged on fleet-config", want)
	if region != "" {
		what += " in " + region
	}
	return waitFor(c.t, limit, what, func() (bool, string, error) {
		g, err := c.groups(ctx, up, api.DeviceQuery{Intent: "fleet-config", Region: region}, "intent-state")
		if err != nil {
			return false, err.Error(), nil // a server may be electing
		}
		return g["converged"] == want, fmt.Sprint(g), nil
	})
}

// stopRegion stops region r's server and fleet, as a region lost at once.
func (c *composeCluster) stopRegion(r int) {
	c.must("compose", "stop", "-t", "30", servers[r], "sim-"+regions[r])
}

func (c *composeCluster) startRegion(r int) {
	c.must("compose", "start", servers[r], "sim-"+regions[r])
}

// leader returns the index of the leader as a server of up sees it.
func (c *composeCluster) leader(ctx context.Context, up upSet) (int, error) {
	for i := range servers {
		if !up[i] {
			continue
		}
		m, err := c.client(i, c.token).Members(ctx)
		if err != nil || m.Leader == "" {
			continue
		}
		for j, id := range servers {
			if id == m.Leader {
				return j, nil
			}
		}
	}
	return 0, errors.New("no server of the cluster knows a leader")
}

// waitSameState waits until every server is a voter, alive in gossip, and
// holds the leader's state at the same index (meteor members: same@N).
func (c *composeCluster) waitSameState(ctx context.Context, limit time.Duration) {
	c.t.Helper()
	waitFor(c.t, limit, "every server healthy and agreeing with the leader", func() (bool, string, error) {
		var notes []string
		for i := range servers {
			h, err := c.client(i, c.token).Health(ctx)
			if err != nil || !h.Healthy {
				notes = append(notes, fmt.Sprintf("%s not healthy (%v)", servers[i], err))
			}
		}
		m, err := c.client(0, c.token).Members(ctx)
		if err != nil {
			return false, err.Error(), nil
		}
		same := 0
		for _, mem := range m.Members {
			switch {
			case mem.Suffrage != "voter" || mem.GossipState != "alive":
				notes = append(notes, fmt.Sprintf("%s %s %s", mem.ID, mem.Suffrage, mem.GossipState))
			case mem.Diverged:
				c.t.Fatalf("%s diverged from the leader: %+v", mem.ID, mem.StateCheck)
			case mem.Leader || (mem.StateCheck != nil && mem.StateCheck.Result == api.StateSame):
				same++
			}
		}
		return len(notes) == 0 && same == len(servers), fmt.Sprintf("%d of %d same as the leader %s; %s", same, len(servers), m.Leader, strings.Join(notes, "; ")), nil
	})
}

// writer writes a new intent every interval until stopped, each to the
// servers in turn, and keeps what was acknowledged and what failed. A
// write goes to the next server only when the connection to one was
// refused (nothing was sent); the client retries no_leader and
// shutting_down as the CLI does. Anything else (unknown_outcome, a
// timeout, a connection broken after the request) is a failed write.
type writer struct {
	c        *composeCluster
	mu       sync.Mutex
	acked    map[string]uint64 // guarded by mu; intent name -> revision
	index    uint64            // guarded by mu; the highest Raft index acknowledged
	failed   []string          // guarded by mu
	refused  int               // guarded by mu; attempts on a stopped server
	attempts int               // guarded by mu
}

// count returns how many writes were acknowledged so far.
func (w *writer) count() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.acked)
}

// waitAcked waits until n more writes are acknowledged.
func (w *writer) waitAcked(t *testing.T, n int) {
	t.Helper()
	want := w.count() + n
	waitFor(t, time.Minute, fmt.Sprintf("%d more writes acknowledged", n), func() (bool, string, error) {
		got := w.count()
		return got >= want, fmt.Sprintf("%d of %d", got, want), nil
	})
}

func (w *writer) run(ctx context.Context, every time.Duration) {
	next := 0
	for n := 1; ctx.Err() == nil; n++ {
		name := fmt.Sprintf("writer-%04d", n)
		doc := []byte(fmt.Sprintf("name: %s\nselector:\n  fleet: none\nresources:\n  - id: r\n    type: sim\n    spec:\n      value: %d\n", name, n))
		var err error
		var res *api.WriteResponse
		for try := 0; try < len(servers); try++ {
			i := next % len(servers)
			next++
			wctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			res, err = w.c.client(i, w.c.token).PutIntent(wctx, name, doc, nil)
			cancel()
			w.mu.Lock()
			w.attempts++
			if isRefused(err) {
				w.refused++
				w.mu.Unlock()
				continue
			}
			w.mu.Unlock()
			break
		}
		w.mu.Lock()
		if err == nil {
			w.acked[name] = res.Revision
			w.index = max(w.index, res.Index)
		} else {
			w.failed = append(w.failed, fmt.Sprintf("%s: %v", name, err))
		}
		w.mu.Unlock()
		select {
		case <-ctx.Done():
		case <-time.After(every):
		}
	}
}

// isRefused reports whether err is a connection that could not be made:
// the request never left.
func isRefused(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial"
}

// TestThreeRegions brings up the cluster of deploy/compose.yaml as make
// cluster-up does (three regions, a server and a simulated fleet each,
// TLS, encrypted gossip, tokens), then: every device converges on an
// intent; the region of the leader is lost at once (server and fleet);
// another revision converges in the other regions while the cut-off
// devices turn unreachable, never failed; the region comes back and
// everything converges; every server is restarted in turn while a writer
// keeps writing intents: no write fails or is lost, the servers agree,
// and the fleet converges again.
func TestThreeRegions(t *testing.T) {
	skipUnlessDocker(t)
	began := time.Now()
	ctx := context.Background()
	n := *devicesFlag
	c := startCompose(t)
	up := allUp()
	t.Logf("cluster up in %s", time.Since(began).Round(time.Second))

	// 1. Every device of every region enrolls and takes an intent.
	phase := time.Now()
	waitFor(t, 2*time.Minute, "every device enrolled with its region's labels", func() (bool, string, error) {
		g, err := c.groups(ctx, up, api.DeviceQuery{Selector: "fleet=sim", Connected: ptr(true)}, "region")
		if err != nil {
			return false, err.Error(), nil
		}
		return g[regions[0]] == n && g[regions[1]] == n && g[regions[2]] == n, fmt.Sprint(g), nil
	})
	c.putFleetIntent(ctx, up, "v1")
	c.waitConverged(ctx, up, "", 3*n, 2*time.Minute)
	g, err := c.groups(ctx, up, api.DeviceQuery{Selector: "fleet=sim"}, "owner")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("owners: %v (each region's devices owned by its own server)", g)
	for _, s := range servers {
		if g[s] != n {
			t.Errorf("%s owns %d devices, want its region's %d: %v", s, g[s], n, g)
		}
	}
	t.Logf("phase 1 (enroll, converge): %s", time.Since(phase).Round(time.Second))

	// 2. The leader's region is lost at once.
	phase = time.Now()
	lost, err := c.leader(ctx, up)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("stopping region %s: %s (the leader) and its fleet", regions[lost], servers[lost])
	c.stopRegion(lost)
	delete(up, lost)
	c.putFleetIntent(ctx, up, "v2")
	for r := range regions {
		if r != lost {
			c.waitConverged(ctx, up, regions[r], n, 2*time.Minute)
		}
	}
	// The cut-off devices are a comms gap, never an apply failure: each
	// turns unreachable once silent past its class's threshold
	// (network-policy: 2 min).
	waitFor(t, 4*time.Minute, "every device of "+regions[lost]+" unreachable", func() (bool, string, error) {
		g, err := c.groups(ctx, up, api.DeviceQuery{Region: regions[lost]}, "status")
		if err != nil {
			return false, err.Error(), nil
		}
		for _, bad := range []string{string(scheduler.StatusFailed), string(scheduler.StatusStuck)} {
			if g[bad] > 0 {
				return false, "", fmt.Errorf("%d cut-off devices %s: %v", g[bad], bad, g)
			}
		}
		return g[string(scheduler.StatusUnreachable)] == n, fmt.Sprint(g), nil
	})
	t.Logf("phase 2 (region %s lost): %s", regions[lost], time.Since(phase).Round(time.Second))

	// 3. The region comes back.
	phase = time.Now()
	c.startRegion(lost)
	up = allUp()
	c.waitConverged(ctx, up, "", 3*n, 2*time.Minute)
	c.waitSameState(ctx, 2*time.Minute)
	t.Logf("phase 3 (region %s back, converged): %s", regions[lost], time.Since(phase).Round(time.Second))

	// 4. Every server restarted in turn under writes.
	phase = time.Now()
	w := &writer{c: c, acked: map[string]uint64{}}
	wctx, stopWriter := context.WithCancel(ctx)
	writing := make(chan struct{})
	go func() { defer close(writing); w.run(wctx, 200*time.Millisecond) }()
	w.waitAcked(t, 10)
	for i, s := range servers {
		leader, _ := c.leader(ctx, up)
		restart, before := time.Now(), w.count()
		c.must("compose", "restart", "-t", "30", s)
		c.waitSameState(ctx, 2*time.Minute)
		role := "a follower"
		if leader == i {
			role = "the leader"
		}
		t.Logf("%s (%s) restarted and caught up in %s; %d writes acknowledged meanwhile", s, role,
			time.Since(restart).Round(100*time.Millisecond), w.count()-before)
		// Writes go on with every server back before the next one stops.
		w.waitAcked(t, 10)
	}
	stopWriter()
	<-writing
	w.mu.Lock()
	defer w.mu.Unlock()
	t.Logf("writer: %d intents acknowledged, %d failed, %d attempts refused by a stopped server", len(w.acked), len(w.failed), w.refused)
	for _, f := range w.failed {
		t.Errorf("failed write: %s", f)
	}
	// Every acknowledged write is on every server at its revision: each
	// server's own replica is read once it has applied the last one
	// (a blocking read returns past the index given).
	for i := range servers {
		list, err := c.client(i, c.token).ListIntents(ctx, api.ReadOptions{Stale: true, WaitIndex: w.index - 1, Wait: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		have := map[string]uint64{}
		for _, in := range list.Intents {
			have[in.Name] = in.Revision
		}
		lost := 0
		for name, rev := range w.acked {
			if have[name] != rev {
				lost++
				if lost <= 5 {
					t.Errorf("%s: acknowledged %s at revision %d, holds revision %d", servers[i], name, rev, have[name])
				}
			}
		}
		if lost > 0 {
			t.Errorf("%s: %d of %d acknowledged writes lost", servers[i], lost, len(w.acked))
		}
	}
	c.waitConverged(ctx, up, "", 3*n, 2*time.Minute)
	t.Logf("phase 4 (rolling restart under writes): %s", time.Since(phase).Round(time.Second))
	t.Logf("three-region compose test took %s", time.Since(began).Round(time.Second))
}

func ptr[T any](v T) *T { return &v }

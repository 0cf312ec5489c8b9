package cluster

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/meteor-edge/meteor/chaos"
	"github.com/meteor-edge/meteor/cluster/api"
	"github.com/meteor-edge/meteor/fsm/acl"
	"github.com/meteor-edge/meteor/wire"
)

// scrape is one answer of GET /metrics: its metric families, and the
// name of every sample line (histograms' _bucket, _sum and _count too).
type scrape struct {
	t        *testing.T
	families map[string]*dto.MetricFamily
	samples  map[string]bool
}

// scrapeMetrics fetches s's /metrics over its TLS API with the token
// (none if empty), as Prometheus would, and parses it.
func scrapeMetrics(t *testing.T, s *Server, token string) *scrape {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, s.HTTPURL()+"/metrics", nil)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := operatorClient(s).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/plain") {
		t.Fatalf("GET /metrics on %s: %d %s: %s", s.ID(), resp.StatusCode, resp.Header.Get("Content-Type"), body)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	families, err := p.TextToMetricFamilies(bytes.NewReader(body))
	if err != nil {
		t.Fatalf("parse /metrics of %s: %v", s.ID(), err)
	}
	sc := &scrape{t: t, families: families, samples: map[string]bool{}}
	lines := bufio.NewScanner(bytes.NewReader(body))
	for lines.Scan() {
		line := lines.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if i := strings.IndexAny(line, "{ "); i > 0 {
			sc.samples[line[:i]] = true
		}
	}
	return sc
}

// find returns the sample of family name with exactly these labels (name,
// value pairs), or nil.
func (sc *scrape) find(name string, labels ...string) *dto.Metric {
	f := sc.families[name]
	if f == nil {
		return nil
	}
	want := map[string]string{}
	for i := 0; i+1 < len(labels); i += 2 {
		want[labels[i]] = labels[i+1]
	}
	for _, m := range f.Metric {
		have := map[string]string{}
		for _, lp := range m.Label {
			have[lp.GetName()] = lp.GetValue()
		}
		if cmp.Equal(have, want) {
			return m
		}
	}
	return nil
}

// value is a counter's or gauge's value, or a histogram's count; the test
// fails if the sample is missing.
func (sc *scrape) value(name string, labels ...string) float64 {
	sc.t.Helper()
	m := sc.find(name, labels...)
	switch {
	case m == nil:
		sc.t.Fatalf("no sample %s%v in /metrics", name, labels)
	case m.Counter != nil:
		return m.Counter.GetValue()
	case m.Gauge != nil:
		return m.Gauge.GetValue()
	case m.Histogram != nil:
		return float64(m.Histogram.GetSampleCount())
	}
	sc.t.Fatalf("sample %s%v has no value", name, labels)
	return 0
}

// byLabel returns family name's non-zero values by the value of label.
func (sc *scrape) byLabel(name, label string) map[string]int {
	out := map[string]int{}
	f := sc.families[name]
	if f == nil {
		return out
	}
	for _, m := range f.Metric {
		for _, lp := range m.Label {
			if lp.GetName() == label && m.GetGauge().GetValue() != 0 {
				out[lp.GetValue()] += int(m.GetGauge().GetValue())
			}
		}
	}
	return out
}

// TestMetricsNeedAReadToken: with the ACL on, /metrics is refused without
// a token (401) and to a token whose scope cannot read the whole cluster
// (403), and served to a read token, Go and process collectors included.
func TestMetricsNeedAReadToken(t *testing.T) {
	c := newACLCluster(t, 1, nil)
	s := c.waitLeader()
	code, e, hdr := call(t, s, "", http.MethodGet, "/metrics", nil, nil)
	if code != http.StatusUnauthorized || e.Code != api.CodeUnauthenticated || !strings.HasPrefix(hdr.Get("WWW-Authenticate"), "Bearer") {
		t.Fatalf("anonymous scrape: %d %+v", code, e)
	}
	code, e, _ = call(t, s, "mtk_not-a-token", http.MethodGet, "/metrics", nil, nil)
	if code != http.StatusUnauthorized {
		t.Fatalf("scrape with a bad token: %d %+v", code, e)
	}
	scoped := c.token(api.CreateTokenRequest{Name: "eu-reader", Policy: acl.PolicyRead, Scope: map[string]string{"region": "eu"}}).Secret
	code, e, _ = call(t, s, scoped, http.MethodGet, "/metrics", nil, nil)
	if code != http.StatusForbidden || e.Code != api.CodeForbidden {
		t.Fatalf("scrape with a scoped token: %d %+v", code, e)
	}
	reader := c.token(api.CreateTokenRequest{Name: "prometheus", Policy: acl.PolicyRead}).Secret
	sc := scrapeMetrics(t, s, reader)
	for _, name := range []string{"go_goroutines", "go_sched_latencies_seconds", "process_cpu_seconds_total", "meteor_raft_applied_index", "meteor_fleet_devices"} {
		if sc.families[name] == nil {
			t.Errorf("no %s in /metrics", name)
		}
	}
	if sc.value("meteor_raft_state", "state", "leader") != 1 {
		t.Error("the only server does not show itself as leader")
	}
	// The refusals were counted, by route, not by path.
	if got := sc.value("meteor_api_requests_total", "route", "GET /metrics", "code", "401"); got != 2 {
		t.Errorf("%v refused scrapes counted, want 2", got)
	}
}

// TestMetricsMoveWithWrites: an intent write moves the applied index, the
// commit latency histogram and the request counter of its route and code;
// a refused write counts under its own code.
func TestMetricsMoveWithWrites(t *testing.T) {
	c := newTestCluster(t, 1, nil)
	s := c.waitLeader()
	s.metrics.state.resourcesMaxAge.Store(int64(time.Hour))
	before := scrapeMetrics(t, s, "")
	route := "PUT /v1/intents/{name}"
	if before.find("meteor_api_requests_total", "route", route, "code", "200") != nil {
		t.Fatal("an intent write counted before any was made")
	}
	commits := before.value("meteor_raft_commit_seconds")

	res, err := client(s).PutIntent(context.Background(), "motd", putDoc(t, simpleIntent("motd", "hello")), nil)
	if err != nil {
		t.Fatal(err)
	}
	code, _, _ := call(t, s, "", http.MethodPut, "/v1/intents/other", putDoc(t, simpleIntent("motd", "hello")), nil)
	if code != http.StatusBadRequest {
		t.Fatalf("write under another name: %d", code)
	}
	var after *scrape
	// The request is counted once its answer is written: the client may
	// have read it a moment before. Raft's applied index, too, moves on
	// only after the write's future was answered.
	waitFor(t, 10*time.Second, func() error {
		after = scrapeMetrics(t, s, "")
		if after.find("meteor_api_requests_total", "route", route, "code", "400") == nil {
			return fmt.Errorf("the refused write is not counted yet")
		}
		if got := after.value("meteor_raft_applied_index"); got < float64(res.Index) {
			return fmt.Errorf("applied index %v, the write is at %d", got, res.Index)
		}
		return nil
	})
	if got := after.value("meteor_api_requests_total", "route", route, "code", "200"); got != 1 {
		t.Errorf("%v writes counted with 200, want 1", got)
	}
	if got := after.value("meteor_api_requests_total", "route", route, "code", "400"); got != 1 {
		t.Errorf("%v writes counted with 400, want 1", got)
	}
	if got := after.value("meteor_api_request_duration_seconds", "route", route); got != 2 {
		t.Errorf("%v writes timed, want 2", got)
	}
	if got := after.value("meteor_raft_applied_index"); got < float64(res.Index) || got <= before.value("meteor_raft_applied_index") {
		t.Errorf("applied index %v after the write at %d (before: %v)", got, res.Index, before.value("meteor_raft_applied_index"))
	}
	if got := after.value("meteor_state_revision"); got != float64(res.Revision) {
		t.Errorf("state revision %v, want the write's %d", got, res.Revision)
	}
	if got := after.value("meteor_raft_commit_seconds"); got <= commits {
		t.Errorf("commit histogram count %v, %v before the write", got, commits)
	}

	// The resources by class are counted again only once their count is
	// old enough; their index says which state they reflect.
	if got, was := after.value("meteor_fleet_resources_index"), before.value("meteor_fleet_resources_index"); got != was || got != before.value("meteor_state_index") {
		t.Errorf("resources counted at %v, then at %v within their maximum age", was, got)
	}
	s.metrics.state.resourcesMaxAge.Store(0)
	sc := scrapeMetrics(t, s, "")
	if got := sc.value("meteor_fleet_resources_index"); got != sc.value("meteor_state_index") || got < float64(res.Index) {
		t.Errorf("resources counted at %v once old, state at %v", got, sc.value("meteor_state_index"))
	}
}

// TestMetricsFollowAgents: a real agent connecting moves the connected
// sessions; the devices by status equal /v1/status's counts at the same
// index; the rollout and resource gauges show the device converged; its
// connection's bytes are observed when it closes, and a resumed session
// counts as resumed. The dashboard's metrics all exist in this server's
// output.
func TestMetricsFollowAgents(t *testing.T) {
	pki := newTestPKI(t)
	c := newTestCluster(t, 1, pki.withAgents(t))
	s := c.waitLeader()
	s.metrics.state.resourcesMaxAge.Store(0) // counted at every scrape
	in := filesIntent("store-config", 4, "v1")
	in.Rollout = map[string]any{"waves": []any{"100%"}}
	c.propose(in)
	sc := scrapeMetrics(t, s, "")
	if got := sc.value("meteor_agent_sessions_connected"); got != 0 {
		t.Fatalf("%v sessions connected before any agent", got)
	}

	ra := startAgent(t, pki, "store-7", agentAddrs(c), map[string]string{"region": "eu"}, chaos.LinkProfile{}, nil)
	waitDeviceConverged(t, c, "store-7")
	waitFor(t, 10*time.Second, func() error {
		sc = scrapeMetrics(t, s, "")
		if got := sc.value("meteor_agent_sessions_connected"); got != 1 {
			return fmt.Errorf("%v sessions connected, want 1", got)
		}
		return nil
	})
	if got := sc.value("meteor_agent_sessions_total", "resumed", "false"); got != 1 {
		t.Errorf("%v new sessions, want 1", got)
	}

	// The rollout releases the revision to the device, which converges
	// on it, and the rollout completes.
	waitFor(t, 30*time.Second, func() error {
		sc = scrapeMetrics(t, s, "")
		if got := sc.value("meteor_rollout_devices", "intent", "store-config", "stage", "converged"); got != 1 {
			return fmt.Errorf("rollout: %v devices converged, want 1", got)
		}
		if got := sc.value("meteor_fleet_resources", "class", "default", "state", "converged"); got != 4 {
			return fmt.Errorf("%v resources of class default converged, want 4", got)
		}
		if sc.find("meteor_rollout_state", "intent", "store-config", "state", "completed") == nil {
			return fmt.Errorf("rollout state: %v", sc.families["meteor_rollout_state"].GetMetric())
		}
		return nil
	})
	if got := sc.value("meteor_rollout_devices", "intent", "store-config", "stage", "targeted"); got != 1 {
		t.Errorf("rollout: %v devices targeted, want 1", got)
	}

	// The fleet gauges are /v1/status's figures, at the same index.
	waitFor(t, 10*time.Second, func() error {
		st, err := client(s).Status(context.Background(), apiStale)
		if err != nil {
			return err
		}
		sc = scrapeMetrics(t, s, "")
		if idx := sc.value("meteor_state_index"); idx != float64(st.Index) {
			return fmt.Errorf("metrics at index %v, /v1/status at %d", idx, st.Index)
		}
		if diff := cmp.Diff(st.ByStatus, sc.byLabel("meteor_fleet_devices", "status")); diff != "" {
			t.Fatalf("devices by status (-/v1/status +metrics):\n%s", diff)
		}
		return nil
	})
	if got := sc.value("meteor_fleet_devices", "status", "converged"); got != 1 {
		t.Errorf("%v devices converged, want 1", got)
	}

	// The agent leaves: its connection's bytes are observed.
	ra.stop()
	waitFor(t, 10*time.Second, func() error {
		sc = scrapeMetrics(t, s, "")
		if got := sc.value("meteor_agent_sessions_connected"); got != 0 {
			return fmt.Errorf("%v sessions connected after the agent stopped", got)
		}
		if got := sc.value("meteor_agent_connection_bytes", "direction", "sent"); got != 1 {
			return fmt.Errorf("%v connections' bytes observed, want 1", got)
		}
		return nil
	})
	if sum := sc.find("meteor_agent_connection_bytes", "direction", "received").GetHistogram().GetSampleSum(); sum < 1000 {
		t.Errorf("the agent's connection carried %v bytes to the server", sum)
	}

	// A session resumed with its token counts as resumed.
	tlsConf := pki.deviceTLS(t, "dev-2")
	a := dialAgent(t, s.AgentAddr(), tlsConf)
	a.send(hello(map[string]string{"region": "eu"}))
	w := expect[*wire.Welcome](a)
	waitFor(t, 10*time.Second, func() error {
		if got := scrapeMetrics(t, s, "").value("meteor_agent_sessions_total", "resumed", "false"); got != 2 {
			return fmt.Errorf("%v new sessions, want 2", got)
		}
		return nil
	})
	a.close()
	b := dialAgent(t, s.AgentAddr(), tlsConf)
	b.send(&wire.Hello{Major: wire.ProtocolMajor, SessionID: w.SessionID, ResumeToken: w.ResumeToken, Labels: map[string]string{"region": "eu"}})
	expect[*wire.Welcome](b)
	waitFor(t, 10*time.Second, func() error {
		sc = scrapeMetrics(t, s, "")
		if got := sc.value("meteor_agent_sessions_total", "resumed", "true"); got != 1 {
			return fmt.Errorf("%v resumed sessions, want 1", got)
		}
		return nil
	})
	if got := sc.value("meteor_agent_sessions_total", "resumed", "false"); got != 2 {
		t.Errorf("%v new sessions after one resumed, want 2", got)
	}
	checkDashboardMetrics(t, sc)
}

// TestMetricsCountLeaderChanges: when the leader dies, the survivors count
// the new leader and the winner the election it stood in.
func TestMetricsCountLeaderChanges(t *testing.T) {
	c := newTestCluster(t, 3, nil)
	old := c.waitLeader()
	c.waitConverged()
	before := map[string]*scrape{}
	for _, s := range c.alive() {
		before[s.ID()] = scrapeMetrics(t, s, "")
		if got := before[s.ID()].value("meteor_gossip_members", "state", "alive"); got != 3 {
			t.Errorf("%s: %v alive gossip members, want 3", s.ID(), got)
		}
	}
	c.kill(c.index(old))
	leader := c.waitLeader()
	for _, s := range c.alive() {
		sc := scrapeMetrics(t, s, "")
		b := before[s.ID()]
		if got, was := sc.value("meteor_raft_leader_changes_total"), b.value("meteor_raft_leader_changes_total"); got <= was {
			t.Errorf("%s: leader changes %v, %v before the leader died", s.ID(), got, was)
		}
		if got := sc.value("meteor_raft_term"); got <= b.value("meteor_raft_term") {
			t.Errorf("%s: term %v did not move", s.ID(), got)
		}
		if s == leader {
			if got, was := sc.value("meteor_raft_elections_total"), b.value("meteor_raft_elections_total"); got <= was {
				t.Errorf("new leader %s: elections %v, %v before", s.ID(), got, was)
			}
			if sc.value("meteor_raft_state", "state", "leader") != 1 {
				t.Errorf("new leader %s does not show itself as leader", s.ID())
			}
		}
	}
}

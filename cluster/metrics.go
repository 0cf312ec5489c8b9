package cluster

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/meteor-edge/meteor/cluster/api"
	"github.com/meteor-edge/meteor/fsm"
	"github.com/meteor-edge/meteor/scheduler"
)

// The server's Prometheus metrics, served at GET /metrics
// (docs/operations.md, "Metrics" lists them all). Each server has a
// registry of its own, never the process's default one: a test or
// 'meteor dev' runs several servers in one process.
//
// Two kinds, kept apart so that no fact has two sources:
//
//   - Gauges that mirror state are computed when Prometheus scrapes, by
//     stateCollector, from the place the API takes the same fact from:
//     the replica's device records as /v1/status counts them
//     (statusCounts), the rollout status /v1/rollouts/{name} serves
//     (httpAPI.rolloutStatus), the Raft figures of /v1/health
//     (Server.self), the gossip table of /v1/cluster/members and the
//     agent server's session table and counters (Server.AgentStats).
//   - Counters and histograms of events are moved where the event
//     happens: API requests (instrument), commits (proposeRaw), leader
//     changes and elections (observeRaft), agent connections' bytes
//     (agentDeps.connClosed).

// metricsNamespace prefixes every Meteor metric.
const metricsNamespace = "meteor"

// serverMetrics are a server's registry and its event metrics. The
// metrics are safe for concurrent use; the struct is not changed after
// newServerMetrics.
type serverMetrics struct {
	reg *prometheus.Registry

	// apiRequests counts the HTTP API's requests by route (the mux
	// pattern, never the raw path) and status code; apiSeconds times
	// them by route.
	apiRequests *prometheus.CounterVec
	apiSeconds  *prometheus.HistogramVec
	// commitSeconds times proposals this server made as leader, from
	// raft.Apply to the applied result.
	commitSeconds prometheus.Histogram
	// leaderChanges counts the leaders this server's Raft has followed
	// (a new leader known); elections the times it became a candidate
	// (campaigns repeated while it stays one count once).
	leaderChanges, elections prometheus.Counter
	// connBytes observes, when an agent connection closes, the bytes it
	// carried each way (QUIC's own count, headers and retransmissions
	// included).
	connBytes *prometheus.HistogramVec
	// state computes the gauges that mirror state.
	state *stateCollector
}

func newServerMetrics(s *Server) *serverMetrics {
	m := &serverMetrics{
		reg: prometheus.NewRegistry(),
		apiRequests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: metricsNamespace, Subsystem: "api", Name: "requests_total",
			Help: "HTTP API requests answered by this server, by route pattern and status code.",
		}, []string{"route", "code"}),
		apiSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: metricsNamespace, Subsystem: "api", Name: "request_duration_seconds",
			Help:    "Time this server took to answer HTTP API requests, by route pattern.",
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30},
		}, []string{"route"}),
		commitSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: metricsNamespace, Subsystem: "raft", Name: "commit_seconds",
			Help:    "Time from a proposal on this server, as leader, to its commit and application.",
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5},
		}),
		leaderChanges: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: metricsNamespace, Subsystem: "raft", Name: "leader_changes_total",
			Help: "Times this server's Raft learned of a new leader (itself included).",
		}),
		elections: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: metricsNamespace, Subsystem: "raft", Name: "elections_total",
			Help: "Times this server became a Raft candidate to stand for election.",
		}),
		connBytes: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: metricsNamespace, Subsystem: "agent", Name: "connection_bytes",
			Help:    "Bytes one agent connection (a session's stay on this server) carried, by direction, observed when it closes.",
			Buckets: prometheus.ExponentialBuckets(1024, 4, 10), // 1 KiB to 256 MiB
		}, []string{"direction"}),
		state: newStateCollector(s),
	}
	// Label values known in advance exist from the start, at zero.
	for _, dir := range []string{"sent", "received"} {
		m.connBytes.WithLabelValues(dir)
	}
	m.reg.MustRegister(
		// The scheduler's latencies (go_sched_latencies_seconds): how long
		// runnable goroutines waited for a CPU. On a busy host, this is
		// what Raft's heartbeats wait in before they go out.
		collectors.NewGoCollector(collectors.WithGoCollectorRuntimeMetrics(collectors.MetricsScheduler)),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		m.apiRequests, m.apiSeconds, m.commitSeconds, m.leaderChanges, m.elections, m.connBytes, m.state,
	)
	return m
}

// handler serves the registry in Prometheus' text format. A part of the
// state that cannot be read is logged and left out; the rest is served.
func (m *serverMetrics) handler(logger hclog.Logger) http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{
		ErrorLog:      logger.Named("metrics").StandardLogger(&hclog.StandardLoggerOptions{ForceLevel: hclog.Warn}),
		ErrorHandling: promhttp.ContinueOnError,
	})
}

// handleMetrics serves GET /metrics: this server's registry, the fleet
// gauges read from its own replica (a stale read, which the index gauges
// date).
func (h *httpAPI) handleMetrics(w http.ResponseWriter, r *http.Request) {
	if h.metrics == nil {
		writeError(w, &api.Error{StatusCode: http.StatusNotFound, Code: api.CodeNotFound, Message: "this server serves no metrics"})
		return
	}
	h.metrics.ServeHTTP(w, r)
}

// agentConnClosed observes the bytes of an agent connection that closed
// (agentDeps.connClosed).
func (m *serverMetrics) agentConnClosed(sent, received uint64) {
	m.connBytes.WithLabelValues("sent").Observe(float64(sent))
	m.connBytes.WithLabelValues("received").Observe(float64(received))
}

// instrument counts and times the requests next answers. It reads the
// route from r.Pattern, which the ServeMux inside next sets on r.
func (m *serverMetrics) instrument(clock Clock, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := clock.Mono()
		rec := &statusRecorder{ResponseWriter: w}
		next.ServeHTTP(rec, r)
		route := r.Pattern
		if route == "" {
			route = "none" // the mux's own redirect or 404
		}
		if rec.code == 0 {
			rec.code = http.StatusOK
		}
		m.apiRequests.WithLabelValues(route, strconv.Itoa(rec.code)).Inc()
		if !waits(r) {
			m.apiSeconds.WithLabelValues(route).Observe(clock.Mono().Sub(start).Seconds())
		}
	})
}

// waits reports whether a request lasts as long as the client or the
// state wants (an event stream, a blocking read): its time says nothing
// of the server's, and is left out of the latency histogram.
func waits(r *http.Request) bool {
	return r.Pattern == "GET /v1/events" || r.URL.RawQuery != "" && r.URL.Query().Has("index")
}

// statusRecorder remembers the status code a handler answered with. It
// flushes (streamed answers, the reverse proxy) and unwraps for
// http.ResponseController.
type statusRecorder struct {
	http.ResponseWriter
	code int // 0 until the header is written
}

func (w *statusRecorder) WriteHeader(code int) {
	if w.code == 0 {
		w.code = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusRecorder) Write(b []byte) (int, error) {
	if w.code == 0 {
		w.code = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

func (w *statusRecorder) Flush() {
	if w.code == 0 {
		w.code = http.StatusOK
	}
	_ = http.NewResponseController(w.ResponseWriter).Flush()
}

func (w *statusRecorder) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// raftObserver is the raft.Observer the metrics follow leader changes and
// elections with, and the channel it delivers on. Raft never blocks on
// it: an observation that finds the channel full is dropped (and counted,
// meteor_raft_observations_dropped_total).
type raftObserver struct {
	obs *raft.Observer
	ch  chan raft.Observation
}

func newRaftObserver() *raftObserver {
	ch := make(chan raft.Observation, 64)
	return &raftObserver{ch: ch, obs: raft.NewObserver(ch, false, func(o *raft.Observation) bool {
		switch o.Data.(type) {
		case raft.LeaderObservation, raft.RaftState:
			return true
		}
		return false
	})}
}

// observeRaft counts leader changes and elections from o until ctx ends.
func (m *serverMetrics) observeRaft(ctx context.Context, o *raftObserver) {
	for {
		select {
		case <-ctx.Done():
			return
		case ob := <-o.ch:
			switch d := ob.Data.(type) {
			case raft.LeaderObservation:
				if d.LeaderID != "" {
					m.leaderChanges.Inc()
				}
			case raft.RaftState:
				if d == raft.Candidate {
					m.elections.Inc()
				}
			}
		}
	}
}

// stateCollector computes the gauges that mirror state when Prometheus
// scrapes, each from the source the API reads it from. Every label value
// is bounded: statuses, states and classes are fixed sets, intents are
// as many as the operators write, and no device ID is a label.
type stateCollector struct {
	s *Server

	raftApplied, raftCommit, raftLast, raftTerm, raftState, raftDropped                   *prometheus.Desc
	gossipMembers                                                                         *prometheus.Desc
	sessionsConnected, sessions, early, deltaBytes, reports, reportFailures, notifies     *prometheus.Desc
	pushedDeltas, notifyWindow                                                            *prometheus.Desc
	stateIndex, stateRevision, devices, corrections, resources, transitions, statusFailed *prometheus.Desc
	resourcesIndex                                                                        *prometheus.Desc
	rolloutDevices, rolloutWave, rolloutWaves, rolloutState                               *prometheus.Desc
	rolloutRevision                                                                       *prometheus.Desc
	forwardBatches, forwardCommands, reportBatches, reportsBatched                        *prometheus.Desc
	evaluated                                                                             *prometheus.Desc

	// resourcesMaxAge (a time.Duration) bounds how long the last
	// resource counts (resourcesLast, guarded by resourcesMu) are served
	// again once the replica has moved on (fleetResources).
	resourcesMaxAge atomic.Int64
	resourcesMu     sync.Mutex
	resourcesLast   *resourceCounts
}

func newStateCollector(s *Server) *stateCollector {
	d := func(subsystem, name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc(prometheus.BuildFQName(metricsNamespace, subsystem, name), help, labels, nil)
	}
	c := &stateCollector{
		s:                 s,
		raftApplied:       d("raft", "applied_index", "The last Raft index this server applied to its replica."),
		raftCommit:        d("raft", "commit_index", "The last Raft index this server knows to be committed."),
		raftLast:          d("raft", "last_index", "The last Raft index in this server's log."),
		raftTerm:          d("raft", "term", "This server's current Raft term."),
		raftState:         d("raft", "state", "1 for this server's Raft role (leader, follower, candidate; unknown while shut down), 0 for the others.", "state"),
		raftDropped:       d("raft", "observations_dropped_total", "Raft observations the metrics missed (their channel was full), so leader changes and elections may be undercounted by as many."),
		gossipMembers:     d("gossip", "members", "Servers in this server's gossip view, by state as /v1/cluster/members shows it.", "state"),
		sessionsConnected: d("agent", "sessions_connected", "Agent sessions connected to this server now."),
		sessions:          d("agent", "sessions_total", "Agent sessions established on this server, by whether they resumed an earlier session.", "resumed"),
		early:             d("agent", "zero_rtt_accepted_total", "Agent sessions established on this server whose connection's 0-RTT data was accepted."),
		deltaBytes:        d("agent", "delta_bytes_total", "Encoded bytes of the Delta frames this server sent agents."),
		reports:           d("agent", "reports_total", "Agent reports this server received and had recorded."),
		reportFailures:    d("agent", "report_failures_total", "Tries to record an agent's report that failed (its owner refused it, could not commit it, or could not be reached); the session tries again."),
		notifies:          d("agent", "notifies_total", "Notify pushes this server sent agents."),
		notifyWindow:      d("agent", "notify_window", "How many sessions this server may push a change to at once now: the notify window, which narrows while the server is busy (its goroutines wait to run) and widens again up to its size."),
		pushedDeltas:      d("agent", "notify_deltas_total", "Notify pushes that carried their change's Delta (protocol 1.5), which the agent takes without pulling; the rest named the revision only."),
		stateIndex:        d("state", "index", "The Raft index of the last command in the replica the fleet gauges were read from (as /v1/status says in index)."),
		stateRevision:     d("state", "revision", "The cluster revision of the replica the fleet gauges were read from."),
		devices:           d("fleet", "devices", "Devices by status, as /v1/status counts them; the same on every server at the same index.", "status"),
		corrections:       d("fleet", "drift_corrections", "Drift corrections the devices' agents reported, summed over every device's resources: each agent counts from its start, so the sum falls when agents restart (use increase() over it with care)."),
		resources:         d("fleet", "resources", "Intended resources on all devices, by reconcile class and state, as GET /v1/devices/{id} shows each.", "class", "state"),
		transitions:       d("status", "transitions_total", "Device status transitions this server, as owner, committed."),
		statusFailed:      d("status", "batches_failed_total", "Status batches this server, as owner, could not commit, or whose outcome it could not learn (a forward to the leader timed out); their reports stay unacknowledged and the agents send them again."),
		evaluated:         d("status", "evaluated_total", "Devices this server's periodic evaluations went through as their owner: judged=\"true\" those classified again, judged=\"false\" those passed over because nothing their status depends on had changed.", "judged"),
		forwardBatches:    d("forward", "batches_total", "Requests that carried commands this server forwarded to the leader in batches (/v1/internal/apply-batch)."),
		forwardCommands:   d("forward", "commands_total", "Commands this server forwarded to the leader in batches; over meteor_forward_batches_total, the mean batch."),
		reportBatches:     d("forward", "report_batches_total", "Requests that carried agents' reports this server handed to their devices' owners in batches (/v1/internal/report-batch)."),
		reportsBatched:    d("forward", "reports_total", "Agents' reports this server handed to their devices' owners in batches; over meteor_forward_report_batches_total, the mean batch."),
		rolloutDevices:    d("rollout", "devices", "Devices of an intent's rollout by progress, as /v1/rollouts/{name} counts them.", "intent", "stage"),
		rolloutWave:       d("rollout", "wave", "The wave an intent's rollout is in (or ended in), from 1.", "intent"),
		rolloutWaves:      d("rollout", "waves", "The number of waves of an intent's rollout.", "intent"),
		rolloutState:      d("rollout", "state", "1 for the state an intent's rollout is in.", "intent", "state"),
		rolloutRevision:   d("rollout", "revision", "The revision an intent's rollout rolls out.", "intent"),
		resourcesIndex:    d("fleet", "resources_index", "The replica index meteor_fleet_resources were counted at: they are counted anew only once the replica moved on and the last count is 30 s old."),
	}
	c.resourcesMaxAge.Store(int64(defaultResourcesMaxAge))
	return c
}

// Describe implements prometheus.Collector.
func (c *stateCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{
		c.raftApplied, c.raftCommit, c.raftLast, c.raftTerm, c.raftState, c.raftDropped,
		c.gossipMembers, c.sessionsConnected, c.sessions, c.early, c.deltaBytes, c.reports, c.reportFailures, c.notifies, c.pushedDeltas, c.notifyWindow,
		c.stateIndex, c.stateRevision, c.devices, c.corrections, c.resources, c.resourcesIndex, c.transitions, c.statusFailed,
		c.rolloutDevices, c.rolloutWave, c.rolloutWaves, c.rolloutState, c.rolloutRevision,
		c.forwardBatches, c.forwardCommands, c.reportBatches, c.reportsBatched, c.evaluated,
	} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c *stateCollector) Collect(ch chan<- prometheus.Metric) {
	c.collectRaft(ch)
	c.collectGossip(ch)
	c.collectAgents(ch)
	read := c.s.fsm.Read()
	ch <- gauge(c.stateIndex, float64(read.Index()))
	ch <- gauge(c.stateRevision, float64(read.Revision()))
	if err := c.collectFleet(ch, read); err != nil {
		ch <- prometheus.NewInvalidMetric(c.devices, err)
	}
	if err := c.collectRollouts(ch, read); err != nil {
		ch <- prometheus.NewInvalidMetric(c.rolloutDevices, err)
	}
}

func gauge(d *prometheus.Desc, v float64, labels ...string) prometheus.Metric {
	return prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
}

func counter(d *prometheus.Desc, v uint64, labels ...string) prometheus.Metric {
	return prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), labels...)
}

// raftRoles are the values of meteor_raft_state's label (roleName).
var raftRoles = []string{"leader", "follower", "candidate", "unknown"}

func (c *stateCollector) collectRaft(ch chan<- prometheus.Metric) {
	st := c.s.self()
	ch <- gauge(c.raftApplied, float64(st.AppliedIndex))
	ch <- gauge(c.raftCommit, float64(st.CommitIndex))
	ch <- gauge(c.raftLast, float64(st.LastIndex))
	ch <- gauge(c.raftTerm, float64(st.Term))
	role := roleName(st.RaftState)
	for _, r := range raftRoles {
		ch <- gauge(c.raftState, b2f(r == role), r)
	}
	if o := c.s.raftObs; o != nil {
		ch <- counter(c.raftDropped, o.obs.GetNumDropped())
	}
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// gossipStates are the values of meteor_gossip_members' label
// (gossipState).
var gossipStates = []string{"alive", "suspect", "failed", "left", "leaving", "unknown"}

func (c *stateCollector) collectGossip(ch chan<- prometheus.Metric) {
	counts := map[string]int{}
	for _, m := range c.s.members() {
		counts[gossipState(m)]++
	}
	for _, st := range gossipStates {
		ch <- gauge(c.gossipMembers, float64(counts[st]), st)
	}
}

func (c *stateCollector) collectAgents(ch chan<- prometheus.Metric) {
	st := c.s.AgentStats()
	ch <- gauge(c.sessionsConnected, float64(st.Connected))
	ch <- counter(c.sessions, st.Fresh, "false")
	ch <- counter(c.sessions, st.Resumed, "true")
	ch <- counter(c.early, st.ZeroRTT)
	ch <- counter(c.deltaBytes, st.DeltaBytes)
	ch <- counter(c.reports, st.Reports)
	ch <- counter(c.reportFailures, st.ReportFailures)
	ch <- counter(c.notifies, st.Notifies)
	ch <- counter(c.pushedDeltas, st.PushedDeltas)
	ch <- gauge(c.notifyWindow, float64(st.NotifyWindow))
	ch <- counter(c.transitions, c.s.status.transitions.Load())
	ch <- counter(c.statusFailed, c.s.status.failed.Load())
	ch <- counter(c.evaluated, c.s.status.judged.Load(), "true")
	ch <- counter(c.evaluated, c.s.status.passed.Load(), "false")
	ch <- counter(c.forwardBatches, c.s.forwarder.batches.Load())
	ch <- counter(c.forwardCommands, c.s.forwarder.commands.Load())
	ch <- counter(c.reportBatches, c.s.reportFwd.batches.Load())
	ch <- counter(c.reportsBatched, c.s.reportFwd.reports.Load())
}

// resourceStates are the values of meteor_fleet_resources' state label:
// the states of an intended resource (scheduler.Compare).
var resourceStates = []string{
	scheduler.StatePending, scheduler.StateProgressing, scheduler.StateFailed, scheduler.StateApplied,
	scheduler.StateConverged, scheduler.StateDrifted,
}

// defaultResourcesMaxAge is how long the resources by class and state
// are served again before they are counted anew (stateCollector.resources).
const defaultResourcesMaxAge = 30 * time.Second

// classState is one series of meteor_fleet_resources.
type classState struct{ class, state string }

// resourceCounts are the resources by class and state as of one state of
// the replica (fsm.Read.StateID; its index is what
// meteor_fleet_resources_index shows), and when (on the monotonic clock)
// they were counted.
type resourceCounts struct {
	state  fsm.StateID
	at     time.Time
	counts map[classState]int
}

// collectFleet counts the devices by status, as /v1/status does, and
// their intended resources by class and state (fleetResources).
func (c *stateCollector) collectFleet(ch chan<- prometheus.Metric, read *fsm.Read) error {
	devices, err := read.Devices(nil)
	if err != nil {
		return fmt.Errorf("read devices: %w", err)
	}
	counts := statusCounts(devices)
	var corrections uint64
	for _, d := range devices {
		for _, r := range d.Resources {
			corrections += uint64(r.Corrections)
		}
	}
	ch <- gauge(c.corrections, float64(corrections))
	for _, st := range deviceStatuses {
		ch <- gauge(c.devices, float64(counts[st]), st)
	}
	for st, n := range counts {
		if !slices.Contains(deviceStatuses, st) {
			ch <- gauge(c.devices, float64(n), st)
		}
	}

	rc, err := c.fleetResources(read, devices)
	if err != nil {
		return err
	}
	ch <- gauge(c.resourcesIndex, float64(rc.state.Index()))
	left := maps.Clone(rc.counts)
	for _, cl := range slices.Sorted(maps.Keys(c.s.config.effectiveClasses(read))) {
		for _, st := range resourceStates {
			ch <- gauge(c.resources, float64(left[classState{cl, st}]), cl, st)
			delete(left, classState{cl, st})
		}
	}
	for k, n := range left {
		ch <- gauge(c.resources, float64(n), k.class, k.state)
	}
	return nil
}

// fleetResources counts the intended resources of every device by
// reconcile class and state, comparing each device's desired state with
// its record as GET /v1/devices/{id} does. That costs as much as
// computing /v1/status (about 0.1 s at 100,000 devices on a quiet 2-core
// host), so the counts are kept and served again until the replica has
// moved on (another state, a restore's too) and they are resourcesMaxAge
// old; meteor_fleet_resources_index dates
// them. Concurrent scrapes wait for one count.
func (c *stateCollector) fleetResources(read *fsm.Read, devices []*fsm.DeviceRecord) (*resourceCounts, error) {
	c.resourcesMu.Lock()
	defer c.resourcesMu.Unlock()
	now := c.s.clock.Mono()
	if last := c.resourcesLast; last != nil && (last.state == read.StateID() || now.Sub(last.at) < time.Duration(c.resourcesMaxAge.Load())) {
		return last, nil
	}
	classes := c.s.config.effectiveClasses(read)
	h := c.s.api
	out := &resourceCounts{state: read.StateID(), at: now, counts: map[classState]int{}}
	memo, err := h.planner.Memo(read)
	if err != nil {
		return nil, fmt.Errorf("desired states: %w", err)
	}
	for _, d := range devices {
		desired, err := memo.Desired(d.ID, h.cfg.recordSelection(d))
		if err != nil {
			return nil, fmt.Errorf("desired state of a device: %w", err)
		}
		v := scheduler.Compare(desired, d)
		class := make(map[string]string, len(desired.Resources))
		for _, r := range desired.Resources {
			class[r.Key] = classLabel(classes, r.Resource.EffectiveClass())
		}
		for _, rv := range v.Resources {
			if cl, ok := class[rv.Key]; ok { // not one held but no longer intended
				out.counts[classState{cl, rv.State}]++
			}
		}
	}
	c.resourcesLast = out
	return out, nil
}

// classLabel is the class a resource naming class is reconciled by, as
// the status owner judges it (scheduler.Classes.For): an unknown or empty
// name is the default class.
func classLabel(classes scheduler.Classes, class string) string {
	if _, ok := classes[class]; ok {
		return class
	}
	return scheduler.DefaultClass
}

// rolloutStages are the values of meteor_rollout_devices' stage label,
// the fields of api.RolloutCounts.
var rolloutStages = []string{"targeted", "released", "acknowledged", "converged", "failed"}

// collectRollouts describes every intent's rollout as GET
// /v1/rollouts/{name} does (httpAPI.rolloutStatus). Intents without a
// rollout block have no rollout record and are left out.
func (c *stateCollector) collectRollouts(ch chan<- prometheus.Metric, read *fsm.Read) error {
	ros, err := read.Rollouts(nil)
	if err != nil {
		return fmt.Errorf("read rollouts: %w", err)
	}
	now := c.s.clock.Now()
	for _, ro := range ros {
		rec, err := read.Intent(nil, ro.Intent)
		if errors.Is(err, fsm.ErrNotFound) {
			continue // the intent was deleted
		}
		if err != nil {
			return fmt.Errorf("read intent %q: %w", ro.Intent, err)
		}
		st, err := c.s.api.rolloutStatus(read, rec, now)
		if err != nil {
			return err
		}
		n := st.Counts
		for i, v := range []int{n.Targeted, n.Released, n.Acknowledged, n.Converged, n.Failed} {
			ch <- gauge(c.rolloutDevices, float64(v), st.Intent, rolloutStages[i])
		}
		ch <- gauge(c.rolloutWave, float64(st.Wave), st.Intent)
		ch <- gauge(c.rolloutWaves, float64(len(st.Waves)), st.Intent)
		ch <- gauge(c.rolloutState, 1, st.Intent, st.State)
		ch <- gauge(c.rolloutRevision, float64(st.Revision), st.Intent)
	}
	return nil
}

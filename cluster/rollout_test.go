package cluster

import (
	"context"
	"encoding/hex"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/meteor-edge/meteor/fsm"
	"github.com/meteor-edge/meteor/fsm/intent"
	"github.com/meteor-edge/meteor/scheduler"
)

// setClock is a Clock whose wall time a test sets; the rollout worker
// reads only Now (the test calls pass itself).
type setClock struct {
	SystemClock
	mu  sync.Mutex
	now time.Time // guarded by mu
}

func (c *setClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *setClock) advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// leaderOf adapts a proposer to the worker's leaderProposer.
type leaderOf struct{ p proposer }

func (l leaderOf) Propose(ctx context.Context, t fsm.MessageType, req any) (fsm.ApplyResult, uint64, error) {
	return l.p.apply(ctx, t, req)
}

// simFleet is a fleet of simulated devices driven by the committed state:
// each react, every device whose desired state changed acknowledges it and
// reports it applied, as behave says (by default applied and effective).
type simFleet struct {
	t       testing.TB
	p       proposer
	read    func() *fsm.Read
	cfg     *Config
	planner *scheduler.Planner
	ids     []string
	labels  map[string]map[string]string
	seq     map[string]uint64
	fp      map[string]string
	// behave, if set, returns the status a device reports for a resource
	// it was asked to hold: its applied digest (empty: not applied), the
	// effective result and an apply error.
	behave func(device string, r *scheduler.Resource) (applied bool, effective, lastError string)
	// attempts, if set, is how many attempts a device reports for each
	// resource (absent: one).
	attempts map[string]uint32
}

func newSimFleet(t testing.TB, p proposer, read func() *fsm.Read, n int, labelsOf func(i int) map[string]string) *simFleet {
	f := &simFleet{
		t: t, p: p, read: read, cfg: &Config{TrustReportedLabels: true}, planner: scheduler.NewPlanner(),
		labels: map[string]map[string]string{}, seq: map[string]uint64{}, fp: map[string]string{},
	}
	var sessions []fsm.DeviceSessionRequest
	for i := range n {
		id := fmt.Sprintf("dev-%03d", i)
		f.ids = append(f.ids, id)
		f.labels[id] = labelsOf(i)
		sessions = append(sessions, fsm.DeviceSessionRequest{ID: id, Labels: f.labels[id], SessionID: "s-" + id, Server: "s1", Connected: true, Time: 1})
	}
	f.commit(fsm.DeviceSessionBatchType, &fsm.DeviceSessionBatchRequest{Sessions: sessions})
	return f
}

func (f *simFleet) commit(t fsm.MessageType, req any) {
	f.t.Helper()
	res, _, err := applied(context.Background(), f.p, t, req)
	if err != nil {
		f.t.Fatalf("commit %s: %v (%+v)", t, err, res)
	}
}

// react has every device act on its desired state, and report again those
// whose behaviour changed.
func (f *simFleet) react() {
	f.t.Helper()
	read := f.read()
	var sessions []fsm.DeviceSessionRequest
	var trs []fsm.StatusTransition
	for _, id := range f.ids {
		desired, err := f.planner.Desired(read, id, f.labels[id])
		if err != nil {
			f.t.Fatal(err)
		}
		var res []fsm.ResourceStatus
		var sig strings.Builder
		for _, r := range desired.Resources {
			ok, eff, lastErr := true, "ok", ""
			if f.behave != nil {
				ok, eff, lastErr = f.behave(id, r)
			}
			rs := fsm.ResourceStatus{Key: r.Key, Effective: eff, LastError: lastErr, State: "converged", Attempts: f.attempts[id]}
			if ok {
				rs.AppliedDigest, rs.AppliedRevision = hex.EncodeToString(r.Digest[:]), r.Revision
			} else {
				rs.State = "failed"
			}
			res = append(res, rs)
			fmt.Fprintf(&sig, "%s=%s/%v/%s/%s;", r.Key, rs.AppliedDigest, ok, eff, lastErr)
		}
		if f.fp[id] == sig.String() {
			continue
		}
		f.fp[id] = sig.String()
		f.seq[id]++
		sessions = append(sessions, fsm.DeviceSessionRequest{ID: id, Labels: f.labels[id], SessionID: "s-" + id, Server: "s1", Connected: true, AckedRevision: desired.Revision, Time: 2})
		trs = append(trs, fsm.StatusTransition{Device: id, Seq: f.seq[id], Time: 2, Revision: desired.Revision, Status: "converged", Full: true, Resources: res})
	}
	if len(sessions) > 0 {
		f.commit(fsm.DeviceSessionBatchType, &fsm.DeviceSessionBatchRequest{Sessions: sessions})
		f.commit(fsm.StatusBatchType, &fsm.StatusBatchRequest{Owner: "s1", Transitions: trs})
	}
}

// holding returns the devices whose desired state holds content of
// intent net at revision rev, by its resource digest.
func (f *simFleet) holding(name string, rev uint64) map[string]bool {
	f.t.Helper()
	read := f.read()
	out := map[string]bool{}
	for _, id := range f.ids {
		d, err := f.planner.Desired(read, id, f.labels[id])
		if err != nil {
			f.t.Fatal(err)
		}
		for _, r := range d.Resources {
			if r.Intent == name && r.Revision == rev {
				out[id] = true
			}
		}
	}
	return out
}

// rolloutRig is a rollout worker over one state machine, with a fleet.
type rolloutRig struct {
	t     testing.TB
	p     *localProposer
	clock *setClock
	w     *rolloutWorker
	fleet *simFleet
}

func newRolloutRig(t testing.TB, n int, labelsOf func(i int) map[string]string) *rolloutRig {
	p := newLocalProposer(t)
	clock := &setClock{now: time.Date(2026, 12, 1, 3, 0, 0, 0, time.UTC)}
	r := &rolloutRig{t: t, p: p, clock: clock}
	r.fleet = newSimFleet(t, p, p.state.Read, n, labelsOf)
	r.w = &rolloutWorker{logger: hclog.NewNullLogger(), clock: clock, cfg: r.fleet.cfg, state: p.state,
		planner: scheduler.NewPlanner(), propose: leaderOf{p}, interval: time.Second, samples: map[string]sample{}}
	return r
}

func (r *rolloutRig) put(in *intent.Intent) uint64 {
	r.t.Helper()
	if err := in.Validate(); err != nil {
		r.t.Fatal(err)
	}
	res, _, err := applied(context.Background(), r.p, fsm.PutIntentType, &fsm.PutIntentRequest{Intent: in, Time: r.clock.Now().UnixNano()})
	if err != nil {
		r.t.Fatal(err)
	}
	return res.Revision
}

func (r *rolloutRig) rollout(name string) *fsm.RolloutRecord {
	r.t.Helper()
	ro, err := r.p.state.Read().Rollout(nil, name)
	if err != nil {
		r.t.Fatal(err)
	}
	return ro
}

// tick lets a second pass: the fleet acts, then the worker decides.
func (r *rolloutRig) tick() {
	r.t.Helper()
	r.fleet.react()
	r.clock.advance(time.Second)
	if err := r.w.pass(context.Background()); err != nil {
		r.t.Fatal(err)
	}
}

// until ticks until done holds, at most limit ticks.
func (r *rolloutRig) until(limit int, what string, done func(*fsm.RolloutRecord) bool, each func()) {
	r.t.Helper()
	r.untilOf("net", limit, what, done, each)
}

func (r *rolloutRig) untilOf(name string, limit int, what string, done func(*fsm.RolloutRecord) bool, each func()) {
	r.t.Helper()
	for i := 0; i < limit; i++ {
		r.tick()
		if each != nil {
			each()
		}
		if done(r.rollout(name)) {
			return
		}
	}
	ro := r.rollout(name)
	r.t.Fatalf("%s: not after %d ticks: %s (%s), wave %d", what, limit, ro.State, ro.Reason, ro.Wave+1)
}

func (r *rolloutRig) view(name string) scheduler.Decision {
	r.t.Helper()
	read := r.p.state.Read()
	ro, err := read.Rollout(nil, name)
	if err != nil {
		r.t.Fatal(err)
	}
	in, err := judgeRollout(read, r.fleet.cfg, r.w.planner, ro, r.clock.Now())
	if err != nil {
		r.t.Fatal(err)
	}
	return scheduler.Decide(in)
}

func netIntent(value string, rollout map[string]any) *intent.Intent {
	return &intent.Intent{
		Name:     "net",
		Selector: map[string]string{"region": "eu"},
		Resources: []intent.Resource{{
			ID: "policy", Type: "sim", Spec: map[string]any{"value": value},
		}},
		Rollout: rollout,
	}
}

// fleetLabels gives 500 devices: every tenth a kiosk, the others stores.
func fleetLabels(i int) map[string]string {
	if i%10 == 0 {
		return map[string]string{"region": "eu", "site-type": "kiosk"}
	}
	return map[string]string{"region": "eu", "site-type": "store"}
}

func fiveWaves() map[string]any {
	return map[string]any{
		"waves": []any{
			map[string]any{"name": "pilot", "count": int64(5)},
			map[string]any{"name": "tenth", "percent": "10%", "approval": true},
			map[string]any{"name": "half", "percent": "50%"},
			map[string]any{"name": "stores", "percent": "100%"},
			map[string]any{"name": "kiosks", "selector": "site-type=kiosk"},
		},
		"maxParallel": int64(20),
		"gate":        map[string]any{"converged": "95%", "hold": "5s"},
		"onFailure":   map[string]any{"threshold": "20%"},
	}
}

func TestRolloutWavesInOrder(t *testing.T) {
	r := newRolloutRig(t, 500, fleetLabels)
	r1 := r.put(netIntent("v1", nil))
	r.tick()
	r2 := r.put(netIntent("v2", fiveWaves()))
	read := r.p.state.Read()
	rec, _ := read.Intent(nil, "net")
	doc, _ := read.IntentDoc(rec, r2)
	spec, err := doc.RolloutSpec()
	if err != nil {
		t.Fatal(err)
	}
	maxSeen := 0
	checkParallel := func() {
		v := r.view("net")
		for _, w := range v.Waves {
			if inFlight := w.Released - w.Converged - w.Failed - w.Unreachable; inFlight > spec.WaveMaxParallel(w.Number-1) {
				t.Fatalf("wave %d has %d devices in progress, maxParallel %d", w.Number, inFlight, spec.WaveMaxParallel(w.Number-1))
			} else {
				maxSeen = max(maxSeen, inFlight)
			}
		}
	}
	// The pilot goes first; then the rollout waits for approval.
	r.until(60, "wave 2 waits for approval", func(ro *fsm.RolloutRecord) bool { return ro.State == fsm.RolloutWaitingApproval }, checkParallel)
	if got := r.fleet.holding("net", r2); len(got) != 5 {
		t.Fatalf("before approval %d devices hold revision %d, want the 5 of the pilot", len(got), r2)
	}
	if ro := r.rollout("net"); ro.Wave != 1 || !strings.Contains(ro.Reason, "meteor rollout approve net --wave 2") {
		t.Fatalf("waiting rollout = wave %d, %q", ro.Wave+1, ro.Reason)
	}
	for range 10 {
		r.tick()
	}
	if got := r.fleet.holding("net", r2); len(got) != 5 {
		t.Fatalf("a wave waiting for approval released: %d devices hold revision %d", len(got), r2)
	}
	r.p.mustApply(t, fsm.RolloutControlType, &fsm.RolloutControlRequest{Intent: "net", Action: fsm.RolloutApprove, Wave: 2, Time: 1, Actor: fsm.Actor{Name: "alice"}})
	r.until(400, "completed", func(ro *fsm.RolloutRecord) bool { return ro.State == fsm.RolloutCompleted }, checkParallel)
	if maxSeen != 20 {
		t.Errorf("at most %d devices were in progress at once; maxParallel 20 was never reached", maxSeen)
	}
	if got := r.fleet.holding("net", r2); len(got) != 500 {
		t.Fatalf("after completion %d devices hold revision %d, want 500", len(got), r2)
	}
	if ro := r.rollout("net"); ro.Stable != r2 {
		t.Fatalf("stable revision %d after completion, want %d (was %d)", ro.Stable, r2, r1)
	}

	// Waves released in order, each device once, kiosks last.
	evs, _ := r.p.state.Read().RolloutEvents(nil, "net")
	seen := map[string]int{}
	lastWave := 0
	perWave := map[int]int{}
	for _, e := range evs {
		if e.Kind != fsm.EventRelease || e.Revision != r2 {
			continue
		}
		if e.Wave < lastWave {
			t.Fatalf("wave %d released after wave %d", e.Wave, lastWave)
		}
		lastWave = e.Wave
		for _, d := range e.Devices {
			seen[d]++
			perWave[e.Wave]++
			if kiosk := fleetLabels(idOf(d))["site-type"] == "kiosk"; kiosk != (e.Wave == 5) {
				t.Fatalf("device %s (kiosk %v) released in wave %d", d, kiosk, e.Wave)
			}
		}
	}
	for d, n := range seen {
		if n != 1 {
			t.Fatalf("device %s released %d times", d, n)
		}
	}
	// 450 stores: 5, then up to 10% (45), 50% (225), 100%; 50 kiosks.
	if want := map[int]int{1: 5, 2: 40, 3: 180, 4: 225, 5: 50}; fmt.Sprint(perWave) != fmt.Sprint(want) {
		t.Fatalf("devices per wave %v, want %v", perWave, want)
	}
}

func idOf(dev string) int {
	var i int
	fmt.Sscanf(dev, "dev-%d", &i)
	return i
}

func TestRolloutGateHoldsOnEffectiveProbe(t *testing.T) {
	r := newRolloutRig(t, 500, fleetLabels)
	r.put(netIntent("v1", nil))
	r.tick()
	ro := fiveWaves()
	ro["onFailure"] = map[string]any{"threshold": "100%"} // never pause: the gate must hold by itself
	r2 := r.put(netIntent("v2", ro))
	probeFails := true
	r.fleet.behave = func(dev string, res *scheduler.Resource) (bool, string, string) {
		if res.Revision == r2 && probeFails {
			return true, "mismatch", "" // applied, but the probe disagrees
		}
		return true, "ok", ""
	}
	for range 30 {
		r.tick()
	}
	v := r.view("net")
	if ro := r.rollout("net"); ro.Wave != 0 || ro.State != fsm.RolloutProgressing {
		t.Fatalf("with failing probes the rollout moved on: wave %d, %s (%s)", ro.Wave+1, ro.State, ro.Reason)
	}
	if v.Waves[0].Released != 5 || v.Waves[0].Converged != 0 || v.Waves[1].Released != 0 {
		t.Fatalf("waves = %+v", v.Waves[:2])
	}
	if !strings.Contains(v.Waiting, "wave 1 gate: 0 of 5 (0%) converged, need 95%") {
		t.Fatalf("waiting for %q", v.Waiting)
	}
	probeFails = false
	r.until(20, "the gate passes once the probes agree", func(ro *fsm.RolloutRecord) bool { return ro.Wave == 1 }, nil)
}

func TestRolloutThresholdPauses(t *testing.T) {
	r := newRolloutRig(t, 500, fleetLabels)
	r.put(netIntent("v1", nil))
	r.tick()
	r2 := r.put(netIntent("v2", fiveWaves()))
	failing := map[string]bool{}
	r.fleet.behave = func(dev string, res *scheduler.Resource) (bool, string, string) {
		if res.Revision == r2 && len(failing) < 2 || failing[dev] {
			failing[dev] = true
			return false, "unknown", "exit status 1"
		}
		return true, "ok", ""
	}
	r.until(20, "paused", func(ro *fsm.RolloutRecord) bool { return ro.State == fsm.RolloutPaused }, nil)
	ro := r.rollout("net")
	want := "wave 1: 2 of 5 (40%) devices failed, stuck or unhealthy, above the 20% threshold"
	if !strings.HasPrefix(ro.Reason, want) || !strings.HasSuffix(ro.Reason, ": paused") {
		t.Fatalf("reason %q, want it to start %q", ro.Reason, want)
	}
	released := len(r.fleet.holding("net", r2))
	for range 10 {
		r.tick()
	}
	if got := len(r.fleet.holding("net", r2)); got != released {
		t.Fatalf("a paused rollout released: %d -> %d", released, got)
	}
}

func TestRolloutRevertsByItself(t *testing.T) {
	r := newRolloutRig(t, 500, fleetLabels)
	r1 := r.put(netIntent("v1", nil))
	r.tick()
	ro := fiveWaves()
	ro["onFailure"] = map[string]any{"threshold": "0%", "action": "revert"}
	r2 := r.put(netIntent("v2", ro))
	r.fleet.behave = func(dev string, res *scheduler.Resource) (bool, string, string) {
		if res.Revision == r2 {
			return true, "mismatch", "" // every apply succeeds; the effective state is wrong
		}
		return true, "ok", ""
	}
	r.until(20, "reverted", func(ro *fsm.RolloutRecord) bool { return ro.State == fsm.RolloutReverted }, nil)
	if !strings.Contains(r.rollout("net").Reason, "reverted to revision") {
		t.Fatalf("reason %q", r.rollout("net").Reason)
	}
	if got := r.fleet.holding("net", r2); len(got) != 0 {
		t.Fatalf("after the revert %d devices hold revision %d", len(got), r2)
	}
	if got := r.fleet.holding("net", r1); len(got) != 500 {
		t.Fatalf("after the revert %d devices hold revision %d, want 500", len(got), r1)
	}
}

func TestRolloutUndoAndSupersede(t *testing.T) {
	r := newRolloutRig(t, 500, fleetLabels)
	fast := map[string]any{"waves": []any{int64(5), "50%", "100%"}, "maxParallel": int64(50)}
	r1 := r.put(netIntent("v1", nil))
	r.tick()
	r2 := r.put(netIntent("v2", fast))
	r.until(10, "wave 2 under way", func(ro *fsm.RolloutRecord) bool { return ro.Wave == 1 }, nil)
	before := r.fleet.holding("net", r2)
	// A newer revision supersedes the rollout: the devices holding r2 keep
	// it until r3 reaches them, and r2 reaches no one else.
	r3 := r.put(netIntent("v3", fast))
	if outs, _ := r.p.state.Read().RolloutOutcomes("net"); len(outs) != 1 || outs[0].State != fsm.RolloutSuperseded {
		t.Fatalf("outcomes = %+v", outs)
	}
	r.until(200, "r3 completed", func(ro *fsm.RolloutRecord) bool { return ro.State == fsm.RolloutCompleted }, func() {
		for d := range r.fleet.holding("net", r2) {
			if !before[d] {
				t.Fatalf("device %s received the superseded revision %d", d, r2)
			}
		}
	})
	if got := r.fleet.holding("net", r3); len(got) != 500 {
		t.Fatalf("%d devices hold revision %d", len(got), r3)
	}
	// Undo: the document of r1 again, as a new revision, by the same rules.
	read := r.p.state.Read()
	rec, _ := read.Intent(nil, "net")
	old, err := read.IntentDoc(rec, r1)
	if err != nil {
		t.Fatal(err)
	}
	undo := *old
	undo.Rollout = fast
	r4 := r.put(&undo)
	r.until(200, "undo completed", func(ro *fsm.RolloutRecord) bool { return ro.Revision == r4 && ro.State == fsm.RolloutCompleted }, nil)
	d, _ := r.w.planner.Desired(r.p.state.Read(), "dev-001", fleetLabels(1))
	want, _ := (&intent.ResourceBody{Intent: "net", Resource: old.Resources[0]}).Canonical()
	if len(d.Resources) != 1 || string(d.Resources[0].Body) != string(want) {
		t.Fatalf("after undo dev-001 holds %s, want %s", d.Resources[0].Body, want)
	}
}

// leaderProposerOf commits on whichever server of a test cluster leads.
type leaderProposerOf struct{ c *testCluster }

func (l leaderProposerOf) apply(ctx context.Context, t fsm.MessageType, req any) (fsm.ApplyResult, uint64, error) {
	var res fsm.ApplyResult
	var index uint64
	waitFor(l.c.t, 20*time.Second, func() error {
		var err error
		res, index, err = l.c.waitLeader().Propose(ctx, t, req)
		return err
	})
	return res, index, nil
}

// TestRolloutCarriesOnAfterLeaderLoss kills the leader in the middle of a
// rollout on a real three-server cluster: the new leader's worker carries
// on from the committed state, releasing no device twice and skipping
// none.
func TestRolloutCarriesOnAfterLeaderLoss(t *testing.T) {
	c := newTestCluster(t, 3, func(cfg *Config) {
		cfg.TrustReportedLabels = true
		cfg.RolloutInterval = 100 * time.Millisecond
	})
	leader := c.waitLeader()
	via := c.follower()
	fleet := newSimFleet(t, leaderProposerOf{c}, via.fsm.Read, 60, func(int) map[string]string { return map[string]string{"region": "eu"} })
	c.propose(netIntent("v1", nil))
	waitFor(t, 10*time.Second, func() error {
		fleet.react()
		return nil
	})
	r2 := c.propose(netIntent("v2", map[string]any{"waves": []any{int64(5), "25%", "50%", "100%"}, "maxParallel": int64(3)})).Revision
	released := func() int { return len(fleet.holding("net", r2)) }
	waitFor(t, 30*time.Second, func() error {
		fleet.react()
		if n := released(); n < 12 {
			return fmt.Errorf("%d devices released", n)
		}
		return nil
	})
	t.Logf("killing the leader %s with %d of 60 devices released", leader.config.NodeID, released())
	c.kill(c.index(leader))
	waitFor(t, 60*time.Second, func() error {
		fleet.react()
		ro, err := via.fsm.Read().Rollout(nil, "net")
		if err != nil {
			return err
		}
		if ro.State != fsm.RolloutCompleted {
			return fmt.Errorf("rollout %s (%s), %d devices released", ro.State, ro.Reason, released())
		}
		return nil
	})
	if next := c.waitLeader(); next == leader {
		t.Fatal("the killed server still leads")
	}
	evs, err := via.fsm.Read().RolloutEvents(nil, "net")
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]int{}
	for _, e := range evs {
		if e.Kind == fsm.EventRelease && e.Revision == r2 {
			for _, d := range e.Devices {
				seen[d]++
			}
		}
	}
	if len(seen) != 60 {
		t.Fatalf("%d devices released, want 60", len(seen))
	}
	for d, n := range seen {
		if n != 1 {
			t.Fatalf("device %s released %d times", d, n)
		}
	}
	if got := released(); got != 60 {
		t.Fatalf("%d devices hold revision %d", got, r2)
	}
}

// retailLabels labels 1,200 devices as the retail fleet of the simulator
// (agent/sim): stores of a gateway and five tills on fiber, kiosks on
// cellular links, pop-up sites of two tills.
func retailLabels(i int) map[string]string {
	regions := []string{"eu-west", "us-east", "ap-south"}
	switch i % 10 {
	case 6, 7, 8:
		k := i / 10 * 3
		return map[string]string{"region": regions[k%3], "site": fmt.Sprintf("kiosk-%04d", k), "role": "kiosk", "link": "cellular"}
	case 9:
		p := i / 20
		return map[string]string{"region": regions[p%3], "site": fmt.Sprintf("popup-%04d", p), "role": "pos-terminal", "link": "popup"}
	}
	n := i/10*6 + i%10
	role := "pos-terminal"
	if n%6 == 0 {
		role = "store-gateway"
	}
	return map[string]string{"region": regions[n/6%3], "site": fmt.Sprintf("store-%04d", n/6), "role": role, "link": "fiber"}
}

// TestPlanOnTheRetailFleet plans each change of the retail
// scenario on a 1,200-device fleet, applies it, lets the rollout complete
// and checks that the devices and resources whose reported state changed
// are exactly those the plan named, in the waves it named.
func TestPlanOnTheRetailFleet(t *testing.T) {
	r := newRolloutRig(t, 1200, retailLabels)
	h := &httpAPI{cfg: r.fleet.cfg, planner: scheduler.NewPlanner()}
	files, err := filepath.Glob("../docs/examples/retail/*.yaml")
	if err != nil || len(files) != 3 {
		t.Fatalf("retail changes: %v, %v", files, err)
	}
	reported := func() map[string]map[string]string {
		out := map[string]map[string]string{}
		devs, _ := r.p.state.Read().Devices(nil)
		for _, d := range devs {
			m := map[string]string{}
			for _, rs := range d.Resources {
				m[rs.Key] = rs.AppliedDigest
			}
			out[d.ID] = m
		}
		return out
	}
	// Apply each change twice over (the second time with another value),
	// so that plans see added and changed resources.
	for round := range 2 {
		for _, f := range files {
			b, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			doc, err := intent.Parse(b)
			if err != nil {
				t.Fatal(err)
			}
			if round == 1 {
				doc.Resources[0].Spec["value"] = fmt.Sprint(doc.Resources[0].Spec["value"], "-next")
			}
			plan, err := h.plan(r.p.state.Read(), []*intent.Intent{doc})
			if err != nil {
				t.Fatal(err)
			}
			ip := plan.Intents[0]
			want := map[string][]string{}
			waveOf := map[string]int{}
			for _, d := range ip.Devices {
				for _, c := range d.Changes {
					want[d.ID] = append(want[d.ID], c.Key)
				}
				waveOf[d.ID] = d.Wave
			}
			before := reported()
			r.put(doc)
			r.untilOf(doc.Name, 400, doc.Name+" completed", func(ro *fsm.RolloutRecord) bool { return ro.State == fsm.RolloutCompleted }, nil)
			r.tick()
			after := reported()
			got := map[string][]string{}
			for id, keys := range after {
				for _, k := range slices.Sorted(maps.Keys(keys)) {
					if name, _, _ := intent.SplitResourceKey(k); name == doc.Name && before[id][k] != keys[k] {
						got[id] = append(got[id], k)
					}
				}
			}
			for id := range want {
				slices.Sort(want[id])
			}
			if len(want) == 0 || fmt.Sprint(got) != fmt.Sprint(want) {
				t.Fatalf("round %d, %s: the plan named %d devices, the apply changed %d:\nplanned %v\nchanged %v", round, doc.Name, len(want), len(got), want, got)
			}
			// Each device was released in the wave the plan gave it.
			evs, _ := r.p.state.Read().RolloutEvents(nil, doc.Name)
			rev := r.rollout(doc.Name).Revision
			for _, e := range evs {
				if e.Kind != fsm.EventRelease || e.Revision != rev {
					continue
				}
				for _, d := range e.Devices {
					if waveOf[d] != 0 && waveOf[d] != e.Wave {
						t.Fatalf("%s: %s released in wave %d, planned in %d", doc.Name, d, e.Wave, waveOf[d])
					}
				}
			}
		}
	}
}

// failingSteps is a leaderProposer whose rollout steps for one intent fail
// while broken is set, as a proposal that cannot commit does.
type failingSteps struct {
	leaderProposer
	intent string
	broken atomic.Bool
}

func (f *failingSteps) Propose(ctx context.Context, t fsm.MessageType, req any) (fsm.ApplyResult, uint64, error) {
	if step, ok := req.(*fsm.RolloutStepRequest); ok && t == fsm.RolloutStepType && step.Intent == f.intent && f.broken.Load() {
		return fsm.ApplyResult{}, 0, errInjected
	}
	return f.leaderProposer.Propose(ctx, t, req)
}

// TestRolloutWorkerCarriesOnPastAFailingRollout: a rollout whose steps
// cannot commit does not stop the worker: the other rollouts go on at
// every pass, and the failing one goes on once its steps commit again.
func TestRolloutWorkerCarriesOnPastAFailingRollout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRolloutRig(t, 100, fleetLabels)
		fail := &failingSteps{leaderProposer: r.w.propose, intent: "other"}
		fail.broken.Store(true)
		r.w.propose = fail
		other := func(value string, rollout map[string]any) *intent.Intent {
			in := netIntent(value, rollout)
			in.Name, in.Resources[0].ID = "other", "other-policy"
			return in
		}
		r.put(netIntent("v1", nil))
		r.put(other("v1", nil))
		r.fleet.react()
		waves := map[string]any{"waves": []any{int64(5), "50%", "100%"}, "maxParallel": int64(50)}
		r2 := r.put(netIntent("v2", waves))
		o2 := r.put(other("v2", waves))

		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		done := make(chan error, 1)
		go func() { done <- r.w.Run(ctx) }()
		// tick lets the fleet act and the worker make one pass.
		tick := func() {
			r.fleet.react()
			r.clock.advance(time.Second)
			time.Sleep(r.w.interval)
			synctest.Wait()
			select {
			case err := <-done:
				t.Fatalf("the rollout worker stopped: %v", err)
			default:
			}
		}
		for i := 0; r.rollout("net").State != fsm.RolloutCompleted; i++ {
			if i == 100 {
				ro := r.rollout("net")
				t.Fatalf("net is not completed after %d passes while other's steps fail: %s (%s), wave %d", i, ro.State, ro.Reason, ro.Wave+1)
			}
			tick()
		}
		if got := len(r.fleet.holding("net", r2)); got != 100 {
			t.Fatalf("%d devices hold net revision %d, want 100", got, r2)
		}
		if got := len(r.fleet.holding("other", o2)); got != 0 {
			t.Fatalf("%d devices hold other revision %d though none of its steps committed", got, o2)
		}

		fail.broken.Store(false)
		for i := 0; r.rollout("other").State != fsm.RolloutCompleted; i++ {
			if i == 100 {
				ro := r.rollout("other")
				t.Fatalf("other is not completed %d passes after its steps commit again: %s (%s)", i, ro.State, ro.Reason)
			}
			tick()
		}
		if got := len(r.fleet.holding("other", o2)); got != 100 {
			t.Fatalf("%d devices hold other revision %d, want 100", got, o2)
		}
		cancel()
		if err := <-done; err != nil {
			t.Fatalf("Run after its context ended: %v", err)
		}
	})
}

package agent

import (
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/meteor-edge/meteor/agent/driver"
	"github.com/meteor-edge/meteor/fsm/intent"
	"github.com/meteor-edge/meteor/wire"
)

func TestOrder(t *testing.T) {
	mk := func(key string, requires ...string) *item { return &item{key: key, requires: requires} }
	items := map[string]*item{
		"a/db":     mk("a/db"),
		"a/app":    mk("a/app", "a/config", "a/db"),
		"a/config": mk("a/config", "a/db"),
		"a/web":    mk("a/web", "a/app", "a/missing"),
		"b/x":      mk("b/x", "b/y"),
		"b/y":      mk("b/y", "b/x"),
		"c/solo":   mk("c/solo"),
	}
	ordered, cycles := order(items)
	var got []string
	for _, it := range ordered {
		got = append(got, it.key)
	}
	want := []string{"a/db", "a/config", "a/app", "a/web", "b/y", "b/x", "c/solo"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("order (-want +got):\n%s", diff)
	}
	if len(cycles) != 2 || !strings.Contains(cycles["b/x"], "b/x -> b/y -> b/x") || cycles["b/y"] == "" {
		t.Errorf("cycles = %v", cycles)
	}
}

func TestDecodeItem(t *testing.T) {
	good := desired(t, "app", 3, fileRes("cfg", "/etc/app.conf", "x", "db", "db"))
	it := decodeItem(good)
	if it.err != nil || it.res.Type != "file" || !cmp.Equal(it.requires, []string{"app/db"}) {
		t.Errorf("decodeItem(good) = %+v", it)
	}
	for name, mutate := range map[string]func(d *[]byte, key *string){
		"not json":       func(b *[]byte, _ *string) { *b = []byte("{") },
		"key without /":  func(_ *[]byte, k *string) { *k = "app-cfg" },
		"other intent":   func(_ *[]byte, k *string) { *k = "other/cfg" },
		"other resource": func(_ *[]byte, k *string) { *k = "app/other" },
	} {
		d := good
		mutate(&d.Body, &d.Key)
		if it := decodeItem(d); !errors.Is(it.err, errBadBody) {
			t.Errorf("%s: err = %v, want errBadBody", name, it.err)
		}
	}
}

// TestReconcileOrderAndBlocked: resources are applied after what they
// require; a resource whose requirement failed, or is applied but not yet
// effective, is blocked and not touched.
func TestReconcileOrderAndBlocked(t *testing.T) {
	r := newRig(t)
	flaky := &flakyDriver{Driver: driver.NewSim(driver.Config{Sim: r.sim}), probe: driver.EffectiveMismatch}
	r.reg.Register("flaky", flaky)
	slow := intent.Resource{ID: "slow", Type: "flaky", Spec: map[string]any{"value": 1}}
	r.record(4,
		desired(t, "app", 4, fileRes("web", "/srv/web.conf", "web", "config", "db")),
		desired(t, "app", 4, fileRes("config", "/srv/app.conf", "config", "db")),
		desired(t, "app", 2, fileRes("db", "/srv/db.conf", "db")),
		desired(t, "app", 4, simRes("broken", 1, map[string]any{"failureRate": 1})),
		desired(t, "app", 4, simRes("needs-broken", 1, nil, "broken")),
		desired(t, "app", 4, slow),
		desired(t, "app", 4, simRes("needs-slow", 1, nil, "slow")),
		desired(t, "app", 4, simRes("needs-ghost", 1, nil, "ghost")),
	)
	begun := r.pass()
	want := []string{"app/broken", "app/db", "app/config", "app/slow", "app/web"}
	if diff := cmp.Diff(want, begun); diff != "" {
		t.Errorf("steps of the first pass (-want +got):\n%s", diff)
	}
	for key, want := range map[string]string{
		"app/db": StateConverged, "app/config": StateConverged, "app/web": StateConverged,
		"app/broken": StateFailed, "app/needs-broken": StateBlocked,
		"app/slow": StateProgressing, "app/needs-slow": StateBlocked, "app/needs-ghost": StateBlocked,
	} {
		if got := r.status(key); got.State != want {
			t.Errorf("%s: state %s (%s), want %s", key, got.State, got.Detail, want)
		}
	}
	if got := r.status("app/needs-broken").Detail; got != "requires app/broken, which is failed" {
		t.Errorf("needs-broken detail = %q", got)
	}
	if got := r.status("app/needs-slow").Detail; got != "requires app/slow, which is progressing" {
		t.Errorf("needs-slow detail = %q", got)
	}
	if got := r.status("app/needs-ghost").Detail; !strings.Contains(got, "not in the desired set") {
		t.Errorf("needs-ghost detail = %q", got)
	}
	if b := r.status("app/broken"); b.Attempts != 1 || !strings.Contains(b.LastError, "simulated apply failure") {
		t.Errorf("broken = %+v", b)
	}
	if s := r.st.snapshot(); s.State != StateFailed || !strings.HasPrefix(s.BlockedReason, "app/needs-broken: requires") {
		t.Errorf("device state %q blocked %q", s.State, s.BlockedReason)
	}

	// The requirement becomes effective: its dependent proceeds once the
	// re-probe (with backoff, RetryMin first) is due.
	flaky.set(driver.EffectiveOK, nil)
	if begun := r.pass(); len(begun) != 0 {
		t.Errorf("pass before any retry or probe is due began %v", begun)
	}
	r.clock.Advance(DefaultRetryMin)
	begun = r.pass()
	if diff := cmp.Diff([]string{"app/broken", "app/needs-slow"}, begun); diff != "" {
		t.Errorf("steps once due (-want +got):\n%s", diff)
	}
	if got := r.status("app/needs-slow").State; got != StateConverged {
		t.Errorf("needs-slow = %s", got)
	}
	if b := r.status("app/broken"); b.Attempts != 2 || b.State != StateFailed {
		t.Errorf("broken after retry = %+v", b)
	}
	// Backoff doubles: nothing at +1s, the third attempt at +2s.
	r.clock.Advance(DefaultRetryMin)
	if begun := r.pass(); len(begun) != 0 {
		t.Errorf("retry before the doubled backoff: %v", begun)
	}
	r.clock.Advance(DefaultRetryMin)
	if begun := r.pass(); !cmp.Equal(begun, []string{"app/broken"}) {
		t.Errorf("third attempt: %v", begun)
	}
}

// TestReconcileIdempotent: applying the same desired state again changes
// nothing: no step, no file touched, no applied record rewritten.
func TestReconcileIdempotent(t *testing.T) {
	r := newRig(t)
	r.record(1,
		desired(t, "app", 1, fileRes("a", "/etc/a", "A")),
		desired(t, "app", 1, fileRes("b", "/etc/b", "B", "a")),
	)
	if begun := r.pass(); len(begun) != 2 {
		t.Fatalf("first pass began %v", begun)
	}
	mtimes := fileMtimes(t, r.root)
	before, err := r.j.AppliedAll()
	if err != nil {
		t.Fatal(err)
	}
	// The same set journaled again (a repeated Delta), and probes due.
	r.record(1,
		desired(t, "app", 1, fileRes("a", "/etc/a", "A")),
		desired(t, "app", 1, fileRes("b", "/etc/b", "B", "a")),
	)
	r.clock.Advance(time.Hour)
	if begun := r.pass(); len(begun) != 0 {
		t.Errorf("second pass began %v", begun)
	}
	after, err := r.j.AppliedAll()
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(before, after); diff != "" {
		t.Errorf("applied records changed (-before +after):\n%s", diff)
	}
	if diff := cmp.Diff(mtimes, fileMtimes(t, r.root)); diff != "" {
		t.Errorf("files touched (-before +after):\n%s", diff)
	}
	if s := r.st.snapshot(); s.State != StateConverged {
		t.Errorf("device state %s", s.State)
	}
}

func TestReconcileDrift(t *testing.T) {
	r := newRig(t)
	res := func(id, drift string) intent.Resource {
		x := fileRes(id, "/etc/"+id, id+"-content")
		x.Drift = drift
		return x
	}
	r.record(1,
		desired(t, "app", 1, res("corrected", "")),
		desired(t, "app", 1, res("tolerated", intent.DriftTolerate)),
		desired(t, "app", 1, res("reported", intent.DriftReport)),
	)
	r.pass()
	for _, id := range []string{"corrected", "tolerated", "reported"} {
		if err := os.WriteFile(r.path("/etc/"+id), []byte("local edit"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if begun := r.pass(); len(begun) != 0 {
		t.Errorf("drift acted on before the probe interval: %v", begun)
	}
	r.clock.Advance(DefaultProbeInterval)
	if begun := r.pass(); !cmp.Equal(begun, []string{"app/corrected"}) {
		t.Errorf("drift pass began %v, want only app/corrected", begun)
	}
	read := func(id string) string {
		b, err := os.ReadFile(r.path("/etc/" + id))
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	if got := read("corrected"); got != "corrected-content" {
		t.Errorf("corrected file = %q", got)
	}
	for _, id := range []string{"tolerated", "reported"} {
		if got := read(id); got != "local edit" {
			t.Errorf("%s file = %q, want the local edit kept", id, got)
		}
	}
	c := r.status("app/corrected")
	if c.State != StateConverged || c.Corrections != 1 || c.Effective != wire.EffectiveOK {
		t.Errorf("corrected = %+v", c)
	}
	if o := r.status("app/tolerated"); o.State != StateOverridden || !strings.Contains(o.Detail, "tolerated") {
		t.Errorf("tolerated = %+v", o)
	}
	if d := r.status("app/reported"); d.State != StateDrifted || d.Effective != wire.EffectiveMismatch {
		t.Errorf("reported = %+v", d)
	}
	if s := r.st.snapshot(); s.State != StateDrifted {
		t.Errorf("device state %s, want drifted", s.State)
	}
	// The applied records still name the intended digest: drift is not a
	// change of what was applied.
	if a, _, _ := r.j.Applied("app/reported"); a.Digest != desired(t, "app", 1, res("reported", intent.DriftReport)).Digest {
		t.Errorf("reported applied record = %+v", a)
	}
}

func TestReconcileTerminalAndForget(t *testing.T) {
	r := newRig(t)
	bad := intent.Resource{ID: "bad", Type: "file", Spec: map[string]any{"path": "relative/path", "content": "x"}}
	unknown := intent.Resource{ID: "unknown", Type: "no-such-driver", Spec: map[string]any{}}
	r.record(1,
		desired(t, "app", 1, bad),
		desired(t, "app", 1, unknown),
		desired(t, "app", 1, fileRes("kept", "/etc/kept", "k")),
	)
	if begun := r.pass(); !cmp.Equal(begun, []string{"app/bad", "app/kept"}) {
		t.Errorf("first pass began %v", begun)
	}
	for _, key := range []string{"app/bad", "app/unknown"} {
		if s := r.status(key); s.State != StateFailed || !strings.Contains(s.Detail, "terminal") {
			t.Errorf("%s = %+v", key, s)
		}
	}
	r.clock.Advance(time.Hour)
	if begun := r.pass(); len(begun) != 0 {
		t.Errorf("terminal errors retried: %v", begun)
	}
	// "kept" leaves the desired set: forgotten, its file left in place.
	r.record(2, desired(t, "app", 1, bad))
	r.pass()
	if _, ok, _ := r.j.Applied("app/kept"); ok {
		t.Error("applied record of a removed resource kept")
	}
	if _, err := os.Stat(r.path("/etc/kept")); err != nil {
		t.Errorf("file of a removed resource: %v, want it left on the device", err)
	}
	if got := len(r.st.snapshot().Resources); got != 1 {
		t.Errorf("%d resources in the status, want 1", got)
	}
}

func TestBackoff(t *testing.T) {
	for _, tc := range []struct {
		n    int
		want time.Duration
	}{{0, time.Second}, {1, time.Second}, {2, 2 * time.Second}, {4, 8 * time.Second}, {10, time.Minute}, {1000, time.Minute}} {
		if got := backoff(time.Second, time.Minute, tc.n); got != tc.want {
			t.Errorf("backoff(%d) = %v, want %v", tc.n, got, tc.want)
		}
	}
}

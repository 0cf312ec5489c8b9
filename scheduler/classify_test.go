package scheduler

import (
	"encoding/hex"
	"slices"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/meteor-edge/meteor/fsm"
	"github.com/meteor-edge/meteor/wire"
)

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// Test resources and their classes.
const (
	fw   = "net/fw"    // network-policy: unreachable after 2m, progress deadline 5m
	motd = "cfg/motd"  // config: unreachable after 5m, progress deadline 5m
	pkg  = "pkg/nginx" // package: unreachable after 30m, progress deadline 1h
)

var testClassOf = map[string]Intended{fw: {Class: "network-policy"}, motd: {Class: "config"}, pkg: {Class: "package"}}

func digestOf(key string) wire.Digest { return wire.DigestOf([]byte(key)) }

func hexOf(key string) string { d := digestOf(key); return hex.EncodeToString(d[:]) }

// desiredAt is a desired state holding keys, each released at rev.
func desiredAt(rev uint64, keys ...string) *DesiredState {
	d := &DesiredState{Revision: rev}
	for _, k := range keys {
		d.Resources = append(d.Resources, &Resource{Key: k, Revision: rev, Digest: digestOf(k)})
	}
	return d
}

// Reported resource states, as the agent reports them.
func converged(key string) fsm.ResourceStatus {
	return fsm.ResourceStatus{Key: key, AppliedDigest: hexOf(key), Effective: "ok", State: "converged", Detail: "content matches"}
}

func applied(key string) fsm.ResourceStatus {
	return fsm.ResourceStatus{Key: key, AppliedDigest: hexOf(key), Effective: "unknown", State: "progressing"}
}

func notApplied(key string) fsm.ResourceStatus {
	return fsm.ResourceStatus{Key: key, AppliedDigest: "old", Effective: "ok", State: "pending"}
}

func failing(key, err string, attempts uint32, at time.Time) fsm.ResourceStatus {
	return fsm.ResourceStatus{Key: key, AppliedDigest: "old", Effective: "ok", State: "failed", Detail: "retrying", LastError: err, Attempts: attempts, UpdatedAt: at.UnixNano()}
}

func withState(r fsm.ResourceStatus, effective, state, detail string) fsm.ResourceStatus {
	r.Effective, r.State, r.Detail = effective, state, detail
	return r
}

// legacy is rec as a protocol 1.0 agent reported it: no state field, the
// state at the start of the detail.
func legacy(rec fsm.DeviceRecord) fsm.DeviceRecord {
	rec.Resources = slices.Clone(rec.Resources)
	for i := range rec.Resources {
		r := &rec.Resources[i]
		if r.Detail != "" {
			r.Detail = r.State + ": " + r.Detail
		} else {
			r.Detail = r.State
		}
		r.State = ""
	}
	return rec
}

// summary is what the table checks of a DeviceStatus.
type summary struct {
	Status, Reason   string
	Since, NextRetry time.Time
	Resources        map[string]string
}

func summarize(s DeviceStatus) summary {
	out := summary{Status: s.Status, Reason: s.Reason, Since: s.Since, NextRetry: s.NextRetry, Resources: map[string]string{}}
	for _, r := range s.Resources {
		out.Resources[r.Key] = r.Status
	}
	return out
}

func TestClassify(t *testing.T) {
	ago := func(d time.Duration) time.Time { return t0.Add(-d) }
	mark := func(d time.Duration) ProgressMark { return ProgressMark{At: ago(d)} }
	tests := []struct {
		name      string
		desired   *DesiredState
		rec       fsm.DeviceRecord
		classes   Classes // nil: DefaultClasses
		progress  ProgressMark
		want      summary
		wantRetry map[string]time.Time // per-resource NextRetry, if checked
	}{{
		name:     "converged",
		desired:  desiredAt(3, fw, motd),
		rec:      fsm.DeviceRecord{Connected: true, AckedRevision: 3, Resources: []fsm.ResourceStatus{converged(fw), converged(motd)}},
		progress: mark(time.Hour),
		want:     summary{Status: StatusConverged, Reason: "all 2 resources converged", Since: ago(time.Hour), Resources: map[string]string{fw: "converged", motd: "converged"}},
	}, {
		name:    "nothing desired",
		desired: desiredAt(3),
		rec:     fsm.DeviceRecord{Connected: true, AckedRevision: 3},
		want:    summary{Status: StatusConverged, Reason: "no resources are desired", Resources: map[string]string{}},
	}, {
		name:     "pending while the revision is not acknowledged",
		desired:  desiredAt(5, motd),
		rec:      fsm.DeviceRecord{Connected: true, AckedRevision: 4, Resources: []fsm.ResourceStatus{notApplied(motd)}},
		progress: mark(time.Minute),
		want:     summary{Status: StatusPending, Reason: "desired revision 5 not acknowledged yet (device acknowledged 4)", Since: ago(time.Minute), Resources: map[string]string{motd: "pending"}},
	}, {
		name:     "never connected is pending, not unreachable",
		desired:  desiredAt(5, fw),
		rec:      fsm.DeviceRecord{},
		progress: mark(time.Hour),
		want:     summary{Status: StatusPending, Reason: "desired revision 5 not acknowledged yet (device acknowledged 0)", Since: ago(time.Hour), Resources: map[string]string{fw: "pending"}},
	}, {
		name:     "slow: progressing within the deadline",
		desired:  desiredAt(5, motd, pkg),
		rec:      fsm.DeviceRecord{Connected: true, AckedRevision: 5, Resources: []fsm.ResourceStatus{applied(motd), converged(pkg)}},
		progress: mark(4*time.Minute + 59*time.Second),
		want: summary{Status: StatusProgressing, Reason: "1 of 2 resources converged; cfg/motd: applied; the probe has not confirmed it yet",
			Since: ago(4*time.Minute + 59*time.Second), Resources: map[string]string{motd: "progressing", pkg: "converged"}},
	}, {
		name:     "stuck: connected, no progress past the deadline",
		desired:  desiredAt(5, motd, pkg),
		rec:      fsm.DeviceRecord{Connected: true, AckedRevision: 5, Resources: []fsm.ResourceStatus{applied(motd), converged(pkg)}},
		progress: mark(12 * time.Minute),
		want: summary{Status: StatusStuck, Reason: "no progress for 12m (config allows 5m); last state: cfg/motd progressing: applied; the probe has not confirmed it yet",
			Since: ago(12 * time.Minute), Resources: map[string]string{motd: "progressing", pkg: "converged"}},
	}, {
		name:     "loose class: a slow package is not stuck at 12m",
		desired:  desiredAt(5, motd, pkg),
		rec:      fsm.DeviceRecord{Connected: true, AckedRevision: 5, Resources: []fsm.ResourceStatus{converged(motd), notApplied(pkg)}},
		progress: mark(12 * time.Minute),
		want: summary{Status: StatusProgressing, Reason: "1 of 2 resources converged; pkg/nginx: acknowledged; not applied yet",
			Since: ago(12 * time.Minute), Resources: map[string]string{motd: "converged", pkg: "progressing"}},
	}, {
		name:     "stuck needs a connection",
		desired:  desiredAt(5, motd),
		rec:      fsm.DeviceRecord{AckedRevision: 5, LastSeen: ago(time.Minute).UnixNano(), Resources: []fsm.ResourceStatus{applied(motd)}},
		progress: mark(12 * time.Minute),
		want: summary{Status: StatusProgressing, Reason: "0 of 1 resource converged; cfg/motd: applied; the probe has not confirmed it yet",
			Since: ago(12 * time.Minute), Resources: map[string]string{motd: "progressing"}},
	}, {
		name:     "comms gap: unreachable although the last report said failed",
		desired:  desiredAt(5, fw, pkg),
		rec:      fsm.DeviceRecord{AckedRevision: 5, LastSeen: ago(7*time.Minute + 12*time.Second).UnixNano(), Resources: []fsm.ResourceStatus{failing(fw, "iptables-restore: exit 1", 2, ago(8*time.Minute)), converged(pkg)}},
		progress: mark(time.Hour),
		want: summary{Status: StatusUnreachable, Reason: "no contact for 7m12s (network-policy allows 2m)",
			Since: ago(7*time.Minute + 12*time.Second), Resources: map[string]string{fw: "failed", pkg: "converged"}},
	}, {
		name:    "short silence: the last report stands",
		desired: desiredAt(5, fw),
		rec:     fsm.DeviceRecord{AckedRevision: 5, LastSeen: ago(90 * time.Second).UnixNano(), Resources: []fsm.ResourceStatus{failing(fw, "iptables-restore: exit 1", 2, ago(90*time.Second))}},
		want: summary{Status: StatusFailed, Reason: "net/fw: apply failed (attempt 2): iptables-restore: exit 1; next retry at 2026-03-01T11:58:32Z",
			Since: ago(90 * time.Second), NextRetry: ago(88 * time.Second), Resources: map[string]string{fw: "failed"}},
	}, {
		name:      "apply failure: exponential backoff from the last attempt",
		desired:   desiredAt(5, motd),
		rec:       fsm.DeviceRecord{Connected: true, AckedRevision: 5, Resources: []fsm.ResourceStatus{failing(motd, "disk full", 4, ago(time.Second))}},
		want:      summary{Status: StatusFailed, Reason: "cfg/motd: apply failed (attempt 4): disk full; next retry at 2026-03-01T12:00:07Z", Since: ago(time.Second), NextRetry: t0.Add(7 * time.Second), Resources: map[string]string{motd: "failed"}},
		wantRetry: map[string]time.Time{motd: t0.Add(7 * time.Second)},
	}, {
		name:    "apply failure: backoff capped at the class maximum",
		desired: desiredAt(5, motd),
		rec:     fsm.DeviceRecord{Connected: true, AckedRevision: 5, Resources: []fsm.ResourceStatus{failing(motd, "disk full", 30, ago(time.Minute))}},
		want:    summary{Status: StatusFailed, Reason: "cfg/motd: apply failed (attempt 30): disk full; next retry at 2026-03-01T12:04:00Z", Since: ago(time.Minute), NextRetry: t0.Add(4 * time.Minute), Resources: map[string]string{motd: "failed"}},
	}, {
		name:    "apply failure: device retry is the earliest resource retry",
		desired: desiredAt(5, fw, motd),
		rec: fsm.DeviceRecord{Connected: true, AckedRevision: 5, Resources: []fsm.ResourceStatus{
			failing(fw, "exit 1", 1, t0), failing(motd, "disk full", 10, t0)}},
		want:      summary{Status: StatusFailed, Reason: "net/fw: apply failed (attempt 1): exit 1; next retry at 2026-03-01T12:00:01Z; 1 more failed", Since: t0, NextRetry: t0.Add(time.Second), Resources: map[string]string{fw: "failed", motd: "failed"}},
		wantRetry: map[string]time.Time{fw: t0.Add(time.Second), motd: t0.Add(5 * time.Minute)},
	}, {
		name:    "apply failure: terminal, no retry",
		desired: desiredAt(5, motd),
		rec: fsm.DeviceRecord{Connected: true, AckedRevision: 5, Resources: []fsm.ResourceStatus{
			withState(failing(motd, "spec: mode must be octal", 1, t0), "ok", "failed", "terminal: waiting for a new desired state")}},
		want: summary{Status: StatusFailed, Reason: "cfg/motd: apply failed (attempt 1, terminal): spec: mode must be octal; change the intent to retry", Since: t0, Resources: map[string]string{motd: "failed"}},
	}, {
		name:    "blocked: the agent's reason passes through",
		desired: desiredAt(5, fw, motd),
		rec: fsm.DeviceRecord{Connected: true, AckedRevision: 5, BlockedReason: "cfg/motd: workload lock held by pos-sync since 11:58",
			Resources: []fsm.ResourceStatus{converged(fw), withState(notApplied(motd), "ok", "blocked", "workload lock held by pos-sync since 11:58")}},
		progress: mark(time.Hour),
		want:     summary{Status: StatusBlocked, Reason: "cfg/motd: workload lock held by pos-sync since 11:58", Resources: map[string]string{fw: "converged", motd: "blocked"}},
	}, {
		name:    "blocked: from the detail alone",
		desired: desiredAt(5, motd),
		rec: fsm.DeviceRecord{Connected: true, AckedRevision: 5,
			Resources: []fsm.ResourceStatus{withState(notApplied(motd), "ok", "blocked", "requires cfg/base, which is failed")}},
		want: summary{Status: StatusBlocked, Reason: "cfg/motd: requires cfg/base, which is failed", Resources: map[string]string{motd: "blocked"}},
	}, {
		name:     "blocked: from the record's reason alone",
		desired:  desiredAt(5, motd),
		rec:      fsm.DeviceRecord{Connected: true, AckedRevision: 5, BlockedReason: "cfg/motd: maintenance lock", Resources: []fsm.ResourceStatus{converged(motd)}},
		progress: mark(time.Hour),
		want:     summary{Status: StatusBlocked, Reason: "cfg/motd: maintenance lock", Resources: map[string]string{motd: "converged"}},
	}, {
		name:    "drifted",
		desired: desiredAt(5, motd),
		rec: fsm.DeviceRecord{Connected: true, AckedRevision: 5, Resources: []fsm.ResourceStatus{
			withState(converged(motd), "mismatch", "drifted", "drift reported, not corrected: content sha256 1a2b, want 3c4d")}},
		want: summary{Status: StatusDrifted, Reason: "cfg/motd: drift reported, not corrected: content sha256 1a2b, want 3c4d", Resources: map[string]string{motd: "drifted"}},
	}, {
		name:    "overridden, not drifted, when the agent tolerates it",
		desired: desiredAt(5, motd),
		rec: fsm.DeviceRecord{Connected: true, AckedRevision: 5, Resources: []fsm.ResourceStatus{
			withState(converged(motd), "mismatch", "overridden", "local override by alice until 18:00: store hours")}},
		want: summary{Status: StatusOverridden, Reason: "cfg/motd: local override by alice until 18:00: store hours", Resources: map[string]string{motd: "overridden"}},
	}, {
		name:     "no longer desired: progressing until removed",
		desired:  desiredAt(5),
		rec:      fsm.DeviceRecord{Connected: true, AckedRevision: 5, Resources: []fsm.ResourceStatus{converged("old/x")}},
		progress: mark(time.Minute),
		want: summary{Status: StatusProgressing, Reason: "0 of 1 resource converged; old/x: no longer desired; the device has not removed it yet",
			Since: ago(time.Minute), Resources: map[string]string{"old/x": "progressing"}},
	}, {
		name:    "custom classes: backoff and thresholds come from the resource's class",
		desired: desiredAt(5, motd),
		classes: Classes{DefaultClass: {Name: DefaultClass, ReportInterval: time.Second, UnreachableAfter: time.Minute, ProgressDeadline: time.Minute, RetryBase: 10 * time.Second, RetryMax: 30 * time.Second}},
		rec:     fsm.DeviceRecord{Connected: true, AckedRevision: 5, Resources: []fsm.ResourceStatus{failing(motd, "disk full", 2, t0)}},
		want:    summary{Status: StatusFailed, Reason: "cfg/motd: apply failed (attempt 2): disk full; next retry at 2026-03-01T12:00:20Z", Since: t0, NextRetry: t0.Add(20 * time.Second), Resources: map[string]string{motd: "failed"}},
	},
		// Precedence: unreachable > failed > blocked > stuck > pending >
		// progressing > drifted > overridden > converged.
		{
			name:    "precedence: failed over blocked",
			desired: desiredAt(5, fw, motd),
			rec: fsm.DeviceRecord{Connected: true, AckedRevision: 5, BlockedReason: "cfg/motd: lock",
				Resources: []fsm.ResourceStatus{failing(fw, "exit 1", 1, t0), withState(notApplied(motd), "ok", "blocked", "lock")}},
			want: summary{Status: StatusFailed, Reason: "net/fw: apply failed (attempt 1): exit 1; next retry at 2026-03-01T12:00:01Z", Since: t0, NextRetry: t0.Add(time.Second), Resources: map[string]string{fw: "failed", motd: "blocked"}},
		}, {
			name:    "precedence: blocked over stuck",
			desired: desiredAt(5, fw, motd),
			rec: fsm.DeviceRecord{Connected: true, AckedRevision: 5,
				Resources: []fsm.ResourceStatus{applied(fw), withState(notApplied(motd), "ok", "blocked", "requires cfg/base")}},
			progress: mark(time.Hour),
			want:     summary{Status: StatusBlocked, Reason: "cfg/motd: requires cfg/base", Resources: map[string]string{fw: "progressing", motd: "blocked"}},
		}, {
			name:     "precedence: stuck over pending",
			desired:  desiredAt(5, fw),
			rec:      fsm.DeviceRecord{Connected: true, AckedRevision: 4, Resources: []fsm.ResourceStatus{notApplied(fw)}},
			progress: mark(6 * time.Minute),
			want: summary{Status: StatusStuck, Reason: "no progress for 6m (network-policy allows 5m); last state: net/fw pending: revision 5 not acknowledged yet (device acknowledged 4)",
				Since: ago(6 * time.Minute), Resources: map[string]string{fw: "pending"}},
		}, {
			name:     "precedence: pending over progressing",
			desired:  &DesiredState{Revision: 6, Resources: []*Resource{{Key: fw, Revision: 6, Digest: digestOf(fw)}, {Key: motd, Revision: 5, Digest: digestOf(motd)}}},
			rec:      fsm.DeviceRecord{Connected: true, AckedRevision: 5, Resources: []fsm.ResourceStatus{notApplied(fw), applied(motd)}},
			progress: mark(time.Minute),
			want: summary{Status: StatusPending, Reason: "desired revision 6 not acknowledged yet (device acknowledged 5)",
				Since: ago(time.Minute), Resources: map[string]string{fw: "pending", motd: "progressing"}},
		}, {
			name:    "precedence: progressing over drifted",
			desired: desiredAt(5, fw, motd),
			rec: fsm.DeviceRecord{Connected: true, AckedRevision: 5,
				Resources: []fsm.ResourceStatus{withState(converged(fw), "mismatch", "drifted", "rule missing"), applied(motd)}},
			progress: mark(time.Minute),
			want: summary{Status: StatusProgressing, Reason: "0 of 2 resources converged; cfg/motd: applied; the probe has not confirmed it yet",
				Since: ago(time.Minute), Resources: map[string]string{fw: "drifted", motd: "progressing"}},
		}, {
			name:    "precedence: drifted over overridden",
			desired: desiredAt(5, fw, motd),
			rec: fsm.DeviceRecord{Connected: true, AckedRevision: 5,
				Resources: []fsm.ResourceStatus{withState(converged(fw), "mismatch", "overridden", "pinned"), withState(converged(motd), "mismatch", "drifted", "edited")}},
			want: summary{Status: StatusDrifted, Reason: "cfg/motd: edited", Resources: map[string]string{fw: "overridden", motd: "drifted"}},
		}, {
			name:    "precedence: overridden over converged",
			desired: desiredAt(5, fw, motd),
			rec: fsm.DeviceRecord{Connected: true, AckedRevision: 5,
				Resources: []fsm.ResourceStatus{withState(converged(fw), "mismatch", "overridden", "pinned"), converged(motd)}},
			want: summary{Status: StatusOverridden, Reason: "net/fw: pinned", Resources: map[string]string{fw: "overridden", motd: "converged"}},
		}}
	for _, tt := range tests {
		// Each record as a 1.1 agent reports it (typed state) and as a 1.0
		// agent did (state at the start of the detail): same verdict.
		for _, proto := range []string{"1.1", "1.0"} {
			rec := tt.rec
			if proto == "1.0" {
				rec = legacy(rec)
			}
			t.Run(tt.name+"/"+proto, func(t *testing.T) {
				v := Compare(tt.desired, &rec)
				got := Classify(v, &rec, tt.classes, testClassOf, t0, tt.progress)
				if diff := cmp.Diff(tt.want, summarize(got)); diff != "" {
					t.Errorf("Classify (-want +got):\n%s", diff)
				}
				for key, want := range tt.wantRetry {
					for _, r := range got.Resources {
						if r.Key == key && !r.NextRetry.Equal(want) {
							t.Errorf("%s next retry %v, want %v", key, r.NextRetry, want)
						}
					}
				}
			})
		}
	}
}

// TestReportedState checks that a typed state is taken as is (a detail
// that happens to start like a 1.0 prefix is only text), and that the
// prefix is read only from records without one.
func TestReportedState(t *testing.T) {
	for _, tt := range []struct {
		rep                   fsm.ResourceStatus
		wantState, wantDetail string
	}{
		{fsm.ResourceStatus{State: "converged", Detail: "blocked: says the log line"}, "converged", "blocked: says the log line"},
		{fsm.ResourceStatus{State: "blocked", Detail: "requires app/db"}, "blocked", "requires app/db"},
		{fsm.ResourceStatus{State: "pending"}, "pending", ""},
		{fsm.ResourceStatus{Detail: "blocked: requires app/db"}, "blocked", "requires app/db"},
		{fsm.ResourceStatus{Detail: "progressing"}, "progressing", ""},
		{fsm.ResourceStatus{Detail: "probe: exit 1"}, "", "probe: exit 1"},
		{fsm.ResourceStatus{}, "", ""},
	} {
		if state, detail := ReportedState(&tt.rep); state != tt.wantState || detail != tt.wantDetail {
			t.Errorf("ReportedState(%+v) = %q, %q; want %q, %q", tt.rep, state, detail, tt.wantState, tt.wantDetail)
		}
	}

	// In the classifier: a converged resource whose detail reads like a
	// 1.0 "blocked" prefix is converged.
	d := desiredAt(5, motd)
	rec := fsm.DeviceRecord{Connected: true, AckedRevision: 5, Resources: []fsm.ResourceStatus{
		withState(converged(motd), "ok", "converged", "blocked: nothing, says the probe")}}
	got := Classify(Compare(d, &rec), &rec, nil, testClassOf, t0, ProgressMark{At: t0})
	if got.Status != StatusConverged {
		t.Errorf("status %s (%s), want converged", got.Status, got.Reason)
	}
}

func TestRetryDelay(t *testing.T) {
	c := Class{RetryBase: time.Second, RetryMax: time.Minute}
	got := map[int]time.Duration{}
	for _, n := range []int{0, 1, 2, 3, 4, 6, 7, 100, 1 << 30} {
		got[n] = c.RetryDelay(n)
	}
	want := map[int]time.Duration{0: time.Second, 1: time.Second, 2: 2 * time.Second, 3: 4 * time.Second, 4: 8 * time.Second,
		6: 32 * time.Second, 7: time.Minute, 100: time.Minute, 1 << 30: time.Minute}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("RetryDelay (-want +got):\n%s", diff)
	}
}

func TestUrgencyOrder(t *testing.T) {
	order := []string{StatusConverged, StatusOverridden, StatusDrifted, StatusProgressing, StatusPending,
		StatusStuck, StatusBlocked, StatusFailed, StatusUnreachable}
	for i := 1; i < len(order); i++ {
		if Urgency(order[i]) <= Urgency(order[i-1]) {
			t.Errorf("%s does not outrank %s", order[i], order[i-1])
		}
	}
	if Urgency("bogus") >= Urgency(StatusConverged) {
		t.Error("an unknown status outranks converged")
	}
}

func TestNextProgressMark(t *testing.T) {
	d := desiredAt(5, fw, motd)
	view := func(acked uint64, rs ...fsm.ResourceStatus) (DeviceView, *fsm.DeviceRecord) {
		rec := &fsm.DeviceRecord{Connected: true, AckedRevision: acked, Resources: rs}
		return Compare(d, rec), rec
	}
	at := func(acked uint64, rs ...fsm.ResourceStatus) ProgressMark {
		v, rec := view(acked, rs...)
		return NextProgressMark(ProgressMark{}, v, rec, t0)
	}
	later := t0.Add(time.Hour)
	tests := []struct {
		name     string
		prev     ProgressMark
		acked    uint64
		reported []fsm.ResourceStatus
		wantAt   time.Time
	}{
		{"first observation starts the clock", ProgressMark{}, 4, nil, later},
		{"nothing changed", at(5, applied(fw), notApplied(motd)), 5, []fsm.ResourceStatus{applied(fw), notApplied(motd)}, t0},
		{"acknowledged a higher revision", at(4), 5, nil, later},
		{"a resource applied", at(5, notApplied(fw), notApplied(motd)), 5, []fsm.ResourceStatus{applied(fw), notApplied(motd)}, later},
		{"the probe confirmed it", at(5, applied(fw), notApplied(motd)), 5, []fsm.ResourceStatus{converged(fw), notApplied(motd)}, later},
		{"a failure is no progress", at(5, notApplied(fw), notApplied(motd)), 5, []fsm.ResourceStatus{failing(fw, "x", 1, t0), notApplied(motd)}, t0},
		{"drift is no progress", at(5, converged(fw), applied(motd)), 5, []fsm.ResourceStatus{withState(converged(fw), "mismatch", "drifted", "x"), applied(motd)}, t0},
		{"new work after converging starts the clock", at(5, converged(fw), converged(motd)), 5, []fsm.ResourceStatus{converged(fw), withState(converged(motd), "mismatch", "drifted", "x")}, later},
		{"a restored mark keeps its time", ProgressMark{Revision: 5, At: t0}, 5, []fsm.ResourceStatus{applied(fw), notApplied(motd)}, t0},
		{"a restored mark moves on a higher revision", ProgressMark{Revision: 4, At: t0}, 5, []fsm.ResourceStatus{applied(fw), notApplied(motd)}, later},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v, rec := view(tt.acked, tt.reported...)
			got := NextProgressMark(tt.prev, v, rec, later)
			if !got.At.Equal(tt.wantAt) {
				t.Errorf("At = %v, want %v", got.At, tt.wantAt)
			}
			if got.Revision != tt.acked || got.Fingerprint == "" {
				t.Errorf("mark %+v", got)
			}
			if again := NextProgressMark(got, v, rec, later.Add(time.Hour)); again != got {
				t.Errorf("the same observation moved the mark: %+v -> %+v", got, again)
			}
		})
	}
}

func TestClassesValidate(t *testing.T) {
	def := DefaultClasses()
	if err := def.Validate(); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{DefaultClass, "network-policy", "config", "package", "certificate"} {
		if def.For(name).Name != name {
			t.Errorf("For(%q) = %+v", name, def.For(name))
		}
	}
	if def.For("nosuch").Name != DefaultClass || (Classes{}).For("config").Name != DefaultClass {
		t.Error("unknown classes do not fall back to the default")
	}
	np, pk := def.For("network-policy"), def.For("package")
	if np.UnreachableAfter != 2*time.Minute || np.ProgressDeadline != 5*time.Minute || pk.ProgressDeadline != time.Hour {
		t.Errorf("network-policy %+v, package %+v", np, pk)
	}
	bad := DefaultClasses()
	delete(bad, DefaultClass)
	c := bad["config"]
	c.RetryBase, c.UnreachableAfter = time.Hour, time.Second
	bad["config"] = c
	bad["x"] = Class{Name: "y"}
	err := bad.Validate()
	for _, want := range []string{`no "default" class`, `class "config": retry.base 1h0m0s above retry.max 5m0s`, `class "x": name "y" does not match its key`, "pullInterval must be at least 1ns, got 0s"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Validate() = %v, want it to mention %q", err, want)
		}
	}
}

// TestDeviceLife walks one device through its life on the fake clock of a
// synctest bubble: pending, progressing, a comms gap, and convergence.
func TestDeviceLife(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d := desiredAt(1, fw)
		rec := &fsm.DeviceRecord{ID: "store-42"}
		var mark ProgressMark
		step := func(wantStatus string) DeviceStatus {
			t.Helper()
			v := Compare(d, rec)
			mark = NextProgressMark(mark, v, rec, time.Now())
			got := Classify(v, rec, nil, testClassOf, time.Now(), mark)
			if got.Status != wantStatus {
				t.Fatalf("at %v: status %s (%s), want %s", time.Now(), got.Status, got.Reason, wantStatus)
			}
			return got
		}
		seen := func() { rec.LastSeen = time.Now().UnixNano() }

		rec.Connected = true
		seen()
		step(StatusPending)

		time.Sleep(10 * time.Second) // the agent acknowledges revision 1
		rec.AckedRevision = 1
		seen()
		step(StatusProgressing)

		time.Sleep(30 * time.Second) // applied; the probe has not answered yet
		rec.Resources = []fsm.ResourceStatus{applied(fw)}
		seen()
		step(StatusProgressing)

		time.Sleep(4 * time.Minute) // slow but within network-policy's 5m
		step(StatusProgressing)

		rec.Connected = false // the cellular link drops
		seen()
		time.Sleep(time.Minute)
		step(StatusProgressing) // silence within 2m: the last report stands
		time.Sleep(72 * time.Second)
		got := step(StatusUnreachable)
		if got.Reason != "no contact for 2m12s (network-policy allows 2m)" {
			t.Fatalf("reason %q", got.Reason)
		}

		time.Sleep(time.Hour) // still down: unreachable, never stuck
		step(StatusUnreachable)

		rec.Connected = true // back, and the probe confirms
		rec.Resources = []fsm.ResourceStatus{converged(fw)}
		seen()
		got = step(StatusConverged)
		if !got.Since.Equal(time.Now()) {
			t.Fatalf("converged since %v, want now (%v)", got.Since, time.Now())
		}
	})
}

package intent

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// rolloutDoc is an intent with the given rollout block, written at two
// spaces of indent under "rollout:", which is line 4; the block starts at
// line 5.
func rolloutDoc(block string) string {
	return "name: store-net\nresources:\n  - {id: a, type: sim, spec: {value: 1}}\nrollout:\n" + block
}

// rolloutOf parses doc and returns its typed rollout.
func rolloutOf(t *testing.T, doc string) *Rollout {
	t.Helper()
	in, err := Parse([]byte(doc))
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	r, err := in.RolloutSpec()
	if err != nil {
		t.Fatalf("RolloutSpec: %v", err)
	}
	return r
}

// defaults is the typed view of a block that sets nothing but what modify
// changes.
func defaults(modify func(r *Rollout)) *Rollout {
	r := &Rollout{
		Strategy:         "waves",
		Waves:            []Wave{{Name: "wave-1", Percent: 100}},
		Gate:             Gate{Converged: 100},
		OnFailure:        OnFailure{Action: "pause"},
		ProgressDeadline: 30 * time.Minute,
	}
	if modify != nil {
		modify(r)
	}
	return r
}

func TestRolloutSpellings(t *testing.T) {
	for _, tc := range []struct {
		name  string
		block string
		want  *Rollout
	}{
		{
			name:  "defaults",
			block: "  strategy: waves\n",
			want:  defaults(nil),
		},
		{
			name:  "empty waves",
			block: "  waves: []\n",
			want:  defaults(nil),
		},
		{
			name:  "immediate",
			block: "  strategy: immediate\n  waves: []\n  window: \"22:00-06:00\"\n",
			want: defaults(func(r *Rollout) {
				r.Strategy, r.Waves = "immediate", nil
				r.Window = &Window{Start: 22 * 60, End: 6 * 60}
			}),
		},
		{
			name: "mapping waves",
			block: `  waves:
    - name: pilot
      count: 1
      approval: false
      maxParallel: 1
    - percent: 10
      approval: true
      gate: {hold: 1h}
    - selector: {site-type: kiosk, region: "*"}
      gate: {converged: 90, timeout: 2h}
    - name: rest
      percent: 100
  maxParallel: 20
  gate:
    converged: 95%
    hold: 10m
  onFailure:
    threshold: 5
    action: revert
  progressDeadline: 45m
  window: "02:00-05:30"
`,
			want: &Rollout{
				Strategy: "waves",
				Waves: []Wave{
					{Name: "pilot", Count: 1, MaxParallel: 1},
					{Name: "wave-2", Percent: 10, Approval: true, Gate: &Gate{Converged: 95, Hold: time.Hour}},
					{Name: "wave-3", Selector: map[string]string{"site-type": "kiosk", "region": "*"},
						Gate: &Gate{Converged: 90, Hold: 10 * time.Minute, Timeout: 2 * time.Hour}},
					{Name: "rest", Percent: 100},
				},
				MaxParallel:      20,
				Gate:             Gate{Converged: 95, Hold: 10 * time.Minute},
				OnFailure:        OnFailure{Threshold: 5, Action: "revert"},
				ProgressDeadline: 45 * time.Minute,
				Window:           &Window{Start: 2 * 60, End: 5*60 + 30},
			},
		},
		{
			name:  "shorthand",
			block: "  waves: [1, 5, \"10%\", 12.5%, site-type=kiosk, \"a=b, c=d\", 100%]\n",
			want: defaults(func(r *Rollout) {
				r.Waves = []Wave{
					{Name: "wave-1", Count: 1},
					{Name: "wave-2", Count: 5},
					{Name: "wave-3", Percent: 10},
					{Name: "wave-4", Percent: 12.5},
					{Name: "wave-5", Selector: map[string]string{"site-type": "kiosk"}},
					{Name: "wave-6", Selector: map[string]string{"a": "b", "c": "d"}},
					{Name: "wave-7", Percent: 100},
				}
			}),
		},
		{
			name:  "selector string in a mapping",
			block: "  waves:\n    - {name: kiosks, selector: \"site-type=kiosk,link=*\"}\n    - 100%\n",
			want: defaults(func(r *Rollout) {
				r.Waves = []Wave{
					{Name: "kiosks", Selector: map[string]string{"site-type": "kiosk", "link": "*"}},
					{Name: "wave-2", Percent: 100},
				}
			}),
		},
		{
			name: "percents as numbers and strings",
			block: `  waves:
    - {percent: 2.5}
    - {percent: "25%"}
    - {percent: 100.0}
  gate: {converged: "99.5%"}
  onFailure: {threshold: 0.5}
`,
			want: defaults(func(r *Rollout) {
				r.Waves = []Wave{{Name: "wave-1", Percent: 2.5}, {Name: "wave-2", Percent: 25}, {Name: "wave-3", Percent: 100}}
				r.Gate.Converged = 99.5
				r.OnFailure.Threshold = 0.5
			}),
		},
		{
			name:  "zero percents where allowed",
			block: "  gate: {converged: 0%}\n  onFailure: {threshold: \"0%\", action: pause}\n",
			want:  defaults(func(r *Rollout) { r.Gate.Converged = 0 }),
		},
		{
			name:  "equal percents and counts between",
			block: "  waves: [10%, 3, 10%, 100%]\n",
			want: defaults(func(r *Rollout) {
				r.Waves = []Wave{{Name: "wave-1", Percent: 10}, {Name: "wave-2", Count: 3}, {Name: "wave-3", Percent: 10}, {Name: "wave-4", Percent: 100}}
			}),
		},
		{
			name:  "nulls count as absent",
			block: "  strategy: null\n  window: null\n  gate: {hold: null}\n  waves:\n    - {count: 2, percent: null, name: null}\n",
			want:  defaults(func(r *Rollout) { r.Waves = []Wave{{Name: "wave-1", Count: 2}} }),
		},
		{
			name:  "explicit names like defaults",
			block: "  waves:\n    - {name: wave-1, count: 1}\n    - 50%\n    - {name: wave-3, percent: 100}\n",
			want: defaults(func(r *Rollout) {
				r.Waves = []Wave{{Name: "wave-1", Count: 1}, {Name: "wave-2", Percent: 50}, {Name: "wave-3", Percent: 100}}
			}),
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := rolloutOf(t, rolloutDoc(tc.block))
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("RolloutSpec (-want +got):\n%s", diff)
			}
		})
	}
}

func TestRolloutJSON(t *testing.T) {
	doc := `{"name": "store-net", "resources": [{"id": "a", "type": "sim", "spec": {"value": 1}}],
  "rollout": {"waves": [1, "10%", {"selector": {"site-type": "kiosk"}, "approval": true}, {"percent": 100}],
    "gate": {"converged": "95%"}, "window": "22:00-06:00"}}`
	want := defaults(func(r *Rollout) {
		r.Waves = []Wave{
			{Name: "wave-1", Count: 1},
			{Name: "wave-2", Percent: 10},
			{Name: "wave-3", Selector: map[string]string{"site-type": "kiosk"}, Approval: true},
			{Name: "wave-4", Percent: 100},
		}
		r.Gate.Converged = 95
		r.Window = &Window{Start: 22 * 60, End: 6 * 60}
	})
	if diff := cmp.Diff(want, rolloutOf(t, doc)); diff != "" {
		t.Errorf("RolloutSpec (-want +got):\n%s", diff)
	}
}

func TestRolloutAbsent(t *testing.T) {
	in, err := Parse([]byte("name: x\nresources: [{id: a, type: sim, spec: {value: 1}}]\nrollout: {}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if r, err := in.RolloutSpec(); r != nil || err != nil {
		t.Errorf("RolloutSpec of an empty block = %+v, %v; want nil, nil", r, err)
	}
	for _, m := range []map[string]any{nil, {}} {
		if r, err := ParseRollout(m); r != nil || err != nil {
			t.Errorf("ParseRollout(%v) = %+v, %v; want nil, nil", m, r, err)
		}
	}
}

func TestParseRolloutBuilt(t *testing.T) {
	// Values built in code, with int for int64; no lines in errors.
	r, err := ParseRollout(map[string]any{"waves": []any{3, "50%"}, "maxParallel": 4})
	if err != nil {
		t.Fatal(err)
	}
	want := defaults(func(r *Rollout) {
		r.Waves = []Wave{{Name: "wave-1", Count: 3}, {Name: "wave-2", Percent: 50}}
		r.MaxParallel = 4
	})
	if diff := cmp.Diff(want, r); diff != "" {
		t.Errorf("ParseRollout (-want +got):\n%s", diff)
	}

	for _, tc := range []struct {
		name string
		m    map[string]any
		want *ValidationError
	}{
		{"typed rule", map[string]any{"waves": []any{"50%", "10%"}},
			&ValidationError{Field: "rollout.waves[1]", Msg: "percent must be at least 50, the percent of waves[0], as percents are cumulative"}},
		{"generic rule first", map[string]any{"waves": []int{1}},
			&ValidationError{Field: "rollout.waves", Msg: "unsupported value of type []int"}},
		{"field order", map[string]any{"window": "x", "strategy": "all"},
			&ValidationError{Field: "rollout.strategy", Msg: `unknown strategy "all"; allowed: waves, immediate`}},
		{"huge float count", map[string]any{"waves": []any{1e19}},
			&ValidationError{Field: "rollout.waves[0]", Msg: "count must be between 1 and 1000000, got 1e+19"}},
		{"float max parallel", map[string]any{"maxParallel": 2.5},
			&ValidationError{Field: "rollout.maxParallel", Msg: "must be a whole number, got 2.5"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseRollout(tc.m)
			var got *ValidationError
			if !errors.As(err, &got) {
				t.Fatalf("ParseRollout = %v, want a *ValidationError", err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("ParseRollout error (-want +got):\n%s", diff)
			}
		})
	}

	// RolloutSpec names the intent; Validate of a built intent agrees.
	in := &Intent{Name: "built", Resources: []Resource{sim("a")}, Rollout: map[string]any{"waves": []any{"x"}}}
	_, err = in.RolloutSpec()
	want2 := `intent "built": rollout.waves[0]: must be a count such as 5, a percent such as "10%", a selector such as "site-type=kiosk" or a mapping, got "x"`
	if err == nil || err.Error() != want2 {
		t.Errorf("RolloutSpec error %v, want %s", err, want2)
	}
	if err := in.Validate(); err == nil || err.Error() != want2 {
		t.Errorf("Validate error %v, want %s", err, want2)
	}
}

func TestRolloutWaveOverrides(t *testing.T) {
	r := rolloutOf(t, rolloutDoc(`  maxParallel: 10
  gate: {converged: 95%, hold: 5m}
  waves:
    - {count: 1, maxParallel: 1, gate: {hold: 1h}}
    - 100%
`))
	for i, want := range []struct {
		gate        Gate
		maxParallel int
	}{
		{Gate{Converged: 95, Hold: time.Hour}, 1},
		{Gate{Converged: 95, Hold: 5 * time.Minute}, 10},
		{Gate{Converged: 95, Hold: 5 * time.Minute}, 10}, // out of range: the rollout's
	} {
		if got := r.WaveGate(i); got != want.gate {
			t.Errorf("WaveGate(%d) = %+v, want %+v", i, got, want.gate)
		}
		if got := r.WaveMaxParallel(i); got != want.maxParallel {
			t.Errorf("WaveMaxParallel(%d) = %d, want %d", i, got, want.maxParallel)
		}
	}
}

// rolloutBadDocs break the rollout rules; each message names the field and
// its line.
var rolloutBadDocs = []struct {
	name  string
	block string
	want  string
}{
	{
		name:  "unknown top-level field",
		block: "  strategy: waves\n  pause: 1.5\n",
		want:  `rollout.pause: unknown field; allowed: gate, maxParallel, onFailure, progressDeadline, strategy, waves, window (line 6)`,
	},
	{
		name:  "unknown wave field",
		block: "  waves:\n    - count: 1\n      approve: true\n",
		want:  `rollout.waves[0].approve: unknown field; allowed: approval, count, gate, maxParallel, name, percent, selector (line 7)`,
	},
	{
		name:  "unknown gate field",
		block: "  gate:\n    converged: 95%\n    settle: 5m\n",
		want:  `rollout.gate.settle: unknown field; allowed: converged, hold, timeout (line 7)`,
	},
	{
		name:  "unknown wave gate field",
		block: "  waves:\n    - percent: 50\n      gate:\n        holdFor: 1m\n",
		want:  `rollout.waves[0].gate.holdFor: unknown field; allowed: converged, hold, timeout (line 8)`,
	},
	{
		name:  "unknown onFailure field",
		block: "  onFailure:\n    action: pause\n    rollback: true\n",
		want:  `rollout.onFailure.rollback: unknown field; allowed: action, threshold (line 7)`,
	},
	{
		name:  "negative count",
		block: "  waves: [-5, 200]\n",
		want:  `rollout.waves[0]: count must be between 1 and 1000000, got -5 (line 5)`,
	},
	{
		name:  "count too large",
		block: "  waves:\n    - 1\n    - count: 1000001\n",
		want:  `rollout.waves[1].count: must be between 1 and 1000000, got 1000001 (line 7)`,
	},
	{
		name:  "count zero",
		block: "  waves:\n    - count: 0\n",
		want:  `rollout.waves[0].count: must be between 1 and 1000000, got 0 (line 6)`,
	},
	{
		name:  "fractional count",
		block: "  waves:\n    - 2.5\n",
		want:  `rollout.waves[0]: count must be a whole number, got 2.5 (line 6)`,
	},
	{
		name:  "count as a string",
		block: "  waves:\n    - count: \"5\"\n",
		want:  `rollout.waves[0].count: must be a whole number, got string (line 6)`,
	},
	{
		name:  "window out of range",
		block: "  window: \"25:00-99:00\"\n",
		want:  `rollout.window: must be "HH:MM-HH:MM" in UTC, such as "22:00-06:00", or "maintenance", got "25:00-99:00" (line 5)`,
	},
	{
		name:  "window one-digit hour",
		block: "  window: 2:00-5:00\n",
		want:  `rollout.window: must be "HH:MM-HH:MM" in UTC, such as "22:00-06:00", or "maintenance", got "2:00-5:00" (line 5)`,
	},
	{
		name:  "window empty",
		block: "  window: \"06:00-06:00\"\n",
		want:  `rollout.window: must end at another time than it starts; leave window out to allow any time (line 5)`,
	},
	{
		name:  "window not a string",
		block: "  window: {start: \"22:00\", end: \"06:00\"}\n",
		want:  `rollout.window: must be a string, got mapping (line 5)`,
	},
	{
		name:  "percent above 100",
		block: "  waves:\n    - 10%\n    - percent: 200\n",
		want:  `rollout.waves[1].percent: must be between 0 and 100, got 200 (line 7)`,
	},
	{
		name:  "shorthand percent above 100",
		block: "  waves:\n    - 10%\n    - 200%\n",
		want:  `rollout.waves[1]: percent must be between 0 and 100, got 200 (line 7)`,
	},
	{
		name:  "percent zero",
		block: "  waves:\n    - percent: 0%\n",
		want:  `rollout.waves[0].percent: must be greater than 0 (line 6)`,
	},
	{
		name:  "percent string without sign",
		block: "  waves:\n    - percent: \"50\"\n",
		want:  `rollout.waves[0].percent: must be a percent such as 95 or "95%", got "50" (line 6)`,
	},
	{
		name:  "percent not a number",
		block: "  waves:\n    - ten%\n",
		want:  `rollout.waves[0]: must be a percent such as 95 or "95%", got "ten%" (line 6)`,
	},
	{
		name:  "converged above 100",
		block: "  gate:\n    converged: 101%\n",
		want:  `rollout.gate.converged: must be between 0 and 100, got 101 (line 6)`,
	},
	{
		name:  "threshold negative",
		block: "  onFailure:\n    threshold: -1\n",
		want:  `rollout.onFailure.threshold: must be between 0 and 100, got -1 (line 6)`,
	},
	{
		name:  "threshold a boolean",
		block: "  onFailure:\n    threshold: true\n",
		want:  `rollout.onFailure.threshold: must be a percent such as 95 or "95%", got boolean (line 6)`,
	},
	{
		name:  "decreasing percents",
		block: "  waves:\n    - 50%\n    - 3\n    - 10%\n",
		want:  `rollout.waves[2]: percent must be at least 50, the percent of waves[0], as percents are cumulative (line 8)`,
	},
	{
		name:  "decreasing percents in mappings",
		block: "  waves:\n    - percent: 25\n    - name: next\n      percent: 20\n",
		want:  `rollout.waves[1].percent: must be at least 25, the percent of waves[0], as percents are cumulative (line 8)`,
	},
	{
		name:  "bad action",
		block: "  onFailure:\n    action: rollback\n",
		want:  `rollout.onFailure.action: unknown action "rollback"; allowed: pause, revert (line 6)`,
	},
	{
		name:  "bad strategy",
		block: "  strategy: canary\n",
		want:  `rollout.strategy: unknown strategy "canary"; allowed: waves, immediate (line 5)`,
	},
	{
		name:  "duration not a string",
		block: "  progressDeadline: 30\n",
		want:  `rollout.progressDeadline: must be a duration such as "30s", got integer (line 5)`,
	},
	{
		name:  "duration spelt out",
		block: "  gate:\n    hold: 10 minutes\n",
		want:  `rollout.gate.hold: must be a duration such as "30s", got "10 minutes" (line 6)`,
	},
	{
		name:  "duration zero",
		block: "  gate:\n    timeout: 0s\n",
		want:  `rollout.gate.timeout: must be greater than 0 (line 6)`,
	},
	{
		name:  "duration negative",
		block: "  progressDeadline: -1m\n",
		want:  `rollout.progressDeadline: must be greater than 0 (line 5)`,
	},
	{
		name:  "maxParallel zero",
		block: "  maxParallel: 0\n",
		want:  `rollout.maxParallel: must be at least 1, got 0 (line 5)`,
	},
	{
		name:  "wave maxParallel negative",
		block: "  waves:\n    - count: 10\n      maxParallel: -3\n",
		want:  `rollout.waves[0].maxParallel: must be at least 1, got -3 (line 7)`,
	},
	{
		name:  "maxParallel a string",
		block: "  maxParallel: \"5\"\n",
		want:  `rollout.maxParallel: must be a whole number, got string (line 5)`,
	},
	{
		name:  "duplicate wave names",
		block: "  waves:\n    - {name: pilot, count: 1}\n    - 10%\n    - {name: pilot, percent: 100}\n",
		want:  `rollout.waves[2].name: duplicate wave name "pilot" (first in waves[0]) (line 8)`,
	},
	{
		name:  "default name taken",
		block: "  waves:\n    - {name: wave-1, count: 1}\n    - {name: wave-3, percent: 50}\n    - 100%\n",
		want:  `rollout.waves[2]: the default name "wave-3" is taken by waves[1]; name this wave (line 8)`,
	},
	{
		name:  "wave name not a label",
		block: "  waves:\n    - name: Pilot_Store\n      count: 1\n",
		want:  `rollout.waves[0].name: must be a DNS label: a-z, 0-9 and '-', starting and ending with a letter or digit (line 6)`,
	},
	{
		name:  "wave name empty",
		block: "  waves:\n    - {name: \"\", count: 1}\n",
		want:  `rollout.waves[0].name: must not be empty; leave name out for the default wave-N (line 6)`,
	},
	{
		name:  "immediate with waves",
		block: "  strategy: immediate\n  waves: [10%, 100%]\n",
		want:  `rollout.waves: not allowed with strategy "immediate", which releases every device at once; remove waves or use strategy "waves" (line 6)`,
	},
	{
		name:  "too many waves",
		block: "  waves: [" + strings.Repeat("1, ", 32) + "1]\n",
		want:  `rollout.waves: at most 32 waves are allowed, got 33 (line 5)`,
	},
	{
		name:  "waves not a list",
		block: "  waves: 100%\n",
		want:  `rollout.waves: must be a list, got string (line 5)`,
	},
	{
		name:  "count and percent",
		block: "  waves:\n    - count: 1\n      percent: 10\n",
		want:  `rollout.waves[0].percent: conflicts with count; set one of count, percent and selector (line 7)`,
	},
	{
		name:  "percent and selector",
		block: "  waves:\n    - selector: {site-type: kiosk}\n      percent: 10\n",
		want:  `rollout.waves[0].selector: conflicts with percent; set one of count, percent and selector (line 6)`,
	},
	{
		name:  "no count, percent or selector",
		block: "  waves:\n    - name: pilot\n      approval: true\n",
		want:  `rollout.waves[0]: one of count, percent and selector is required (line 6)`,
	},
	{
		name:  "empty selector mapping",
		block: "  waves:\n    - selector: {}\n",
		want:  `rollout.waves[0].selector: must not be empty (line 6)`,
	},
	{
		name:  "empty selector string",
		block: "  waves:\n    - selector: \"\"\n",
		want:  `rollout.waves[0].selector: must not be empty (line 6)`,
	},
	{
		name:  "selector value not a string",
		block: "  waves:\n    - selector:\n        floor: 2\n",
		want:  `rollout.waves[0].selector.floor: must be a string, got integer (line 7)`,
	},
	{
		name:  "selector bad value",
		block: "  waves:\n    - selector: {site: store 42}\n",
		want:  `rollout.waves[0].selector.site: invalid label value: must be "*" or at most 63 of A-Z, a-z, 0-9, '.', '_' and '-', starting and ending with a letter or digit (line 6)`,
	},
	{
		name:  "shorthand selector bad key",
		block: "  waves:\n    - site type=kiosk\n",
		want:  `rollout.waves[0]: selector "site type": invalid label key: the name must be 1-63 of A-Z, a-z, 0-9, '.', '_' and '-', starting and ending with a letter or digit (line 6)`,
	},
	{
		name:  "shorthand selector without value",
		block: "  waves:\n    - a=b,c\n",
		want:  `rollout.waves[0]: selector term "c" is not "key=value" (line 6)`,
	},
	{
		name:  "shorthand selector label twice",
		block: "  waves:\n    - a=b,a=c\n",
		want:  `rollout.waves[0]: selector label "a" is given twice (line 6)`,
	},
	{
		name:  "shorthand neither",
		block: "  waves:\n    - kiosks\n",
		want:  `rollout.waves[0]: must be a count such as 5, a percent such as "10%", a selector such as "site-type=kiosk" or a mapping, got "kiosks" (line 6)`,
	},
	{
		name:  "shorthand boolean",
		block: "  waves:\n    - true\n",
		want:  `rollout.waves[0]: must be a mapping, a count such as 5, a percent such as "10%" or a selector such as "site-type=kiosk", got boolean (line 6)`,
	},
	{
		name:  "gate not a mapping",
		block: "  gate: 95%\n",
		want:  `rollout.gate: must be a mapping, got string (line 5)`,
	},
	{
		name:  "approval not a boolean",
		block: "  waves:\n    - {count: 1, approval: \"true\"}\n",
		want:  `rollout.waves[0].approval: must be true or false, got string (line 6)`,
	},
	{
		name:  "first in document order",
		block: "  window: \"24:00-01:00\"\n  waves:\n    - 0%\n  strategy: all\n",
		want:  `rollout.window: must be "HH:MM-HH:MM" in UTC, such as "22:00-06:00", or "maintenance", got "24:00-01:00" (line 5)`,
	},
	{
		name:  "generic rules before typed ones",
		block: "  a: " + strings.Repeat("[", 40) + strings.Repeat("]", 40) + "\n",
		want:  `rollout.a` + strings.Repeat("[0]", 32) + `: nested too deeply (more than 32 levels) (line 5)`,
	},
}

func TestRolloutErrors(t *testing.T) {
	for _, tc := range rolloutBadDocs {
		t.Run(tc.name, func(t *testing.T) {
			in, err := Parse([]byte(rolloutDoc(tc.block)))
			if err == nil {
				t.Fatalf("Parse succeeded: %+v", in.Rollout)
			}
			if got, want := err.Error(), `intent "store-net": `+tc.want; got != want {
				t.Errorf("Parse error\n got: %s\nwant: %s", got, want)
			}
			var verr *ValidationError
			if !errors.As(err, &verr) {
				t.Errorf("Parse error is %T, want *ValidationError", err)
			}
		})
	}
}

// TestValidateCommitted checks that an intent committed with a rollout
// block from before the rollout rules still validates for the state
// machine, while proposers are held to the rules.
func TestValidateCommitted(t *testing.T) {
	old := &Intent{
		Name:      "store-net",
		Resources: []Resource{sim("a")},
		Rollout: map[string]any{
			"waves":     []any{int64(5), "25", int64(100)},
			"pause":     1.5,
			"approvals": map[string]any{"required": true, "from": []any{"ops"}},
		},
	}
	if err := old.ValidateCommitted(); err != nil {
		t.Errorf("ValidateCommitted() = %v, want nil", err)
	}
	wantErr := `intent "store-net": rollout.approvals: unknown field; allowed: gate, maxParallel, onFailure, progressDeadline, strategy, waves, window`
	if err := old.Validate(); err == nil || err.Error() != wantErr {
		t.Errorf("Validate() = %v, want %s", err, wantErr)
	}
	if r, err := old.RolloutSpec(); r != nil || err == nil || err.Error() != wantErr {
		t.Errorf("RolloutSpec() = %v, %v; want nil, %s", r, err, wantErr)
	}

	// Every other rule still holds.
	for _, tc := range []struct {
		name   string
		modify func(in *Intent)
		want   string
	}{
		{"generic value rule", func(in *Intent) { in.Rollout["pause"] = []int{1} },
			`intent "store-net": rollout.pause: unsupported value of type []int`},
		{"name", func(in *Intent) { in.Name = "Store" },
			`intent: name: must be a DNS label: a-z, 0-9 and '-', starting and ending with a letter or digit`},
		{"resources", func(in *Intent) { in.Resources[0].Type = "nope" },
			`intent "store-net": resources[0].type: unknown type "nope"; allowed: certificate, exec, file, sim`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := old.Clone()
			tc.modify(in)
			if err := in.ValidateCommitted(); err == nil || err.Error() != tc.want {
				t.Errorf("ValidateCommitted() = %v, want %s", err, tc.want)
			}
		})
	}
}

func TestWindow(t *testing.T) {
	at := func(hhmm string) time.Time {
		tm, err := time.Parse("2006-01-02 15:04:05", "2026-11-27 "+hhmm)
		if err != nil {
			t.Fatal(err)
		}
		return tm
	}
	day := func(tm time.Time) time.Time { return tm.AddDate(0, 0, 1) }
	night := Window{Start: 22 * 60, End: 6 * 60}      // crosses midnight
	early := Window{Start: 2 * 60, End: 5*60 + 30}    // within a day
	evening := Window{Start: 18 * 60, End: 24*60 - 1} // up to 23:59
	for _, tc := range []struct {
		w      Window
		t      time.Time
		inside bool
		next   time.Time // NextOpen; t itself when inside
	}{
		{night, at("21:59:59"), false, at("22:00:00")},
		{night, at("22:00:00"), true, at("22:00:00")},
		{night, at("23:59:59"), true, at("23:59:59")},
		{night, at("00:00:00"), true, at("00:00:00")},
		{night, at("05:59:59"), true, at("05:59:59")},
		{night, at("06:00:00"), false, at("22:00:00")},
		{night, at("12:00:00"), false, at("22:00:00")},
		{early, at("01:00:00"), false, at("02:00:00")},
		{early, at("02:00:00"), true, at("02:00:00")},
		{early, at("05:29:59"), true, at("05:29:59")},
		{early, at("05:30:00"), false, day(at("02:00:00"))},
		{early, at("23:00:00"), false, day(at("02:00:00"))},
		{evening, at("23:59:30"), false, day(at("18:00:00"))},
		{evening, at("23:58:59"), true, at("23:58:59")},
		{Window{Start: 0, End: 60}, at("23:30:00"), false, day(at("00:00:00"))},
		{Window{Start: 23 * 60, End: 0}, at("23:30:00"), true, at("23:30:00")},
		{Window{Start: 23 * 60, End: 0}, at("00:00:00"), false, at("23:00:00")},
	} {
		if got := tc.w.Contains(tc.t); got != tc.inside {
			t.Errorf("%v.Contains(%s) = %v, want %v", tc.w, tc.t.Format(time.TimeOnly), got, tc.inside)
		}
		if got := tc.w.NextOpen(tc.t); !got.Equal(tc.next) {
			t.Errorf("%v.NextOpen(%s) = %v, want %v", tc.w, tc.t.Format(time.TimeOnly), got, tc.next)
		}
	}

	// Another zone: 23:30 in UTC+2 is 21:30 UTC, outside the night window,
	// which opens at 22:00 UTC, 00:00 the next day there.
	zone := time.FixedZone("UTC+2", 2*60*60)
	local := time.Date(2026, 11, 27, 23, 30, 0, 0, zone)
	if night.Contains(local) {
		t.Errorf("Contains(%v) = true, want false", local)
	}
	next := night.NextOpen(local)
	if want := time.Date(2026, 11, 28, 0, 0, 0, 0, zone); !next.Equal(want) || next.Location() != zone {
		t.Errorf("NextOpen(%v) = %v, want %v", local, next, want)
	}
	if in := local.Add(30 * time.Minute); !night.Contains(in) {
		t.Errorf("Contains(%v) = false, want true", in)
	}

	// Across a month and a year.
	eve := time.Date(2026, 12, 31, 23, 0, 0, 0, time.UTC)
	if got, want := early.NextOpen(eve), time.Date(2027, 1, 1, 2, 0, 0, 0, time.UTC); !got.Equal(want) {
		t.Errorf("NextOpen(%v) = %v, want %v", eve, got, want)
	}

	for w, want := range map[Window]string{
		night:                       "22:00-06:00 UTC",
		early:                       "02:00-05:30 UTC",
		{Start: 0, End: 23*60 + 59}: "00:00-23:59 UTC",
	} {
		if got := w.String(); got != want {
			t.Errorf("String() = %q, want %q", got, want)
		}
	}
}

// TestWindowNextOpenIsOpen checks NextOpen against Contains at every
// minute of a day, for windows of every shape.
func TestWindowNextOpenIsOpen(t *testing.T) {
	base := time.Date(2026, 11, 27, 0, 0, 30, 0, time.UTC)
	for _, w := range []Window{{22 * 60, 6 * 60}, {2 * 60, 5 * 60}, {0, 1}, {1439, 0}, {0, 1439}, {720, 719}} {
		for m := range 24 * 60 {
			tm := base.Add(time.Duration(m) * time.Minute)
			next := w.NextOpen(tm)
			if !w.Contains(next) || next.Before(tm) {
				t.Fatalf("%v.NextOpen(%v) = %v: not open, or before", w, tm, next)
			}
			// No open time between tm and next: the minute before next is
			// closed, or is before tm.
			if prev := next.Add(-time.Minute).Truncate(time.Minute); next != tm && !prev.Before(tm) && w.Contains(prev) {
				t.Fatalf("%v.NextOpen(%v) = %v, but %v is open", w, tm, next, prev)
			}
		}
	}
}

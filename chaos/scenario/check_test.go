package scenario

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
)

// scriptedCheck answers each check with the next verdict and records the
// limits it was given.
type scriptedCheck struct {
	verdicts []porcupine.CheckResult
	limits   []time.Duration
}

func (s *scriptedCheck) check(ops []porcupine.Operation, limit time.Duration) (porcupine.CheckResult, porcupine.LinearizationInfo) {
	s.limits = append(s.limits, limit)
	v := s.verdicts[0]
	s.verdicts = s.verdicts[1:]
	return v, porcupine.LinearizationInfo{}
}

// TestCheckLinearizableRechecks checks the policy for a check that runs
// out of time: the same history is checked again within the longer
// budget, and a history judged in neither is a violation.
func TestCheckLinearizableRechecks(t *testing.T) {
	const budget, recheck = 30 * time.Second, 2 * time.Minute
	tests := []struct {
		name       string
		verdicts   []porcupine.CheckResult
		recheck    time.Duration
		want       porcupine.CheckResult
		wantLimits []time.Duration
		violation  string // "" for none, else a substring
	}{
		{"ok at once", []porcupine.CheckResult{porcupine.Ok}, recheck,
			porcupine.Ok, []time.Duration{budget}, ""},
		{"illegal at once, not rechecked", []porcupine.CheckResult{porcupine.Illegal}, recheck,
			porcupine.Illegal, []time.Duration{budget}, "not linearizable"},
		{"unknown then ok", []porcupine.CheckResult{porcupine.Unknown, porcupine.Ok}, recheck,
			porcupine.Ok, []time.Duration{budget, recheck}, ""},
		{"unknown then illegal", []porcupine.CheckResult{porcupine.Unknown, porcupine.Illegal}, recheck,
			porcupine.Illegal, []time.Duration{budget, recheck}, "not linearizable"},
		{"unknown twice", []porcupine.CheckResult{porcupine.Unknown, porcupine.Unknown}, recheck,
			porcupine.Unknown, []time.Duration{budget, recheck}, "inconclusive: porcupine did not finish checking 3 operations within 30s, then 2m0s"},
		{"unknown, no recheck", []porcupine.CheckResult{porcupine.Unknown}, -1,
			porcupine.Unknown, []time.Duration{budget}, "inconclusive: porcupine did not finish checking 3 operations within 30s ("},
	}
	ops := []porcupine.Operation{
		op(0, 0, 1, put("x"), rev(1)),
		op(1, 2, 3, get(), read(1, "x")),
		op(0, 4, never, put("y"), Output{Unknown: true}),
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sc := &scriptedCheck{verdicts: tt.verdicts}
			l := checkLinearizable(sc.check, ops, budget, tt.recheck)
			if l.verdict != tt.want {
				t.Errorf("verdict %s, want %s", l.verdict, tt.want)
			}
			if len(sc.verdicts) != 0 {
				t.Errorf("%d scripted checks not run", len(sc.verdicts))
			}
			if !slices.Equal(sc.limits, tt.wantLimits) || !slices.Equal(l.budgets, tt.wantLimits) {
				t.Errorf("checks run with limits %v (recorded %v), want %v", sc.limits, l.budgets, tt.wantLimits)
			}
			if got := l.rechecked(); got != (len(tt.wantLimits) > 1) {
				t.Errorf("rechecked %v with limits %v", got, tt.wantLimits)
			}
			v := l.violation()
			switch {
			case tt.violation == "" && v != "":
				t.Errorf("violation %q, want none", v)
			case tt.violation != "" && !strings.Contains(v, tt.violation):
				t.Errorf("violation %q, want it to contain %q", v, tt.violation)
			}
		})
	}
}

// TestCheckLinearizablePorcupine runs the real checker on a small history
// in both outcomes.
func TestCheckLinearizablePorcupine(t *testing.T) {
	good := []porcupine.Operation{
		op(0, 0, 1, put("x"), rev(1)),
		op(1, 2, 3, get(), read(1, "x")),
	}
	bad := []porcupine.Operation{
		op(0, 0, 1, put("x"), rev(1)),
		op(1, 2, 3, get(), Output{}), // absent after an acknowledged write
	}
	if l := checkLinearizable(porcupineCheck, good, time.Minute, time.Minute); l.verdict != porcupine.Ok || l.violation() != "" || l.rechecked() {
		t.Errorf("good history: %s, %q, rechecked %v", l.verdict, l.violation(), l.rechecked())
	}
	if l := checkLinearizable(porcupineCheck, bad, time.Minute, time.Minute); l.verdict != porcupine.Illegal || l.violation() == "" {
		t.Errorf("bad history: %s, %q", l.verdict, l.violation())
	}
}

package driver

import (
	"context"
	"errors"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/meteor-edge/meteor/fsm/intent"
)

func simRes(id string, spec map[string]any) intent.Resource {
	return intent.Resource{ID: id, Type: "sim", Spec: spec}
}

func TestSimApplyTakesApplyTime(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		dev := NewSimDevice(7)
		d := lookup(t, newRegistry(t, Config{Sim: dev}), "sim")
		ctx := t.Context()
		r := simRes("mtu", map[string]any{"value": 1400, "applyTime": "2s"})

		cur, err := d.Current(ctx, r)
		if err != nil || cur.Present {
			t.Fatalf("Current before apply = %+v, %v", cur, err)
		}
		if diff, _ := d.Diff(r, cur); !diff.Changed {
			t.Fatal("Diff before apply: unchanged")
		}
		start := time.Now()
		if err := d.Apply(ctx, r); err != nil {
			t.Fatal(err)
		}
		if took := time.Since(start); took != 2*time.Second {
			t.Errorf("Apply took %v of fake time, want 2s", took)
		}
		if v, ok := dev.Get("mtu"); !ok || v != "1400" {
			t.Errorf("device value = %q, %v", v, ok)
		}
		// JSON decodes numbers as float64: the same value still matches.
		rJSON := simRes("mtu", map[string]any{"value": 1400.0, "applyTime": "2s"})
		start = time.Now()
		if err := d.Apply(ctx, rJSON); err != nil || time.Since(start) != 0 {
			t.Errorf("converged Apply = %v after %v, want immediate no-op", err, time.Since(start))
		}
		if dev.Applies() != 1 {
			t.Errorf("Applies() = %d, want 1", dev.Applies())
		}
		cur, _ = d.Current(ctx, rJSON)
		if diff, _ := d.Diff(rJSON, cur); diff.Changed {
			t.Errorf("Diff after apply = %+v", diff)
		}
	})
}

func TestSimApplyRespectsCancellation(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		dev := NewSimDevice(1)
		d := NewSim(Config{Sim: dev})
		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		defer cancel()
		err := d.Apply(ctx, simRes("slow", map[string]any{"value": "x", "applyTime": "1h"}))
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Apply = %v, want deadline exceeded", err)
		}
		if _, ok := dev.Get("slow"); ok {
			t.Error("interrupted apply changed the device")
		}
	})
}

func TestSimFailureRateIsSeeded(t *testing.T) {
	outcomes := func(seed uint64) string {
		dev := NewSimDevice(seed)
		d := NewSim(Config{Sim: dev, Clock: &fakeClock{}})
		var b strings.Builder
		for i := range 64 {
			r := simRes("flaky", map[string]any{"value": i, "failureRate": 0.5})
			if err := d.Apply(t.Context(), r); err != nil {
				b.WriteByte('F')
			} else {
				b.WriteByte('.')
			}
		}
		return b.String()
	}
	a, b := outcomes(42), outcomes(42)
	if a != b {
		t.Errorf("same seed, different outcomes:\n%s\n%s", a, b)
	}
	if n := strings.Count(a, "F"); n == 0 || n == len(a) {
		t.Errorf("failureRate 0.5 gave %d failures of %d", n, len(a))
	}
	never := NewSim(Config{Sim: NewSimDevice(1)})
	always := NewSim(Config{Sim: NewSimDevice(1)})
	for i := range 16 {
		if err := never.Apply(t.Context(), simRes("r", map[string]any{"value": i, "failureRate": 0})); err != nil {
			t.Fatalf("failureRate 0 failed: %v", err)
		}
		if err := always.Apply(t.Context(), simRes("r", map[string]any{"value": i, "failureRate": 1})); err == nil {
			t.Fatal("failureRate 1 succeeded")
		}
	}
}

func TestSimDriftAndEffective(t *testing.T) {
	dev := NewSimDevice(1)
	d := NewSim(Config{Sim: dev})
	ctx := t.Context()
	r := simRes("dns", map[string]any{"value": "10.0.0.53"})
	if eff, _ := d.Probe(ctx, r); eff.Result != EffectiveMismatch {
		t.Errorf("Probe before apply = %+v", eff)
	}
	if err := d.Apply(ctx, r); err != nil {
		t.Fatal(err)
	}
	if eff, _ := d.Probe(ctx, r); eff.Result != EffectiveOK {
		t.Errorf("Probe after apply = %+v", eff)
	}
	// Applied but the live system still uses the old value.
	if err := dev.SetEffective("dns", "8.8.8.8"); err != nil {
		t.Fatal(err)
	}
	if eff, _ := d.Probe(ctx, r); eff.Result != EffectiveMismatch || !strings.Contains(eff.Detail, "8.8.8.8") {
		t.Errorf("Probe with effective override = %+v", eff)
	}
	dev.ClearEffective("dns")
	// A local change behind the agent's back.
	if err := dev.Set("dns", "1.1.1.1"); err != nil {
		t.Fatal(err)
	}
	cur, _ := d.Current(ctx, r)
	if diff, _ := d.Diff(r, cur); !diff.Changed || diff.Reasons[0] != `value "1.1.1.1", want "10.0.0.53"` {
		t.Errorf("Diff after drift = %+v", diff)
	}
	dev.Delete("dns")
	if cur, _ := d.Current(ctx, r); cur.Present {
		t.Error("Current after Delete: present")
	}
	if err := dev.Set("x", []int{1}); err == nil {
		t.Error("Set with a non-scalar succeeded")
	}
}

func TestSimBadSpecs(t *testing.T) {
	checkBadSpecs(t, NewSim(Config{}), map[string]intent.Resource{
		"no value":       simRes("novalue", map[string]any{}),
		"list value":     simRes("list", map[string]any{"value": []any{1}}),
		"bad applyTime":  simRes("time", map[string]any{"value": 1, "applyTime": "later"}),
		"rate too high":  simRes("rate", map[string]any{"value": 1, "failureRate": 1.5}),
		"rate as string": simRes("ratestr", map[string]any{"value": 1, "failureRate": "0.5"}),
	})
}

// BenchmarkSimConvergedPass measures a converged Current, Diff and Probe
// pass, which the fleet simulator runs per resource on every cadence.
func BenchmarkSimConvergedPass(b *testing.B) {
	dev := NewSimDevice(1)
	d := NewSim(Config{Sim: dev})
	r := simRes("r", map[string]any{"value": "v"})
	ctx := context.Background()
	if err := d.Apply(ctx, r); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		cur, _ := d.Current(ctx, r)
		if diff, _ := d.Diff(r, cur); diff.Changed {
			b.Fatal("changed")
		}
		if eff, _ := d.Probe(ctx, r); eff.Result != EffectiveOK {
			b.Fatal("not ok")
		}
	}
}

package driver

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/meteor-edge/meteor/fsm/intent"
)

// script writes an executable /bin/sh script into dir and returns the
// argv running it. Scripts cd to their directory so they can use
// relative names such as "marker".
func script(t *testing.T, dir, name, body string) []any {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte("#!/bin/sh\ncd \"$(dirname \"$0\")\" || exit 99\n"+body+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	return []any{"/bin/sh", p}
}

// runsOf counts the lines an apply script appended to its "runs" file.
func runsOf(t *testing.T, dir string) int {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "runs"))
	if errors.Is(err, os.ErrNotExist) {
		return 0
	}
	if err != nil {
		t.Fatal(err)
	}
	return strings.Count(string(b), "\n")
}

func markerRes(t *testing.T, dir string) intent.Resource {
	return intent.Resource{ID: "marker", Type: "exec", Spec: map[string]any{
		"check": script(t, dir, "check.sh", "test -f marker"),
		"apply": script(t, dir, "apply.sh", "echo run >> runs\ntouch marker"),
	}}
}

func TestExecApplyIsGuardedByCheck(t *testing.T) {
	dir := t.TempDir()
	d := lookup(t, newRegistry(t, Config{}), "exec")
	ctx := t.Context()
	r := markerRes(t, dir)

	cur, err := d.Current(ctx, r)
	if err != nil || cur.Present {
		t.Fatalf("Current before apply = %+v, %v; want check failing", cur, err)
	}
	diff, err := d.Diff(r, cur)
	if err != nil || !diff.Changed || !strings.Contains(diff.Reasons[0], "exit status 1") {
		t.Fatalf("Diff before apply = %+v, %v", diff, err)
	}
	if eff, err := d.Probe(ctx, r); err != nil || eff.Result != EffectiveMismatch {
		t.Fatalf("Probe before apply = %+v, %v; want mismatch", eff, err)
	}

	if err := d.Apply(ctx, r); err != nil {
		t.Fatalf("Apply: %v", err)
	}
	if n := runsOf(t, dir); n != 1 {
		t.Fatalf("apply command ran %d times, want 1", n)
	}
	if err := d.Apply(ctx, r); err != nil {
		t.Fatalf("second Apply: %v", err)
	}
	if n := runsOf(t, dir); n != 1 {
		t.Errorf("second Apply ran the apply command: %d runs, want 1", n)
	}
	cur, err = d.Current(ctx, r)
	if err != nil || !cur.Present {
		t.Fatalf("Current after apply = %+v, %v; want check passing", cur, err)
	}
	if diff, err := d.Diff(r, cur); err != nil || diff.Changed {
		t.Errorf("Diff after apply = %+v, %v; want unchanged", diff, err)
	}
	if eff, err := d.Probe(ctx, r); err != nil || eff.Result != EffectiveOK {
		t.Errorf("Probe after apply = %+v, %v; want ok", eff, err)
	}
}

func TestExecApplyFailures(t *testing.T) {
	dir := t.TempDir()
	d := NewExec(Config{Logger: testLogger(t)})
	ctx := t.Context()
	check := script(t, dir, "check.sh", "test -f marker")

	failing := intent.Resource{ID: "failing", Type: "exec", Spec: map[string]any{
		"check": check, "apply": script(t, dir, "fail.sh", "echo disk full >&2; exit 3"),
	}}
	err := d.Apply(ctx, failing)
	if err == nil || !strings.Contains(err.Error(), "exit status 3: disk full") {
		t.Errorf("Apply with failing command = %v, want exit status 3 and its output", err)
	}

	noop := intent.Resource{ID: "noop", Type: "exec", Spec: map[string]any{
		"check": check, "apply": []string{"/bin/true"},
	}}
	if err := d.Apply(ctx, noop); err == nil || !strings.Contains(err.Error(), "check still fails") {
		t.Errorf("Apply whose check still fails = %v, want check still fails", err)
	}

	missing := intent.Resource{ID: "missing", Type: "exec", Spec: map[string]any{
		"check": []string{filepath.Join(dir, "no-such-program")}, "apply": []string{"/bin/true"},
	}}
	if err := d.Apply(ctx, missing); err == nil {
		t.Error("Apply with a missing check program succeeded")
	}
	if eff, err := d.Probe(ctx, missing); err != nil || eff.Result != EffectiveUnknown {
		t.Errorf("Probe with a missing program = %+v, %v; want unknown", eff, err)
	}
}

func TestExecEnvAndProbeCommand(t *testing.T) {
	dir := t.TempDir()
	d := NewExec(Config{Logger: testLogger(t), ExecPolicy: ExecPolicy{Env: []string{"WANT"}}})
	ctx := t.Context()
	r := intent.Resource{ID: "env", Type: "exec",
		Spec: map[string]any{
			"check": script(t, dir, "check.sh", `test "$(cat value 2>/dev/null)" = "$WANT"`),
			"apply": script(t, dir, "apply.sh", `printf %s "$WANT" > value`),
			"env":   map[string]any{"WANT": "v2"},
		},
		Probe: map[string]any{"command": script(t, dir, "probe.sh", `test -f loaded && test "$(cat loaded)" = "$WANT"`)},
	}
	if err := d.Apply(ctx, r); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "value")); string(b) != "v2" {
		t.Fatalf("value = %q, want v2 from env", b)
	}
	eff, err := d.Probe(ctx, r)
	if err != nil || eff.Result != EffectiveMismatch || !strings.Contains(eff.Detail, "exit status 1") {
		t.Fatalf("Probe before load = %+v, %v; want mismatch", eff, err)
	}
	if err := os.WriteFile(filepath.Join(dir, "loaded"), []byte("v2"), 0o644); err != nil {
		t.Fatal(err)
	}
	if eff, err := d.Probe(ctx, r); err != nil || eff.Result != EffectiveOK {
		t.Fatalf("Probe after load = %+v, %v; want ok", eff, err)
	}
}

func TestExecPolicy(t *testing.T) {
	dir := t.TempDir()
	d := NewExec(Config{Logger: testLogger(t), ExecPolicy: AllowPrograms("/bin/sh")})
	ctx := t.Context()
	if err := d.Apply(ctx, markerRes(t, dir)); err != nil {
		t.Fatalf("allowed Apply: %v", err)
	}
	refused := intent.Resource{ID: "refused", Type: "exec", Spec: map[string]any{
		"check": []any{"/bin/false"}, "apply": []any{"/usr/bin/touch", filepath.Join(dir, "refused")},
	}}
	if err := d.Apply(ctx, refused); !errors.Is(err, ErrNotAllowed) {
		t.Errorf("Apply of a refused command = %v, want ErrNotAllowed", err)
	}
	if _, err := d.Probe(ctx, refused); !errors.Is(err, ErrNotAllowed) {
		t.Errorf("Probe of a refused command = %v, want ErrNotAllowed", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "refused")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("refused command ran: %v", err)
	}
}

func TestExecCancelled(t *testing.T) {
	dir := t.TempDir()
	d := NewExec(Config{Logger: testLogger(t)})
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if err := d.Apply(ctx, markerRes(t, dir)); err == nil || !errors.Is(err, ctx.Err()) {
		t.Errorf("Apply with cancelled context = %v, want context.Canceled", err)
	}
	if n := runsOf(t, dir); n != 0 {
		t.Errorf("apply ran %d times under a cancelled context", n)
	}
}

func TestExecBadSpecs(t *testing.T) {
	d := NewExec(Config{})
	ok := []any{"/bin/true"}
	bad := map[string]intent.Resource{
		"no check":     {ID: "nocheck", Type: "exec", Spec: map[string]any{"apply": ok}},
		"no apply":     {ID: "noapply", Type: "exec", Spec: map[string]any{"check": ok}},
		"string argv":  {ID: "str", Type: "exec", Spec: map[string]any{"check": "/bin/true", "apply": ok}},
		"empty argv":   {ID: "empty", Type: "exec", Spec: map[string]any{"check": []any{}, "apply": ok}},
		"non-string":   {ID: "num", Type: "exec", Spec: map[string]any{"check": []any{"/bin/true", 1}, "apply": ok}},
		"bad timeout":  {ID: "timeout", Type: "exec", Spec: map[string]any{"check": ok, "apply": ok, "timeout": "soon"}},
		"zero timeout": {ID: "zero", Type: "exec", Spec: map[string]any{"check": ok, "apply": ok, "timeout": "0s"}},
		"bad env":      {ID: "env", Type: "exec", Spec: map[string]any{"check": ok, "apply": ok, "env": map[string]any{"A": 1}}},
		"bad env name": {ID: "envname", Type: "exec", Spec: map[string]any{"check": ok, "apply": ok, "env": map[string]any{"A=B": "x"}}},
	}
	checkBadSpecs(t, d, bad)
	badProbe := intent.Resource{ID: "probe", Type: "exec", Spec: map[string]any{"check": ok, "apply": ok},
		Probe: map[string]any{"command": "true"}}
	if _, err := d.Probe(t.Context(), badProbe); !errors.Is(err, ErrInvalidSpec) {
		t.Errorf("Probe with a bad probe.command = %v, want ErrInvalidSpec", err)
	}
}

func TestTailBuffer(t *testing.T) {
	b := &tailBuffer{max: 4}
	for _, s := range []string{"ab", "cd", "ef", "g"} {
		_, _ = b.Write([]byte(s))
	}
	if got := string(b.buf); got != "defg" {
		t.Errorf("tail = %q, want defg", got)
	}
	_, _ = b.Write([]byte("0123456789"))
	if got := string(b.buf); got != "6789" {
		t.Errorf("tail after a long write = %q, want 6789", got)
	}
}

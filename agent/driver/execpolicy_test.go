package driver

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/meteor-edge/meteor/fsm/intent"
)

// envRes is an exec resource whose apply records that it ran and whose
// check never passes, with env as its spec env.
func envRes(t *testing.T, dir string, env map[string]any) intent.Resource {
	return intent.Resource{ID: "env", Type: "exec", Spec: map[string]any{
		"check": script(t, dir, "check.sh", "test -f marker"),
		"apply": script(t, dir, "apply.sh", "echo run >> runs\ntouch marker"),
		"env":   env,
	}}
}

// requireNotAllowed checks that every method refuses r with ErrNotAllowed
// naming want and the agent flag, and that no command ran.
func requireNotAllowed(t *testing.T, d Driver, r intent.Resource, dir, want, flag string) {
	t.Helper()
	ctx := t.Context()
	_, curErr := d.Current(ctx, r)
	_, diffErr := d.Diff(r, State{})
	applyErr := d.Apply(ctx, r)
	_, probeErr := d.Probe(ctx, r)
	for name, err := range map[string]error{"Current": curErr, "Diff": diffErr, "Apply": applyErr, "Probe": probeErr} {
		if !errors.Is(err, ErrNotAllowed) || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), flag) {
			t.Errorf("%s = %v, want ErrNotAllowed naming %s and %s", name, err, want, flag)
		}
	}
	if n := runsOf(t, dir); n != 0 {
		t.Errorf("a refused resource ran its apply command %d times", n)
	}
}

func TestExecEnvRefusesLoaderVariables(t *testing.T) {
	for _, allow := range [][]string{nil, {"*"}, {"LD_*", "PYTHON*"}} {
		d := NewExec(Config{Logger: testLogger(t), ExecPolicy: ExecPolicy{Env: allow}})
		for _, name := range []string{"LD_PRELOAD", "LD_LIBRARY_PATH", "PYTHONPATH", "BASH_ENV", "IFS", "NODE_OPTIONS", "GCONV_PATH", "PATH"} {
			dir := t.TempDir()
			requireNotAllowed(t, d, envRes(t, dir, map[string]any{name: dir + "/evil.so"}), dir, name, "--exec-env-allow")
		}
	}
}

func TestExecEnvRefusesUnlistedVariables(t *testing.T) {
	d := NewExec(Config{Logger: testLogger(t), ExecPolicy: ExecPolicy{Env: []string{"APP_MODE", "SITE_*"}}})
	dir := t.TempDir()
	requireNotAllowed(t, d, envRes(t, dir, map[string]any{"APP_MODE": "x", "WANT": "v2"}), dir, `"WANT"`, "--exec-env-allow")
	requireNotAllowed(t, NewExec(Config{}), envRes(t, dir, map[string]any{"APP_MODE": "x"}), dir, `"APP_MODE"`, "--exec-env-allow")
}

func TestExecEnvPassesAllowedVariablesOnly(t *testing.T) {
	t.Setenv("METEOR_TEST_AGENT_SECRET", "hunter2")
	dir := t.TempDir()
	d := NewExec(Config{Logger: testLogger(t), ExecPolicy: ExecPolicy{Env: []string{"APP_MODE", "SITE_*", "LD_BIND_NOW"}}})
	r := intent.Resource{ID: "env", Type: "exec", Spec: map[string]any{
		"check": script(t, dir, "check.sh", "test -f env.out"),
		"apply": script(t, dir, "apply.sh", "env > env.out"),
		"env":   map[string]any{"APP_MODE": "kiosk", "SITE_ID": "store-42", "LD_BIND_NOW": "1"},
	}}
	if err := d.Apply(t.Context(), r); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(dir, "env.out"))
	if err != nil {
		t.Fatal(err)
	}
	got := string(b)
	for _, want := range []string{"APP_MODE=kiosk\n", "SITE_ID=store-42\n", "LD_BIND_NOW=1\n", "PATH=" + defaultExecPath + "\n", "LANG=C\n"} {
		if !strings.Contains(got, want) {
			t.Errorf("command environment lacks %q:\n%s", want, got)
		}
	}
	if strings.Contains(got, "METEOR_TEST_AGENT_SECRET") || strings.Contains(got, "hunter2") {
		t.Errorf("the agent's own environment reached the command:\n%s", got)
	}
}

// link makes a symbolic link at name pointing to target.
func link(t *testing.T, target, name string) string {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(name), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(target, name); err != nil {
		t.Fatal(err)
	}
	return name
}

func TestExecAllowChecksResolvedPath(t *testing.T) {
	dir := t.TempDir()
	// An allowed path name that is a link: at start-up it leads to
	// /bin/true; an intent later points it at a shell.
	tool := link(t, "/bin/true", filepath.Join(dir, "allowed", "tool"))
	d := NewExec(Config{Logger: testLogger(t), ExecPolicy: ExecPolicy{Programs: []string{tool, "/bin/true"}, Env: []string{"PATH"}}})
	ctx := t.Context()
	trueResolved, err := filepath.EvalSymlinks("/bin/true")
	if err != nil {
		t.Fatal(err)
	}
	run := func(argv0 string, env map[string]any) error {
		r := intent.Resource{ID: "allow", Type: "exec", Spec: map[string]any{
			"check": []any{argv0}, "apply": []any{argv0}, "env": env,
		}}
		_, err := d.Current(ctx, r)
		return err
	}
	for _, argv0 := range []string{tool, "/bin/true", trueResolved, "true"} {
		if err := run(argv0, nil); err != nil {
			t.Errorf("allowed program %s refused: %v", argv0, err)
		}
	}

	refused := map[string]string{
		// A link of an allowed name elsewhere, to a program not allowed.
		"link to a shell named true": link(t, "/bin/sh", filepath.Join(dir, "elsewhere", "true")),
		// A link to an allowed binary under another name (a multi-call
		// binary would run another applet).
		"link to true named rm": link(t, "/bin/true", filepath.Join(dir, "elsewhere", "rm")),
	}
	for name, argv0 := range refused {
		if err := run(argv0, nil); !errors.Is(err, ErrNotAllowed) || !strings.Contains(err.Error(), "--exec-allow") {
			t.Errorf("%s: %v, want ErrNotAllowed naming --exec-allow", name, err)
		}
	}
	// A PATH set by the spec is where a bare name is looked up.
	evil := filepath.Join(dir, "evil")
	if err := os.Mkdir(evil, 0o755); err != nil {
		t.Fatal(err)
	}
	script(t, evil, "true", "touch pwned")
	if err := run("true", map[string]any{"PATH": evil}); !errors.Is(err, ErrNotAllowed) {
		t.Errorf("true found in the spec's PATH: %v, want ErrNotAllowed", err)
	}
	// The allowed link now points at a shell.
	if err := os.Remove(tool); err != nil {
		t.Fatal(err)
	}
	link(t, "/bin/sh", tool)
	if err := run(tool, nil); !errors.Is(err, ErrNotAllowed) || !strings.Contains(err.Error(), "resolved to") {
		t.Errorf("allowed link retargeted to a shell: %v, want ErrNotAllowed", err)
	}
	if _, err := os.Stat(filepath.Join(evil, "pwned")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a refused program ran: %v", err)
	}

	// A listed link to a multi-call binary allows the applet it names,
	// not the binary under its own name (busybox sh -c ...).
	multi := filepath.Join(dir, "multi", "busybox")
	if err := os.MkdirAll(filepath.Dir(multi), 0o755); err != nil {
		t.Fatal(err)
	}
	bin, err := os.ReadFile(trueResolved)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(multi, bin, 0o755); err != nil {
		t.Fatal(err)
	}
	applet := link(t, multi, filepath.Join(dir, "applets", "test"))
	d = NewExec(Config{Logger: testLogger(t), ExecPolicy: ExecPolicy{Programs: []string{applet}}})
	if err := run(applet, nil); err != nil {
		t.Errorf("the listed applet link refused: %v", err)
	}
	if err := run(multi, nil); !errors.Is(err, ErrNotAllowed) {
		t.Errorf("the multi-call binary under its own name: %v, want ErrNotAllowed", err)
	}
}

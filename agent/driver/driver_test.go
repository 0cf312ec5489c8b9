package driver

import (
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/hashicorp/go-hclog"
	"go.uber.org/goleak"

	"github.com/meteor-edge/meteor/fsm/intent"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// testLogger routes driver logs to t.Log.
func testLogger(t *testing.T) hclog.Logger {
	return hclog.New(&hclog.LoggerOptions{Name: t.Name(), Output: testWriter{t}, Level: hclog.Trace})
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Helper()
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// fakeClock is a manually set clock. After fires immediately; tests that
// need waiting use testing/synctest with SystemClock instead.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = t
}

func (c *fakeClock) After(d time.Duration) <-chan time.Time {
	ch := make(chan time.Time, 1)
	ch <- c.Now().Add(d)
	return ch
}

func newRegistry(t *testing.T, cfg Config) *Registry {
	t.Helper()
	if cfg.Logger == nil {
		cfg.Logger = testLogger(t)
	}
	reg, err := NewRegistry(cfg)
	if err != nil {
		t.Fatalf("NewRegistry: %v", err)
	}
	return reg
}

func lookup(t *testing.T, reg *Registry, typ string) Driver {
	t.Helper()
	d, err := reg.Lookup(typ)
	if err != nil {
		t.Fatalf("Lookup(%q): %v", typ, err)
	}
	return d
}

func TestRegistry(t *testing.T) {
	reg := newRegistry(t, Config{})
	if diff := cmp.Diff([]string{"certificate", "exec", "file", "sim"}, reg.Types()); diff != "" {
		t.Errorf("Types() mismatch (-want +got):\n%s", diff)
	}
	if _, err := reg.Lookup("service"); !errors.Is(err, ErrUnknownType) {
		t.Errorf("Lookup(service) error = %v, want ErrUnknownType", err)
	}
	sim := NewSim(Config{})
	reg.Register("service", sim)
	if d, err := reg.Lookup("service"); err != nil || d != Driver(sim) {
		t.Errorf("Lookup(service) after Register = %v, %v", d, err)
	}
	if _, err := NewRegistry(Config{Root: "relative/dir"}); err == nil {
		t.Error("NewRegistry with a relative root succeeded, want error")
	}
}

func TestEffectiveResultString(t *testing.T) {
	for r, want := range map[EffectiveResult]string{EffectiveOK: "ok", EffectiveMismatch: "mismatch", EffectiveUnknown: "unknown"} {
		if got := r.String(); got != want {
			t.Errorf("%d.String() = %q, want %q", r, got, want)
		}
	}
}

func TestAllowPrograms(t *testing.T) {
	rules := AllowPrograms("/bin/sh").compile()
	if _, err := rules.resolveCommand("/bin/sh", defaultExecPath); err != nil {
		t.Errorf("allowed program refused: %v", err)
	}
	if _, err := rules.resolveCommand("sh", defaultExecPath); err != nil {
		t.Errorf("allowed program found in PATH refused: %v", err)
	}
	for _, argv0 := range []string{"/bin/rm", "rm", "./sh"} {
		if _, err := rules.resolveCommand(argv0, defaultExecPath); err == nil {
			t.Errorf("policy allowed %q", argv0)
		}
	}
	if err := AllowPrograms("bin/sh").Validate(); err == nil {
		t.Error("relative program accepted")
	}
	if err := AllowPrograms("/no/such/program").Validate(); err == nil {
		t.Error("missing program accepted")
	}
	if err := (ExecPolicy{Env: []string{"A=B"}}).Validate(); err == nil {
		t.Error("invalid env name accepted")
	}
}

// checkBadSpecs runs each resource through every Driver method and requires an
// ErrInvalidSpec error.
func checkBadSpecs(t *testing.T, d Driver, bad map[string]intent.Resource) {
	t.Helper()
	ctx := t.Context()
	for name, r := range bad {
		t.Run(name, func(t *testing.T) {
			_, err := d.Current(ctx, r)
			if !errors.Is(err, ErrInvalidSpec) {
				t.Errorf("Current error = %v, want ErrInvalidSpec", err)
			}
			if _, err := d.Diff(r, State{}); !errors.Is(err, ErrInvalidSpec) {
				t.Errorf("Diff error = %v, want ErrInvalidSpec", err)
			}
			if err := d.Apply(ctx, r); !errors.Is(err, ErrInvalidSpec) {
				t.Errorf("Apply error = %v, want ErrInvalidSpec", err)
			}
			if _, err := d.Probe(ctx, r); !errors.Is(err, ErrInvalidSpec) {
				t.Errorf("Probe error = %v, want ErrInvalidSpec", err)
			}
			if err != nil && !strings.Contains(err.Error(), r.ID) {
				t.Errorf("error %q does not name resource %q", err, r.ID)
			}
		})
	}
}

package driver

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/meteor-edge/meteor/fsm/intent"
)

const (
	// defaultExecTimeout bounds each command of an exec resource without
	// spec.timeout.
	defaultExecTimeout = 30 * time.Second
	// execWaitDelay bounds how long Wait waits for output pipes held open
	// by stray descendants once the command has exited or been killed.
	execWaitDelay = 2 * time.Second
	// outputTail is how much of a command's combined output is kept for
	// error messages and probe details.
	outputTail = 2048
)

// Exec is the "exec" driver: a guarded command pair.
//
// Spec: check and apply (argv lists, no shell unless argv runs one),
// optional timeout (Go duration, default 30s, bounding each command run)
// and optional env (variables added to BaseEnv; each name must be allowed
// by ExecPolicy.Env, or the resource is refused with ErrNotAllowed). The
// agent's own environment is never passed on. argv[0] is looked up in the
// command's PATH and resolved through symbolic links; the resolved file
// is what runs, and what ExecPolicy.Programs is checked against.
// Check exiting 0 means the device is already in the desired state and
// apply is skipped; otherwise apply runs, and then check must pass. On
// timeout or cancellation the whole process group is killed. Probe:
// optional probe.command argv (and probe.timeout), default the check
// command; exit 0 is EffectiveOK, another exit status EffectiveMismatch,
// a command that cannot start or times out EffectiveUnknown.
//
// Current runs the check command, so it has the side effects check has.
// Processes that leave the process group (setsid, daemons) are not
// tracked and survive a timeout.
type Exec struct {
	rules  execRules
	logger hclog.Logger
}

// NewExec returns the exec driver configured by cfg. The policy's
// programs are resolved now; one that cannot be resolved allows nothing
// (Config.Validate reports it).
func NewExec(cfg Config) *Exec {
	cfg = cfg.withDefaults()
	return &Exec{rules: cfg.ExecPolicy.compile(), logger: cfg.Logger.Named("driver.exec")}
}

type execSpec struct {
	check, apply []string
	timeout      time.Duration
	env          []string // BaseEnv, then the spec's KEY=value sorted by name
}

func (d *Exec) parse(r intent.Resource) (execSpec, error) {
	var s execSpec
	var ok bool
	var err error
	if s.check, ok, err = getArgv(r, r.Spec, "check"); err != nil {
		return s, err
	} else if !ok {
		return s, specErr(r, "check is required")
	}
	if s.apply, ok, err = getArgv(r, r.Spec, "apply"); err != nil {
		return s, err
	} else if !ok {
		return s, specErr(r, "apply is required")
	}
	if s.timeout, err = getDuration(r, r.Spec, "timeout", defaultExecTimeout); err != nil {
		return s, err
	}
	if s.timeout == 0 {
		return s, specErr(r, "timeout must be positive")
	}
	env, err := getStringMap(r, r.Spec, "env")
	if err != nil {
		return s, err
	}
	if s.env, err = d.rules.environment(env); errors.Is(err, ErrNotAllowed) {
		return s, fmt.Errorf("exec resource %q: %w", r.ID, err)
	} else if err != nil {
		return s, specErr(r, "%v", err)
	}
	return s, nil
}

// StepEnv is the environment variable every command of a step carries
// (StepHook.Marker), so that a process a step started can be recognised
// after the agent crashed.
const StepEnv = "METEOR_STEP"

// StepHook is what the agent learns of the processes a step runs: the
// exec driver sets Marker in each command's environment (StepEnv) and
// calls Started with the process ID of each command it starts, which is
// also its process group's ID (each command runs in a group of its own).
type StepHook struct {
	Marker  string
	Started func(pid int)
}

type stepKey struct{}

// WithStep returns ctx carrying hook, for the commands an Apply runs.
func WithStep(ctx context.Context, hook *StepHook) context.Context {
	return context.WithValue(ctx, stepKey{}, hook)
}

// StepBudget is the longest an Apply of r may take: three commands
// (check, apply, check again), each within the spec's timeout. After a
// crash the agent waits at most this long, from the step's start, for a
// command of the step that survived (the optional Budgeted interface).
func (d *Exec) StepBudget(r intent.Resource) time.Duration {
	s, err := d.parse(r)
	if err != nil {
		return defaultExecTimeout
	}
	return 3 * s.timeout
}

// Current runs the check command: Present is true when it exits 0, and
// Attrs["check"] holds its outcome.
func (d *Exec) Current(ctx context.Context, r intent.Resource) (State, error) {
	s, err := d.parse(r)
	if err != nil {
		return State{}, err
	}
	ok, detail, err := d.run(ctx, r, "check", s.check, s.env, s.timeout)
	if err != nil {
		return State{}, err
	}
	return State{Present: ok, Attrs: map[string]string{"check": detail}}, nil
}

// Diff reports a change when the check command failed.
func (d *Exec) Diff(r intent.Resource, cur State) (Diff, error) {
	if _, err := d.parse(r); err != nil {
		return Diff{}, err
	}
	if cur.Present {
		return Diff{}, nil
	}
	return Diff{Changed: true, Reasons: []string{"check failed: " + cur.Attrs["check"]}}, nil
}

// Apply runs check; if it fails, runs apply and then check again, failing
// when check still fails.
func (d *Exec) Apply(ctx context.Context, r intent.Resource) error {
	s, err := d.parse(r)
	if err != nil {
		return err
	}
	ok, _, err := d.run(ctx, r, "check", s.check, s.env, s.timeout)
	if err != nil {
		return err
	}
	if ok {
		d.logger.Debug("check passes, apply skipped", "resource", r.ID)
		return nil
	}
	ok, detail, err := d.run(ctx, r, "apply", s.apply, s.env, s.timeout)
	if err != nil {
		return err
	}
	if !ok {
		return fmt.Errorf("exec resource %q: apply command failed: %s", r.ID, detail)
	}
	ok, detail, err = d.run(ctx, r, "check", s.check, s.env, s.timeout)
	if err != nil {
		return err
	}
	if !ok {
		return fmt.Errorf("exec resource %q: apply command succeeded but check still fails: %s", r.ID, detail)
	}
	d.logger.Debug("applied", "resource", r.ID)
	return nil
}

// Probe runs probe.command (default: the check command).
func (d *Exec) Probe(ctx context.Context, r intent.Resource) (Effective, error) {
	s, err := d.parse(r)
	if err != nil {
		return Effective{}, err
	}
	argv, ok, err := getArgv(r, r.Probe, "command")
	if err != nil {
		return Effective{}, err
	}
	if !ok {
		argv = s.check
	}
	timeout, err := getDuration(r, r.Probe, "timeout", s.timeout)
	if err != nil {
		return Effective{}, err
	}
	if timeout == 0 {
		return Effective{}, specErr(r, "probe timeout must be positive")
	}
	passed, detail, err := d.run(ctx, r, "probe", argv, s.env, timeout)
	switch {
	case err != nil && (errors.Is(err, ErrNotAllowed) || ctx.Err() != nil):
		return Effective{}, err
	case err != nil:
		return Effective{Result: EffectiveUnknown, Detail: err.Error()}, nil
	case passed:
		return Effective{Result: EffectiveOK, Detail: "probe command passed"}, nil
	default:
		return Effective{Result: EffectiveMismatch, Detail: "probe command failed: " + detail}, nil
	}
}

// run runs argv with a timeout. ok reports exit status 0; detail describes
// the outcome ("exit status 1: <output tail>"). err is set when the
// command was refused, could not start, timed out or was cancelled.
func (d *Exec) run(ctx context.Context, r intent.Resource, what string, argv, env []string, timeout time.Duration) (ok bool, detail string, err error) {
	path, err := d.rules.resolveCommand(argv[0], envValue(env, "PATH"))
	if err != nil {
		return false, "", fmt.Errorf("exec resource %q: %s command: %w", r.ID, what, err)
	}
	if err := ctx.Err(); err != nil {
		return false, "", fmt.Errorf("exec resource %q: %s command: %w", r.ID, what, err)
	}
	tctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	// Run the resolved file, so that a link swapped after the check
	// cannot change what runs; argv[0] stays as written, for the program.
	cmd := exec.CommandContext(tctx, path, argv[1:]...)
	cmd.Args[0] = argv[0]
	cmd.Env = env
	out := &tailBuffer{max: outputTail}
	cmd.Stdout, cmd.Stderr = out, out
	cmd.WaitDelay = execWaitDelay
	killProcessGroupOnCancel(cmd)
	hook, _ := ctx.Value(stepKey{}).(*StepHook)
	if hook != nil && hook.Marker != "" {
		cmd.Env = append(cmd.Env, StepEnv+"="+hook.Marker)
	}
	start := time.Now()
	err = cmd.Start()
	if err == nil {
		if hook != nil && hook.Started != nil {
			hook.Started(cmd.Process.Pid)
		}
		err = cmd.Wait()
	}
	d.logger.Trace("ran command", "resource", r.ID, "what", what, "argv", argv, "took", time.Since(start), "error", err)
	var exitErr *exec.ExitError
	switch {
	case ctx.Err() != nil:
		return false, "", fmt.Errorf("exec resource %q: %s command %q: %w", r.ID, what, argv[0], ctx.Err())
	case tctx.Err() != nil:
		return false, "", fmt.Errorf("exec resource %q: %s command %q timed out after %s (process group killed)%s", r.ID, what, argv[0], timeout, out.suffix())
	case err == nil || errors.Is(err, exec.ErrWaitDelay):
		return true, "exit status 0", nil
	case errors.As(err, &exitErr):
		return false, exitErr.String() + out.suffix(), nil
	default:
		return false, "", fmt.Errorf("exec resource %q: %s command %q: %w", r.ID, what, argv[0], err)
	}
}

// tailBuffer keeps the last max bytes written to it. exec.Cmd calls Write
// from one goroutine at a time when Stdout and Stderr are the same writer.
type tailBuffer struct {
	max int
	buf []byte
}

func (b *tailBuffer) Write(p []byte) (int, error) {
	n := len(p)
	if len(p) >= b.max {
		b.buf = append(b.buf[:0], p[len(p)-b.max:]...)
		return n, nil
	}
	if over := len(b.buf) + len(p) - b.max; over > 0 {
		b.buf = append(b.buf[:0], b.buf[over:]...)
	}
	b.buf = append(b.buf, p...)
	return n, nil
}

// suffix renders the kept output for appending to a message.
func (b *tailBuffer) suffix() string {
	s := strings.TrimSpace(string(b.buf))
	if s == "" {
		return ""
	}
	return ": " + s
}

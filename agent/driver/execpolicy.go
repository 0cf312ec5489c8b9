package driver

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// ExecPolicy narrows what the exec driver may run and with which
// environment. The zero value allows every program and lets a spec's env
// set no variable: commands get the base environment only (BaseEnv).
//
// A site sets it with meteor agent --exec-allow and --exec-env-allow; see
// docs/security.md for what an intent can make a device do without it.
type ExecPolicy struct {
	// Programs, when not empty, are the only programs exec commands may
	// run: absolute paths, resolved through symbolic links when the driver
	// is built. A command's argv[0] is looked up in the command's PATH,
	// resolved the same way, and must land on one of the resolved
	// programs, invoked under the base name of the listed path or of its
	// target (so that a multi-call binary such as busybox cannot be
	// turned into another applet by a link of another name). Empty allows
	// any program.
	Programs []string
	// Env are the names of the variables a spec's env may set. An entry
	// ending in "*" allows every name with that prefix, except the
	// dynamic-loader and interpreter variables (LD_PRELOAD, PYTHONPATH,
	// BASH_ENV, …, see IsLoaderEnv), which are allowed only when named
	// exactly. Empty allows none.
	Env []string
}

// AllowPrograms returns an ExecPolicy that allows only the listed
// programs (absolute paths, e.g. "/bin/sh") and no spec env variable.
// Note that allowing a shell or an interpreter allows whatever it runs.
func AllowPrograms(programs ...string) ExecPolicy {
	return ExecPolicy{Programs: programs}
}

// Validate reports whether the policy is usable: every program is an
// absolute path to an existing file, and every env entry is a valid name
// or prefix pattern.
func (p ExecPolicy) Validate() error {
	for _, prog := range p.Programs {
		if _, err := resolveProgram(prog); err != nil {
			return fmt.Errorf("exec policy: program %q: %w", prog, err)
		}
	}
	for _, name := range p.Env {
		if err := checkEnvName(strings.TrimSuffix(name, "*")); err != nil {
			return fmt.Errorf("exec policy: env %q: %w", name, err)
		}
	}
	return nil
}

// resolveProgram returns the absolute path, without symbolic links, of
// the executable regular file prog.
func resolveProgram(prog string) (string, error) {
	if !filepath.IsAbs(prog) {
		return "", errors.New("not an absolute path")
	}
	resolved, err := filepath.EvalSymlinks(prog)
	if err != nil {
		return "", err
	}
	st, err := os.Stat(resolved)
	if err != nil {
		return "", err
	}
	if !st.Mode().IsRegular() || st.Mode().Perm()&0o111 == 0 {
		return "", fmt.Errorf("%s is not an executable file", resolved)
	}
	return resolved, nil
}

func checkEnvName(name string) error {
	if name == "" || strings.ContainsAny(name, "=\x00") {
		return errors.New("not a valid variable name")
	}
	return nil
}

// defaultExecPath is the PATH of exec commands, unless a spec sets PATH
// and the policy allows it.
const defaultExecPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// BaseEnv is the environment every exec command starts from, whatever the
// agent's own environment holds (which may include secrets): a fixed PATH,
// HOME (the agent's, or "/"), and LANG=C so that check commands parse
// predictable output. A spec's env variables, where allowed, are added
// on top and may replace these.
func BaseEnv() []string {
	home := os.Getenv("HOME")
	if home == "" || !filepath.IsAbs(home) {
		home = "/"
	}
	return []string{"PATH=" + defaultExecPath, "HOME=" + home, "LANG=C"}
}

// loaderEnvNames and loaderEnvPrefixes are the variables that make a
// dynamic loader, a libc or an interpreter load or run other code, or
// change how a shell parses: allowed only when named exactly in
// ExecPolicy.Env.
var (
	loaderEnvNames = []string{
		"BASHOPTS", "BASH_ENV", "CDPATH", "ENV", "GCONV_PATH", "GLOBIGNORE",
		"HOSTALIASES", "IFS", "LOCPATH", "NLSPATH", "PATH", "PERLLIB",
		"PS4", "RESOLV_HOST_CONF", "SHELLOPTS",
	}
	loaderEnvPrefixes = []string{
		"BASH_FUNC_", "DYLD_", "GEM_", "GLIBC_", "JAVA_TOOL_OPTIONS", "JDK_JAVA_OPTIONS",
		"LD_", "LUA_", "MALLOC_", "NODE_", "PERL5", "PHP", "PYTHON", "RUBY", "_JAVA_OPTIONS",
	}
)

// IsLoaderEnv reports whether name is a dynamic-loader, interpreter or
// shell-parsing variable, which ExecPolicy.Env allows only by exact name.
func IsLoaderEnv(name string) bool {
	for _, n := range loaderEnvNames {
		if name == n {
			return true
		}
	}
	for _, p := range loaderEnvPrefixes {
		if strings.HasPrefix(name, p) {
			return true
		}
	}
	return false
}

// execRules is an ExecPolicy compiled when the driver is built.
type execRules struct {
	// programs maps each allowed program's resolved path to the base
	// names it may be invoked as; nil allows any program.
	programs    map[string]map[string]bool
	envExact    map[string]bool
	envPrefixes []string
}

// compile resolves the policy's programs. A program that cannot be
// resolved allows nothing (Validate reports it at start-up).
func (p ExecPolicy) compile() execRules {
	var r execRules
	if len(p.Programs) > 0 {
		r.programs = make(map[string]map[string]bool, len(p.Programs))
		for _, prog := range p.Programs {
			resolved, err := resolveProgram(prog)
			if err != nil {
				continue
			}
			// Only the listed name: a listed link to a multi-call
			// binary (busybox) allows that applet, not the binary under
			// its own name, which would run any applet.
			if r.programs[resolved] == nil {
				r.programs[resolved] = map[string]bool{}
			}
			r.programs[resolved][filepath.Base(prog)] = true
		}
	}
	r.envExact = make(map[string]bool, len(p.Env))
	for _, name := range p.Env {
		if prefix, ok := strings.CutSuffix(name, "*"); ok {
			r.envPrefixes = append(r.envPrefixes, prefix)
		} else {
			r.envExact[name] = true
		}
	}
	return r
}

// checkEnv returns nil when a spec may set the variable name.
func (r execRules) checkEnv(name string) error {
	if r.envExact[name] {
		return nil
	}
	if IsLoaderEnv(name) {
		return fmt.Errorf("env variable %q is a dynamic-loader, interpreter or shell variable, "+
			"allowed only when the agent names it in --exec-env-allow", name)
	}
	for _, p := range r.envPrefixes {
		if strings.HasPrefix(name, p) {
			return nil
		}
	}
	return fmt.Errorf("env variable %q is not allowed; the agent allows spec variables with --exec-env-allow", name)
}

// environment returns the command environment for a spec's variables:
// BaseEnv, then the spec's, sorted by name. It refuses, wrapping
// ErrNotAllowed, the first variable (by name) the policy does not allow.
func (r execRules) environment(spec map[string]string) ([]string, error) {
	names := make([]string, 0, len(spec))
	for k := range spec {
		names = append(names, k)
	}
	sort.Strings(names)
	env := BaseEnv()
	for _, k := range names {
		if err := checkEnvName(k); err != nil {
			return nil, fmt.Errorf("%w: env name %q", err, k)
		}
		if err := r.checkEnv(k); err != nil {
			return nil, fmt.Errorf("%w: %w", ErrNotAllowed, err)
		}
		env = append(env, k+"="+spec[k])
	}
	return env, nil
}

// resolveCommand finds argv0 as the command would run it: a bare name is
// looked up in pathList (the command's PATH), an absolute path is taken
// as is, then symbolic links are resolved. It returns the resolved path
// to execute, and refuses, wrapping ErrNotAllowed, a program the policy
// does not allow.
func (r execRules) resolveCommand(argv0, pathList string) (string, error) {
	found, err := lookPath(argv0, pathList)
	if err != nil {
		return "", err
	}
	resolved, err := filepath.EvalSymlinks(found)
	if err != nil {
		return "", fmt.Errorf("resolve %s: %w", found, err)
	}
	if r.programs == nil {
		return resolved, nil
	}
	if names := r.programs[resolved]; names[filepath.Base(found)] {
		return resolved, nil
	}
	how := ""
	if resolved != argv0 {
		how = fmt.Sprintf(" (resolved to %s)", resolved)
	}
	return "", fmt.Errorf("%w: program %q%s is not in the allow-list (--exec-allow)", ErrNotAllowed, argv0, how)
}

// lookPath finds the executable name in pathList, like exec.LookPath but
// with the command's PATH rather than the agent's. Relative paths with a
// slash and empty PATH entries (the current directory) are refused.
func lookPath(name, pathList string) (string, error) {
	if strings.Contains(name, "/") {
		if !filepath.IsAbs(name) {
			return "", fmt.Errorf("program %q must be an absolute path or a name looked up in PATH", name)
		}
		return filepath.Clean(name), nil
	}
	for _, dir := range filepath.SplitList(pathList) {
		if !filepath.IsAbs(dir) {
			continue
		}
		p := filepath.Join(dir, name)
		if st, err := os.Stat(p); err == nil && st.Mode().IsRegular() && st.Mode().Perm()&0o111 != 0 {
			return p, nil
		}
	}
	return "", fmt.Errorf("program %q not found in PATH %s", name, pathList)
}

// envValue returns the value of name in env (KEY=value, last wins).
func envValue(env []string, name string) string {
	v := ""
	for _, kv := range env {
		if k, val, ok := strings.Cut(kv, "="); ok && k == name {
			v = val
		}
	}
	return v
}

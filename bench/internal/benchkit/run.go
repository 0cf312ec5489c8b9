package benchkit

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
)

// ModulePath identifies the module root, found by walking up from the
// working directory.
const ModulePath = "github.com/meteor-edge/meteor"

// Main is a driver's main: it parses the command line (exit status 2 on a
// bad one), then runs the benchmark until it ends or the first SIGINT,
// SIGTERM or SIGHUP cancels it (exit status 1 on an error). prog prefixes
// the error messages.
func Main[C any](prog string, parse func(args []string, errOut io.Writer) (C, error), run func(ctx context.Context, cfg C, out, log io.Writer) error) {
	cfg, err := parse(os.Args[1:], os.Stderr)
	if errors.Is(err, flag.ErrHelp) {
		return
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, prog+":", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
	go func() {
		<-ctx.Done()
		// Restore default handling: a second Ctrl-C ends the driver at
		// once, and Pdeathsig still takes the servers along.
		stop()
	}()
	err = run(ctx, cfg, os.Stdout, os.Stderr)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, prog+":", err)
		os.Exit(1)
	}
}

// ParseLevels parses a comma-separated list such as "1,16,64", the value
// of the flag named flagName, into sorted, distinct counts between 1 and
// most.
func ParseLevels(s, flagName string, most int) ([]int, error) {
	var out []int
	for f := range strings.SplitSeq(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 || n > most {
			return nil, fmt.Errorf("-%s %q: %q is not a count between 1 and %d", flagName, s, f, most)
		}
		out = append(out, n)
	}
	slices.Sort(out)
	return slices.Compact(out), nil
}

// ModuleRoot walks up from the working directory to this module's go.mod.
func ModuleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		b, err := os.ReadFile(filepath.Join(dir, "go.mod"))
		if err == nil && strings.Contains(string(b), "module "+ModulePath+"\n") {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("not inside the %s module", ModulePath)
		}
		dir = parent
	}
}

// Locate finds the module root and the results directory: outDir, or
// bench/results in the module if outDir is empty. Outside the module it
// returns root "" if outDir and meteorBin are both given (nothing else
// needs the module), and an error otherwise.
func Locate(outDir, meteorBin string) (root, resultsDir string, err error) {
	root, err = ModuleRoot()
	if err != nil && (outDir == "" || meteorBin == "") {
		return "", "", fmt.Errorf("%w (or pass -out and -meteor-bin)", err)
	}
	if outDir == "" {
		outDir = filepath.Join(root, "bench", "results")
	}
	return root, outDir, nil
}

// TempDir creates the run's scratch directory, named after prefix. Defer
// the returned finish with a pointer to the run's error: it turns the
// error into "interrupted" if ctx was cancelled, keeps the directory
// (telling log that it holds what) if the run failed or keep is set, and
// removes it otherwise.
func TempDir(ctx context.Context, prefix, what string, keep bool, log io.Writer) (dir string, finish func(err *error), err error) {
	dir, err = os.MkdirTemp("", prefix)
	if err != nil {
		return "", nil, err
	}
	finish = func(err *error) {
		if ctx.Err() != nil {
			*err = errors.New("interrupted")
		}
		if (*err != nil && ctx.Err() == nil) || keep {
			fmt.Fprintf(log, "%s kept in %s\n", what, dir)
			return
		}
		if rerr := os.RemoveAll(dir); rerr != nil {
			fmt.Fprintf(log, "remove %s: %v\n", dir, rerr)
		}
	}
	return dir, finish, nil
}

// AbsPaths makes every non-empty path absolute: servers run in their data
// dirs, so relative paths given on the command line would break.
func AbsPaths(paths ...*string) error {
	for _, p := range paths {
		if *p == "" {
			continue
		}
		abs, err := filepath.Abs(*p)
		if err != nil {
			return err
		}
		*p = abs
	}
	return nil
}

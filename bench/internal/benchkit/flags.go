package benchkit

import (
	"context"
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"
)

// Flags are the flags every driver has: the meteor binary, the results
// directory and keeping the scratch directory. Register them with
// Register.
type Flags struct {
	MeteorBin string
	OutDir    string
	Keep      bool
}

// NewFlagSet returns a flag set for the driver bench/name whose usage
// message is "Usage: go run ./bench/NAME [flags]", about, and the flags.
func NewFlagSet(name, about string, errOut io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(errOut)
	fs.Usage = func() {
		fmt.Fprintf(errOut, "Usage: go run ./bench/%s [flags]\n\n%s\n\nFlags:\n", name, strings.TrimSpace(about))
		fs.PrintDefaults()
	}
	return fs
}

// Register adds -meteor-bin, -out and -keep to fs; kept says what -keep
// keeps ("PKI, data, server logs").
func (f *Flags) Register(fs *flag.FlagSet, kept string) {
	fs.StringVar(&f.MeteorBin, "meteor-bin", "", "meteor binary (default: build ./cmd/meteor into the run's temporary dir)")
	fs.StringVar(&f.OutDir, "out", "", "results directory (default: bench/results in the module)")
	fs.BoolVar(&f.Keep, "keep", false, "keep the temporary dir ("+kept+") after a successful run")
}

// Parse parses args into fs, refuses positional arguments, and makes
// -meteor-bin, -out and paths (other path flags) absolute.
func (f *Flags) Parse(fs *flag.FlagSet, args []string, paths ...*string) error {
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	return AbsPaths(append([]*string{&f.MeteorBin, &f.OutDir}, paths...)...)
}

// Locate finds the module root and sets OutDir to the results directory
// (see Locate).
func (f *Flags) Locate() (root string, err error) {
	root, f.OutDir, err = Locate(f.OutDir, f.MeteorBin)
	return root, err
}

// Meteor returns the meteor binary: -meteor-bin, or ./cmd/meteor of the
// module at root built into dir.
func (f *Flags) Meteor(ctx context.Context, root, dir string, log io.Writer) (string, error) {
	if f.MeteorBin != "" {
		return f.MeteorBin, nil
	}
	fmt.Fprintln(log, "building ./cmd/meteor")
	return BuildMeteor(ctx, root, dir)
}

// ParseChoices parses a comma-separated list of distinct choices, the
// value of the flag named flagName, keeping the order of first mention.
func ParseChoices(s, flagName string, choices ...string) ([]string, error) {
	var out []string
	for c := range strings.SplitSeq(s, ",") {
		c = strings.TrimSpace(c)
		if !slices.Contains(choices, c) {
			return nil, fmt.Errorf("-%s %q: %q is not one of %s", flagName, s, c, strings.Join(choices, ", "))
		}
		if !slices.Contains(out, c) {
			out = append(out, c)
		}
	}
	return out, nil
}

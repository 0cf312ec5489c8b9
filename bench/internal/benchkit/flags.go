package benchkit

import (
	"context"
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"
)

// Flags are the flags every driver has: the meteor binary, the results
// directory and keeping the scratch directory. Register them with
// Register.
type Flags struct {
	MeteorBin string
	OutDir    string
	Keep      bool
	// RaiseUDP is -raise-udp-buffers, for drivers that register it
	// (RegisterUDP): see Scratch.UDPBuffers.
	RaiseUDP bool
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

// RegisterUDP adds -raise-udp-buffers to fs, for drivers whose devices
// speak QUIC.
func (f *Flags) RegisterUDP(fs *flag.FlagSet) {
	fs.BoolVar(&f.RaiseUDP, "raise-udp-buffers", true, fmt.Sprintf("as root, raise net.core.rmem_max and wmem_max to %d for the run (quic-go's recommendation) and put them back at its end", UDPBufferMax))
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

// Scratch is what a driver's run sets up first: the module, the run's
// scratch directory and the group of its child processes.
type Scratch struct {
	Root     string // the module root; "" outside the module (see Locate)
	Dir      string // the run's scratch directory (TempDir)
	Procs    *Group // the run's child processes
	finish   func(err *error)
	restores []func() error // undone by Finish, last first
	log      io.Writer
}

// Start locates the module and the results directory (Flags.Locate),
// creates the run's scratch directory, named after prefix and holding
// what (TempDir, kept with -keep), and an empty Group. Defer Finish with a
// pointer to the run's error.
func (f *Flags) Start(ctx context.Context, prefix, what string, log io.Writer) (*Scratch, error) {
	root, err := f.Locate()
	if err != nil {
		return nil, err
	}
	dir, finish, err := TempDir(ctx, prefix, what, f.Keep, log)
	if err != nil {
		return nil, err
	}
	return &Scratch{Root: root, Dir: dir, Procs: &Group{}, finish: finish, log: log}, nil
}

// UDPBuffers raises the host's UDP buffer limits for the run if raise is
// set and it can (RaiseUDPBufferMax; Finish puts them back), tells log
// what it did, and returns that for the results.
func (s *Scratch) UDPBuffers(raise bool) UDPBufferSetup {
	setup, restore := RaiseUDPBufferMax(raise)
	s.restores = append(s.restores, restore)
	fmt.Fprintf(s.log, "UDP buffers: %s\n", setup.Note)
	return setup
}

// Finish stops the run's processes (SIGKILL after grace), puts back what
// the run changed on the host, then keeps or removes the scratch
// directory as TempDir's finish does with *err.
func (s *Scratch) Finish(err *error, grace time.Duration) {
	s.Procs.StopAll(grace)
	for i := len(s.restores) - 1; i >= 0; i-- {
		if rerr := s.restores[i](); rerr != nil {
			fmt.Fprintf(s.log, "%v\n", rerr)
		}
	}
	s.finish(err)
}

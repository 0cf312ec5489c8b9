package cliflags

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/spf13/pflag"
)

// testFlags is a flag set with a flag of every type the commands use.
type testFlags struct {
	f        *pflag.FlagSet
	conf     Config
	name     string
	region   string
	join     string
	labels   string
	dev      bool
	n        int
	big      uint64
	timeout  time.Duration
	fraction float64
}

func newTestFlags() *testFlags {
	t := &testFlags{f: pflag.NewFlagSet("server", pflag.ContinueOnError)}
	t.f.StringVar(&t.name, "node-id", "", "")
	t.f.StringVar(&t.region, "region", "default", "")
	t.f.StringVar(&t.join, "join", "", "")
	t.f.StringVar(&t.labels, "labels", "", "")
	t.f.BoolVar(&t.dev, "dev", false, "")
	t.f.IntVar(&t.n, "bootstrap-expect", 0, "")
	t.f.Uint64Var(&t.big, "snapshot-threshold", 8192, "")
	t.f.DurationVar(&t.timeout, "apply-timeout", 5*time.Second, "")
	t.f.Float64Var(&t.fraction, "loss", 0, "")
	t.conf.Register(t.f)
	MarkList(t.f, "join")
	MarkKeyValues(t.f, "labels")
	return t
}

// run parses args as the command line and then applies the config file
// holding content, as a command's PreRunE does.
func (t *testFlags) run(tb testing.TB, content string, args ...string) error {
	tb.Helper()
	path := filepath.Join(tb.TempDir(), "meteor.yaml")
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		tb.Fatal(err)
	}
	if err := t.f.Parse(append([]string{"--config", path}, args...)); err != nil {
		return err
	}
	return t.conf.Apply(t.f)
}

// TestConfigPrecedence: a flag given on the command line wins over the
// file, the file over the default; every type takes its YAML scalar, a
// list flag a YAML list, a key=value flag a mapping.
func TestConfigPrecedence(t *testing.T) {
	const file = `# a server
node-id: eu-1
region: eu-west
join: [10.0.1.1:8472, "10.0.2.1:8472"]
labels:
  site: store-42
  role: gw
dev: true
bootstrap-expect: 3
snapshot-threshold: 100000
apply-timeout: 3s
loss: 0.5
`
	f := newTestFlags()
	if err := f.run(t, file, "--region", "us-east", "--bootstrap-expect=5"); err != nil {
		t.Fatal(err)
	}
	type got struct {
		Name, Region, Join, Labels string
		Dev                        bool
		N                          int
		Big                        uint64
		Timeout                    time.Duration
		Fraction                   float64
	}
	want := got{"eu-1", "us-east", "10.0.1.1:8472,10.0.2.1:8472", "site=store-42,role=gw", true, 5, 100000, 3 * time.Second, 0.5}
	if diff := cmp.Diff(want, got{f.name, f.region, f.join, f.labels, f.dev, f.n, f.big, f.timeout, f.fraction}); diff != "" {
		t.Errorf("flags after the file (-want +got):\n%s", diff)
	}

	// Keys the file leaves out keep their defaults; a list flag also
	// takes the command line's comma-separated string.
	f = newTestFlags()
	if err := f.run(t, "join: 10.0.1.1:8472,10.0.2.1:8472\n"); err != nil {
		t.Fatal(err)
	}
	if f.region != "default" || f.timeout != 5*time.Second || f.join != "10.0.1.1:8472,10.0.2.1:8472" {
		t.Errorf("region %q, apply-timeout %v, join %q; want the defaults and the string as given", f.region, f.timeout, f.join)
	}

	// An empty file, or one of comments only, sets nothing.
	for _, empty := range []string{"", "# nothing yet\n", "---\n"} {
		f = newTestFlags()
		if err := f.run(t, empty); err != nil || f.region != "default" {
			t.Errorf("%q: %v, region %q", empty, err, f.region)
		}
	}

	// Without --config nothing is read.
	f = newTestFlags()
	if err := f.conf.Apply(f.f); err != nil {
		t.Errorf("no --config: %v", err)
	}
}

// TestConfigErrors: every mistake in a file is an error naming its line
// and what is wrong.
func TestConfigErrors(t *testing.T) {
	for _, tc := range []struct {
		name, file, want string
	}{
		{"unknown key", "node-id: eu-1\nnode_id: eu-2\n", `line 2: unknown key "node_id": there is no flag --node_id`},
		{"duplicate key", "node-id: eu-1\nregion: eu\n\nnode-id: eu-2\n", `line 4: key "node-id" given twice (first on line 1)`},
		{"duplicate label", "labels:\n  site: a\n  site: b\n", `line 3: key "site" given twice (first on line 2)`},
		{"no value", "region:\n", "line 1: region: no value"},
		{"null", "region: ~\n", "line 1: region: no value"},
		{"bad int", "bootstrap-expect: three\n", `line 1: bootstrap-expect: invalid argument "three"`},
		{"bad duration", "region: eu\napply-timeout: 3\n", `line 2: apply-timeout: invalid argument "3"`},
		{"bad bool", "dev: maybe\n", `line 1: dev: invalid argument "maybe"`},
		{"list for a plain flag", "region: [eu, us]\n", "line 1: region: takes one value, not a list"},
		{"mapping for a plain flag", "region:\n  eu: 1\n", "line 2: region: takes one value, not a mapping"},
		{"mapping for a list", "join: {a: b}\n", "line 1: join: takes one value, not a mapping"},
		{"nested list", "join: [[a]]\n", "line 1: a list item must be a plain value"},
		{"comma in an item", "join: ['a,b']\n", `list item "a,b" holds a comma`},
		{"config in config", "config: other.yaml\n", `line 1: key "config" cannot be set in a config file`},
		{"top-level list", "- node-id: eu-1\n", "line 1: want a mapping of flag names to values"},
		{"top-level scalar", "eu-1\n", "line 1: want a mapping of flag names to values"},
		{"two documents", "node-id: eu-1\n---\nregion: eu\n", "line 2: a second YAML document"},
		{"alias", "node-id: &id eu-1\nregion: *id\n", "line 2: region: YAML aliases are not supported"},
		{"not YAML", "node-id: [eu-1\n", "yaml:"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newTestFlags()
			err := f.run(t, tc.file)
			if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "meteor.yaml: ") {
				t.Errorf("%q: error %v, want %q after the file's name", tc.file, err, tc.want)
			}
		})
	}
	f := newTestFlags()
	if err := f.f.Parse([]string{"--config", filepath.Join(t.TempDir(), "missing.yaml")}); err != nil {
		t.Fatal(err)
	}
	if err := f.conf.Apply(f.f); err == nil || !strings.Contains(err.Error(), "--config: open ") {
		t.Errorf("a missing file: %v", err)
	}
}

// TestReference: the table lists every flag but --config and --help, with
// its kind of value and default.
func TestReference(t *testing.T) {
	var b strings.Builder
	Reference(&b, newTestFlags().f)
	out := b.String()
	for _, want := range []string{
		"| `apply-timeout` | `--apply-timeout` | duration | `5s` |",
		"| `join` | `--join` | list of strings | — |",
		"| `labels` | `--labels` | mapping | — |",
		"| `region` | `--region` | string | `default` |",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("no row %q in\n%s", want, out)
		}
	}
	if strings.Contains(out, "`config`") {
		t.Errorf("--config listed as a key:\n%s", out)
	}
}

// Package cliflags holds the command-line flags and parsers that both
// binaries, meteor and meteor-agent, share: the log flags of the
// long-running commands, key=value lists, and the --config file that sets
// a command's flags from YAML (config.go). It owns no command; it must
// not import the server (cluster) or anything else the agent binary
// leaves out (cmd/meteor-agent/deps_test.go).
package cliflags

import (
	"fmt"
	"io"
	"strings"

	"github.com/hashicorp/go-hclog"
	"github.com/spf13/pflag"
)

// Logs are the log flags of the long-running commands (server, agent,
// dev, sim): the level, and JSON lines instead of text. The keys are the
// same everywhere (docs/operations.md, "Logs").
type Logs struct {
	Level string
	JSON  bool
}

// Register adds --log-level (default level) and --log-json to f.
func (l *Logs) Register(f *pflag.FlagSet, level string) {
	f.StringVar(&l.Level, "log-level", level, "log level: trace, debug, info, warn, error")
	f.BoolVar(&l.JSON, "log-json", false, "write the logs as JSON lines (@timestamp, @level, @module, @message and the keys) instead of text")
}

// Logger returns the logger the flags ask for, writing to out, or an
// error naming a level that does not exist.
func (l *Logs) Logger(out io.Writer) (hclog.Logger, error) {
	level := hclog.LevelFromString(l.Level)
	if level == hclog.NoLevel {
		return nil, fmt.Errorf("--log-level %q: want trace, debug, info, warn or error", l.Level)
	}
	return hclog.New(&hclog.LoggerOptions{Name: "meteor", Level: level, Output: out, JSONFormat: l.JSON}), nil
}

// KeyValues parses "k=v,k2=v2" given to flag; an empty string is an
// empty map.
func KeyValues(flag, s string) (map[string]string, error) {
	out := map[string]string{}
	if strings.TrimSpace(s) == "" {
		return out, nil
	}
	for _, kv := range strings.Split(s, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(kv), "=")
		if !ok || k == "" {
			return nil, fmt.Errorf("%s: %q is not key=value", flag, kv)
		}
		if _, dup := out[k]; dup {
			return nil, fmt.Errorf("%s: label %s given twice", flag, k)
		}
		out[k] = v
	}
	return out, nil
}

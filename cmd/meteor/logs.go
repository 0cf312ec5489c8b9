package main

import (
	"fmt"
	"io"
	"strings"

	"github.com/hashicorp/go-hclog"
	"github.com/spf13/pflag"
)

// logFlags are the log flags of the long-running commands (server,
// agent, dev, sim): the level, and JSON lines instead of text. The keys
// are the same everywhere (docs/operations.md, "Logs").
type logFlags struct {
	level string
	json  bool
}

func (l *logFlags) register(f *pflag.FlagSet, level string) {
	f.StringVar(&l.level, "log-level", level, "log level: trace, debug, info, warn, error")
	f.BoolVar(&l.json, "log-json", false, "write the logs as JSON lines (@timestamp, @level, @module, @message and the keys) instead of text")
}

// logger returns the logger the flags ask for, writing to out, or an
// error naming a level that does not exist.
func (l *logFlags) logger(out io.Writer) (hclog.Logger, error) {
	level := hclog.LevelFromString(l.level)
	if level == hclog.NoLevel {
		return nil, fmt.Errorf("--log-level %q: want trace, debug, info, warn or error", l.level)
	}
	return hclog.New(&hclog.LoggerOptions{Name: "meteor", Level: level, Output: out, JSONFormat: l.json}), nil
}

// args are the flags again, for a child process that logs the same way.
func (l *logFlags) args() []string {
	out := []string{"--log-level", strings.ToLower(l.level)}
	if l.json {
		out = append(out, "--log-json")
	}
	return out
}

// Command meteor-agent is Meteor's device agent alone: the command `meteor
// agent` runs (package agentcmd, the same flags), in a binary without the
// server, the operator CLI, chaos or the benchmarks, built static for
// devices by make build-agent. deps_test.go keeps it that way.
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/meteor-edge/meteor/cmd/internal/agentcmd"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := execute(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// Exit statuses, as meteor's (docs/api.md, "CLI").
const (
	exitOK    = 0
	exitError = 1
	exitUsage = 2 // an unknown flag or an argument
)

// execute runs the agent with the command line args and returns its exit
// status. An error goes to stderr, followed by the usage when the command
// line itself was wrong.
func execute(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	cmd := agentcmd.New("meteor-agent")
	cmd.SilenceUsage, cmd.SilenceErrors = true, true
	cmd.SetArgs(args)
	cmd.SetOut(stdout)
	cmd.SetErr(stderr)
	usage := false
	cmd.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { usage = true; return err })
	if cmd.Args != nil {
		check := cmd.Args
		cmd.Args = func(c *cobra.Command, args []string) error {
			err := check(c, args)
			usage = err != nil
			return err
		}
	}
	err := cmd.ExecuteContext(ctx)
	if err == nil {
		return exitOK
	}
	fmt.Fprintln(stderr, "Error:", err)
	if usage {
		fmt.Fprintf(stderr, "\n%s", cmd.UsageString())
		return exitUsage
	}
	return exitError
}

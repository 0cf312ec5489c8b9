package agentcmd

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"path/filepath"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/meteor-edge/meteor/agent"
)

// DefaultDataDir is where the local commands look for the running
// agent's control socket unless told.
const DefaultDataDir = "/var/lib/meteor-agent"

// localFlags locate the running agent's control socket.
type localFlags struct {
	dataDir, socket string
	json            bool
}

func (l *localFlags) register(cmd *cobra.Command) {
	f := cmd.Flags()
	f.StringVar(&l.dataDir, "data-dir", DefaultDataDir, "the running agent's --data-dir, which holds its control socket")
	f.StringVar(&l.socket, "socket", "", "the control socket's path, if the agent was given --control-socket")
	f.BoolVar(&l.json, "json", false, "print the agent's answer as JSON")
}

func (l *localFlags) path() string {
	if l.socket != "" {
		return l.socket
	}
	return filepath.Join(l.dataDir, agent.DefaultControlSocket)
}

// send sends a request to the running agent and prints its answer.
func (l *localFlags) send(ctx context.Context, out io.Writer, req agent.ControlRequest, table func(io.Writer, *agent.ControlResponse)) error {
	ctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	resp, err := agent.Control(ctx, l.path(), req)
	if err != nil {
		return err
	}
	if l.json {
		enc := json.NewEncoder(out)
		enc.SetIndent("", "  ")
		return enc.Encode(resp)
	}
	if resp.Message != "" {
		fmt.Fprintln(out, resp.Message)
	}
	if table != nil {
		table(out, resp)
	}
	return nil
}

// localCommands are the commands that talk to the agent running on this
// device through its control socket.
func localCommands(path string) []*cobra.Command {
	var l localFlags
	var reason, forDur string
	var clear bool
	override := &cobra.Command{
		Use:   "override RESOURCE --reason TEXT --for DURATION",
		Short: "Pin a resource's local state on this device for a while (talks to the running agent)",
		Long: `Pin a resource (INTENT/ID) as it is on this device: until the override ends
the agent neither corrects its drift nor applies a new desired state of it,
and reports it overridden, with the reason, who set it and until when, as
an expected local change rather than an alarm. At the end the agent
corrects it again. --clear ends an override early. The agent's control
socket (in its --data-dir) is its user's only: run this as that user
(usually root).`,
		Example: `  ` + path + ` override pos-terminal-config/settings --reason "vendor hotfix, ticket 4711" --for 24h
  ` + path + ` override pos-terminal-config/settings --clear`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			req := agent.ControlRequest{Op: agent.OpOverride, Resource: args[0], Reason: reason, For: forDur}
			if clear {
				req = agent.ControlRequest{Op: agent.OpClearOverride, Resource: args[0]}
			}
			return l.send(cmd.Context(), cmd.OutOrStdout(), req, nil)
		},
	}
	override.Flags().StringVar(&reason, "reason", "", "why (reported to the control plane; required)")
	override.Flags().StringVar(&forDur, "for", "", "how long, e.g. 24h (at most 720h; required)")
	override.Flags().BoolVar(&clear, "clear", false, "end the resource's override now")
	l.register(override)

	var ll localFlags
	overrides := &cobra.Command{
		Use:   "overrides",
		Short: "List the local overrides in force on this device (talks to the running agent)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return ll.send(cmd.Context(), cmd.OutOrStdout(), agent.ControlRequest{Op: agent.OpOverrides}, printOverrides)
		},
	}
	ll.register(overrides)
	return []*cobra.Command{override, overrides, lockCommand(path)}
}

// lockCommand is meteor agent lock acquire / release / list.
func lockCommand(path string) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "lock",
		Short: "Take and release workload locks on this device (talks to the running agent)",
		Long: `A workload that must not be interrupted holds a lock while it runs; the steps
of resources that require the lock (requires: [lock:NAME]) wait until it is
released, and the rest of the plan goes on. A lock held past its maximum
hold is reported stale, and an operator can break it from the control plane
(meteor device unlock). A workload may instead create a lock file named
NAME in the agent's lock directory (--lock-dir) and remove it when done.`,
	}
	var la localFlags
	var holder, maxHold string
	acquire := &cobra.Command{
		Use:     "acquire NAME --max-hold DURATION [--holder TEXT]",
		Short:   "Take a lock",
		Example: `  ` + path + ` lock acquire pos-sync --max-hold 2h --holder "end-of-day sync"`,
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return la.send(cmd.Context(), cmd.OutOrStdout(), agent.ControlRequest{Op: agent.OpLockAcquire, Lock: args[0], Holder: holder, MaxHold: maxHold}, nil)
		},
	}
	acquire.Flags().StringVar(&maxHold, "max-hold", "4h", "how long it may be held before it is reported stale (at most 168h)")
	acquire.Flags().StringVar(&holder, "holder", "", "who holds it (default: your user and process)")
	la.register(acquire)
	var lr localFlags
	release := &cobra.Command{
		Use: "release NAME", Short: "Release a lock taken with acquire", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return lr.send(cmd.Context(), cmd.OutOrStdout(), agent.ControlRequest{Op: agent.OpLockRelease, Lock: args[0]}, nil)
		},
	}
	lr.register(release)
	var ll localFlags
	list := &cobra.Command{
		Use: "list", Short: "List the locks held (taken with acquire, or lock files)", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return ll.send(cmd.Context(), cmd.OutOrStdout(), agent.ControlRequest{Op: agent.OpLocks}, printLocks)
		},
	}
	ll.register(list)
	cmd.AddCommand(acquire, release, list)
	return cmd
}

func printLocks(w io.Writer, resp *agent.ControlResponse) {
	if len(resp.Locks) == 0 {
		fmt.Fprintln(w, "no lock held")
		return
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "LOCK\tHOLDER\tSINCE\tMAX HOLD\tSTALE\tFILE")
	for _, l := range resp.Locks {
		file := l.File
		if file == "" {
			file = "-"
		}
		maxHold := l.MaxHold
		if maxHold == "" {
			maxHold = "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%v\t%s\n", l.Name, l.Holder, l.Since.Local().Format(time.RFC3339), maxHold, l.Stale, file)
	}
	tw.Flush()
}

func printOverrides(w io.Writer, resp *agent.ControlResponse) {
	if len(resp.Overrides) == 0 {
		fmt.Fprintln(w, "no local override in force")
		return
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "RESOURCE\tUNTIL\tBY\tREASON")
	for _, o := range resp.Overrides {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", o.Resource, o.Until.Local().Format(time.RFC3339), o.By, o.Reason)
	}
	tw.Flush()
}

package main

import (
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/meteor-edge/meteor/cluster/api"
	"github.com/meteor-edge/meteor/fsm/intent"
)

func newClassCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "class",
		Short: "Write and delete reconcile classes",
		Long: `A reconcile class is the cadence and risk profile of one kind of state: how
often agents pull, probe and report, how they back off a failing apply, and
when the servers judge a device unreachable or stuck. Every resource names
its class (class: network-policy); 'meteor get classes' lists those in
effect. Classes are replicated: a class written here takes the place of
the built-in one of its name on every server, and reaches every connected
agent within seconds (agents of protocol 1.4). See docs/agent.md,
"Reconcile classes".`,
	}
	var files []string
	apply := &cobra.Command{
		Use:   "apply -f FILE",
		Short: "Create or replace classes from YAML documents (needs an operator token)",
		Long: `Create or replace reconcile classes. FILE ('-' for standard input) holds one
or more YAML documents separated by '---', each a class:

  name: network-policy
  pullInterval: 1m
  probeInterval: 15s
  reportInterval: 1h
  retry: {base: 1s, max: 30s, jitter: 0.1}
  unreachableAfter: 2m
  progressDeadline: 5m

A field left out keeps the value the class has now (a new class takes the
default class's). Cadences and retries are at least 1s. Every document is
validated before anything is sent; each write is in the audit log.`,
		Example: `  meteor class apply -f classes.yaml
  echo 'name: certificate
probeInterval: 1m' | meteor class apply -f -`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(files) == 0 {
				return &usageError{fmt.Errorf("no documents: pass -f FILE")}
			}
			c := g.client()
			cur, err := c.Classes(cmd.Context(), api.ReadOptions{})
			if err != nil {
				return fmt.Errorf("read the classes in effect: %w", err)
			}
			base := map[string]intent.Class{}
			for _, cl := range cur.Classes {
				ic, err := cl.Intent()
				if err != nil {
					return fmt.Errorf("the server's class %s: %w", cl.Name, err)
				}
				base[cl.Name] = ic
			}
			var classes []intent.Class
			for _, f := range files {
				data, err := readFileOrStdin(f)
				if err != nil {
					return err
				}
				cs, err := intent.ParseClasses(data, base)
				if err != nil {
					return fmt.Errorf("%s: %w", f, err)
				}
				classes = append(classes, cs...)
			}
			var out []api.Class
			for _, cl := range classes {
				res, err := c.PutClass(cmd.Context(), api.ClassOf(cl))
				if err != nil {
					return fmt.Errorf("apply class %q: %w", cl.Name, err)
				}
				out = append(out, *res)
				if !g.structured() {
					fmt.Fprintf(cmd.OutOrStdout(), "class/%s applied (index %d)\n", res.Name, res.Index)
				}
			}
			if g.structured() {
				return g.print(cmd.OutOrStdout(), api.ClassList{Classes: out})
			}
			return nil
		},
	}
	apply.Flags().StringSliceVarP(&files, "file", "f", nil, "YAML file of classes, or - for standard input (repeatable)")

	del := &cobra.Command{
		Use:   "delete NAME",
		Short: "Delete a written class; a built-in class of its name takes its place again (needs an operator token)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := g.client().DeleteClass(cmd.Context(), args[0]); err != nil {
				return err
			}
			return g.acted(cmd.OutOrStdout(), "delete-class", args[0], fmt.Sprintf("class/%s deleted", args[0]))
		},
	}
	cmd.AddCommand(apply, del)
	return cmd
}

func newWindowCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "window",
		Short: "Write and delete maintenance windows",
		Long: `A maintenance window says when the devices its selector matches may take
disruptive steps (resources marked disruptive: true, such as a service
restart), in each device's local time: its timezone label (the control
plane's, else the one it reports; Europe.Berlin for Europe/Berlin), else
UTC. A device that no window selects is not held. A rollout with
"window: maintenance" releases each device only while its window is open.
'meteor get windows' lists them. See docs/operations.md, "Maintenance
windows".`,
	}
	var files []string
	apply := &cobra.Command{
		Use:   "apply -f FILE",
		Short: "Create or replace maintenance windows from YAML documents (needs an operator token)",
		Long: `Create or replace maintenance windows. FILE ('-' for standard input) holds one
or more YAML documents separated by '---', each a window:

  name: store-nights
  selector: {role: pos-gateway}
  schedule:
    - {days: mon-fri, from: "22:00", to: "05:00"}
    - {days: "sat,sun", from: "00:00", to: "23:59"}

days are day names (mon ... sun), ranges (mon-fri), lists (sat,sun), daily,
weekdays or weekends; a span whose "to" is before its "from" ends the next
day. Every document is validated before anything is sent; each write is in
the audit log.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(files) == 0 {
				return &usageError{fmt.Errorf("no documents: pass -f FILE")}
			}
			var windows []intent.MaintenanceWindow
			for _, f := range files {
				data, err := readFileOrStdin(f)
				if err != nil {
					return err
				}
				ws, err := intent.ParseMaintenanceWindows(data)
				if err != nil {
					return fmt.Errorf("%s: %w", f, err)
				}
				windows = append(windows, ws...)
			}
			var out []api.MaintenanceWindow
			for _, w := range windows {
				res, err := g.client().PutMaintenanceWindow(cmd.Context(), api.WindowOf(w))
				if err != nil {
					return fmt.Errorf("apply maintenance window %q: %w", w.Name, err)
				}
				out = append(out, *res)
				if !g.structured() {
					fmt.Fprintf(cmd.OutOrStdout(), "maintenance-window/%s applied (index %d)\n", res.Name, res.Index)
				}
			}
			if g.structured() {
				return g.print(cmd.OutOrStdout(), api.MaintenanceWindowList{Windows: out})
			}
			return nil
		},
	}
	apply.Flags().StringSliceVarP(&files, "file", "f", nil, "YAML file of maintenance windows, or - for standard input (repeatable)")
	del := &cobra.Command{
		Use:   "delete NAME",
		Short: "Delete a maintenance window (needs an operator token)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := g.client().DeleteMaintenanceWindow(cmd.Context(), args[0]); err != nil {
				return err
			}
			return g.acted(cmd.OutOrStdout(), "delete-maintenance-window", args[0], fmt.Sprintf("maintenance-window/%s deleted", args[0]))
		},
	}
	cmd.AddCommand(apply, del)
	return cmd
}

// printWindows prints the maintenance windows as a table.
func printWindows(w io.Writer, list *api.MaintenanceWindowList) error {
	tw := table(w)
	fmt.Fprintln(tw, "NAME\tSELECTOR\tSCHEDULE (LOCAL TIME)\tWRITTEN")
	for _, mw := range list.Windows {
		var spans []string
		for _, s := range mw.Schedule {
			spans = append(spans, s.Days+" "+s.From+"-"+s.To)
		}
		by := "-"
		if mw.UpdatedAt != nil {
			by = "by " + mw.Actor + ", " + ago(*mw.UpdatedAt)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", mw.Name, orDash(labels(mw.Selector)), strings.Join(spans, "; "), by)
	}
	return tw.Flush()
}

// readFileOrStdin reads a file, or standard input for "-".
func readFileOrStdin(name string) ([]byte, error) {
	if name == "-" {
		return io.ReadAll(os.Stdin)
	}
	return os.ReadFile(name)
}

// printClasses prints the classes in effect as a table.
func printClasses(w io.Writer, list *api.ClassList) error {
	tw := table(w)
	fmt.Fprintln(tw, "NAME\tPULL\tPROBE\tREPORT\tRETRY\tUNREACHABLE\tPROGRESS\tSOURCE")
	for _, c := range list.Classes {
		source := c.Source
		if c.UpdatedAt != nil {
			source += fmt.Sprintf(" by %s, %s", c.Actor, ago(*c.UpdatedAt))
		}
		retry := fmt.Sprintf("%s..%s", shortDur(c.Retry.Base), shortDur(c.Retry.Max))
		if c.Retry.Jitter > 0 {
			retry += fmt.Sprintf(" ±%g%%", c.Retry.Jitter*100)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", c.Name, shortDur(c.PullInterval), shortDur(c.ProbeInterval), shortDur(c.ReportInterval),
			retry, shortDur(c.UnreachableAfter), shortDur(c.ProgressDeadline), source)
	}
	return tw.Flush()
}

// shortDur prints a Go duration string without zero trailing units: 1h0m0s
// is 1h, 5m0s is 5m.
func shortDur(s string) string {
	d, err := time.ParseDuration(s)
	if err != nil {
		return s
	}
	out := d.String()
	for _, z := range []string{"m0s", "h0m"} {
		if len(out) > len(z) && out[len(out)-len(z):] == z {
			out = out[:len(out)-2]
		}
	}
	return out
}

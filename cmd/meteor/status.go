package main

import (
	"bytes"
	"fmt"
	"io"
	"sort"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/meteor-edge/meteor/cluster/api"
	"github.com/meteor-edge/meteor/scheduler"
)

// statusOrder lists device statuses most urgent first.
var statusOrder = scheduler.Statuses()

func newStatusCmd(g *globals) *cobra.Command {
	var watch bool
	var interval time.Duration
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Show the fleet: devices per status and each intent's progress",
		Long: `Show the fleet summary: how many devices are in each status, and for each
intent's current revision how many devices it targets, how many acknowledged
it, converged, failed, drifted or are unreachable. --watch redraws it live:
each read waits on the server until the state has changed (a blocking
read), and redraws stay at least --interval apart.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			c := g.client()
			var index uint64 // with --watch: wait for the state to pass it
			for {
				drawn := time.Now()
				st, err := c.Status(cmd.Context(), api.ReadOptions{Stale: watch, WaitIndex: index, Wait: 30 * time.Second})
				index = 0
				if err == nil && watch {
					index = st.Index
				}
				if err != nil && !watch {
					return err
				}
				var buf bytes.Buffer
				if err != nil {
					fmt.Fprintf(&buf, "cannot read status: %v\n", err)
				} else if g.structured() {
					if err := g.print(&buf, st); err != nil {
						return err
					}
				} else {
					printStatus(&buf, st)
				}
				if watch && !g.structured() {
					// Clear the screen and redraw from the top.
					fmt.Fprint(cmd.OutOrStdout(), "\033[H\033[2J")
					fmt.Fprintf(cmd.OutOrStdout(), "meteor status --watch  %s  (Ctrl-C to stop)\n\n", time.Now().Format("15:04:05"))
				}
				cmd.OutOrStdout().Write(buf.Bytes())
				if !watch {
					return nil
				}
				// The next read blocks until something changed; redraws
				// stay at least --interval apart.
				select {
				case <-cmd.Context().Done():
					return nil
				case <-time.After(interval - time.Since(drawn)):
				}
			}
		},
	}
	cmd.Flags().BoolVarP(&watch, "watch", "w", false, "redraw live until Ctrl-C")
	cmd.Flags().DurationVar(&interval, "interval", time.Second, "least time between redraws with --watch")
	return cmd
}

func printStatus(w io.Writer, st *api.FleetStatus) {
	fmt.Fprintf(w, "Fleet: %s at cluster revision %d\n", nDevices(st.Devices), st.Revision)
	for _, s := range statusOrder {
		if n := st.ByStatus[s]; n > 0 {
			fmt.Fprintf(w, "  %-12s %6d  %s\n", s, n, bar(n, st.Devices, 30))
		}
	}
	if len(st.Intents) == 0 {
		return
	}
	fmt.Fprintln(w, "\nIntents:")
	tw := table(w)
	fmt.Fprintln(tw, "  NAME\tREVISION\tTARGETED\tRELEASED\tACKED\tCONVERGED\tFAILED\tDRIFTED\tUNREACHABLE\tPROGRESS")
	for _, in := range st.Intents {
		fmt.Fprintf(tw, "  %s\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%s %s\n", in.Name, in.Revision, in.Targeted, in.Released, in.Acknowledged,
			in.Converged, in.Failed, in.Drifted, in.Unreachable, bar(in.Converged, in.Targeted, 20), percent(in.Converged, in.Targeted))
	}
	tw.Flush()
}

func bar(n, total, width int) string {
	if total <= 0 {
		return "[" + strings.Repeat(" ", width) + "]"
	}
	full := n * width / total
	return "[" + strings.Repeat("#", full) + strings.Repeat(".", width-full) + "]"
}

func printTimeline(w io.Writer, tl *api.Timeline) {
	fmt.Fprintf(w, "Timeline of %s (oldest first):\n", tl.Device)
	tw := table(w)
	fmt.Fprintln(tw, "  TIME\tREVISION\tSTATUS\tOWNER\tREASON\tRESOURCES")
	for _, e := range tl.Entries {
		var res []string
		for k, v := range e.Resources {
			res = append(res, k+"="+v)
		}
		sort.Strings(res)
		fmt.Fprintf(tw, "  %s\t%d\t%s\t%s\t%s\t%s\n", e.Time.Local().Format("15:04:05.000"), e.Revision, e.Status, e.Owner, e.Reason, strings.Join(res, " "))
	}
	tw.Flush()
}

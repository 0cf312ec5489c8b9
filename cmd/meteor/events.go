package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/meteor-edge/meteor/cluster/api"
)

func newEventsCmd(g *globals) *cobra.Command {
	var q api.EventQuery
	var kinds string
	var follow bool
	cmd := &cobra.Command{
		Use:   "events",
		Short: "Show what changed: intent revisions, releases, approvals, status transitions, drift",
		Long: `Show the cluster's events, oldest first: intent revisions (intent),
rollout releases (release), decisions (rollout), approvals (approval),
progress samples (progress), device status transitions (status), drift
found, tolerated or corrected (drift), device changes (device) and
connections (session).

Without --follow it prints the events the server keeps (the newest 16,384
by default) and exits; with --follow it goes on printing new ones until
Ctrl-C, reconnecting after a dropped connection and resuming where it was,
so none is lost. A "reset" line means the server no longer kept the events
after the last one printed. Every server gives an event the same ID, so
--after ID resumes anywhere. -o json prints one JSON object a line.

  meteor events --follow --intent store-network-policy
  meteor events --kind status,drift --device store-0042`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if kinds != "" {
				q.Kinds = strings.Split(kinds, ",")
			}
			if !follow && q.After == "" {
				q.After = "0" // every event kept
			}
			q.Kept = !follow
			out := cmd.OutOrStdout()
			p := &eventPrinter{w: out, format: g.output}
			c := g.client()
			onRetry := func(err error) { fmt.Fprintf(os.Stderr, "meteor events: %v; reconnecting\n", err) }
			if !follow {
				_, err := c.Events(cmd.Context(), q, p.print)
				if err == io.EOF {
					err = nil
				}
				return err
			}
			err := c.FollowEvents(cmd.Context(), q, p.print, onRetry)
			if cmd.Context().Err() != nil {
				return nil // Ctrl-C
			}
			return err
		},
	}
	cmd.Flags().BoolVarP(&follow, "follow", "f", false, "go on printing new events until Ctrl-C")
	cmd.Flags().StringVar(&kinds, "kind", "", "only these kinds, comma-separated: intent, release, rollout, approval, progress, status, drift, device, session")
	cmd.Flags().StringVar(&q.Intent, "intent", "", "only this intent's events and those of the devices its current revision targets")
	cmd.Flags().StringVar(&q.Device, "device", "", "only this device's events")
	cmd.Flags().StringVar(&q.After, "after", "", "start after the event with this ID (an earlier line's ID)")
	return cmd
}

// eventPrinter prints events as lines of a table, or one JSON or YAML
// value each.
type eventPrinter struct {
	w      io.Writer
	format string
	header bool
}

func (p *eventPrinter) print(e api.Event) error {
	switch p.format {
	case outputJSON:
		b, err := json.Marshal(e)
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(p.w, "%s\n", b)
		return err
	case outputYAML:
		if _, err := fmt.Fprintln(p.w, "---"); err != nil {
			return err
		}
		return printYAML(p.w, e)
	}
	if !p.header {
		p.header = true
		fmt.Fprintf(p.w, "%-12s %-8s %-9s %-13s %-24s %s\n", "ID", "TIME", "KIND", "ACTION", "SUBJECT", "DETAIL")
	}
	_, err := fmt.Fprintf(p.w, "%-12s %-8s %-9s %-13s %-24s %s\n", e.ID, eventTime(e.Time), e.Kind, orDash(e.Action), eventSubject(e), eventDetail(e))
	return err
}

func eventTime(t time.Time) string {
	if t.IsZero() || t.Unix() <= 0 {
		return "-"
	}
	return t.Local().Format("15:04:05")
}

// eventSubject names what the event is about: the intent and its
// revision, the device, or both.
func eventSubject(e api.Event) string {
	var parts []string
	if e.Intent != "" {
		s := e.Intent
		if e.Revision != 0 {
			s += fmt.Sprintf("@%d", e.Revision)
		}
		parts = append(parts, s)
	}
	if e.Device != "" {
		parts = append(parts, e.Device)
	}
	if len(parts) == 0 {
		return "-"
	}
	return strings.Join(parts, " ")
}

// eventDetail says what happened, in a few words.
func eventDetail(e api.Event) string {
	var parts []string
	if e.Status != "" && e.Kind == "status" {
		parts = append(parts, e.Status)
	}
	if e.Wave != 0 {
		parts = append(parts, fmt.Sprintf("wave %d", e.Wave))
	}
	if e.Devices != 0 {
		parts = append(parts, nDevices(e.Devices))
	}
	if c := e.Counts; c != nil {
		parts = append(parts, fmt.Sprintf("%d targeted, %d acknowledged, %d converged, %d failed", c.Targeted, c.Acknowledged, c.Converged, c.Failed))
	}
	if len(e.Resources) > 0 {
		keys := make([]string, 0, len(e.Resources))
		for k := range e.Resources {
			keys = append(keys, k+"="+e.Resources[k])
		}
		sort.Strings(keys)
		if len(keys) > 0 {
			parts = append(parts, strings.Join(keys, " "))
		}
	}
	for _, s := range []string{e.Reason, e.Message} {
		if s != "" {
			parts = append(parts, s)
		}
	}
	if e.Actor != "" {
		parts = append(parts, "by "+e.Actor)
	}
	return strings.Join(parts, "; ")
}

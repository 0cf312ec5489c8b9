package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/meteor-edge/meteor/cluster"
	"github.com/meteor-edge/meteor/cluster/api"
	"github.com/meteor-edge/meteor/fsm/intent"
)

func newApplyCmd(g *globals) *cobra.Command {
	var files []string
	var ifMatch int64
	var wait bool
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:   "apply -f FILE [--wait [--timeout D]]",
		Short: "Create or replace intents from YAML or JSON documents",
		Long: `Create or replace intents. FILE may hold several YAML documents separated by
'---', may be a directory (every .yaml, .yml and .json file in it), or '-' for
standard input. Every document is validated before anything is sent. Prints the
new revision of each intent, or that it is unchanged: a document equal to the
intent's current one makes no revision. 'meteor plan -f FILE' shows first what
an apply would change.

--wait then follows each intent's revision, printing a line whenever its
progress changes, until every device it targets has converged on it (exit
0). It fails (exit 1, naming devices that did not converge) once the
revision cannot converge without an operator: its rollout paused, aborted
or reverted, a newer revision replaced it, or every device has settled with
some failed; and after --timeout, saying what was still missing.`,
		Example: `  meteor apply -f store-net.yaml
  meteor apply -f intents/ --wait --timeout 10m`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if timeout != 0 && !wait {
				return &usageError{errors.New("--timeout bounds --wait, which is not given")}
			}
			docs, err := readIntentFiles(files)
			if err != nil {
				return err
			}
			if ifMatch >= 0 && len(docs) != 1 {
				return fmt.Errorf("--if-match applies to a single intent, but %d documents were given", len(docs))
			}
			c := g.client()
			var results []api.WriteResponse
			for _, in := range docs {
				body, err := json.Marshal(in)
				if err != nil {
					return err
				}
				var im *uint64
				if ifMatch >= 0 {
					v := uint64(ifMatch)
					im = &v
				}
				res, err := c.PutIntent(cmd.Context(), in.Name, body, im)
				if err != nil {
					return fmt.Errorf("apply intent %q: %w", in.Name, err)
				}
				results = append(results, *res)
				if !g.structured() {
					printApplied(cmd.OutOrStdout(), res)
				}
			}
			if g.structured() {
				if err := g.print(cmd.OutOrStdout(), results); err != nil {
					return err
				}
			}
			if !wait {
				return nil
			}
			ctx := cmd.Context()
			if timeout > 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, timeout)
				defer cancel()
			}
			progress := cmd.OutOrStdout()
			if g.structured() {
				progress = cmd.ErrOrStderr()
			}
			for _, res := range results {
				if err := waitApplied(ctx, c, res.Name, res.Revision, api.ReadOptions{}, progress, api.WatchEvery); err != nil {
					return err
				}
			}
			return nil
		},
	}
	cmd.Flags().StringArrayVarP(&files, "filename", "f", nil, "intent file, directory, or - for stdin (repeatable)")
	cmd.Flags().Int64Var(&ifMatch, "if-match", -1, "apply only if the intent's current revision is this (0: only if it does not exist)")
	cmd.Flags().BoolVar(&wait, "wait", false, "then wait until every targeted device has converged on each new revision (non-zero exit if it fails or times out)")
	cmd.Flags().DurationVar(&timeout, "timeout", 0, "with --wait, give up after this long (0: no limit)")
	return cmd
}

// printApplied says what a put did: a new revision, or none for an
// unchanged document.
func printApplied(w io.Writer, res *api.WriteResponse) {
	if res.Unchanged {
		fmt.Fprintf(w, "intent %s unchanged (revision %d)\n", res.Name, res.Revision)
		return
	}
	fmt.Fprintf(w, "intent/%s applied: revision %d\n", res.Name, res.Revision)
}

// readIntents parses the documents in a file, a directory or stdin.
func readIntents(path string) ([]*intent.Intent, error) {
	if path == "-" {
		data, err := io.ReadAll(os.Stdin)
		if err != nil {
			return nil, fmt.Errorf("read stdin: %w", err)
		}
		return parseDocs("stdin", data)
	}
	fi, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	if !fi.IsDir() {
		data, err := os.ReadFile(path)
		if err != nil {
			return nil, err
		}
		return parseDocs(path, data)
	}
	entries, err := os.ReadDir(path)
	if err != nil {
		return nil, err
	}
	var out []*intent.Intent
	for _, e := range entries {
		switch filepath.Ext(e.Name()) {
		case ".yaml", ".yml", ".json":
		default:
			continue
		}
		d, err := readIntents(filepath.Join(path, e.Name()))
		if err != nil {
			return nil, err
		}
		out = append(out, d...)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s: no .yaml, .yml or .json files", path)
	}
	return out, nil
}

func parseDocs(name string, data []byte) ([]*intent.Intent, error) {
	docs, err := intent.ParseAll(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	return docs, nil
}

func newGetCmd(g *globals) *cobra.Command {
	var stale bool
	cmd := &cobra.Command{Use: "get", Short: "Show intents, devices, reconcile classes and maintenance windows"}
	cmd.PersistentFlags().BoolVar(&stale, "stale", false, "read from the contacted server's replica without confirming leadership (faster, may lag)")

	list := &cobra.Command{
		Use: "intents", Short: "List intents", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			res, err := g.client().ListIntents(cmd.Context(), api.ReadOptions{Stale: stale})
			if err != nil {
				return err
			}
			if g.structured() {
				return g.print(cmd.OutOrStdout(), res)
			}
			tw := table(cmd.OutOrStdout())
			fmt.Fprintln(tw, "NAME\tREVISION\tRESOURCES\tSELECTOR\tUPDATED")
			for _, in := range res.Intents {
				fmt.Fprintf(tw, "%s\t%d\t%d\t%s\t%s\n", in.Name, in.Revision, in.Resources, labels(in.Selector), ago(in.UpdatedAt))
			}
			tw.Flush()
			fmt.Fprintf(cmd.OutOrStdout(), "cluster revision %d\n", res.Revision)
			return nil
		},
	}
	var rev uint64
	one := &cobra.Command{
		Use: "intent NAME", Short: "Show one intent, now or at a revision", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			res, err := g.client().GetIntent(cmd.Context(), args[0], api.ReadOptions{Stale: stale, Revision: rev})
			if err != nil {
				return err
			}
			if g.structured() {
				return g.print(cmd.OutOrStdout(), res)
			}
			w := cmd.OutOrStdout()
			fmt.Fprintf(w, "Name:      %s\nRevision:  %d\nUpdated:   %s (%s)\nSelector:  %s\n", res.Name, res.Revision, res.UpdatedAt.Format(time.RFC3339), ago(res.UpdatedAt), labels(res.Intent.Selector))
			fmt.Fprintln(w, "Resources:")
			tw := table(w)
			fmt.Fprintln(tw, "  ID\tTYPE\tCLASS\tDRIFT\tREQUIRES")
			for _, r := range res.Intent.Resources {
				fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s\n", r.ID, r.Type, r.EffectiveClass(), r.EffectiveDrift(), strings.Join(r.Requires, ","))
			}
			tw.Flush()
			if len(res.Intent.Rollout) > 0 {
				b, _ := json.Marshal(res.Intent.Rollout)
				fmt.Fprintf(w, "Rollout:   %s\n", b)
			}
			return nil
		},
	}
	one.Flags().Uint64Var(&rev, "revision", 0, "show the intent as it was at this cluster revision")

	var dq api.DeviceQuery
	var connected, converged, retried string
	devices := &cobra.Command{
		Use:   "devices [--intent NAME] [--status S] [--resource KEY] [--group-by G] ...",
		Short: "List devices, or those a query selects, or count them by a value",
		Long: `List the devices the cluster knows, with their status and revisions.

The flags select devices; each one given is a filter a listed device
passes. With --intent the list shows each device's state on that intent
(the revision released to it, converged or what is worst among its
resources), with --resource that resource's applied digest and state.
--group-by counts the selected devices per value instead, naming a few of
each.

The questions an operator asks after a change, one command each:

  # which devices missed the update, and why
  meteor get devices --intent change-1-network-policy --intent-state not-converged
  # which devices needed more than one attempt and converged in the end
  meteor get devices --intent change-1-network-policy --retried --intent-state converged
  # which devices serve the old certificate, which the new one
  meteor get devices --resource change-3-cert-rotation/pos-tls --group-by applied-digest

--sort traffic lists the devices that exchanged the most bytes with the
servers today (UTC, as their agents count them) first, with a TRAFFIC
column; --limit N keeps the top N:

  meteor get devices --sort traffic --limit 10`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			var err error
			if dq.Connected, err = optBool("--connected", connected); err != nil {
				return err
			}
			if dq.Converged, err = optBool("--converged", converged); err != nil {
				return err
			}
			if dq.Retried, err = optBool("--retried", retried); err != nil {
				return err
			}
			res, err := g.client().QueryDevices(cmd.Context(), dq, api.ReadOptions{Stale: stale})
			if err != nil {
				return err
			}
			if g.structured() {
				return g.print(cmd.OutOrStdout(), res)
			}
			printDeviceList(cmd.OutOrStdout(), res)
			return nil
		},
	}
	df := devices.Flags()
	df.StringVar(&dq.Intent, "intent", "", "only devices the intent's current revision targets; shows each one's state on it")
	df.StringVar(&dq.IntentState, "intent-state", "", "with --intent: converged, not-converged, not-released, failed, drifted, progressing or pending (comma-separated)")
	df.StringVar(&dq.Resource, "resource", "", "only devices that hold or are meant to hold this resource key (intent/id); shows its state")
	df.StringVar(&dq.AppliedDigest, "applied-digest", "", "with --resource: a prefix of the applied digest (at least 4 hex digits), or none")
	df.StringVar(&dq.Status, "status", "", "device statuses, comma-separated (pending, progressing, converged, drifted, overridden, blocked, failed, unreachable, stuck)")
	df.StringVar(&dq.Reason, "reason", "", "a word or phrase of the status reason")
	df.StringVar(&dq.Selector, "selector", "", "labels the device is selected by, k=v,k2=v2")
	df.StringVar(&dq.Region, "region", "", "the region label")
	df.StringVar(&dq.Server, "server", "", "the server the device is (or was last) connected to")
	df.StringVar(&dq.Owner, "owner", "", "the server that owns the device")
	df.StringVar(&connected, "connected", "", "only devices with a session now (--connected=false: without one)")
	df.StringVar(&converged, "converged", "", "only devices with every resource converged (--converged=false: the others)")
	df.StringVar(&retried, "retried", "", "only devices where a resource (of --intent or --resource, if given) took more than one attempt (--retried=false: the others)")
	df.Lookup("retried").NoOptDefVal = "true"
	df.Lookup("connected").NoOptDefVal = "true"
	df.Lookup("converged").NoOptDefVal = "true"
	df.Uint64Var(&dq.AckedBelow, "acked-below", 0, "only devices whose acknowledged revision is below this one")
	df.IntVar(&dq.Limit, "limit", 0, "list at most this many (the answer says where the next page starts)")
	df.StringVar(&dq.After, "after", "", "list devices after this ID (the next page)")
	df.StringVar(&dq.GroupBy, "group-by", "", "count the devices per status, intent-state, applied-digest, acked-revision, desired-revision, region, server, owner or connected")
	df.StringVar(&dq.Sort, "sort", "", "traffic: the devices that exchanged the most bytes today first (with --limit, the top ones); default: by ID")
	var timeline bool
	device := &cobra.Command{
		Use: "device ID", Short: "Show a device: each resource's intended, applied and effective state", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c := g.client()
			d, err := c.GetDevice(cmd.Context(), args[0], api.ReadOptions{Stale: stale})
			if err != nil {
				return err
			}
			var tl *api.Timeline
			if timeline {
				if tl, err = c.Timeline(cmd.Context(), args[0], api.ReadOptions{Stale: stale}); err != nil {
					return err
				}
			}
			if g.structured() {
				if tl != nil {
					return g.print(cmd.OutOrStdout(), deviceDescription{Device: d, Timeline: tl})
				}
				return g.print(cmd.OutOrStdout(), d)
			}
			printDevice(cmd.OutOrStdout(), d, false)
			if tl != nil {
				fmt.Fprintln(cmd.OutOrStdout())
				printTimeline(cmd.OutOrStdout(), tl)
			}
			return nil
		},
	}
	device.Flags().BoolVar(&timeline, "timeline", false, "also show the device's status transitions")
	ownership := &cobra.Command{
		Use: "ownership", Short: "Show how devices are spread over the servers that own them", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			res, err := g.client().Ownership(cmd.Context())
			if err != nil {
				return err
			}
			if g.structured() {
				return g.print(cmd.OutOrStdout(), res)
			}
			tw := table(cmd.OutOrStdout())
			fmt.Fprintln(tw, "SERVER\tREGION\tDEVICES")
			for _, s := range res.Servers {
				fmt.Fprintf(tw, "%s\t%s\t%d\n", s.ID, s.Region, s.Devices)
			}
			tw.Flush()
			fmt.Fprint(cmd.OutOrStdout(), nDevices(res.Devices))
			if res.Unowned > 0 {
				fmt.Fprintf(cmd.OutOrStdout(), ", %d without an alive server", res.Unowned)
			}
			fmt.Fprintln(cmd.OutOrStdout())
			return nil
		},
	}
	progress := &cobra.Command{
		Use:   "progress NAME",
		Short: "Show where the devices an intent's current revision targets are with it, and how they got there",
		Long: `Show the progress of an intent's current revision (GET
/v1/intents/{name}/progress): how many devices it targets, how many it is
released to, acknowledged, converged on it, failed, drifted or unreachable,
then the targeted devices' statuses over time since the revision was
written, one row per committed transition (at most 120).

It covers the current revision only: the devices of an earlier revision
are counted by where they are with the current one. 'meteor rollout
history NAME' shows how earlier revisions' rollouts ended.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			res, err := g.client().IntentProgress(cmd.Context(), args[0], api.ReadOptions{Stale: stale})
			if err != nil {
				return err
			}
			if g.structured() {
				return g.print(cmd.OutOrStdout(), res)
			}
			printProgress(cmd.OutOrStdout(), res)
			return nil
		},
	}
	classes := &cobra.Command{
		Use: "classes", Short: "List the reconcile classes in effect", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			res, err := g.client().Classes(cmd.Context(), api.ReadOptions{Stale: stale})
			if err != nil {
				return err
			}
			if g.structured() {
				return g.print(cmd.OutOrStdout(), res)
			}
			return printClasses(cmd.OutOrStdout(), res)
		},
	}
	windows := &cobra.Command{
		Use: "windows", Short: "List the maintenance windows", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			res, err := g.client().MaintenanceWindows(cmd.Context(), api.ReadOptions{Stale: stale})
			if err != nil {
				return err
			}
			if g.structured() {
				return g.print(cmd.OutOrStdout(), res)
			}
			return printWindows(cmd.OutOrStdout(), res)
		},
	}
	cmd.AddCommand(list, one, devices, device, progress, ownership, classes, windows)
	return cmd
}

// printProgress prints an intent revision's counts, then its devices'
// statuses over time.
func printProgress(w io.Writer, p *api.IntentProgress) {
	fmt.Fprintf(w, "Intent:        %s revision %d, the current one (progress covers the current revision only)\n", p.Name, p.Revision)
	fmt.Fprintf(w, "Written:       %s (%s)\n", p.UpdatedAt.Local().Format(time.RFC3339), ago(p.UpdatedAt))
	fmt.Fprintf(w, "Targeted:      %s\n", nDevices(p.Targeted))
	share := func(n int) string { return fmt.Sprintf("%d  (%s)", n, percent(n, p.Targeted)) }
	fmt.Fprintf(w, "Released:      %s\n", share(p.Released))
	fmt.Fprintf(w, "Acknowledged:  %s\n", share(p.Acknowledged))
	fmt.Fprintf(w, "Converged:     %s  %s\n", share(p.Converged), bar(p.Converged, p.Targeted, 20))
	fmt.Fprintf(w, "Failed:        %d\nDrifted:       %d\nUnreachable:   %d\n", p.Failed, p.Drifted, p.Unreachable)
	if len(p.Series) == 0 {
		return
	}
	var cols []string
	for _, s := range statusOrder {
		for _, pt := range p.Series {
			if pt.Counts[s] > 0 {
				cols = append(cols, s)
				break
			}
		}
	}
	fmt.Fprintln(w, "Device statuses since the revision was written:")
	tw := table(w)
	fmt.Fprintf(tw, "  TIME\t%s\n", strings.ToUpper(strings.Join(cols, "\t")))
	for _, pt := range p.Series {
		row := make([]string, len(cols))
		for i, s := range cols {
			row[i] = strconv.Itoa(pt.Counts[s])
		}
		fmt.Fprintf(tw, "  %s\t%s\n", pt.Time.Local().Format("15:04:05.000"), strings.Join(row, "\t"))
	}
	tw.Flush()
}

// optBool parses an optional true/false flag ("" is unset).
func optBool(flag, v string) (*bool, error) {
	if v == "" {
		return nil, nil
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		return nil, fmt.Errorf("%s %q: want true or false", flag, v)
	}
	return &b, nil
}

// printDeviceList prints a device query's answer: its groups, or its
// devices with their state on the intent or resource it named.
func printDeviceList(w io.Writer, res *api.DeviceList) {
	if res.GroupBy != "" {
		tw := table(w)
		fmt.Fprintf(tw, "%s\tDEVICES\tSAMPLE\n", strings.ToUpper(res.GroupBy))
		for _, g := range res.Groups {
			sample := strings.Join(g.Sample, ", ")
			if more := g.Count - len(g.Sample); more > 0 {
				sample += fmt.Sprintf(", and %d more", more)
			}
			fmt.Fprintf(tw, "%s\t%d\t%s\n", g.Value, g.Count, sample)
		}
		tw.Flush()
		fmt.Fprintf(w, "%s in %s\n", nDevices(res.Matched), plural(uint64(len(res.Groups)), "group", "groups"))
		return
	}
	var withIntent, withResource bool
	for _, d := range res.Devices {
		withIntent = withIntent || d.Intent != nil
		withResource = withResource || d.Resource != nil
	}
	tw := table(w)
	byTraffic := res.Sort == "traffic"
	head := "ID\tSTATUS\tCONNECTED\tSERVER\tOWNER\tDESIRED\tACKED"
	if byTraffic {
		head = "ID\tTRAFFIC TODAY\tSTATUS\tCONNECTED\tSERVER\tOWNER\tDESIRED\tACKED"
	}
	if withIntent {
		head += "\tINTENT REV\tON INTENT"
	}
	if withResource {
		head += "\tRESOURCE\tAPPLIED"
	}
	fmt.Fprintln(tw, head+"\tRESOURCES\tLAST SEEN\tREASON")
	for _, d := range res.Devices {
		fmt.Fprint(tw, d.ID)
		if byTraffic {
			fmt.Fprintf(tw, "\t%s", trafficCell(d.TrafficToday))
		}
		fmt.Fprintf(tw, "\t%s\t%v\t%s\t%s\t%d\t%d", d.Status, d.Connected, orDash(d.Server), orDash(d.Owner), d.DesiredRevision, d.AckedRevision)
		if withIntent {
			if in := d.Intent; in != nil {
				fmt.Fprintf(tw, "\t%d\t%s (%d/%d)", in.Revision, in.State, in.Converged, in.Resources)
			} else {
				fmt.Fprint(tw, "\t-\t-")
			}
		}
		if withResource {
			if r := d.Resource; r != nil {
				fmt.Fprintf(tw, "\t%s\t%s", r.State, orDash(shortDigest(r.AppliedDigest)))
			} else {
				fmt.Fprint(tw, "\t-\t-")
			}
		}
		fmt.Fprintf(tw, "\t%s\t%s\t%s\n", counts(d.Resources, d.Counts), ago(d.LastSeen), orDash(d.StatusReason))
	}
	tw.Flush()
	if res.Next != "" {
		fmt.Fprintf(w, "%d of %s shown; the next page: --after %s\n", len(res.Devices), nDevices(res.Matched), res.Next)
	} else if byTraffic && res.Matched != len(res.Devices) {
		fmt.Fprintf(w, "the %d heaviest of %s\n", len(res.Devices), nDevices(res.Matched))
	} else if res.Matched != len(res.Devices) || len(res.Devices) == 0 {
		fmt.Fprintf(w, "%s\n", nDevices(res.Matched))
	}
}

// shortDigest is a digest's first 12 hex digits.
func shortDigest(d string) string {
	if len(d) > 12 {
		return d[:12]
	}
	return d
}

// statusMeanings say in plain words what each device status means.
var statusMeanings = map[string]string{
	"pending":          "its agent has not acknowledged its desired revision yet",
	"progressing":      "its agent acknowledged its desired state and is applying it",
	"converged":        "every resource is applied as intended and its probe agrees",
	"drifted":          "a probe sees something other than what was applied",
	"overridden":       "a local change that the resource's drift policy tolerates",
	"blocked":          "a precondition or a workload lock holds a step back",
	"failed":           "the last apply failed; the agent retries with backoff unless the error is terminal",
	"unreachable":      "no contact for longer than its class allows: a comms gap, not an apply failure",
	"stuck":            "connected, but no progress past the progress deadline",
	"fighting":         "something on the device keeps undoing a resource; the agent backs its corrections off",
	"deadline-at-risk": "a resource's rotation deadline will be missed at the device's current rate (its link history, its class's backoff)",
	"deadline-missed":  "a resource's rotation deadline passed and it is not applied",
}

// printDevice prints a device; perServer adds its traffic per server.
func printDevice(w io.Writer, d *api.Device, perServer bool) {
	conn := "no"
	if d.Connected {
		conn = "yes, to " + d.Server
	} else if d.Server != "" {
		conn = "no (last on " + d.Server + ")"
	}
	if d.SessionID != "" {
		conn += ", session " + d.SessionID
	}
	status := d.Status
	if m := statusMeanings[d.Status]; m != "" {
		status += " - " + m
	}
	if d.StatusSince != nil {
		status += " (since " + ago(*d.StatusSince) + ")"
	}
	if d.StatusReason != "" {
		status += "\n            why: " + d.StatusReason
	}
	source := "reported by the device, trusted by this cluster"
	if d.LabelsControlled {
		source = "control plane"
	} else if len(d.Labels) == 0 {
		source = "the control plane has not labelled it: it receives only intents for all devices"
	}
	fmt.Fprintf(w, "Device:     %s\nLabels:     %s  (%s)\nReported:   %s  (the device's own word)\nStatus:     %s\nOwner:      %s\nConnected:  %s\nLast seen:  %s\nRevisions:  desired %d, acknowledged %d\nConverged:  %v  (%s)\n",
		d.ID, deviceLabels(d.Labels), source, deviceLabels(d.ReportedLabels), status, orDash(d.Owner), conn, ago(d.LastSeen), d.DesiredRevision, d.AckedRevision, d.Converged, counts(d.Resources, d.Counts))
	if d.NextRetry != nil {
		fmt.Fprintf(w, "Next retry: %s\n", d.NextRetry.Local().Format(time.RFC3339))
	}
	if d.BlockedReason != "" {
		fmt.Fprintf(w, "Blocked:    %s\n", d.BlockedReason)
	}
	fmt.Fprintf(w, "Traffic:    %s\n", trafficSummary(d.Traffic))
	if perServer {
		printTrafficServers(w, d.Traffic)
	}
	if l := linkSummary(d.Link); l != "" {
		fmt.Fprintf(w, "Link:       %s\n", l)
	}
	for i, l := range d.Locks {
		label := "Locks:      "
		if i > 0 {
			label = "            "
		}
		text := fmt.Sprintf("%s held by %s since %s (%s)", l.Name, orDash(l.Holder), l.Since.Local().Format(time.RFC3339), ago(l.Since))
		if l.MaxHold != "" {
			text += ", at most " + shortDur(l.MaxHold)
		}
		if l.Stale {
			text += ", STALE: meteor device unlock " + d.ID + " " + l.Name + " --reason TEXT"
		}
		fmt.Fprintln(w, label+text+" ["+l.Source+"]")
	}
	if r := d.Recovery; r != nil {
		fmt.Fprintf(w, "Recovered:  %s, %s\n", ago(r.At), r.Story)
	}
	for _, u := range d.Unlocks {
		outcome := "not answered yet"
		if u.Outcome != "" {
			outcome = u.Outcome
		}
		fmt.Fprintf(w, "Unlock:     %s ordered by %s %s (%s): %s\n", u.Lock, u.Actor, ago(u.Time), u.Reason, outcome)
	}
	fmt.Fprintln(w, "Resources:")
	tw := table(w)
	fmt.Fprintln(tw, "  KEY\tSTATE\tSTATUS\tINTENDED\tAPPLIED\tEFFECTIVE\tATTEMPTS\tDETAIL")
	for _, r := range d.States {
		detail := r.Detail
		if r.LastError != "" {
			detail = "error: " + r.LastError
		}
		if h := holdText(r.Hold); h != "" && r.LastError == "" {
			detail = h // what the agent says too, with the times
		}
		if r.Status == "deadline-at-risk" || r.Status == "deadline-missed" {
			detail = r.Reason
		} else if rot := r.Rotation; rot != nil {
			detail += " (rotation window " + orDash(rot.NotBefore) + " to " + orDash(rot.Deadline) + ")"
		}
		if r.Corrections > 0 {
			detail += fmt.Sprintf(" (drift corrected %s since the agent started)", plural(uint64(r.Corrections), "time", "times"))
		}
		attempts := "-"
		if r.Attempts > 0 {
			attempts = strconv.FormatUint(uint64(r.Attempts), 10)
		}
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", r.Key, r.State, orDash(r.Status), short(r.IntendedDigest, r.IntendedRevision), short(r.AppliedDigest, r.AppliedRevision), orDash(r.Effective), attempts, orDash(detail))
	}
	tw.Flush()
}

// linkSummary says what a device's link history holds; "" for none.
func linkSummary(l *api.LinkHistory) string {
	if l == nil {
		return ""
	}
	var out string
	if len(l.Gaps) > 0 {
		var longest time.Duration
		for _, g := range l.Gaps {
			longest = max(longest, g.To.Sub(g.From))
		}
		out = fmt.Sprintf("%s without a session recently, the longest %s", plural(uint64(len(l.Gaps)), "gap", "gaps"), longest.Round(time.Second))
	}
	if l.OfflineSince != nil {
		if out != "" {
			out += "; "
		}
		out += "offline since " + l.OfflineSince.Local().Format(time.RFC3339) + " (" + ago(*l.OfflineSince) + ")"
	}
	return out
}

// holdText says what holds a resource back; "" for nothing.
func holdText(h *api.Hold) string {
	if h == nil {
		return ""
	}
	at := func(t *time.Time) string {
		if t == nil {
			return "?"
		}
		return t.Local().Format(time.RFC3339)
	}
	switch h.Kind {
	case "override":
		return fmt.Sprintf("overridden on the device by %s until %s: %s", orDash(h.Holder), at(h.Until), h.Note)
	case "fighting":
		return fmt.Sprintf("fighting: corrected %s since %s, next correction at %s", plural(uint64(h.Count), "time", "times"), at(h.Since), at(h.Until))
	case "window":
		return fmt.Sprintf("waits for maintenance window %s, opening %s (%s)", h.Holder, at(h.Until), orDash(h.Note))
	case "lock":
		return fmt.Sprintf("waits for lock %s held by %s since %s (stale at %s)", h.Note, orDash(h.Holder), at(h.Since), at(h.Until))
	case "precondition":
		return "waits for " + h.Note
	case "schedule":
		return "rotation window opens " + at(h.Until)
	}
	return h.Kind
}

// describeTimeline is how many of its latest transitions 'meteor describe
// device' shows.
const describeTimeline = 10

func newDescribeCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{Use: "describe", Short: "Explain one object: where it stands and why"}
	var stale bool
	cmd.PersistentFlags().BoolVar(&stale, "stale", false, "read from the contacted server's replica without confirming leadership (faster, may lag)")
	device := &cobra.Command{
		Use:   "device ID",
		Short: "Explain a device: its labels and where they come from, its connection, status and why, each resource's three states, its latest transitions",
		Long: fmt.Sprintf(`Explain a device, from GET /v1/devices/{id} and its timeline: the labels it
is selected by and where they come from (the control plane, or what it
reports), the labels it reports, its connection and session, its status in
plain words with the reason its owner gave, each resource's intended,
applied and effective state side by side (as 'meteor get devices' judges
them), and its latest %d status transitions ('meteor get device ID
--timeline' shows them all).`, describeTimeline),
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c := g.client()
			d, err := c.GetDevice(cmd.Context(), args[0], api.ReadOptions{Stale: stale})
			if err != nil {
				return err
			}
			tl, err := c.Timeline(cmd.Context(), args[0], api.ReadOptions{Stale: stale})
			if err != nil {
				return err
			}
			if g.structured() {
				return g.print(cmd.OutOrStdout(), deviceDescription{Device: d, Timeline: tl})
			}
			printDevice(cmd.OutOrStdout(), d, true)
			fmt.Fprintln(cmd.OutOrStdout())
			recent := *tl
			if n := len(recent.Entries); n > describeTimeline {
				recent.Entries = recent.Entries[n-describeTimeline:]
				fmt.Fprintf(cmd.OutOrStdout(), "The latest %d of %d transitions:\n", describeTimeline, n)
			}
			printTimeline(cmd.OutOrStdout(), &recent)
			return nil
		},
	}
	cmd.AddCommand(device)
	return cmd
}

// deviceDescription is what 'meteor describe device -o json' prints, and
// 'meteor get device --timeline -o json'.
type deviceDescription struct {
	Device   *api.Device   `json:"device"`
	Timeline *api.Timeline `json:"timeline"`
}

func counts(total int, c map[string]int) string {
	if len(c) == 0 {
		return fmt.Sprintf("%d", total)
	}
	keys := make([]string, 0, len(c))
	for k := range c {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%d %s", c[k], k)
	}
	return strings.Join(parts, ", ")
}

func short(digest string, rev uint64) string {
	if digest == "" {
		return "-"
	}
	if len(digest) > 8 {
		digest = digest[:8]
	}
	if rev == 0 {
		return digest
	}
	return fmt.Sprintf("%s@%d", digest, rev)
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func newDeleteCmd(g *globals) *cobra.Command {
	var ifMatch int64
	cmd := &cobra.Command{Use: "delete", Short: "Delete intents"}
	one := &cobra.Command{
		Use: "intent NAME", Short: "Delete an intent (its history is kept)", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			var im *uint64
			if ifMatch >= 0 {
				v := uint64(ifMatch)
				im = &v
			}
			res, err := g.client().DeleteIntent(cmd.Context(), args[0], im)
			if err != nil {
				return err
			}
			if g.structured() {
				return g.print(cmd.OutOrStdout(), res)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "intent/%s deleted: revision %d\n", res.Name, res.Revision)
			return nil
		},
	}
	one.Flags().Int64Var(&ifMatch, "if-match", -1, "delete only if the intent's current revision is this")
	cmd.AddCommand(one)
	return cmd
}

func newMembersCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use: "members", Short: "List the cluster's servers", Args: cobra.NoArgs,
		Long: `List the cluster's servers as the server at --addr sees them. The leader is
the one its Raft follows, shown only if the Raft configuration has it as a
voter; a server that says it leads but is not that one shows as "leader
(claimed)".

STATE compares each server's replicated state with the leader's at the same
Raft index (a checkpoint every 16 indexes), never at different ones:
same@N, DIVERGED@N (NOTE gives both hashes: restore that server from the
leader's state, docs/operations.md), or unchecked (NOTE says why: no
checkpoint in common yet, or the server did not answer).`,
		RunE: func(cmd *cobra.Command, args []string) error {
			res, err := g.client().Members(cmd.Context())
			if err != nil {
				return err
			}
			if g.structured() {
				return g.print(cmd.OutOrStdout(), res)
			}
			printMembers(cmd.OutOrStdout(), res)
			return nil
		},
	}
	cmd.AddCommand(&cobra.Command{
		Use: "leave", Short: "Make the server at --addr leave the cluster for good and shut down", Args: cobra.NoArgs,
		Long: `Make the server at --addr leave the cluster: it hands over leadership if it
leads, is removed from the Raft configuration, leaves gossip and shuts down.
Use it to shrink a cluster; a server that only restarts should not leave.`,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := g.client().Leave(cmd.Context()); err != nil {
				return err
			}
			return g.acted(cmd.OutOrStdout(), "leave", g.addr, fmt.Sprintf("server at %s is leaving; check with 'meteor members'", g.addr))
		},
	})
	cmd.AddCommand(newRemovePeerCmd(g, "remove"))
	return cmd
}

func printMembers(w io.Writer, res *api.Members) {
	tw := table(w)
	fmt.Fprintln(tw, "ID\tREGION\tROLE\tSUFFRAGE\tGOSSIP\tAPPLIED\tSTATE\tRAFT\tHTTP\tNOTE")
	for _, m := range res.Members {
		role := m.RaftRole
		switch {
		case m.Leader:
			role = "leader"
		case role == "leader":
			// Not the leader this server's Raft follows.
			role = "leader (claimed)"
		}
		state, notes := "-", []string{}
		if c := m.StateCheck; c != nil {
			state = c.Result
			switch c.Result {
			case api.StateSame:
				state = fmt.Sprintf("same@%d", c.Index)
			case api.StateDiverged:
				state = fmt.Sprintf("DIVERGED@%d", c.Index)
				notes = append(notes, fmt.Sprintf("state hash %s at index %d, the leader's %s", c.Hash, c.Index, c.LeaderHash))
			default:
				notes = append(notes, c.Note)
			}
		}
		if m.Error != "" {
			notes = append(notes, m.Error)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\t%s\t%s\t%s\t%s\n", m.ID, m.Region, role, m.Suffrage, m.GossipState, m.AppliedIndex, state, m.RaftAddr, m.HTTPAddr, strings.Join(notes, "; "))
	}
	tw.Flush()
}

func newHealthCmd(g *globals) *cobra.Command {
	var live bool
	cmd := &cobra.Command{
		Use: "health", Short: "Show the contacted server's health", Args: cobra.NoArgs,
		Long: `Show the contacted server's health (GET /v1/health, which needs a token where
the ACL is on): its Raft state, leader, applied index and revision, and any
server whose state diverged. The exit status is 0 only when it is healthy.

--live asks only the liveness probe (GET /v1/healthz, open without a token):
"ok" and exit status 0 when the server is a member and knows a leader: the
health check of the containers of deploy/compose.yaml (docs/deploy.md).`,
		RunE: func(cmd *cobra.Command, args []string) error {
			if live {
				return liveness(cmd.Context(), cmd.OutOrStdout(), g)
			}
			c := g.client()
			c.RetryNoLeader = 0
			res, err := c.Health(cmd.Context())
			if res != nil && res.Node != "" {
				if g.structured() {
					if perr := g.print(cmd.OutOrStdout(), res); perr != nil {
						return perr
					}
				} else {
					fmt.Fprintf(cmd.OutOrStdout(), "node %s (%s): %s, leader %q, applied %d, revision %d, healthy %v %s\n",
						res.Node, res.Region, res.RaftState, res.Leader, res.AppliedIndex, res.Revision, res.Healthy, res.Message)
					for _, d := range res.Diverged {
						fmt.Fprintf(cmd.OutOrStdout(), "  %s diverged: state hash %s at index %d, the leader's %s\n", d.Server, d.Hash, d.Index, d.LeaderHash)
					}
				}
			}
			return err
		},
	}
	cmd.Flags().BoolVar(&live, "live", false, "ask only the liveness probe (GET /v1/healthz, no token needed): ok when the server is a member and knows a leader")
	return cmd
}

// liveness asks the server at --addr its liveness probe, GET /v1/healthz,
// and prints "ok", or returns why not.
func liveness(ctx context.Context, out io.Writer, g *globals) error {
	hc := g.hc
	if hc == nil {
		hc = &http.Client{Timeout: 30 * time.Second}
	}
	u := api.BaseURL(g.addr) + "/v1/healthz"
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return fmt.Errorf("GET %s: %w", u, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s %s (not a member of a cluster with a leader)", u, resp.Status, strings.TrimSpace(string(body)))
	}
	fmt.Fprintln(out, "ok")
	return nil
}

// versionInfo is what 'meteor version -o json' prints.
type versionInfo struct {
	Version string `json:"version"`
}

func newVersionCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use: "version", Short: "Print the version", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if g.structured() {
				return g.print(cmd.OutOrStdout(), versionInfo{Version: cluster.Version})
			}
			fmt.Fprintln(cmd.OutOrStdout(), "meteor", cluster.Version)
			return nil
		},
	}
}

func table(w io.Writer) *tabwriter.Writer { return tabwriter.NewWriter(w, 0, 4, 2, ' ', 0) }

// deviceLabels prints a device's labels, "none" if it has none.
func deviceLabels(m map[string]string) string {
	if len(m) == 0 {
		return "none"
	}
	return labels(m)
}

func labels(m map[string]string) string {
	if len(m) == 0 {
		return "(all devices)"
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for i, k := range keys {
		keys[i] = k + "=" + m[k]
	}
	return strings.Join(keys, ",")
}

func ago(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	d := time.Since(t).Round(time.Second)
	if d < 0 {
		d = 0
	}
	return d.String() + " ago"
}

// readIntentFiles reads the documents of every -f FILE, in order.
func readIntentFiles(files []string) ([]*intent.Intent, error) {
	if len(files) == 0 {
		return nil, fmt.Errorf("no documents: pass -f FILE")
	}
	var docs []*intent.Intent
	for _, f := range files {
		d, err := readIntents(f)
		if err != nil {
			return nil, err
		}
		docs = append(docs, d...)
	}
	return docs, nil
}

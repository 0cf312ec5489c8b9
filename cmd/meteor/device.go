package main

import (
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/meteor-edge/meteor/cluster/api"
)

func newDeviceCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "device",
		Short: "Label, revoke, unrevoke and unlock devices",
		Long: `A device's labels, which decide the intents (and secrets) it receives, come
from the control plane: its enrollment or 'meteor device label'. The labels
its agent reports (meteor agent --labels) are facts, shown as such; they
select intents only on a development cluster (meteor dev, server --dev) or
one started with --trust-reported-labels.`,
	}
	var stale bool
	show := &cobra.Command{
		Use: "labels ID", Short: "Show a device's control-plane labels, the labels it reports, and those it is selected by",
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			res, err := g.client().DeviceLabels(cmd.Context(), args[0], api.ReadOptions{Stale: stale})
			return printDeviceLabels(cmd.OutOrStdout(), g, res, err)
		},
	}
	show.Flags().BoolVar(&stale, "stale", false, "read the server's replica without a round trip to the leader")

	var remove []string
	var replace bool
	label := &cobra.Command{
		Use:   "label ID [KEY=VALUE ...] [--remove KEY] [--replace]",
		Short: "Set a device's control-plane labels (needs an operator token)",
		Long: `Set labels of a device: KEY=VALUE sets a label, --remove KEY removes one,
--replace starts from no labels instead of the device's current control-plane
labels. From its first labelling on, the device is selected by these labels
only; the labels it reports no longer count. Its sessions get the desired
state of its new labels within moments. The change is in the audit log.`,
		Example: `  meteor device label store-42-gw role=pos-gateway site=store-42
  meteor device label store-42-gw --remove role
  meteor device label store-42-gw region=eu --replace`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			req := api.SetDeviceLabelsRequest{Labels: map[string]string{}, Remove: remove, Replace: replace}
			for _, kv := range args[1:] {
				k, v, ok := strings.Cut(kv, "=")
				if !ok || k == "" {
					return fmt.Errorf("%q is not KEY=VALUE (remove a label with --remove KEY)", kv)
				}
				if _, dup := req.Labels[k]; dup {
					return fmt.Errorf("label %s given twice", k)
				}
				req.Labels[k] = v
			}
			if len(req.Labels) == 0 && len(remove) == 0 && !replace {
				return fmt.Errorf("nothing to change: give KEY=VALUE labels, --remove KEY or --replace")
			}
			res, err := g.client().SetDeviceLabels(cmd.Context(), args[0], req)
			return printDeviceLabels(cmd.OutOrStdout(), g, res, err)
		},
	}
	label.Flags().StringSliceVar(&remove, "remove", nil, "label key to remove (repeatable)")
	label.Flags().BoolVar(&replace, "replace", false, "replace the device's control-plane labels instead of merging into them")

	var reason string
	revoke := &cobra.Command{
		Use:   "revoke ID [--reason TEXT]",
		Short: "Revoke a device: every server closes its sessions and refuses it (needs an operator token)",
		Long: `Revoke a device's identity. Every server closes the device's sessions within
seconds of applying the revocation (a server cut off at the time does so once
it catches up) and refuses its connections and resumptions. The device need
not be known: an identity can be revoked before it first connects. Undo a
mistake with 'meteor device unrevoke' (admin token).`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			res, err := g.client().RevokeDevice(cmd.Context(), args[0], reason)
			if err != nil {
				return err
			}
			if g.structured() {
				return g.print(cmd.OutOrStdout(), res)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "device %s revoked at index %d\n", res.ID, res.Index)
			return nil
		},
	}
	revoke.Flags().StringVar(&reason, "reason", "", "why, for the audit log and the device's refusal")

	unrevoke := &cobra.Command{
		Use: "unrevoke ID", Short: "Undo a device's revocation (needs an admin token)", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := g.client().UnrevokeDevice(cmd.Context(), args[0]); err != nil {
				return err
			}
			return g.acted(cmd.OutOrStdout(), "unrevoke-device", args[0], fmt.Sprintf("device %s may connect again", args[0]))
		},
	}

	revoked := &cobra.Command{
		Use: "revoked", Short: "List the revoked devices", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			res, err := g.client().RevokedDevices(cmd.Context(), api.ReadOptions{Stale: stale})
			if err != nil {
				return err
			}
			if g.structured() {
				return g.print(cmd.OutOrStdout(), res)
			}
			tw := table(cmd.OutOrStdout())
			fmt.Fprintln(tw, "ID\tREVOKED\tBY\tINDEX\tREASON")
			for _, d := range res.Devices {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\n", d.ID, d.Time.Local().Format(time.RFC3339), d.Actor, d.Index, orDash(d.Reason))
			}
			return tw.Flush()
		},
	}
	revoked.Flags().BoolVar(&stale, "stale", false, "read the server's replica without a round trip to the leader")

	var unlockReason string
	unlock := &cobra.Command{
		Use:   "unlock ID LOCK --reason TEXT",
		Short: "Break a workload lock held on a device (needs an operator token)",
		Long: `Order the lock LOCK on device ID broken: the acquisition of it the device last
reported (meteor get device ID lists its locks, stale ones marked), and no
later one. The order is recorded through Raft, audited and put in the
device's timeline; the device's agent breaks the lock when its session gets
the order, and reports the outcome (broken, not held, or taken again since),
which the timeline records too. Use it for a lock past its maximum hold
whose workload is gone: a lock never wedges a device for good.`,
		Example: `  meteor device unlock kiosk-7 pos-sync --reason "sync hung since Friday, ticket 4711"`,
		Args:    cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			if unlockReason == "" {
				return &usageError{fmt.Errorf("--reason is required: it is recorded")}
			}
			res, err := g.client().UnlockDevice(cmd.Context(), args[0], args[1], unlockReason)
			if err != nil {
				return err
			}
			if g.structured() {
				return g.print(cmd.OutOrStdout(), res)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "break of lock %s (held since %s) ordered at index %d; the device breaks it when its session gets the order\n",
				res.Lock, res.Since.Local().Format(time.RFC3339), res.Index)
			return nil
		},
	}
	unlock.Flags().StringVar(&unlockReason, "reason", "", "why (recorded in the audit log and the device's timeline; required)")

	cmd.AddCommand(show, label, revoke, unrevoke, revoked, unlock)
	return cmd
}

// printDeviceLabels prints the answer of a labels request, or returns its
// error.
func printDeviceLabels(w io.Writer, g *globals, d *api.DeviceLabels, err error) error {
	if err != nil {
		return err
	}
	if g.structured() {
		return g.print(w, d)
	}
	control := formatLabels(d.Labels)
	if !d.Controlled {
		control = "none set by the control plane"
	}
	selection := formatLabels(d.Selection)
	switch {
	case d.Controlled:
	case d.TrustReported:
		selection += "  (reported: this cluster trusts what devices report)"
	default:
		selection += "  (selected only by intents with an empty selector until labelled)"
	}
	fmt.Fprintf(w, "Device:       %s\nLabels:       %s\nReported:     %s  (facts the agent states, not used for selection)\nSelected by:  %s\n",
		d.ID, control, formatLabels(d.Reported), selection)
	return nil
}

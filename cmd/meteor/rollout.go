package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/meteor-edge/meteor/cluster/api"
)

func newRolloutCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "rollout",
		Short: "Show and steer rollouts: waves, approvals, pauses, aborts and undo",
		Long: `A revision of an intent with a rollout block reaches its devices wave by
wave (docs/rollouts.md). These commands show where a rollout stands, approve
a wave that waits for it, pause, resume or abort a rollout, and undo a
revision by making an earlier document desired again as a new revision.`,
	}
	cmd.AddCommand(newRolloutStatusCmd(g), newRolloutListCmd(g))
	for _, a := range []struct{ action, short string }{
		{api.RolloutApprove, "Approve the wave that waits for approval, or --wave N ahead of time"},
		{api.RolloutPause, "Pause a rollout: nothing more is released until it is resumed"},
		{api.RolloutResume, "Resume a paused rollout (an aborted or reverted one starts again from wave 1)"},
		{api.RolloutAbort, "Abort a rollout: the released devices go back to the stable revision"},
	} {
		cmd.AddCommand(newRolloutControlCmd(g, a.action, a.short))
	}
	cmd.AddCommand(newRolloutUndoCmd(g), newRolloutHistoryCmd(g), newRolloutEventsCmd(g))
	return cmd
}

func newRolloutStatusCmd(g *globals) *cobra.Command {
	var wait, stale bool
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:   "status NAME",
		Short: "Show a rollout: its state, reason and waves",
		Long: `Show the rollout of an intent's newest revision: its state (progressing,
waiting-approval, paused, completed, aborted, reverted or superseded), why, what
it waits for, and each wave's devices, released, converged and failed.

--wait polls once a second until the rollout completes (exit 0) or stops
(paused, aborted, reverted or superseded: exit 1, printing the reason).`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c := g.client()
			get := func(ctx context.Context) (*api.RolloutStatus, error) {
				return c.Rollout(ctx, args[0], api.ReadOptions{Stale: stale})
			}
			if !wait {
				st, err := get(cmd.Context())
				if err != nil {
					return err
				}
				return printRolloutOutput(cmd.OutOrStdout(), g.output, st)
			}
			ctx := cmd.Context()
			if timeout > 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, timeout)
				defer cancel()
			}
			progress := io.Discard
			if !g.structured() {
				progress = cmd.OutOrStdout()
			}
			st, err := waitRollout(ctx, get, progress, time.Second)
			if st != nil {
				if perr := printRolloutOutput(cmd.OutOrStdout(), g.output, st); perr != nil {
					return perr
				}
			}
			return err
		},
	}
	cmd.Flags().BoolVar(&wait, "wait", false, "wait until the rollout completes (exit 0) or stops (non-zero exit)")
	cmd.Flags().DurationVar(&timeout, "timeout", 0, "with --wait, give up after this long (0: no limit)")
	cmd.Flags().BoolVar(&stale, "stale", false, "read from the contacted server's replica without confirming leadership")
	return cmd
}

// waitRollout polls a rollout every interval until it completes (nil
// error) or stops (an error with its state and reason), printing a line to
// progress whenever what it shows changes. It returns the last status
// read.
func waitRollout(ctx context.Context, get func(context.Context) (*api.RolloutStatus, error), progress io.Writer, every time.Duration) (*api.RolloutStatus, error) {
	var last *api.RolloutStatus
	var shown string
	for {
		st, err := get(ctx)
		if err != nil {
			if ctx.Err() != nil && last != nil {
				return last, fmt.Errorf("gave up waiting for the rollout of %s revision %d: %s (%s)", last.Intent, last.Revision, last.State, orDash(rolloutWhy(last)))
			}
			return last, err
		}
		last = st
		if line := rolloutLine(st); line != shown {
			fmt.Fprintf(progress, "%s  %s\n", time.Now().Format("15:04:05"), line)
			shown = line
		}
		switch st.State {
		case api.RolloutCompleted:
			return st, nil
		case api.RolloutPaused, api.RolloutAborted, api.RolloutReverted, api.RolloutSuperseded:
			return st, fmt.Errorf("rollout of %s revision %d %s: %s", st.Intent, st.Revision, st.State, orDash(st.Reason))
		}
		select {
		case <-ctx.Done():
			return st, fmt.Errorf("gave up waiting for the rollout of %s revision %d: %s (%s)", st.Intent, st.Revision, st.State, orDash(rolloutWhy(st)))
		case <-time.After(every):
		}
	}
}

// rolloutWhy is what a rollout waits for, else why it is in its state.
func rolloutWhy(st *api.RolloutStatus) string {
	if st.WaitingFor != "" {
		return st.WaitingFor
	}
	return st.Reason
}

// rolloutLine sums a rollout up on one line.
func rolloutLine(st *api.RolloutStatus) string {
	c := st.Counts
	s := fmt.Sprintf("%s revision %d: %s", st.Intent, st.Revision, st.State)
	if len(st.Waves) > 0 {
		s += fmt.Sprintf(", wave %d of %d", st.Wave, len(st.Waves))
	}
	s += fmt.Sprintf("; %d targeted, %d released, %d converged, %d failed", c.Targeted, c.Released, c.Converged, c.Failed)
	if why := rolloutWhy(st); why != "" {
		s += " - " + why
	}
	return s
}

func printRolloutOutput(w io.Writer, output string, st *api.RolloutStatus) error {
	if output != outputTable {
		return printValue(w, output, st)
	}
	printRollout(w, st)
	return nil
}

// printRollout prints a rollout's state, reason and what it waits for,
// then a table of its waves.
func printRollout(w io.Writer, st *api.RolloutStatus) {
	stable := "none"
	if st.StableRevision != 0 {
		stable = fmt.Sprintf("%d", st.StableRevision)
	}
	fmt.Fprintf(w, "Rollout:     %s revision %d (stable %s)\n", st.Intent, st.Revision, stable)
	fmt.Fprintf(w, "State:       %s\n", st.State)
	if st.Reason != "" {
		fmt.Fprintf(w, "Reason:      %s\n", st.Reason)
	}
	if st.WaitingFor != "" && st.WaitingFor != st.Reason {
		fmt.Fprintf(w, "Waiting for: %s\n", st.WaitingFor)
	}
	c := st.Counts
	fmt.Fprintf(w, "Devices:     %d targeted, %d released, %d acknowledged, %d converged, %d failed\n", c.Targeted, c.Released, c.Acknowledged, c.Converged, c.Failed)
	if st.AppliedBy != "" {
		applied := "Applied by:  " + st.AppliedBy
		if st.StartedAt != nil {
			applied += ", " + ago(*st.StartedAt)
		}
		fmt.Fprintln(w, applied)
	}
	if len(st.Waves) == 0 {
		return
	}
	fmt.Fprintln(w, "Waves:")
	tw := table(w)
	fmt.Fprintln(tw, "  WAVE\tNAME\tSTATE\tDEVICES\tRELEASED\tCONVERGED\tFAILED\tAPPROVAL")
	for _, v := range st.Waves {
		approval := "-"
		switch {
		case v.ApprovedBy != "":
			approval = "approved by " + v.ApprovedBy
		case v.Approval:
			approval = "required"
		}
		marker := " "
		if v.Number == st.Wave {
			marker = "*"
		}
		fmt.Fprintf(tw, " %s%d\t%s\t%s\t%d\t%d\t%d\t%d\t%s\n", marker, v.Number, v.Name, v.State, v.Devices, v.Released, v.Converged, v.Failed, approval)
	}
	tw.Flush()
	for _, v := range st.Waves {
		if len(v.SampleFailed) > 0 {
			more := ""
			if v.Failed > len(v.SampleFailed) {
				more = fmt.Sprintf(" and %d more", v.Failed-len(v.SampleFailed))
			}
			fmt.Fprintf(w, "Wave %d failed: %s%s\n", v.Number, strings.Join(v.SampleFailed, ", "), more)
		}
	}
}

func newRolloutListCmd(g *globals) *cobra.Command {
	var stale bool
	cmd := &cobra.Command{
		Use: "list", Short: "List every intent's rollout", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			res, err := g.client().Rollouts(cmd.Context(), api.ReadOptions{Stale: stale})
			if err != nil {
				return err
			}
			if g.structured() {
				return g.print(cmd.OutOrStdout(), res)
			}
			tw := table(cmd.OutOrStdout())
			fmt.Fprintln(tw, "INTENT\tREVISION\tSTATE\tWAVE\tTARGETED\tRELEASED\tCONVERGED\tFAILED\tWAITING FOR")
			for _, st := range res.Rollouts {
				wave := "-"
				if len(st.Waves) > 0 {
					wave = fmt.Sprintf("%d/%d", st.Wave, len(st.Waves))
				}
				fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%d\t%d\t%d\t%d\t%s\n", st.Intent, st.Revision, st.State, wave, st.Counts.Targeted, st.Counts.Released, st.Counts.Converged, st.Counts.Failed, orDash(rolloutWhy(&st)))
			}
			return tw.Flush()
		},
	}
	cmd.Flags().BoolVar(&stale, "stale", false, "read from the contacted server's replica without confirming leadership")
	return cmd
}

func newRolloutControlCmd(g *globals, action, short string) *cobra.Command {
	var req api.RolloutControl
	cmd := &cobra.Command{
		Use: action + " NAME", Short: short, Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			st, err := g.client().ControlRollout(cmd.Context(), args[0], action, req)
			if err != nil {
				return fmt.Errorf("rollout %s %s: %w", action, args[0], err)
			}
			return printRolloutOutput(cmd.OutOrStdout(), g.output, st)
		},
	}
	if action == api.RolloutApprove {
		cmd.Flags().IntVar(&req.Wave, "wave", 0, "the wave to approve, from 1 (default: the one waiting)")
	}
	cmd.Flags().StringVar(&req.Reason, "reason", "", "why, recorded on the rollout's timeline and in the audit log")
	cmd.Flags().Uint64Var(&req.Revision, "revision", 0, "act only if the rollout is of this revision")
	return cmd
}

func newRolloutUndoCmd(g *globals) *cobra.Command {
	var req api.UndoRequest
	cmd := &cobra.Command{
		Use:   "undo NAME",
		Short: "Make an earlier document of an intent desired again, as a new revision",
		Long: `Make an earlier document of an intent desired again. It becomes a new
revision (the history is never rewritten), rolled out by that document's own
rollout block. Without --to-revision: the stable revision while a rollout is in
progress or ended without completing, else the revision before the current one
('meteor rollout history NAME' lists them).`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			res, err := g.client().UndoRollout(cmd.Context(), args[0], req)
			if err != nil {
				return fmt.Errorf("undo %s: %w", args[0], err)
			}
			if g.structured() {
				return g.print(cmd.OutOrStdout(), res)
			}
			if res.Unchanged {
				fmt.Fprintf(cmd.OutOrStdout(), "intent %s unchanged (revision %d): revision %d's document is the current one\n", res.Name, res.Revision, res.FromRevision)
				return nil
			}
			fmt.Fprintf(cmd.OutOrStdout(), "intent %s: revision %d holds the document of revision %d; follow it with 'meteor rollout status %s'\n", res.Name, res.Revision, res.FromRevision, res.Name)
			return nil
		},
	}
	cmd.Flags().Uint64Var(&req.ToRevision, "to-revision", 0, "the revision to go back to (default: see above)")
	return cmd
}

func newRolloutHistoryCmd(g *globals) *cobra.Command {
	var stale bool
	cmd := &cobra.Command{
		Use: "history NAME", Short: "List an intent's revisions: who applied each, when, and how its rollout ended", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			res, err := g.client().RolloutHistory(cmd.Context(), args[0], api.ReadOptions{Stale: stale})
			if err != nil {
				return err
			}
			if g.structured() {
				return g.print(cmd.OutOrStdout(), res)
			}
			printRolloutHistory(cmd.OutOrStdout(), res)
			return nil
		},
	}
	cmd.Flags().BoolVar(&stale, "stale", false, "read from the contacted server's replica without confirming leadership")
	return cmd
}

func printRolloutHistory(w io.Writer, h *api.RolloutHistory) {
	tw := table(w)
	fmt.Fprintln(tw, "REVISION\tAPPLIED\tBY\tROLLOUT\tREASON")
	for _, r := range h.Revisions {
		rev := fmt.Sprintf("%d", r.Revision)
		if r.Current {
			rev += " (current)"
		}
		state, reason := "-", ""
		switch {
		case r.Deleted:
			state = "deleted"
		case r.Rollout != nil:
			state, reason = r.Rollout.State, r.Rollout.Reason
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", rev, r.Time.Local().Format(time.RFC3339), r.AppliedBy, state, reason)
	}
	tw.Flush()
}

func newRolloutEventsCmd(g *globals) *cobra.Command {
	var stale bool
	var rev uint64
	cmd := &cobra.Command{
		Use: "events NAME", Short: "Show an intent's rollout timeline: releases, gates, approvals, pauses, reverts", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			res, err := g.client().RolloutEvents(cmd.Context(), args[0], api.ReadOptions{Stale: stale, Revision: rev})
			if err != nil {
				return err
			}
			if g.structured() {
				return g.print(cmd.OutOrStdout(), res)
			}
			printRolloutEvents(cmd.OutOrStdout(), res)
			return nil
		},
	}
	cmd.Flags().Uint64Var(&rev, "revision", 0, "only the events of this revision")
	cmd.Flags().BoolVar(&stale, "stale", false, "read from the contacted server's replica without confirming leadership")
	return cmd
}

func printRolloutEvents(w io.Writer, evs *api.RolloutEvents) {
	tw := table(w)
	fmt.Fprintln(tw, "TIME\tREVISION\tWAVE\tEVENT\tBY\tMESSAGE")
	for _, e := range evs.Events {
		msg := e.Message
		if e.Counts != nil && e.Kind == "sample" {
			c := e.Counts
			msg = fmt.Sprintf("%d targeted, %d released, %d acknowledged, %d converged, %d failed", c.Targeted, c.Released, c.Acknowledged, c.Converged, c.Failed)
		}
		if len(e.Devices) > 0 {
			shown := e.Devices[:min(len(e.Devices), 5)]
			msg += ": " + strings.Join(shown, ", ")
			if len(e.Devices) > len(shown) {
				msg += fmt.Sprintf(" and %d more", len(e.Devices)-len(shown))
			}
		}
		wave := "-"
		if e.Wave > 0 {
			wave = fmt.Sprintf("%d", e.Wave)
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t%s\n", e.Time.Local().Format("2006-01-02 15:04:05"), e.Revision, wave, e.Kind, orDash(e.Actor), msg)
	}
	tw.Flush()
}

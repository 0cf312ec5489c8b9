package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"

	"github.com/meteor-edge/meteor/cluster/api"
	"github.com/meteor-edge/meteor/fsm/intent"
)

// planDevicesShown is how many devices 'meteor plan' lists per intent
// without --all.
const planDevicesShown = 20

func newPlanCmd(g *globals) *cobra.Command {
	var files []string
	var all, stale bool
	cmd := &cobra.Command{
		Use:   "plan -f FILE",
		Short: "Show what applying intents would change, committing nothing",
		Long: `Show what 'meteor apply' of the same documents would do, from the
committed state: for each intent whether it is created, updated or unchanged,
which devices it targets, the wave each falls in, which of their resources
change (added, changed or removed, against what each device last reported
applied), and other intents that manage the same file, certificate or
simulated resource on the same devices. FILE is read as by 'meteor apply'.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			docs, err := readIntentFiles(files)
			if err != nil {
				return err
			}
			body, err := intentStream(docs)
			if err != nil {
				return err
			}
			res, err := g.client().Plan(cmd.Context(), body, api.ReadOptions{Stale: stale})
			if err != nil {
				return fmt.Errorf("plan: %w", err)
			}
			if g.structured() {
				return g.print(cmd.OutOrStdout(), res)
			}
			printPlan(cmd.OutOrStdout(), res, all)
			return nil
		},
	}
	cmd.Flags().StringArrayVarP(&files, "filename", "f", nil, "intent file, directory, or - for stdin (repeatable)")
	cmd.Flags().BoolVar(&all, "all", false, fmt.Sprintf("list every device that changes, not only the first %d", planDevicesShown))
	cmd.Flags().BoolVar(&stale, "stale", false, "plan on the contacted server's replica without confirming leadership")
	return cmd
}

// intentStream encodes documents as one stream, JSON documents separated
// by "---", which the server parses as YAML.
func intentStream(docs []*intent.Intent) ([]byte, error) {
	var buf bytes.Buffer
	for i, in := range docs {
		if i > 0 {
			buf.WriteString("---\n")
		}
		b, err := json.Marshal(in)
		if err != nil {
			return nil, fmt.Errorf("encode intent %q: %w", in.Name, err)
		}
		buf.Write(b)
		buf.WriteByte('\n')
	}
	return buf.Bytes(), nil
}

// printPlan prints each intent's summary, its devices' changed resources
// (the first planDevicesShown unless all), and its conflicts last.
func printPlan(w io.Writer, p *api.Plan, all bool) {
	for i, in := range p.Intents {
		if i > 0 {
			fmt.Fprintln(w)
		}
		fmt.Fprintln(w, planSummary(in))
		shown := in.Devices
		if !all && len(shown) > planDevicesShown {
			shown = shown[:planDevicesShown]
		}
		for _, d := range shown {
			var parts []string
			for _, c := range d.Changes {
				parts = append(parts, c.Action+" "+c.Key)
			}
			where := ""
			if d.Wave > 0 {
				where = fmt.Sprintf(" (wave %d)", d.Wave)
			}
			fmt.Fprintf(w, "  %s%s: %s\n", d.ID, where, strings.Join(parts, ", "))
		}
		if n := len(in.Devices) - len(shown); n > 0 {
			fmt.Fprintf(w, "  ... and %s (--all lists them)\n", plural(uint64(n), "more device", "more devices"))
		}
		for _, c := range in.Conflicts {
			sample := strings.Join(c.Sample, ", ")
			if c.Devices > len(c.Sample) {
				sample += ", ..."
			}
			fmt.Fprintf(w, "  conflict: %s and %s (intent %s) both manage %s on %s (%s)\n", c.Key, c.OtherKey, c.OtherIntent, c.Target, nDevices(c.Devices), sample)
		}
	}
}

// planSummary is one intent's line: "store-net: update revision 12 ->
// new; 40 devices targeted, 38 change; waves: 1 (pilot) 1 device, 2
// (tenth) 4, 3 (everyone) 35".
func planSummary(in api.IntentPlan) string {
	var b strings.Builder
	b.WriteString(in.Intent + ": ")
	switch in.Action {
	case api.PlanCreate:
		b.WriteString("create")
	case api.PlanUnchanged:
		fmt.Fprintf(&b, "unchanged (revision %d): applying it changes nothing; %s targeted", in.CurrentRevision, nDevices(in.Targeted))
		return b.String()
	default:
		fmt.Fprintf(&b, "update revision %d -> new", in.CurrentRevision)
	}
	fmt.Fprintf(&b, "; %s targeted, %d change", nDevices(in.Targeted), in.Changed)
	if in.Rollout == intent.StrategyImmediate {
		b.WriteString("; no waves: every device at once")
		return b.String()
	}
	b.WriteString("; waves:")
	for i, wv := range in.Waves {
		if i > 0 {
			b.WriteByte(',')
		}
		n := fmt.Sprintf("%d", wv.Devices)
		if i == 0 {
			n = nDevices(wv.Devices)
		}
		fmt.Fprintf(&b, " %d (%s) %s", wv.Number, wv.Name, n)
	}
	return b.String()
}

// Command meteor is Meteor's single binary: the server, the development
// cluster and the operator CLI.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/meteor-edge/meteor/chaos/scenario"
	"github.com/meteor-edge/meteor/cluster/api"
)

func main() {
	// The chaos scenarios with fleets run their devices in a child
	// process: this program, started again.
	scenario.RunFleetProcessIfAsked()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := newRootCmd().ExecuteContext(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "Error:", err)
		var apiErr *api.Error
		if errors.As(err, &apiErr) && apiErr.StatusCode == 404 {
			os.Exit(3)
		}
		os.Exit(1)
	}
}

// globals are the flags every operator command shares.
type globals struct {
	addr   string
	output string
}

func (g *globals) client() *api.Client { return api.NewClient(g.addr, nil) }

func newRootCmd() *cobra.Command {
	g := &globals{}
	root := &cobra.Command{
		Use:           "meteor",
		Short:         "Meteor: a control plane for fleets of edge devices",
		SilenceUsage:  true,
		SilenceErrors: true,
		PersistentPreRunE: func(cmd *cobra.Command, args []string) error {
			if g.output != "table" && g.output != "json" {
				return fmt.Errorf("-o %q: must be table or json", g.output)
			}
			return nil
		},
	}
	defAddr := os.Getenv("METEOR_ADDR")
	if defAddr == "" {
		defAddr = "127.0.0.1:8470"
	}
	root.PersistentFlags().StringVar(&g.addr, "addr", defAddr, "HTTP address of any Meteor server (env METEOR_ADDR)")
	root.PersistentFlags().StringVarP(&g.output, "output", "o", "table", "output format: table or json")
	root.AddCommand(
		newServerCmd(),
		newAgentCmd(),
		newDevCmd(),
		newApplyCmd(g),
		newGetCmd(g),
		newDeleteCmd(g),
		newMembersCmd(g),
		newHealthCmd(g),
		newStatusCmd(g),
		newCACmd(),
		newTLSCmd(),
		newChaosCmd(),
		newSimCmd(),
		newVersionCmd(),
	)
	return root
}

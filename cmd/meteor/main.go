// Command meteor is Meteor's single binary: the server, the development
// cluster and the operator CLI.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"strings"
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
	// token is the operator token (--token, METEOR_TOKEN), or read from
	// tokenFile (--token-file) before a command runs.
	token     string
	tokenFile string
}

func (g *globals) client() *api.Client {
	c := api.NewClient(g.addr, nil)
	c.Token = g.token
	return c
}

// loadToken settles the token: --token, else --token-file, else
// METEOR_TOKEN (read here, not as the flag's default, which --help would
// print).
func (g *globals) loadToken(explicit bool) error {
	if explicit {
		return nil
	}
	if g.tokenFile == "" {
		g.token = os.Getenv("METEOR_TOKEN")
		return nil
	}
	b, err := os.ReadFile(g.tokenFile)
	if err != nil {
		return fmt.Errorf("--token-file: %w", err)
	}
	g.token = strings.TrimSpace(string(b))
	return nil
}

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
			return g.loadToken(cmd.Flags().Changed("token"))
		},
	}
	defAddr := os.Getenv("METEOR_ADDR")
	if defAddr == "" {
		defAddr = "127.0.0.1:8470"
	}
	root.PersistentFlags().StringVar(&g.addr, "addr", defAddr, "HTTP address of any Meteor server (env METEOR_ADDR)")
	root.PersistentFlags().StringVarP(&g.output, "output", "o", "table", "output format: table or json")
	root.PersistentFlags().StringVar(&g.token, "token", "", "operator token sent to the server (env METEOR_TOKEN); servers with the ACL on require one")
	root.PersistentFlags().StringVar(&g.tokenFile, "token-file", "", "file holding the operator token, such as admin.token from 'meteor tls init' (used unless --token is given)")
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
		newTokenCmd(g),
		newAuditCmd(g),
		newDeviceCmd(g),
		newCACmd(),
		newTLSCmd(),
		newChaosCmd(),
		newSimCmd(),
		newVersionCmd(),
	)
	return root
}

// Command meteor is Meteor's single binary: the server, the agent, the
// development cluster and the operator CLI. cmd/meteor-agent is the agent
// alone, for devices.
package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/meteor-edge/meteor/chaos/scenario"
	"github.com/meteor-edge/meteor/cluster"
	"github.com/meteor-edge/meteor/cluster/api"
	"github.com/meteor-edge/meteor/cluster/pki"
	"github.com/meteor-edge/meteor/cmd/internal/agentcmd"
)

func main() {
	// The chaos scenarios with fleets run their devices in a child
	// process: this program, started again.
	scenario.RunFleetProcessIfAsked()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := execute(ctx, newRootCmd(), os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// Exit statuses (docs/api.md, "CLI").
const (
	exitOK       = 0
	exitError    = 1
	exitUsage    = 2 // an unknown command or flag, a missing subcommand
	exitNotFound = 3 // the server answered 404: the thing asked for does not exist
)

// execute runs the command line args and returns its exit status. An
// error goes to stderr, followed by the command's usage when the command
// line itself was wrong.
func execute(ctx context.Context, root *cobra.Command, args []string, stdout, stderr io.Writer) int {
	root.SetArgs(args)
	root.SetOut(stdout)
	root.SetErr(stderr)
	cmd, err := root.ExecuteContextC(ctx)
	if err == nil {
		return exitOK
	}
	fmt.Fprintln(stderr, "Error:", err)
	var usage *usageError
	if errors.As(err, &usage) || strings.HasPrefix(err.Error(), "unknown command ") {
		if cmd == nil {
			cmd = root
		}
		fmt.Fprintf(stderr, "\n%s", cmd.UsageString())
		return exitUsage
	}
	var apiErr *api.Error
	if errors.As(err, &apiErr) && apiErr.StatusCode == 404 {
		return exitNotFound
	}
	return exitError
}

// usageError is a command line that names no command, or flags that do
// not parse: execute prints the command's usage after it.
type usageError struct{ err error }

func (e *usageError) Error() string { return e.err.Error() }
func (e *usageError) Unwrap() error { return e.err }

// requireSubcommands makes every command below root that only groups
// others refuse to run without one of them: "meteor get foo" and a bare
// "meteor delete" are errors, not the group's help. The root alone still
// prints its help.
func requireSubcommands(root *cobra.Command) {
	for _, c := range root.Commands() {
		requireSubcommands(c)
		if !c.HasSubCommands() || c.Runnable() {
			continue
		}
		// Its usage names it with a command only, not as one to run.
		c.SetUsageTemplate(strings.Replace(c.UsageTemplate(), "{{if .Runnable}}", "{{if and .Runnable (not .HasAvailableSubCommands)}}", 1))
		c.RunE = func(cmd *cobra.Command, args []string) error {
			var names []string
			for _, sub := range cmd.Commands() {
				if sub.IsAvailableCommand() {
					names = append(names, sub.Name())
				}
			}
			if len(args) > 0 {
				msg := fmt.Sprintf("unknown command %q for %q", args[0], cmd.CommandPath())
				if cmd.SuggestionsMinimumDistance <= 0 {
					cmd.SuggestionsMinimumDistance = 2 // cobra's own
				}
				if s := cmd.SuggestionsFor(args[0]); len(s) > 0 {
					msg += fmt.Sprintf(" (did you mean %s?)", strings.Join(s, " or "))
				}
				return &usageError{errors.New(msg)}
			}
			return &usageError{fmt.Errorf("%q needs a subcommand: %s", cmd.CommandPath(), strings.Join(names, ", "))}
		}
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
	// caCert is the cluster CA's certificate file (--ca-cert,
	// METEOR_CACERT); hc the HTTP client that trusts it, set up before a
	// command runs.
	caCert string
	hc     *http.Client
}

// tlsConfig returns the TLS configuration of the CLI's HTTP client, nil
// without the cluster CA.
func (g *globals) tlsConfig() *tls.Config {
	if g.hc == nil {
		return nil
	}
	return g.hc.Transport.(*http.Transport).TLSClientConfig
}

func (g *globals) client() *api.Client {
	c := api.NewClient(g.addr, g.hc)
	c.Token = g.token
	return c
}

// loadTLS settles how the CLI reaches the servers. With the cluster CA
// (--ca-cert, else METEOR_CACERT) it speaks TLS and trusts exactly the
// servers of that cluster, and an address without a scheme means
// https://; without it, an address without a scheme means http://.
func (g *globals) loadTLS() error {
	if g.caCert == "" {
		g.caCert = os.Getenv("METEOR_CACERT")
	}
	if g.caCert == "" {
		return nil
	}
	b, err := os.ReadFile(g.caCert)
	if err != nil {
		return fmt.Errorf("cluster CA (--ca-cert or METEOR_CACERT): %w", err)
	}
	pool, err := pki.PoolFromPEM(b)
	if err != nil {
		return fmt.Errorf("cluster CA %s: %w", g.caCert, err)
	}
	if !strings.Contains(g.addr, "://") {
		g.addr = "https://" + g.addr
	}
	g.hc = &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{TLSClientConfig: cluster.OperatorTLS(pool)}}
	return nil
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
			if err := checkOutput(g.output); err != nil {
				return &usageError{err}
			}
			if err := g.loadTLS(); err != nil {
				return err
			}
			return g.loadToken(cmd.Flags().Changed("token"))
		},
	}
	defAddr := os.Getenv("METEOR_ADDR")
	if defAddr == "" {
		defAddr = "127.0.0.1:8470"
	}
	root.PersistentFlags().StringVar(&g.addr, "addr", defAddr, "HTTP address of any Meteor server (env METEOR_ADDR)")
	root.PersistentFlags().StringVarP(&g.output, "output", "o", "table", "output format: "+strings.Join(outputFormats, ", ")+" (json and yaml print the API's answer)")
	root.PersistentFlags().StringVar(&g.token, "token", "", "operator token sent to the server (env METEOR_TOKEN); servers with the ACL on require one")
	root.PersistentFlags().StringVar(&g.caCert, "ca-cert", "", "the cluster CA's certificate (ca.pem from 'meteor tls init'; env METEOR_CACERT): speak TLS to the servers and trust only theirs")
	root.PersistentFlags().StringVar(&g.tokenFile, "token-file", "", "file holding the operator token, such as admin.token from 'meteor tls init' (used unless --token is given)")
	root.AddCommand(
		newServerCmd(),
		agentcmd.New("meteor agent"),
		newDevCmd(),
		newApplyCmd(g),
		newGetCmd(g),
		newDeleteCmd(g),
		newMembersCmd(g),
		newKeyringCmd(g),
		newSnapshotCmd(g),
		newOperatorCmd(g),
		newHealthCmd(g),
		newStatusCmd(g),
		newEventsCmd(g),
		newRolloutCmd(g),
		newPlanCmd(g),
		newTokenCmd(g),
		newAuditCmd(g),
		newDeviceCmd(g),
		newClassCmd(g),
		newWindowCmd(g),
		newDescribeCmd(g),
		newCACmd(),
		newTLSCmd(),
		newChaosCmd(g),
		newSimCmd(),
		newVersionCmd(g),
	)
	root.SetFlagErrorFunc(func(cmd *cobra.Command, err error) error { return &usageError{err} })
	requireSubcommands(root)
	return root
}

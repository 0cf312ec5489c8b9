// Command meteor is Meteor's single binary: the server, the development
// cluster and the operator CLI.
package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
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
			if g.output != "table" && g.output != "json" {
				return fmt.Errorf("-o %q: must be table or json", g.output)
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
	root.PersistentFlags().StringVarP(&g.output, "output", "o", "table", "output format: table or json")
	root.PersistentFlags().StringVar(&g.token, "token", "", "operator token sent to the server (env METEOR_TOKEN); servers with the ACL on require one")
	root.PersistentFlags().StringVar(&g.caCert, "ca-cert", "", "the cluster CA's certificate (ca.pem from 'meteor tls init'; env METEOR_CACERT): speak TLS to the servers and trust only theirs")
	root.PersistentFlags().StringVar(&g.tokenFile, "token-file", "", "file holding the operator token, such as admin.token from 'meteor tls init' (used unless --token is given)")
	root.AddCommand(
		newServerCmd(),
		newAgentCmd(),
		newDevCmd(),
		newApplyCmd(g),
		newGetCmd(g),
		newDeleteCmd(g),
		newMembersCmd(g),
		newKeyringCmd(g),
		newHealthCmd(g),
		newStatusCmd(g),
		newRolloutCmd(g),
		newPlanCmd(g),
		newTokenCmd(g),
		newAuditCmd(g),
		newDeviceCmd(g),
		newCACmd(),
		newTLSCmd(),
		newChaosCmd(g),
		newSimCmd(),
		newVersionCmd(),
	)
	return root
}

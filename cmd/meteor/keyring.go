package main

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"

	"github.com/meteor-edge/meteor/cluster"
	"github.com/meteor-edge/meteor/cluster/api"
)

func newKeyringCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "keyring",
		Short: "List and rotate the keys that encrypt gossip between servers (needs an admin token)",
		Long: `Every server keeps a gossip keyring in its data dir: it encrypts gossip with
the primary key and decrypts with any installed key. The server at --addr
asks every other for its keyring or changes it, and reports each server.

Rotate a key without any server losing sight of another:

  meteor keyring install --generate --key-file pki/gossip.key.new
  meteor keyring use     --key-file pki/gossip.key.new
  meteor keyring remove  --key-file pki/gossip.key

'use' is refused unless every server has the key, 'remove' while any server
encrypts with it. Keys are named by fingerprint (sha256:...); a key given on
the command line ends up in shell history, so prefer --key-file.`,
	}
	var showSecrets bool
	list := &cobra.Command{
		Use: "list", Short: "List every server's gossip keys by fingerprint, the primary marked", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			res, err := g.client().GossipKeyring(cmd.Context(), showSecrets)
			if err != nil {
				return err
			}
			if g.structured() {
				return g.print(cmd.OutOrStdout(), res)
			}
			printKeyring(cmd.OutOrStdout(), res)
			if failed := res.Failed(); len(failed) > 0 {
				return fmt.Errorf("could not read the keyring of %s", strings.Join(failed, ", "))
			}
			return nil
		},
	}
	list.Flags().BoolVar(&showSecrets, "show-secrets", false, "also print the contacted server's keys themselves (base64)")

	var generate bool
	install := keyringChangeCmd(g, "install", "Add a key to every server's keyring (it decrypts with it; the primary stays)",
		func(ctx context.Context, c *api.Client, key string) (*api.KeyringResponse, error) {
			return c.InstallGossipKey(ctx, key)
		}, &generate)
	use := keyringChangeCmd(g, "use", "Make an installed key the primary on every server (refused unless all have it)",
		func(ctx context.Context, c *api.Client, key string) (*api.KeyringResponse, error) {
			return c.UseGossipKey(ctx, key)
		}, nil)
	remove := keyringChangeCmd(g, "remove", "Remove a key from every server (refused while any server encrypts with it)",
		func(ctx context.Context, c *api.Client, key string) (*api.KeyringResponse, error) {
			return c.RemoveGossipKey(ctx, key)
		}, nil)
	cmd.AddCommand(list, install, use, remove)
	return cmd
}

// keyringChangeCmd builds install, use or remove: the key is the argument
// or --key-file's; with generate (install only) a new key is written to
// --key-file first.
func keyringChangeCmd(g *globals, op, short string, do func(context.Context, *api.Client, string) (*api.KeyringResponse, error), generate *bool) *cobra.Command {
	var keyFile string
	cmd := &cobra.Command{
		Use: op + " [KEY | --key-file FILE]", Short: short, Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if generate != nil && *generate {
				if keyFile == "" || len(args) > 0 {
					return errors.New("--generate writes the new key to --key-file, which it needs, and takes no KEY")
				}
				key := make([]byte, 32)
				rand.Read(key)
				if err := writeSecretFile(keyFile, key); err != nil {
					return fmt.Errorf("--key-file: %w (--generate never overwrites a file)", err)
				}
				fmt.Fprintf(cmd.OutOrStdout(), "generated %s in %s\n", api.KeyFingerprint(key), keyFile)
			}
			key, err := keyringKey(args, keyFile)
			if err != nil {
				return err
			}
			res, err := do(cmd.Context(), g.client(), base64.StdEncoding.EncodeToString(key))
			if res == nil || len(res.Servers) == 0 {
				return err
			}
			if g.structured() {
				if perr := g.print(cmd.OutOrStdout(), res); perr != nil {
					return perr
				}
			} else {
				fmt.Fprintf(cmd.OutOrStdout(), "%s %s\n", op, api.KeyFingerprint(key))
				printKeyring(cmd.OutOrStdout(), res)
			}
			return err
		},
	}
	cmd.Flags().StringVar(&keyFile, "key-file", "", "file holding the key, base64 (such as gossip.key from 'meteor tls init')")
	if generate != nil {
		cmd.Flags().BoolVar(generate, "generate", false, "generate a new 32-byte key and write it to --key-file (mode 0600) before installing it")
	}
	return cmd
}

// keyringKey reads the key from the argument or the file, whichever was
// given.
func keyringKey(args []string, keyFile string) ([]byte, error) {
	switch {
	case len(args) == 1 && keyFile != "":
		return nil, errors.New("give the key as an argument or with --key-file, not both")
	case len(args) == 1:
		return cluster.ParseGossipKey(strings.TrimSpace(args[0]))
	case keyFile != "":
		return readGossipKey(keyFile)
	}
	return nil, errors.New("no key: give it as an argument (base64) or with --key-file")
}

func printKeyring(w io.Writer, res *api.KeyringResponse) {
	secrets := false
	for _, s := range res.Servers {
		secrets = secrets || len(s.Secrets) > 0
	}
	tw := table(w)
	if secrets {
		fmt.Fprintln(tw, "SERVER\tKEY\tPRIMARY\tERROR\tSECRET")
	} else {
		fmt.Fprintln(tw, "SERVER\tKEY\tPRIMARY\tERROR")
	}
	for _, s := range res.Servers {
		if s.Error != "" {
			fmt.Fprintf(tw, "%s\t-\t-\t%s\n", s.ID, s.Error)
			continue
		}
		for i, k := range s.Keys {
			primary := ""
			if k == s.Primary {
				primary = "primary"
			}
			line := fmt.Sprintf("%s\t%s\t%s\t", s.ID, k, primary)
			if i < len(s.Secrets) {
				line += "\t" + s.Secrets[i]
			}
			fmt.Fprintln(tw, line)
		}
	}
	tw.Flush()
}

package main

import (
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/meteor-edge/meteor/cluster"
	"github.com/meteor-edge/meteor/fsm/acl"
)

// Files of a TLS directory: the gossip encryption key, the first admin
// token's secret (for the operator) and its hash (for the servers).
const (
	gossipKeyFile      = "gossip.key"
	adminTokenFile     = "admin.token"
	adminTokenHashFile = "admin-token.sha256"
)

func newTLSCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "tls",
		Short: "Set up the material a secure cluster starts from",
	}
	var dir, ids, hosts string
	var servers int
	var validFor time.Duration
	initCmd := &cobra.Command{
		Use:   "init",
		Short: "Create the cluster CA, a certificate per server, the cluster secret, the gossip key and the first admin token",
		Long: `Create, in --dir, everything a new cluster's servers start from:

  ca.pem, ca-key.pem            the cluster CA (keep ca-key.pem offline afterwards)
  server-<id>.pem, -key.pem     a certificate per server, carrying its node ID
  cluster.secret                derives resume-token and session-ticket keys
  gossip.key                    encrypts gossip between the servers
  admin.token                   the first admin token's secret, for operators
                                (meteor --token-file DIR/admin.token ...)
  admin-token.sha256            its hash: servers create the token from it and
                                require tokens on the HTTP API

Every file holding a secret is written with mode 0600, and nothing is
overwritten. Give each server the directory (or its own files) with
'meteor server --tls-dir DIR'; issue device certificates with
'meteor ca issue-device --dir DIR'.`,
		Example: `  meteor tls init --dir pki --servers 3 --hosts 10.0.0.1,10.0.1.1,10.0.2.1
  meteor tls init --dir pki --ids eu-1,us-1,ap-1`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			var list []string
			if ids != "" {
				list = strings.Split(ids, ",")
			} else {
				if servers < 1 || servers > 7 {
					return fmt.Errorf("--servers %d: must be between 1 and 7", servers)
				}
				for i := range servers {
					list = append(list, fmt.Sprintf("s%d", i+1))
				}
			}
			return initTLS(cmd.OutOrStdout(), dir, list, strings.Split(hosts, ","), validFor)
		},
	}
	f := initCmd.Flags()
	f.StringVar(&dir, "dir", "pki", "directory to create the files in")
	f.IntVar(&servers, "servers", 3, "number of server certificates, for node IDs s1 ... sN")
	f.StringVar(&ids, "ids", "", "comma-separated node IDs of the servers (instead of --servers)")
	f.StringVar(&hosts, "hosts", "127.0.0.1", "comma-separated IPs and names every server certificate is valid for; issue a server of its own with 'meteor ca issue-server'")
	f.DurationVar(&validFor, "valid-for", 10*365*24*time.Hour, "CA certificate lifetime")
	cmd.AddCommand(initCmd)
	return cmd
}

// initTLS creates the CA, the cluster secret, the gossip key and a server
// certificate for each of ids in dir.
func initTLS(out io.Writer, dir string, ids, hosts []string, validFor time.Duration) error {
	for _, id := range ids {
		if err := cluster.CheckNodeID(id); err != nil {
			return err
		}
	}
	if _, err := os.Stat(filepath.Join(dir, gossipKeyFile)); err == nil {
		return fmt.Errorf("%s already holds a gossip key: refusing to overwrite it", dir)
	}
	if err := initCA(out, dir, validFor); err != nil {
		return err
	}
	ca, err := loadCA(dir)
	if err != nil {
		return err
	}
	for _, id := range ids {
		cert, err := ca.IssueServer(id, hosts)
		if err != nil {
			return err
		}
		if err := writeCert(out, dir, "server-"+id, cert); err != nil {
			return err
		}
	}
	key := make([]byte, 32)
	rand.Read(key)
	if err := writeSecretFile(filepath.Join(dir, gossipKeyFile), key); err != nil {
		return err
	}
	fmt.Fprintf(out, "created %s in %s\n", gossipKeyFile, dir)
	return writeAdminToken(out, dir)
}

// writeAdminToken generates the first admin token: its secret in
// admin.token, its hash in admin-token.sha256, both of mode 0600.
func writeAdminToken(out io.Writer, dir string) error {
	tok, err := acl.Generate(rand.Reader)
	if err != nil {
		return err
	}
	for _, f := range []struct{ name, content string }{
		{adminTokenFile, tok.Secret}, {adminTokenHashFile, acl.HashSecret(tok.Secret)},
	} {
		if err := writePrivateFile(filepath.Join(dir, f.name), f.content+"\n"); err != nil {
			return err
		}
	}
	fmt.Fprintf(out, "created %s and %s in %s (keep %s like a password; servers need only the hash)\n", adminTokenFile, adminTokenHashFile, dir, adminTokenFile)
	return nil
}

// writePrivateFile writes s to a new file of mode 0600.
func writePrivateFile(path, s string) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	_, err = f.WriteString(s)
	return errors.Join(err, f.Close())
}

// readAdminTokenHash reads admin-token.sha256 written by 'meteor tls init'.
func readAdminTokenHash(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("admin token hash file: %w", err)
	}
	h := strings.TrimSpace(string(b))
	if !acl.ValidSecretHash(h) {
		return "", fmt.Errorf("admin token hash file %s: not a hex SHA-256", path)
	}
	return h, nil
}

func fileExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// writeSecretFile writes b base64-encoded to a new file of mode 0600.
func writeSecretFile(path string, b []byte) error {
	return writePrivateFile(path, base64.StdEncoding.EncodeToString(b)+"\n")
}

// readGossipKey reads a gossip key file written by 'meteor tls init'.
func readGossipKey(path string) ([]byte, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("gossip key file: %w", err)
	}
	k, err := cluster.ParseGossipKey(strings.TrimSpace(string(b)))
	if err != nil {
		return nil, fmt.Errorf("gossip key file %s: %w", path, err)
	}
	return k, nil
}

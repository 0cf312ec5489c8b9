package main

import (
	"crypto/rand"
	"crypto/tls"
	"encoding/base64"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/meteor-edge/meteor/cluster"
	"github.com/meteor-edge/meteor/cluster/pki"
	"github.com/meteor-edge/meteor/wire"
)

// File names in a CA directory.
const (
	caCertFile    = "ca.pem"
	caKeyFile     = "ca-key.pem"
	clusterSecret = "cluster.secret"
)

func newCACmd() *cobra.Command {
	var dir string
	cmd := &cobra.Command{
		Use:   "ca",
		Short: "Create the cluster CA, the cluster secret, and server and device certificates",
		Long: `Agents and servers authenticate each other with certificates from one cluster CA:
every server has a server certificate, every device its own device certificate,
and the device ID is taken from it. Servers also share a cluster secret, from
which they derive resume-token and TLS session-ticket keys.

  meteor ca init --dir pki                       # pki/ca.pem, pki/ca-key.pem, pki/cluster.secret
  meteor ca issue-server --dir pki --id eu-1 --hosts 10.0.0.1
  meteor ca issue-device --dir pki --id store-42-router

Keep ca-key.pem offline once the certificates are issued.`,
	}
	cmd.PersistentFlags().StringVar(&dir, "dir", "pki", "directory of the CA files")

	var validFor time.Duration
	initCmd := &cobra.Command{
		Use: "init", Short: "Create a new cluster CA and cluster secret", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return initCA(cmd.OutOrStdout(), dir, validFor)
		},
	}
	initCmd.Flags().DurationVar(&validFor, "valid-for", 10*365*24*time.Hour, "CA certificate lifetime")

	var id, hosts string
	server := &cobra.Command{
		Use: "issue-server", Short: "Issue a server certificate", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			ca, err := loadCA(dir)
			if err != nil {
				return err
			}
			var hs []string
			if hosts != "" {
				hs = strings.Split(hosts, ",")
			}
			cert, err := ca.IssueServer(id, hs)
			if err != nil {
				return err
			}
			return writeCert(cmd.OutOrStdout(), dir, "server-"+id, cert)
		},
	}
	server.Flags().StringVar(&id, "id", "", "server node ID")
	server.Flags().StringVar(&hosts, "hosts", "127.0.0.1", "comma-separated IPs and names the server is reached at")

	device := &cobra.Command{
		Use: "issue-device", Short: "Issue a device certificate (the device ID is taken from it)", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			ca, err := loadCA(dir)
			if err != nil {
				return err
			}
			cert, err := ca.IssueDevice(id)
			if err != nil {
				return err
			}
			return writeCert(cmd.OutOrStdout(), dir, "device-"+id, cert)
		},
	}
	device.Flags().StringVar(&id, "id", "", "device ID")
	cmd.AddCommand(initCmd, server, device)
	return cmd
}

func initCA(out io.Writer, dir string, validFor time.Duration) error {
	if _, err := os.Stat(filepath.Join(dir, caKeyFile)); err == nil {
		return fmt.Errorf("%s already holds a CA: refusing to overwrite it", dir)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	ca, err := pki.NewCA("Meteor cluster CA", validFor)
	if err != nil {
		return err
	}
	certPEM, keyPEM, err := ca.PEM()
	if err != nil {
		return err
	}
	secret := make([]byte, 32)
	if _, err := rand.Read(secret); err != nil {
		return err
	}
	for name, data := range map[string][]byte{caCertFile: certPEM, caKeyFile: keyPEM} {
		if err := writePrivateFile(filepath.Join(dir, name), string(data)); err != nil {
			return err
		}
	}
	if err := writeSecretFile(filepath.Join(dir, clusterSecret), secret); err != nil {
		return err
	}
	fmt.Fprintf(out, "created %s, %s and %s in %s\n", caCertFile, caKeyFile, clusterSecret, dir)
	return nil
}

func loadCA(dir string) (*pki.CA, error) {
	certPEM, err := os.ReadFile(filepath.Join(dir, caCertFile))
	if err != nil {
		return nil, fmt.Errorf("%w (run 'meteor ca init --dir %s' first)", err, dir)
	}
	keyPEM, err := os.ReadFile(filepath.Join(dir, caKeyFile))
	if err != nil {
		return nil, err
	}
	return pki.LoadCA(certPEM, keyPEM)
}

func writeCert(out io.Writer, dir, name string, cert tls.Certificate) error {
	certPEM, keyPEM, err := pki.CertificatePEM(cert)
	if err != nil {
		return err
	}
	certPath, keyPath := filepath.Join(dir, name+".pem"), filepath.Join(dir, name+"-key.pem")
	if err := os.WriteFile(certPath, certPEM, 0o644); err != nil {
		return err
	}
	if err := os.WriteFile(keyPath, keyPEM, 0o600); err != nil {
		return err
	}
	fmt.Fprintf(out, "wrote %s and %s\n", certPath, keyPath)
	return nil
}

// loadAgentTLS reads the files a server needs to serve agents.
func loadAgentTLS(caFile, certFile, keyFile, secretFile string) (*cluster.AgentTLS, []byte, error) {
	t, err := loadTLSMaterial(caFile, certFile, keyFile)
	if err != nil {
		return nil, nil, err
	}
	secret, err := readSecret(secretFile)
	if err != nil {
		return nil, nil, err
	}
	return t, secret, nil
}

// loadTLSMaterial reads the CA pool and a server's certificate and key.
func loadTLSMaterial(caFile, certFile, keyFile string) (*cluster.AgentTLS, error) {
	caPEM, err := os.ReadFile(caFile)
	if err != nil {
		return nil, fmt.Errorf("CA file: %w", err)
	}
	pool, err := pki.PoolFromPEM(caPEM)
	if err != nil {
		return nil, fmt.Errorf("CA file %s: %w", caFile, err)
	}
	certPEM, err := os.ReadFile(certFile)
	if err != nil {
		return nil, fmt.Errorf("certificate file: %w", err)
	}
	keyPEM, err := os.ReadFile(keyFile)
	if err != nil {
		return nil, fmt.Errorf("key file: %w", err)
	}
	cert, err := pki.LoadCertificate(certPEM, keyPEM)
	if err != nil {
		return nil, fmt.Errorf("server certificate %s: %w", certFile, err)
	}
	return &cluster.AgentTLS{ClientCAs: pool, Certificate: cert}, nil
}

func readSecret(path string) ([]byte, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("cluster secret file: %w", err)
	}
	secret, err := base64.StdEncoding.DecodeString(strings.TrimSpace(string(b)))
	if err != nil {
		return nil, fmt.Errorf("cluster secret file %s: not base64: %w", path, err)
	}
	if len(secret) < wire.MinClusterSecretLen {
		return nil, fmt.Errorf("cluster secret file %s: %d bytes, need at least %d", path, len(secret), wire.MinClusterSecretLen)
	}
	return secret, nil
}

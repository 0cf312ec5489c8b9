package agentcmd

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/meteor-edge/meteor/agent"
	"github.com/meteor-edge/meteor/agent/driver"
	"github.com/meteor-edge/meteor/cluster/pki"
	"github.com/meteor-edge/meteor/cmd/internal/cliflags"
	"github.com/meteor-edge/meteor/fsm/intent"
	"github.com/meteor-edge/meteor/wire"
)

// New returns the agent command. path is how it is invoked: "meteor
// agent" (a subcommand of meteor) or "meteor-agent" (the command of the
// agent binary); the command's name is its last word, and the examples
// use it.
func New(path string) *cobra.Command {
	cfg := agent.DefaultConfig()
	var servers, labelList, deviceID, caFile, certFile, keyFile, execAllow, execEnvAllow string
	var enrollToken, enrollFile string
	var logs cliflags.Logs
	var conf cliflags.Config
	cmd := &cobra.Command{
		Use:   path[strings.LastIndex(path, " ")+1:],
		Short: "Run the device agent",
		Long: `Run the device agent: keep a session with the nearest Meteor server, journal the
desired state it receives in --data-dir, bring the device to it, watch it for
drift, and report what is applied and effective.

The device identity is its certificate. Either enroll: with --enroll TOKEN
(or --enroll-file) and no certificate yet in --data-dir, the agent generates
its key on the device, sends a certificate request with the enrollment token
(meteor token create --policy enroll) to a server, and keeps the signed
certificate in --data-dir (device.pem, mode 0600); later runs use it and
ignore --enroll, and the agent renews it on its own before it expires. Or
install a certificate from 'meteor ca issue-device' with --cert-file and
--key-file; --device-id must repeat the ID in it, as a check that the right
certificate is installed. --root confines the paths of file and certificate resources
beneath a directory; --exec-allow and --exec-env-allow narrow what exec
resources may run. See docs/agent.md and docs/security.md.

--config FILE reads flag values from a YAML file keyed by flag name
(device-id: store-42-router, servers: [10.0.0.1:8473, 10.0.1.1:8473],
labels: {region: eu}); flags given on the command line override it.
docs/config.md lists every key.`,
		Example: `  ` + path + ` --servers 10.0.0.1:8473,10.0.1.1:8473 --device-id store-42-router \
    --data-dir /var/lib/meteor-agent --ca-file pki/ca.pem --enroll-file /run/enroll.token
  ` + path + ` --servers 10.0.0.1:8473,10.0.1.1:8473 --device-id store-42-router \
    --data-dir /var/lib/meteor-agent --labels region=eu,site=store-42 \
    --ca-file pki/ca.pem --cert-file pki/device-store-42-router.pem \
    --key-file pki/device-store-42-router-key.pem
  ` + path + ` --config /etc/meteor/agent.yaml`,
		Args:    cobra.NoArgs,
		PreRunE: func(cmd *cobra.Command, args []string) error { return conf.Apply(cmd.Flags()) },
		RunE: func(cmd *cobra.Command, args []string) error {
			for _, req := range [][2]string{
				{"--servers", servers}, {"--device-id", deviceID}, {"--data-dir", cfg.DataDir}, {"--ca-file", caFile},
			} {
				if req[1] == "" {
					return fmt.Errorf("%s is required", req[0])
				}
			}
			for _, s := range strings.Split(servers, ",") {
				if s = strings.TrimSpace(s); s != "" {
					cfg.Servers = append(cfg.Servers, s)
				}
			}
			var err error
			if cfg.Logger, err = logs.Logger(os.Stderr); err != nil {
				return err
			}
			if certFile == "" && keyFile == "" {
				// The certificate the agent enrolled for, and renews, in
				// its data dir.
				if cfg.Certificate, cfg.RootCAs, err = enrolledTLS(cmd.Context(), cfg, caFile, deviceID, enrollToken, enrollFile); err != nil {
					return err
				}
				cfg.CertificateDir = cfg.DataDir
			} else {
				if enrollToken != "" || enrollFile != "" {
					return errors.New("--enroll and --enroll-file get a certificate into --data-dir: give them without --cert-file and --key-file")
				}
				if certFile == "" || keyFile == "" {
					return errors.New("--cert-file and --key-file go together")
				}
				roots, cert, err := loadDeviceTLS(caFile, certFile, keyFile)
				if err != nil {
					return err
				}
				id, err := agent.DeviceIDFromCertificate(cert)
				if err != nil {
					return fmt.Errorf("certificate %s: %w", certFile, err)
				}
				if id != deviceID {
					return fmt.Errorf("--device-id %q does not match the device certificate %s, which is for device %q; "+
						"the servers identify the device by its certificate only", deviceID, certFile, id)
				}
				cfg.RootCAs, cfg.Certificate = roots, cert
			}
			if cfg.Labels, err = parseLabelFlag(labelList); err != nil {
				return err
			}
			if _, ok := cfg.Labels[intent.ZoneLabel]; !ok {
				// The device's time zone is a fact it reports, for its
				// maintenance windows; the control plane's label wins.
				if zone := systemZone(); zone != "" {
					if cfg.Labels == nil {
						cfg.Labels = map[string]string{}
					}
					cfg.Labels[intent.ZoneLabel] = intent.ZoneLabelValue(zone)
				}
			}
			if cfg.Root != "" {
				if cfg.Root, err = filepath.Abs(cfg.Root); err != nil {
					return fmt.Errorf("--root: %w", err)
				}
			}
			cfg.AgentVersion = "meteor-agent " + wire.ReleaseVersion
			if cfg.ExecPolicy, err = parseExecPolicy(execAllow, execEnvAllow); err != nil {
				return err
			}
			a, err := agent.New(cfg)
			if err != nil {
				return err
			}
			fmt.Fprintf(os.Stderr, "%s %s: servers %s, journal in %s (Ctrl-C to stop)\n",
				cmd.CommandPath(), a.DeviceID(), strings.Join(cfg.Servers, ","), cfg.DataDir)
			return a.Run(cmd.Context())
		},
	}
	f := cmd.Flags()
	f.StringVar(&servers, "servers", "", "comma-separated agent addresses (host:port, UDP) of the cluster's servers (required)")
	f.StringVar(&deviceID, "device-id", "", "this device's ID; must equal the ID in the device certificate (required)")
	f.StringVar(&cfg.DataDir, "data-dir", "", "directory of the agent's journal (required)")
	f.StringVar(&labelList, "labels", "", "comma-separated key=value labels sent to the servers, e.g. region=eu,site=store-42")
	f.StringVar(&caFile, "ca-file", "", "PEM file of the cluster CA (required)")
	f.StringVar(&certFile, "cert-file", "", "PEM file of a device certificate from 'meteor ca issue-device' (instead of enrolling)")
	f.StringVar(&keyFile, "key-file", "", "PEM file of its key")
	f.StringVar(&enrollToken, "enroll", "", "enrollment token: get a device certificate into --data-dir unless it holds a valid one (prefer --enroll-file: arguments are visible to other users)")
	f.StringVar(&enrollFile, "enroll-file", "", "file holding the enrollment token (see --enroll)")
	f.StringVar(&cfg.Root, "root", "", "confine file and certificate resource paths beneath this directory; links out of it are refused")
	f.StringVar(&execAllow, "exec-allow", "", "comma-separated absolute paths of the only programs exec resources may run, compared after resolving links (default: any)")
	f.StringVar(&execEnvAllow, "exec-env-allow", "", "comma-separated names (or PREFIX_*) of the env variables exec resources may set; loader and interpreter variables only by exact name (default: none)")
	f.DurationVar(&cfg.PullInterval, "pull-interval", cfg.PullInterval, "how often to pull without a push, unless the server says otherwise")
	f.DurationVar(&cfg.ReportInterval, "report-interval", cfg.ReportInterval, "longest time between two full reports (those in between carry only what changed)")
	f.DurationVar(&cfg.KeepAliveMin, "keepalive-min", cfg.KeepAliveMin, "keep-alive interval to start at, and never go below (lower it for a NAT that forgets a UDP binding sooner)")
	f.DurationVar(&cfg.KeepAliveMax, "keepalive-max", cfg.KeepAliveMax, "longest keep-alive interval the NAT binding tests may reach (at or below --keepalive-min: no tests)")
	f.DurationVar(&cfg.ProbeInterval, "probe-interval", cfg.ProbeInterval, "how often applied resources are re-checked for drift and probed")
	f.StringVar(&cfg.ControlSocket, "control-socket", "", "path of the local control socket (default DATA-DIR/agent.sock; - for none)")
	f.StringVar(&cfg.LockDir, "lock-dir", "", "directory of workload lock files (default DATA-DIR/locks; - for none)")
	f.DurationVar(&cfg.LockMaxHold, "lock-max-hold", cfg.LockMaxHold, "maximum hold of a lock file that names none, after which it is reported stale")
	logs.Register(f, "info")
	conf.Register(f)
	cliflags.MarkList(f, "servers", "exec-allow", "exec-env-allow")
	cliflags.MarkKeyValues(f, "labels")
	cmd.AddCommand(localCommands(path)...)
	return cmd
}

// enrolledTLS loads the cluster CA and the certificate kept in the data
// dir, enrolling with the token first if there is none.
func enrolledTLS(ctx context.Context, cfg agent.Config, caFile, deviceID, token, tokenFile string) (tls.Certificate, *x509.CertPool, error) {
	if token != "" && tokenFile != "" {
		return tls.Certificate{}, nil, errors.New("give --enroll or --enroll-file, not both")
	}
	if tokenFile != "" {
		b, err := os.ReadFile(tokenFile)
		if err != nil {
			return tls.Certificate{}, nil, fmt.Errorf("--enroll-file: %w", err)
		}
		token = strings.TrimSpace(string(b))
	}
	roots, err := loadCAPool(caFile)
	if err != nil {
		return tls.Certificate{}, nil, err
	}
	cert, err := agent.LoadOrEnroll(ctx, agent.EnrollConfig{
		DataDir: cfg.DataDir, DeviceID: deviceID, Token: token, Servers: cfg.Servers, RootCAs: roots, Logger: cfg.Logger,
	})
	if err != nil {
		return tls.Certificate{}, nil, fmt.Errorf("%w (or install a certificate with --cert-file and --key-file)", err)
	}
	return cert, roots, nil
}

// loadDeviceTLS reads the cluster CA and the device certificate and key.
func loadDeviceTLS(caFile, certFile, keyFile string) (*x509.CertPool, tls.Certificate, error) {
	roots, err := loadCAPool(caFile)
	if err != nil {
		return nil, tls.Certificate{}, err
	}
	certPEM, err := os.ReadFile(certFile)
	if err != nil {
		return nil, tls.Certificate{}, fmt.Errorf("--cert-file: %w", err)
	}
	keyPEM, err := os.ReadFile(keyFile)
	if err != nil {
		return nil, tls.Certificate{}, fmt.Errorf("--key-file: %w", err)
	}
	cert, err := pki.LoadCertificate(certPEM, keyPEM)
	if err != nil {
		return nil, tls.Certificate{}, fmt.Errorf("device certificate %s and key %s: %w", certFile, keyFile, err)
	}
	return roots, cert, nil
}

// loadCAPool reads the cluster CA of --ca-file.
func loadCAPool(caFile string) (*x509.CertPool, error) {
	caPEM, err := os.ReadFile(caFile)
	if err != nil {
		return nil, fmt.Errorf("--ca-file: %w", err)
	}
	roots, err := pki.PoolFromPEM(caPEM)
	if err != nil {
		return nil, fmt.Errorf("--ca-file %s: %w", caFile, err)
	}
	return roots, nil
}

// parseExecPolicy builds the exec policy of --exec-allow and
// --exec-env-allow (comma-separated lists), resolving the programs now.
func parseExecPolicy(execAllow, execEnvAllow string) (driver.ExecPolicy, error) {
	var p driver.ExecPolicy
	for _, l := range []struct {
		flag, value string
		dst         *[]string
	}{{"--exec-allow", execAllow, &p.Programs}, {"--exec-env-allow", execEnvAllow, &p.Env}} {
		for _, e := range strings.Split(l.value, ",") {
			if e = strings.TrimSpace(e); e != "" {
				*l.dst = append(*l.dst, e)
			}
		}
	}
	if err := (driver.ExecPolicy{Programs: p.Programs}).Validate(); err != nil {
		return p, fmt.Errorf("--exec-allow: %w", err)
	}
	if err := (driver.ExecPolicy{Env: p.Env}).Validate(); err != nil {
		return p, fmt.Errorf("--exec-env-allow: %w", err)
	}
	return p, nil
}

// systemZone returns the host's IANA time zone: $TZ, else the zone
// /etc/localtime links to; "" when neither names a known zone.
func systemZone() string {
	zone := os.Getenv("TZ")
	if zone == "" {
		target, err := os.Readlink("/etc/localtime")
		if err != nil {
			return ""
		}
		_, zone, _ = strings.Cut(target, "zoneinfo/")
	}
	zone = strings.TrimPrefix(zone, ":")
	if zone == "" || zone == "Local" {
		return ""
	}
	if _, err := time.LoadLocation(zone); err != nil {
		return ""
	}
	return zone
}

// parseLabelFlag parses "k=v,k2=v2" given to --labels.
func parseLabelFlag(s string) (map[string]string, error) { return cliflags.KeyValues("--labels", s) }

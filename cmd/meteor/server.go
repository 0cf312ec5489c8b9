package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"runtime/debug"
	"strings"
	"syscall"

	"github.com/hashicorp/go-hclog"
	"github.com/spf13/cobra"

	"github.com/meteor-edge/meteor/cluster"
	"github.com/meteor-edge/meteor/cmd/internal/cliflags"
)

func newServerCmd() *cobra.Command {
	cfg := cluster.DefaultConfig()
	var join, gossipKey string
	var logs cliflags.Logs
	var caFile, certFile, keyFile, secretFile, tlsDir, adminHashFile string
	var aclOn, insecure bool
	var deviceCA deviceCAFlags
	var historyLimit int
	var conf cliflags.Config
	var gc gcFlags
	cmd := &cobra.Command{
		Use:   "server",
		Short: "Run a Meteor server node",
		Long: `Run a Meteor server node. Start 3 or 5 servers with the same --bootstrap-expect
and --join pointing at each other's gossip addresses; the cluster forms once
that many servers see each other. A restarted server rejoins with its data dir.
With --dev, run a single throw-away server with its data in a temporary dir.

--config FILE reads flag values from a YAML file keyed by flag name
(node-id: eu-1, join: [10.0.1.1:8472, 10.0.2.1:8472]); flags given on the
command line override it. docs/config.md lists every key.`,
		Example: `  meteor server --node-id s1 --region eu --data-dir /var/lib/meteor \
    --http-addr 10.0.0.1:8470 --raft-addr 10.0.0.1:8471 --gossip-addr 10.0.0.1:8472 \
    --join 10.0.0.2:8472,10.0.0.3:8472 --bootstrap-expect 3
  meteor server --config /etc/meteor/server.yaml
  meteor server --dev`,
		Args:    cobra.NoArgs,
		PreRunE: func(cmd *cobra.Command, args []string) error { return conf.Apply(cmd.Flags()) },
		RunE: func(cmd *cobra.Command, args []string) error {
			if join != "" {
				cfg.Join = strings.Split(join, ",")
			}
			if tlsDir != "" {
				// The files 'meteor tls init' wrote, unless a flag names
				// another.
				set := func(flag string, v *string, name string) {
					if !cmd.Flags().Changed(flag) {
						*v = filepath.Join(tlsDir, name)
					}
				}
				set("ca-file", &caFile, caCertFile)
				set("cert-file", &certFile, "server-"+cfg.NodeID+".pem")
				set("key-file", &keyFile, "server-"+cfg.NodeID+"-key.pem")
				set("cluster-secret-file", &secretFile, clusterSecret)
				if !cmd.Flags().Changed("admin-token-hash-file") {
					if p := filepath.Join(tlsDir, adminTokenHashFile); fileExists(p) {
						adminHashFile = p
					}
				}
				// A secure set-up stays secure: without the bootstrap
				// hash (needed only until the first token exists) the
				// API still demands tokens.
				aclOn = true
				if gossipKey == "" {
					k, err := readGossipKey(filepath.Join(tlsDir, gossipKeyFile))
					if err != nil {
						return fmt.Errorf("--tls-dir: %w", err)
					}
					cfg.GossipKey = k
				}
			}
			if gossipKey != "" {
				k, err := cluster.ParseGossipKey(gossipKey)
				if err != nil {
					return err
				}
				cfg.GossipKey = k
			}
			cfg.FSM.HistoryLimit = historyLimit
			switch {
			case certFile != "" && insecure:
				return errors.New("--insecure-plaintext: this server has its certificate (--tls-dir or --cert-file); drop one of them")
			case certFile == "" && !insecure && !cfg.Dev:
				return errors.New("a server needs its certificate: create the material with 'meteor tls init --dir pki' and pass --tls-dir pki (or --cert-file and --key-file); --insecure-plaintext runs without TLS, for a network no one else reaches")
			case certFile != "" && len(cfg.GossipKey) == 0:
				return errors.New("gossip would travel unencrypted: give the gossip key (gossip.key from 'meteor tls init', which --tls-dir takes, or --encrypt KEY)")
			case certFile == "":
				fmt.Fprintln(os.Stderr, "WARNING: no TLS: Raft, gossip and the HTTP API speak plaintext, and anyone who reaches these ports can read and change the cluster's state ("+map[bool]string{true: "--dev", false: "--insecure-plaintext"}[cfg.Dev]+").")
			}
			if cfg.AgentAddr != "" || certFile != "" {
				// A server certificate serves agents and runs Raft over
				// mutual TLS with the other servers.
				t, secret, err := loadAgentTLS(caFile, certFile, keyFile, secretFile)
				if err != nil {
					if cfg.AgentAddr != "" {
						return fmt.Errorf("--agent-addr: %w", err)
					}
					return err
				}
				cfg.ClusterSecret = secret
				cfg.PeerTLS = &cluster.PeerTLS{CAs: t.ClientCAs, Certificate: t.Certificate}
				if cfg.AgentAddr != "" {
					cfg.AgentTLS = t
				}
				if err := deviceCA.apply(&cfg, tlsDir, caFile); err != nil {
					return err
				}
			} else if cmd.Flags().Changed("cluster-secret-file") {
				secret, err := readSecret(secretFile)
				if err != nil {
					return err
				}
				cfg.ClusterSecret = secret
			}
			if adminHashFile != "" {
				hash, err := readAdminTokenHash(adminHashFile)
				if err != nil {
					return err
				}
				cfg.ACL = &cluster.ACLConfig{BootstrapTokenHash: hash}
			} else if aclOn {
				cfg.ACL = &cluster.ACLConfig{}
			}
			if cfg.ACL == nil && !cfg.Dev {
				fmt.Fprintln(os.Stderr, "WARNING: the HTTP API authenticates no one: anyone who reaches it can change intents and members. Start from 'meteor tls init' (--tls-dir with admin-token.sha256) or pass --acl.")
			}
			if cfg.Dev {
				if cfg.NodeID == "" {
					cfg.NodeID = "dev"
				}
				if cfg.DataDir == "" {
					dir, err := os.MkdirTemp("", "meteor-dev-")
					if err != nil {
						return err
					}
					defer os.RemoveAll(dir)
					cfg.DataDir = dir
				}
			}
			var err error
			if cfg.Logger, err = logs.Logger(os.Stderr); err != nil {
				return err
			}
			percent, limit, tune, warning, err := gc.apply()
			if err != nil {
				return err
			}
			if warning != nil {
				cfg.Logger.Warn("no memory limit", "error", warning)
			}
			cfg.Logger.Info("garbage collector", "gc_percent", percent, "tuned", tune, "memory_limit", limit)
			if tune {
				t := &gcTuner{read: gcSampler(), set: debug.SetGCPercent, collect: debug.FreeOSMemory, cur: percent, limit: limit, logger: cfg.Logger.Named("gc")}
				go t.run(cmd.Context())
			}
			srv, err := cluster.New(cfg)
			if err != nil {
				return err
			}
			fmt.Fprintf(os.Stderr, "meteor server %s: HTTP API on %s (Ctrl-C to stop)\n", cfg.NodeID, srv.HTTPURL())
			if cfg.PeerTLS != nil {
				stop := reloadOnHangup(cmd.Context(), srv, cfg.Logger, caFile, certFile, keyFile)
				defer stop()
			}
			return srv.Run(cmd.Context())
		},
	}
	f := cmd.Flags()
	f.StringVar(&cfg.NodeID, "node-id", "", "unique, stable server ID (required)")
	f.StringVar(&cfg.Region, "region", cfg.Region, "region this server serves")
	f.StringVar(&cfg.DataDir, "data-dir", "", "directory for the Raft log and snapshots (required unless --dev)")
	f.StringVar(&cfg.HTTPAddr, "http-addr", "127.0.0.1:8470", "HTTP API address")
	f.StringVar(&cfg.RaftAddr, "raft-addr", "127.0.0.1:8471", "Raft TCP address, reachable by the other servers")
	f.StringVar(&cfg.GossipAddr, "gossip-addr", "127.0.0.1:8472", "gossip TCP+UDP address, reachable by the other servers")
	f.StringVar(&join, "join", "", "comma-separated gossip addresses of servers to join")
	f.IntVar(&cfg.BootstrapExpect, "bootstrap-expect", 0, "form a new cluster once this many servers see each other")
	f.BoolVar(&cfg.Dev, "dev", false, "run a single throw-away server")
	f.BoolVar(&cfg.TrustReportedLabels, "trust-reported-labels", false, "select intents by the labels devices report until the control plane labels them (development and benchmarks only: any device could claim any label; --dev implies it)")
	f.StringVar(&gossipKey, "encrypt", "", "base64 gossip encryption key (16, 24 or 32 bytes), the same on every server")
	f.IntVar(&historyLimit, "history-limit", cfg.FSM.HistoryLimit, "revisions kept per intent; the same on every server")
	f.IntVar(&cfg.RaftMultiplier, "raft-multiplier", cfg.RaftMultiplier, "scale Raft's 1 s heartbeat, election and leader-lease timeouts (1-10); 1 replaces a failed leader faster, more holds on slower hosts and longer round trips")
	f.DurationVar(&cfg.ApplyTimeout, "apply-timeout", cfg.ApplyTimeout, "how long a write waits to be committed")
	f.DurationVar(&cfg.DrainTimeout, "drain-timeout", cluster.DefaultDrainTimeout, "on SIGTERM or Ctrl-C, how long to hand leadership over and move agents to the other servers before stopping")
	f.Uint64Var(&cfg.SnapshotThreshold, "snapshot-threshold", cfg.SnapshotThreshold, "log entries between Raft snapshots")
	f.StringVar(&cfg.AgentAddr, "agent-addr", "", "UDP address to serve device agents on (QUIC); needs the TLS flags below")
	f.StringVar(&tlsDir, "tls-dir", "", "directory from 'meteor tls init': takes ca.pem, server-<node-id>.pem and its key, cluster.secret, gossip.key and admin-token.sha256 from it (flags naming a file override)")
	f.StringVar(&caFile, "ca-file", "pki/ca.pem", "cluster CA certificate (PEM), which signs device certificates")
	f.StringVar(&certFile, "cert-file", "", "this server's certificate (PEM), from 'meteor tls init' or 'meteor ca issue-server': it serves agents and runs Raft over mutual TLS")
	f.StringVar(&keyFile, "key-file", "", "this server's private key (PEM)")
	f.StringVar(&adminHashFile, "admin-token-hash-file", "", "file with the SHA-256 of the first admin token (admin-token.sha256 from 'meteor tls init', which --tls-dir takes): switches on token authentication of the HTTP API")
	f.BoolVar(&insecure, "insecure-plaintext", false, "run without a certificate: Raft, gossip (unless --encrypt) and the HTTP API in plaintext, for a network no one else reaches")
	f.BoolVar(&aclOn, "acl", false, "require tokens on the HTTP API even without --admin-token-hash-file (a cluster that has its tokens already)")
	f.StringVar(&secretFile, "cluster-secret-file", "pki/cluster.secret", "cluster secret shared by all servers (from 'meteor ca init')")
	f.DurationVar(&cfg.PullInterval, "pull-interval", cfg.PullInterval, "how often agents are told to pull even without a push")
	f.BoolVar(&cfg.EnableDebug, "enable-debug", false, "serve Go profiling endpoints under /debug/pprof/ on the HTTP API")
	logs.Register(f, "info")
	gc.register(f)
	deviceCA.register(f)
	conf.Register(f)
	cliflags.MarkList(f, "join")
	return cmd
}

// reloadOnHangup reloads the CA file and the server's certificate and key
// (Server.ReloadTLS) on every SIGHUP, until the returned stop is called.
// A reload that fails (a missing file, a certificate that is not this
// server's) is logged and changes nothing.
func reloadOnHangup(ctx context.Context, srv *cluster.Server, logger hclog.Logger, caFile, certFile, keyFile string) (stop func()) {
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, syscall.SIGHUP)
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-ctx.Done():
				return
			case <-ch:
			}
			t, err := loadTLSMaterial(caFile, certFile, keyFile)
			if err == nil {
				err = srv.ReloadTLS(t.ClientCAs, t.Certificate)
			}
			if err != nil {
				logger.Error("SIGHUP: TLS material not reloaded", "error", err)
				continue
			}
			logger.Info("SIGHUP: TLS material reloaded", "ca_file", caFile, "cert_file", certFile)
		}
	}()
	return func() { signal.Stop(ch); cancel(); <-done }
}

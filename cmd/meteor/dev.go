package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/spf13/cobra"

	"github.com/meteor-edge/meteor/cluster"
	"github.com/meteor-edge/meteor/cluster/api"
	"github.com/meteor-edge/meteor/cmd/internal/cliflags"
	"github.com/meteor-edge/meteor/scheduler"
)

func newDevCmd() *cobra.Command {
	var servers, basePort, fleetDevices int
	var examples, dataDir, fleet, changes string
	var keepRunning bool
	var logs cliflags.Logs
	cmd := &cobra.Command{
		Use:   "dev",
		Short: "Run a local development cluster and apply example intents",
		Long: `Run a real Meteor cluster of --servers nodes on loopback in this process
(Raft on raft-boltdb files, gossip, the HTTP API), wait for it to elect a leader,
apply the intents in --examples, and show the members and revisions. Ctrl-C
stops every server and removes the data dir (unless --data-dir was given).
Server i listens on ports base+10*i (HTTP), +1 (Raft), +2 (gossip).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return runDev(cmd.Context(), cmd.OutOrStdout(), devOptions{
				servers: servers, basePort: basePort, dataDir: dataDir, examples: examples,
				fleet: fleet, fleetDevices: fleetDevices, changes: changes, keepRunning: keepRunning, logs: logs,
			})
		},
	}
	cmd.Flags().IntVar(&servers, "servers", 3, "number of servers (3 or 5)")
	cmd.Flags().IntVar(&basePort, "base-port", 8470, "first server's HTTP port")
	cmd.Flags().StringVar(&examples, "examples", "", "file or directory of intents to apply once the cluster is up")
	cmd.Flags().StringVar(&dataDir, "data-dir", "", "keep the servers' data here instead of a temporary dir")
	cmd.Flags().StringVar(&fleet, "fleet", "", "also run a simulated fleet in this process with this profile (fiber, cellular, popup, retail)")
	cmd.Flags().IntVar(&fleetDevices, "fleet-devices", 0, "devices in the simulated fleet (0: the profile's default, 1,200 for retail)")
	cmd.Flags().StringVar(&changes, "changes", "", "with --fleet: a directory of intents applied one after another, each once the previous has converged, while the fleet status is redrawn")
	cmd.Flags().BoolVar(&keepRunning, "keep-running", false, "with --fleet: keep the cluster and the fleet running after the last change, until Ctrl-C")
	logs.Register(cmd.Flags(), "info")
	return cmd
}

type devOptions struct {
	servers, basePort, fleetDevices   int
	dataDir, examples, fleet, changes string
	keepRunning                       bool
	// logs are the servers' (meteor.log in the data dir); the fleet
	// simulator's log (fleet.log) takes their format.
	logs cliflags.Logs
}

// devCluster is the running dev cluster, as the fleet view needs it.
type devCluster struct {
	*cluster.Local
	client     *api.Client // to the first server
	agentAddrs []string
	pkiDir     string
	logPath    string
	console    string // the web console's address, with the admin token
	// startTerm is the highest Raft term once the cluster first had a
	// leader; elections since are counted from it.
	startTerm uint64
}

// checkPorts tells, before anything starts, whether the ports of n
// servers from basePort on are free, and how to choose others if not.
func checkPorts(n, basePort int) error {
	for i := range n {
		for off := 0; off < 4; off++ {
			port := basePort + 10*i + off
			addr := hostPort(port)
			if off != 3 { // HTTP, Raft and gossip use TCP
				ln, err := net.Listen("tcp", addr)
				if err != nil {
					return portInUse(port, basePort, err)
				}
				ln.Close()
			}
			if off >= 2 { // gossip and agents use UDP
				pc, err := net.ListenPacket("udp", addr)
				if err != nil {
					return portInUse(port, basePort, err)
				}
				pc.Close()
			}
		}
	}
	return nil
}

func portInUse(port, basePort int, err error) error {
	return fmt.Errorf("port %d is in use (%v): is another 'meteor dev' running? Choose other ports with --base-port, e.g. 'meteor dev --base-port %d', or 'make demo DEMO_FLAGS=\"--base-port %d\"'",
		port, err, basePort+1000, basePort+1000)
}

func runDev(ctx context.Context, out io.Writer, o devOptions) (err error) {
	n, basePort, dataDir, examples := o.servers, o.basePort, o.dataDir, o.examples
	if n < 1 || n > 7 {
		return fmt.Errorf("--servers %d: must be between 1 and 7", n)
	}
	if err := checkPorts(n, basePort); err != nil {
		return err
	}
	// A closed stdout (the demo piped into a command that has exited)
	// must fail writes, not kill the process before it stops the servers
	// and the simulator.
	signal.Ignore(syscall.SIGPIPE)
	if dataDir == "" {
		dir, terr := os.MkdirTemp("", "meteor-dev-")
		if terr != nil {
			return terr
		}
		defer func() {
			if err != nil {
				// Keep what explains the failure.
				fmt.Fprintf(out, "Kept the data and logs for a look: %s\n", dir)
				return
			}
			os.RemoveAll(dir)
		}()
		dataDir = dir
	}
	if err := os.MkdirAll(dataDir, 0o700); err != nil {
		return err
	}
	logPath := filepath.Join(dataDir, "meteor.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		return err
	}
	defer logFile.Close()
	logger, err := o.logs.Logger(logFile)
	if err != nil {
		return err
	}

	pkiDir := filepath.Join(dataDir, "pki")
	if err := initCA(io.Discard, pkiDir, 365*24*time.Hour); err != nil {
		return fmt.Errorf("create the development PKI: %w", err)
	}
	ca, err := loadCA(pkiDir)
	if err != nil {
		return err
	}
	secret, err := readSecret(filepath.Join(pkiDir, clusterSecret))
	if err != nil {
		return err
	}

	fmt.Fprintf(out, "Starting a %d-server Meteor cluster on loopback (data and logs in %s)\n", n, dataDir)
	startCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	l, err := cluster.StartLocal(startCtx, cluster.LocalOptions{
		Servers:  n,
		Dir:      dataDir,
		IDPrefix: "server-",
		Regions:  []string{"eu-west", "us-east", "ap-south"},
		BasePort: basePort,
		// The production timings: a development cluster shares its host
		// with the simulated fleet and whatever else runs there.
		ProductionTimings: true,
		Agents:            true,
		ACL:               true,
		CA:                ca,
		ClusterSecret:     secret,
		Logger:            func(string) hclog.Logger { return logger },
		Configure: func(_ int, cfg *cluster.Config) {
			// A development cluster shows transitions within seconds:
			// devices that go silent are unreachable after 15 s, not
			// minutes.
			cfg.Classes = devClasses()
			cfg.StatusEvalInterval = time.Second
			cfg.AgentIdleTimeout = 10 * time.Second
			cfg.Dev = n == 1
		},
	})
	if err != nil {
		return fmt.Errorf("%w (logs: %s; is another 'meteor dev' running? choose other ports with --base-port, or 'make demo DEMO_FLAGS=\"--base-port %d\"')", err, logPath, basePort+1000)
	}
	defer func() {
		fmt.Fprintln(out, "\nStopping the cluster...")
		err = errors.Join(err, l.Close())
		fmt.Fprintln(out, "All servers stopped.")
	}()
	srvs := l.Servers()
	for i, s := range srvs {
		fmt.Fprintf(out, "  %s  region %-8s  HTTP %s  raft %s  gossip %s  agents udp %s\n", s.ID(), l.Config(i).Region, s.HTTPURL(), s.RaftAddr(), s.GossipAddr(), s.AgentAddr())
	}
	tokenPath := filepath.Join(pkiDir, adminTokenFile)
	if err := writePrivateFile(tokenPath, l.AdminToken()+"\n"); err != nil {
		return fmt.Errorf("write the admin token: %w", err)
	}
	fmt.Fprintf(out, "\nEvery server speaks TLS and requires a token. To use the CLI with this cluster (admin token):\n"+
		"  export METEOR_ADDR=%s METEOR_CACERT=%s METEOR_TOKEN=%s\n",
		srvs[0].HTTPURL(), filepath.Join(pkiDir, caCertFile), l.AdminToken())
	console := consoleURL(srvs[0].HTTPURL(), l.AdminToken())
	printConsole(out, console, filepath.Join(pkiDir, caCertFile))
	c := l.Client(0)
	c.RetryNoLeader = 30 * time.Second
	fmt.Fprintln(out, "\nCluster is up; a leader is elected.")

	if examples != "" {
		docs, err := readIntents(examples)
		if err != nil {
			return err
		}
		fmt.Fprintf(out, "\nApplying %d intents from %s through %s (any server accepts writes):\n", len(docs), examples, srvs[len(srvs)-1].ID())
		last := l.Client(len(srvs) - 1)
		for _, in := range docs {
			body, err := json.Marshal(in)
			if err != nil {
				return err
			}
			res, err := last.PutIntent(ctx, in.Name, body, nil)
			if err != nil {
				return fmt.Errorf("apply %s: %w", in.Name, err)
			}
			fmt.Fprintf(out, "  intent/%s applied: revision %d\n", res.Name, res.Revision)
		}
	}

	if err := showCluster(ctx, out, c); err != nil {
		return err
	}
	agentAddrs := l.AgentAddrs()
	if o.fleet != "" {
		o.dataDir = dataDir // the temporary dir, when none was given
		dc := &devCluster{Local: l, client: c, agentAddrs: agentAddrs, pkiDir: pkiDir, logPath: logPath, console: console}
		dc.startTerm, _ = dc.Term(ctx)
		return runDevFleet(ctx, out, dc, o, logger)
	}
	devCert, err := ca.IssueDevice("pos-1")
	if err != nil {
		return err
	}
	if err := writeCert(io.Discard, pkiDir, "device-pos-1", devCert); err != nil {
		return err
	}
	fmt.Fprintf(out, "\nTry it from another terminal:\n  bin/meteor get intents --addr %s\n  bin/meteor members --addr %s\n", srvs[0].HTTPAddr(), srvs[0].HTTPAddr())
	fmt.Fprintf(out, "\nRun a device agent (files go under %s):\n  bin/meteor agent --servers %s --device-id pos-1 --labels role=pos-terminal,region=eu-west \\\n    --data-dir %s --root %s \\\n    --ca-file %s --cert-file %s --key-file %s\n  bin/meteor get device pos-1 --addr %s\n\nPress Ctrl-C to stop.\n",
		filepath.Join(dataDir, "pos-1-root"), strings.Join(agentAddrs, ","), filepath.Join(dataDir, "pos-1-agent"), filepath.Join(dataDir, "pos-1-root"),
		filepath.Join(pkiDir, caCertFile), filepath.Join(pkiDir, "device-pos-1.pem"), filepath.Join(pkiDir, "device-pos-1-key.pem"), srvs[0].HTTPAddr())
	<-ctx.Done()
	return nil
}

func showCluster(ctx context.Context, out io.Writer, c *api.Client) error {
	// Give every follower a moment to report its applied index.
	members, err := c.Members(ctx)
	if err != nil {
		return err
	}
	fmt.Fprintln(out, "\nMembers:")
	printMembers(out, members)
	list, err := c.ListIntents(ctx, api.ReadOptions{})
	if err != nil {
		return err
	}
	fmt.Fprintln(out, "\nIntents:")
	tw := table(out)
	fmt.Fprintln(tw, "NAME\tREVISION\tRESOURCES\tSELECTOR")
	for _, in := range list.Intents {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%s\n", in.Name, in.Revision, in.Resources, labels(in.Selector))
	}
	tw.Flush()
	fmt.Fprintf(out, "cluster revision %d\n", list.Revision)
	return nil
}

// devClasses are the built-in reconcile classes with thresholds short
// enough to watch: silence is a comms gap after 15 s, no progress for a
// minute is stuck. The agents' cadences are the built-in ones.
func devClasses() scheduler.Classes {
	classes := scheduler.DefaultClasses()
	for name, cl := range classes {
		cl.UnreachableAfter = 15 * time.Second
		cl.ProgressDeadline = time.Minute
		classes[name] = cl
	}
	return classes
}

func hostPort(port int) string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(port)) }

// consoleURL is the address of the web console of the server at base,
// with the token in the fragment: the browser never sends a fragment, and
// the console keeps the token in the tab's session storage and removes it
// from the address bar.
func consoleURL(base, token string) string { return base + "/ui/#token=" + token }

// printConsole tells where the web console is and how to make the browser
// trust the development CA, which signed the servers' certificates.
func printConsole(out io.Writer, console, caPath string) {
	fmt.Fprintf(out, "\nThe web console (every server serves it at /ui/; the link carries the admin token):\n"+
		"  console: %s\n"+
		"The servers' certificates come from a CA made for this run: %s\n"+
		"To open the console without a certificate warning, import that file into the browser as a certificate authority\n"+
		"(Chromium and Chrome: Settings > Privacy and security > Security > Manage certificates > Authorities > Import;\n"+
		"Firefox: Settings > Privacy & Security > Certificates > View Certificates > Authorities > Import),\n"+
		"or with NSS's certutil: certutil -d sql:$HOME/.pki/nssdb -A -t C,, -n meteor-dev -i %s\n",
		console, caPath, caPath)
}

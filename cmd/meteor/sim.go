package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/meteor-edge/meteor/agent/sim"
	"github.com/meteor-edge/meteor/cmd/internal/cliflags"
)

func newSimCmd() *cobra.Command {
	opts := sim.DefaultOptions()
	var servers, serverRegions, reportPath, logPath, enrollFile string
	var duration time.Duration
	var logs cliflags.Logs
	cmd := &cobra.Command{
		Use:   "sim",
		Short: "Run a simulated fleet of real agents against a cluster",
		Long: `Run --devices simulated devices in this process, each a real agent (QUIC
session, device certificate issued from the CA in --pki, its own journal under
--base-dir) with only the sim driver and a lossy in-process link:

  fiber     urban store uplink, ~1 ms, no loss
  cellular  rural kiosk modem, 20-80 ms round trips, 3 % loss, 8 s outage every 3 min
  popup     pop-up site, offline ~30 min out of ~50, half the time by power loss
  retail    1,200 devices by default: 60 % fiber stores (store-gateway,
            pos-terminal), 30 % cellular kiosks (role=kiosk, link=cellular),
            10 % pop-up sites, in regions eu-west, us-east, ap-south

Server i of --servers is taken to be in region eu-west, us-east, ap-south (i
mod 3), as 'meteor dev' assigns them, or in the region --server-regions gives
it; each device's own region's server is near. --region puts every device in
one region.

Devices get their certificates from the CA key in --pki, or, with
--enroll-file, enroll with a token as real devices do (meteor token create
--enroll; --pki then needs only ca.pem, and the devices get the token's
labels); with --base-dir kept, a later run uses the certificates enrolled.

Every second a line shows the devices connected and converged per link, as
the agents see it; at the end (Ctrl-C or --duration) a JSON report gives per
link the time to 50/90/99/100 % converged, counted from the start, and the bytes
each device sent and received.

  meteor dev --data-dir /tmp/meteor --examples docs/examples
  meteor sim --servers 127.0.0.1:8473,127.0.0.1:8483,127.0.0.1:8493 \
      --pki /tmp/meteor/pki --profile retail --report sim-report.json
  meteor sim --servers 10.0.1.1:8473 --server-regions us-east --region us-east \
      --id-prefix us --devices 50 --profile fiber --pki ca-only \
      --enroll-file us.token --base-dir /var/lib/meteor-sim`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			for _, s := range strings.Split(servers, ",") {
				if s = strings.TrimSpace(s); s != "" {
					opts.Servers = append(opts.Servers, s)
				}
			}
			if serverRegions != "" {
				for _, r := range strings.Split(serverRegions, ",") {
					opts.ServerRegions = append(opts.ServerRegions, strings.TrimSpace(r))
				}
			}
			if enrollFile != "" {
				b, err := os.ReadFile(enrollFile)
				if err != nil {
					return fmt.Errorf("--enroll-file: %w", err)
				}
				if opts.EnrollToken = strings.TrimSpace(string(b)); opts.EnrollToken == "" {
					return fmt.Errorf("--enroll-file %s is empty", enrollFile)
				}
			}
			return runSim(cmd.Context(), cmd.OutOrStdout(), cmd.ErrOrStderr(), opts, duration, reportPath, logPath, logs)
		},
	}
	f := cmd.Flags()
	logs.Register(f, "warn")
	f.StringVar(&servers, "servers", "", "comma-separated agent UDP addresses of the servers (host:port)")
	f.StringVar(&opts.PKIDir, "pki", "", "directory of the cluster CA (ca.pem, ca-key.pem; only ca.pem with --enroll-file), e.g. <dev data dir>/pki")
	f.StringVar(&enrollFile, "enroll-file", "", "file holding an enrollment token: devices enroll with it instead of being issued certificates from the CA key")
	f.StringVar(&opts.Region, "region", "", "put every device in this region (default: spread over eu-west, us-east, ap-south)")
	f.StringVar(&serverRegions, "server-regions", "", "comma-separated region of each server of --servers (default: eu-west, us-east, ap-south in turn)")
	f.StringVar(&opts.IDPrefix, "id-prefix", opts.IDPrefix, "start of every device ID (fleets sharing a cluster need different ones)")
	f.IntVar(&opts.Devices, "devices", 0, "number of devices (0: 1200 for the retail profile)")
	f.StringVar(&opts.Profile, "profile", opts.Profile, "fleet profile: "+strings.Join(sim.Mixes(), ", "))
	f.Uint64Var(&opts.Seed, "seed", 1, "seed of labels, link faults, failures and schedules")
	f.DurationVar(&duration, "duration", 0, "stop after this long (0: until Ctrl-C)")
	f.StringVar(&reportPath, "report", "", "write the JSON report to this file (default: stdout)")
	f.StringVar(&opts.BaseDir, "base-dir", "", "keep the devices' journals here (default: a temporary dir, removed)")
	f.StringVar(&logPath, "log-file", "", "write the agents' logs to this file, - for standard error (default: sim.log in --base-dir)")
	f.Float64Var(&opts.Loss, "loss", 0, "replace the random loss of cellular and popup links (0..1, each direction)")
	f.Float64Var(&opts.TimeScale, "time-scale", 1, "multiply outage and offline periods (0.01: minutes become seconds)")
	f.IntVar(&opts.RampBatch, "ramp", opts.RampBatch, "devices started per second")
	f.DurationVar(&opts.SampleEvery, "sample-every", opts.SampleEvery, "how often every agent's state is sampled (the resolution of the report's convergence times; each sample costs CPU per device)")
	_ = cmd.MarkFlagRequired("servers")
	_ = cmd.MarkFlagRequired("pki")
	return cmd
}

func runSim(ctx context.Context, out, errOut io.Writer, opts sim.Options, duration time.Duration, reportPath, logPath string, logs cliflags.Logs) error {
	if opts.BaseDir == "" {
		dir, err := os.MkdirTemp("", "meteor-sim-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir)
		opts.BaseDir = dir
	}
	if err := os.MkdirAll(opts.BaseDir, 0o700); err != nil {
		return err
	}
	logTo, logName := errOut, "standard error"
	if logPath != "-" {
		if logPath == "" {
			logPath = filepath.Join(opts.BaseDir, "sim.log")
		}
		logFile, err := os.Create(logPath)
		if err != nil {
			return err
		}
		defer logFile.Close()
		logTo, logName = logFile, logPath
	}
	var err error
	if opts.Logger, err = logs.Logger(logTo); err != nil {
		return err
	}
	opts.Summary = out

	fl, err := sim.New(opts)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "Simulating %s (%s, seed %d) against %s; logs in %s. Ctrl-C stops.\n",
		nDevices(fl.Len()), opts.Profile, opts.Seed, strings.Join(opts.Servers, ","), logName)
	if duration > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, duration)
		defer cancel()
	}
	runErr := fl.Run(ctx)
	rep := fl.Report()
	fmt.Fprintln(out, "\nFinal:", fl.Summary())
	for _, name := range rep.LinkNames() {
		l := rep.Links[name]
		fmt.Fprintf(out, "  %-8s %4d devices  converged %4d  time to 50%% %s 90%% %s 99%% %s 100%% %s  bytes/device sent %.0f received %.0f\n",
			name, l.Devices, l.Converged, secs(l.TimeToConverged.P50), secs(l.TimeToConverged.P90),
			secs(l.TimeToConverged.P99), secs(l.TimeToConverged.P100), l.SentBytes.Mean, l.ReceivedBytes.Mean)
	}
	if reportPath == "" {
		if _, err := rep.WriteTo(out); err != nil {
			return err
		}
	} else {
		if err := rep.WriteFile(reportPath); err != nil {
			return err
		}
		fmt.Fprintf(out, "Report written to %s\n", reportPath)
	}
	return runErr
}

func secs(v *float64) string {
	if v == nil {
		return "-"
	}
	return fmt.Sprintf("%.1fs", *v)
}

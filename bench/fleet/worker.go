package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/meteor-edge/meteor/agent"
	"github.com/meteor-edge/meteor/agent/sim"
)

// workerEnv, set to 1 in a child's environment, makes this binary (or the
// test binary) a fleet worker instead of the driver.
const workerEnv = "METEOR_BENCH_FLEET_WORKER"

// workerConfig is a worker's command line: one sim.Fleet and the loopback
// address of its control API.
type workerConfig struct {
	listen      string
	servers     []string
	pkiDir      string
	baseDir     string
	devices     int
	profile     string
	seed        uint64
	prefix      string
	localIP     net.IP
	timeScale   float64
	rampBatch   int
	rampEvery   time.Duration
	sampleEvery time.Duration
	rttProbe    time.Duration
	logLevel    string
}

// args renders c as the command line parseWorker reads.
func (c *workerConfig) args() []string {
	return []string{
		"-listen", c.listen, "-servers", strings.Join(c.servers, ","), "-pki", c.pkiDir,
		"-base-dir", c.baseDir, "-devices", strconv.Itoa(c.devices), "-profile", c.profile,
		"-seed", strconv.FormatUint(c.seed, 10), "-prefix", c.prefix, "-local-ip", c.localIP.String(),
		"-time-scale", strconv.FormatFloat(c.timeScale, 'g', -1, 64),
		"-ramp", strconv.Itoa(c.rampBatch), "-ramp-every", c.rampEvery.String(),
		"-sample-every", c.sampleEvery.String(), "-rtt-probe", c.rttProbe.String(), "-log-level", c.logLevel,
	}
}

func parseWorker(args []string) (*workerConfig, error) {
	c := &workerConfig{}
	fs := flag.NewFlagSet("fleet-worker", flag.ContinueOnError)
	servers := fs.String("servers", "", "agent UDP addresses of the servers")
	localIP := fs.String("local-ip", "", "address the devices' sockets bind to")
	fs.StringVar(&c.listen, "listen", "", "loopback address of the control API")
	fs.StringVar(&c.pkiDir, "pki", "", "cluster CA directory")
	fs.StringVar(&c.baseDir, "base-dir", "", "devices' data directories")
	fs.IntVar(&c.devices, "devices", 0, "devices")
	fs.StringVar(&c.profile, "profile", sim.LinkFiber, "sim profile")
	fs.Uint64Var(&c.seed, "seed", 1, "seed")
	fs.StringVar(&c.prefix, "prefix", "sim", "device ID prefix")
	fs.Float64Var(&c.timeScale, "time-scale", 1, "sim time scale")
	fs.IntVar(&c.rampBatch, "ramp", 50, "devices started per ramp step")
	fs.DurationVar(&c.rampEvery, "ramp-every", time.Second, "ramp step")
	fs.DurationVar(&c.sampleEvery, "sample-every", 200*time.Millisecond, "agent status sampling")
	fs.DurationVar(&c.rttProbe, "rtt-probe", agent.DefaultRTTProbeInterval, "agents' RTT re-probe interval (negative: off)")
	fs.StringVar(&c.logLevel, "log-level", "warn", "log level of the fleet's log (stderr)")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	c.servers = strings.Split(*servers, ",")
	if *localIP != "" && *localIP != "<nil>" {
		if c.localIP = net.ParseIP(*localIP); c.localIP == nil {
			return nil, fmt.Errorf("-local-ip %q: not an IP address", *localIP)
		}
	}
	if c.listen == "" {
		return nil, errors.New("-listen is required")
	}
	return c, nil
}

// workerMain runs a worker until the driver stops it (POST /stop, SIGTERM
// or the driver's death) and returns the exit status.
func workerMain(args []string) int {
	cfg, err := parseWorker(args)
	if err != nil {
		fmt.Fprintln(os.Stderr, "fleet worker:", err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := runWorker(ctx, cfg, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "fleet worker:", err)
		return 1
	}
	return 0
}

// workerSummary is a worker's answer to GET /summary.
type workerSummary struct {
	Summary    sim.Summary `json:"summary"`
	Goroutines int         `json:"goroutines"`
	// Running is false once Run has returned.
	Running bool `json:"running"`
	// Err is Run's error, once it returned.
	Err string `json:"error,omitempty"`
}

// runWorker runs one simulated fleet and serves its control API:
//
//	GET  /summary            workerSummary
//	POST /mark?revision=R    Fleet.Mark(R)
//	GET  /report             the fleet's sim.Report
//	POST /stop               stop the fleet; the worker exits once it stopped
func runWorker(ctx context.Context, cfg *workerConfig, logOut io.Writer) error {
	opts := sim.DefaultOptions()
	opts.Servers, opts.PKIDir, opts.BaseDir = cfg.servers, cfg.pkiDir, cfg.baseDir
	opts.Devices, opts.Profile, opts.Seed, opts.IDPrefix = cfg.devices, cfg.profile, cfg.seed, cfg.prefix
	opts.LocalIP, opts.TimeScale = cfg.localIP, cfg.timeScale
	opts.RampBatch, opts.RampEvery, opts.SampleEvery = cfg.rampBatch, cfg.rampEvery, cfg.sampleEvery
	opts.Logger = hclog.New(&hclog.LoggerOptions{Name: "fleet-worker", Level: hclog.LevelFromString(cfg.logLevel), Output: logOut})
	rtt := cfg.rttProbe
	opts.Agent = func(c *agent.Config) { c.RTTProbeInterval = rtt }
	fl, err := sim.New(opts)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", cfg.listen)
	if err != nil {
		return err
	}
	fctx, stopFleet := context.WithCancel(ctx)
	defer stopFleet()
	done := make(chan struct{})
	var runErr error
	go func() {
		runErr = fl.Run(fctx)
		close(done)
	}()

	writeJSON := func(w http.ResponseWriter, v any) {
		w.Header().Set("Content-Type", "application/json")
		if err := json.NewEncoder(w).Encode(v); err != nil {
			fmt.Fprintln(logOut, "fleet worker: write answer:", err)
		}
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /summary", func(w http.ResponseWriter, r *http.Request) {
		s := workerSummary{Summary: fl.Summary(), Goroutines: runtime.NumGoroutine(), Running: true}
		select {
		case <-done:
			s.Running = false
			if runErr != nil {
				s.Err = runErr.Error()
			}
		default:
		}
		writeJSON(w, s)
	})
	mux.HandleFunc("POST /mark", func(w http.ResponseWriter, r *http.Request) {
		rev, err := strconv.ParseUint(r.URL.Query().Get("revision"), 10, 64)
		if err != nil {
			http.Error(w, "revision: "+err.Error(), http.StatusBadRequest)
			return
		}
		fl.Mark(rev)
		w.WriteHeader(http.StatusNoContent)
	})
	mux.HandleFunc("GET /report", func(w http.ResponseWriter, r *http.Request) { writeJSON(w, fl.Report()) })
	mux.HandleFunc("POST /stop", func(w http.ResponseWriter, r *http.Request) {
		stopFleet()
		w.WriteHeader(http.StatusNoContent)
	})
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	serveErr := make(chan error, 1)
	go func() { serveErr <- srv.Serve(ln) }()
	fmt.Fprintf(logOut, "fleet worker: %d devices (%s), control API on %s\n", fl.Len(), cfg.profile, ln.Addr())

	select {
	case <-done:
	case err := <-serveErr:
		stopFleet()
		<-done
		return fmt.Errorf("control API: %w", err)
	}
	// Answer the driver's last reads (the final report) for a moment
	// after the fleet stopped, then close.
	sctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if ctx.Err() == nil {
		select {
		case <-ctx.Done():
		case <-sctx.Done():
		}
	}
	if err := srv.Shutdown(sctx); err != nil && !errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	return runErr
}

package scenario

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/meteor-edge/meteor/agent/sim"
	"github.com/meteor-edge/meteor/cluster/pki"
)

// fleetProcessEnv, set in the environment of a program that runs
// scenarios, makes it run a simulated fleet instead (RunFleetProcessIfAsked).
const fleetProcessEnv = "METEOR_SCENARIO_FLEET_PROCESS"

// RunFleetProcessIfAsked runs the simulated fleet of a scenario and exits,
// if this process was started as one; otherwise it returns at once. A
// program that runs scenarios with fleets (Run, or startFleetProcess in
// tests) calls it first thing in main, or in TestMain: the fleet runs in
// a child process that is the same executable, started again.
func RunFleetProcessIfAsked() {
	if spec := os.Getenv(fleetProcessEnv); spec != "" {
		os.Exit(runFleetProcess(spec))
	}
}

// fleetNice is the scheduling priority of a fleet process. Simulated
// devices stand in for machines with CPUs of their own; in the servers'
// process, at the servers' priority, their goroutines (hundreds of agents
// under the race detector) were measured to delay the servers' Raft
// heartbeats past the election timeout, and the cluster under test
// elected leaders because its host was busy.
const fleetNice = 10

// fleetProcessSpec is what a fleet process runs: sim.Options that can be
// sent to another process.
type fleetProcessSpec struct {
	Servers     []string
	PKIDir      string
	BaseDir     string
	Devices     int
	Profile     string
	Seed        uint64
	Loss        float64
	TimeScale   float64
	IDPrefix    string
	RampBatch   int
	RampEvery   time.Duration
	SampleEvery time.Duration
	// FastAgent applies fastAgent to every agent's configuration.
	FastAgent bool
}

// fleetProcess is a simulated fleet running in a child process: this
// executable, started again with fleetProcessEnv set, at a lower priority
// (fleetNice). It is driven over its standard input and output, one
// command and one answer a line.
type fleetProcess struct {
	cmd     *exec.Cmd
	devices int
	mu      sync.Mutex // one command at a time
	in      io.WriteCloser
	out     *bufio.Reader
	done    chan struct{} // closed once the process has exited
	err     error         // its exit status, set before done closes
}

// startFleetProcess writes ca's certificate and key under dir for the
// child to load and starts the fleet; its standard error goes to stderr.
// Stop it with stop.
func startFleetProcess(ca *pki.CA, spec fleetProcessSpec, dir string, stderr io.Writer) (*fleetProcess, error) {
	certPEM, keyPEM, err := ca.PEM()
	if err != nil {
		return nil, err
	}
	spec.PKIDir = filepath.Join(dir, "pki")
	if err := os.MkdirAll(spec.PKIDir, 0o700); err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(spec.PKIDir, sim.CACertFile), certPEM, 0o600); err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(spec.PKIDir, sim.CAKeyFile), keyPEM, 0o600); err != nil {
		return nil, err
	}
	b, err := json.Marshal(spec)
	if err != nil {
		return nil, err
	}
	exe, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("fleet process: %w", err)
	}
	p := &fleetProcess{cmd: exec.Command(exe), devices: spec.Devices, done: make(chan struct{})}
	p.cmd.Env = append(os.Environ(), fleetProcessEnv+"="+string(b))
	p.cmd.Stderr = stderr
	p.cmd.SysProcAttr = childProcAttr()
	if p.in, err = p.cmd.StdinPipe(); err != nil {
		return nil, err
	}
	out, err := p.cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	p.out = bufio.NewReaderSize(out, 1<<20)
	if err := p.cmd.Start(); err != nil {
		return nil, fmt.Errorf("fleet process: %w", err)
	}
	go func() {
		p.err = p.cmd.Wait()
		close(p.done)
	}()
	if _, err := p.call("ready"); err != nil {
		return nil, errors.Join(fmt.Errorf("fleet process (does this program call scenario.RunFleetProcessIfAsked first?): %w", err), p.stop())
	}
	return p, nil
}

// Len returns the number of devices.
func (p *fleetProcess) Len() int { return p.devices }

// call sends one command and returns the answer's line.
func (p *fleetProcess) call(cmd string) (string, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if _, err := fmt.Fprintln(p.in, cmd); err != nil {
		return "", fmt.Errorf("%s: %w", cmd, err)
	}
	line, err := p.out.ReadString('\n')
	if err != nil {
		return "", fmt.Errorf("%s: %w", cmd, err)
	}
	line = strings.TrimSuffix(line, "\n")
	if msg, ok := strings.CutPrefix(line, "error "); ok {
		return "", fmt.Errorf("%s: %s", cmd, msg)
	}
	return line, nil
}

// Mark restarts the fleet's convergence clock at revision rev (sim.Fleet.Mark).
func (p *fleetProcess) Mark(rev uint64) error {
	_, err := p.call("mark " + strconv.FormatUint(rev, 10))
	return err
}

// Report returns the fleet's report (sim.Fleet.Report).
func (p *fleetProcess) Report() (*sim.Report, error) {
	line, err := p.call("report")
	if err != nil {
		return nil, err
	}
	var rep sim.Report
	if err := json.Unmarshal([]byte(line), &rep); err != nil {
		return nil, fmt.Errorf("decode the fleet's report: %w", err)
	}
	return &rep, nil
}

// Summary returns the fleet's one-line summary (sim.Fleet.Summary).
func (p *fleetProcess) Summary() string {
	line, err := p.call("summary")
	if err != nil {
		return err.Error()
	}
	return line
}

// stop closes the fleet's input, which stops it, and waits for it to
// exit (killing it after 30 s).
func (p *fleetProcess) stop() error {
	p.in.Close()
	select {
	case <-p.done:
	case <-time.After(30 * time.Second):
		p.cmd.Process.Kill()
		<-p.done
		return errors.New("did not stop within 30 s of its input closing; killed")
	}
	return p.err
}

// runFleetProcess is the child's side: it runs the fleet described in
// fleetProcessEnv and answers commands on its standard input until it
// closes. It returns the exit code.
func runFleetProcess(spec string) int {
	fail := func(err error) int {
		fmt.Fprintln(os.Stderr, "fleet process:", err)
		return 1
	}
	var s fleetProcessSpec
	if err := json.Unmarshal([]byte(spec), &s); err != nil {
		return fail(err)
	}
	if err := lowerPriority(fleetNice); err != nil {
		fmt.Fprintln(os.Stderr, "fleet process: could not lower its priority:", err)
	}
	opts := sim.DefaultOptions()
	opts.Servers, opts.PKIDir, opts.BaseDir = s.Servers, s.PKIDir, s.BaseDir
	opts.Devices, opts.Profile, opts.Seed, opts.Loss = s.Devices, s.Profile, s.Seed, s.Loss
	if s.TimeScale > 0 {
		opts.TimeScale = s.TimeScale
	}
	opts.RampBatch, opts.RampEvery, opts.SampleEvery = s.RampBatch, s.RampEvery, s.SampleEvery
	if s.IDPrefix != "" {
		opts.IDPrefix = s.IDPrefix
	}
	opts.Logger = hclog.NewNullLogger()
	if s.FastAgent {
		opts.Agent = fastAgent
	}
	fleet, err := sim.New(opts)
	if err != nil {
		return fail(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	runErr := make(chan error, 1)
	go func() { runErr <- fleet.Run(ctx) }()

	in := bufio.NewScanner(os.Stdin)
	out := bufio.NewWriter(os.Stdout)
	for in.Scan() {
		cmd, arg, _ := strings.Cut(in.Text(), " ")
		switch cmd {
		case "ready":
			fmt.Fprintln(out, "ok")
		case "mark":
			rev, err := strconv.ParseUint(arg, 10, 64)
			if err != nil {
				fmt.Fprintln(out, "error", err)
				break
			}
			fleet.Mark(rev)
			fmt.Fprintln(out, "ok")
		case "report":
			b, err := json.Marshal(fleet.Report())
			if err != nil {
				fmt.Fprintln(out, "error", err)
				break
			}
			out.Write(append(b, '\n'))
		case "summary":
			fmt.Fprintln(out, fleet.Summary())
		default:
			fmt.Fprintf(out, "error unknown command %q\n", cmd)
		}
		if err := out.Flush(); err != nil {
			break
		}
	}
	cancel()
	if err := <-runErr; err != nil {
		return fail(err)
	}
	return 0
}

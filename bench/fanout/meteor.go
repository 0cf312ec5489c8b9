package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"github.com/quic-go/quic-go"

	"github.com/meteor-edge/meteor/bench/internal/benchkit"
	"github.com/meteor-edge/meteor/cluster/api"
	clusterpki "github.com/meteor-edge/meteor/cluster/pki"
)

// meteorCluster is three `meteor server` processes serving agents, and
// the CA that issued their certificates.
type meteorCluster struct {
	*benchkit.MeteorCluster
	ca *clusterpki.CA
}

// startMeteor creates the PKI with the meteor CLI (`meteor ca init`; the
// servers' certificates are issued as they start) and starts three
// servers that form a cluster, each serving agents on its own UDP port
// (benchkit.StartMeteor), then waits until every one reports a leader.
func startMeteor(ctx context.Context, g *benchkit.Group, bin, dir string) (*meteorCluster, error) {
	pki := filepath.Join(dir, "pki")
	if err := benchkit.InitMeteorCA(ctx, bin, pki); err != nil {
		return nil, err
	}
	caPEM, err1 := os.ReadFile(filepath.Join(pki, "ca.pem"))
	caKey, err2 := os.ReadFile(filepath.Join(pki, "ca-key.pem"))
	if err := errors.Join(err1, err2); err != nil {
		return nil, fmt.Errorf("read the CA: %w", err)
	}
	mc := &meteorCluster{}
	var err error
	if mc.ca, err = clusterpki.LoadCA(caPEM, caKey); err != nil {
		return nil, err
	}
	if mc.MeteorCluster, err = benchkit.StartMeteor(ctx, g, benchkit.MeteorOptions{Bin: bin, Dir: dir, Agents: true, PKI: pki}); err != nil {
		return nil, err
	}
	return mc, nil
}

// meteorSide is the cluster with its fleet connected.
type meteorSide struct {
	mc  *meteorCluster
	fl  *meteorFleet
	doc *desired
}

func (s *meteorSide) apply(ctx context.Context, version int) (uint64, error) {
	doc, err := s.doc.intentDoc(version)
	if err != nil {
		return 0, err
	}
	// Round-robin over the servers, as an operator's writes would land.
	res, err := s.mc.Servers[version%len(s.mc.Servers)].API.PutIntent(ctx, intentName, doc, nil)
	if err != nil {
		return 0, fmt.Errorf("put intent %q: %w", intentName, err)
	}
	return res.Revision, nil
}

func (s *meteorSide) logs() []*confirmLog {
	out := make([]*confirmLog, len(s.fl.devs))
	for i, d := range s.fl.devs {
		out[i] = &d.log
	}
	return out
}

func (s *meteorSide) appliedLogs() []*confirmLog {
	out := make([]*confirmLog, len(s.fl.devs))
	for i, d := range s.fl.devs {
		out[i] = &d.took
	}
	return out
}

func (s *meteorSide) serverCPU() (time.Duration, error) { return s.mc.CPUTime() }

func (s *meteorSide) raftTerm(ctx context.Context) (uint64, error) { return s.mc.RaftTerm(ctx) }

func (s *meteorSide) reconnects() int64 { return s.fl.reconnects.Load() }

func (s *meteorSide) ports() (string, []int) { return "udp", s.mc.AgentPorts() }

// serverCounts reads the intent's progress from the cluster (a
// linearizable read): how many devices it targets, and how many the
// cluster's committed records show acknowledged and converged at the
// intent's current revision.
func (s *meteorSide) serverCounts(ctx context.Context) (*api.IntentProgress, error) {
	p, err := s.mc.Servers[0].API.IntentProgress(ctx, intentName, api.ReadOptions{})
	if err != nil {
		return nil, fmt.Errorf("intent progress: %w", err)
	}
	return p, nil
}

// runMeteor starts the cluster, connects the fleet, converges it on
// version 1, and measures one change per loss level.
func runMeteor(ctx context.Context, cfg *config, g *benchkit.Group, bin, dir string, lossy *lossTable, levels []int, out, log io.Writer) ([]*levelResult, string, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, "", err
	}
	doc, err := newDesired(cfg.bodySize)
	if err != nil {
		return nil, "", err
	}
	fmt.Fprintln(log, "meteor: starting 3 servers")
	mc, err := startMeteor(ctx, g, bin, dir)
	if err != nil {
		return nil, "", err
	}
	s := &meteorSide{mc: mc, doc: doc}
	// Version 1 exists before the devices connect: each one's first
	// session brings it.
	rev1, err := s.apply(ctx, 1)
	if err != nil {
		return nil, "", err
	}
	// Connect only once every replica has it: a session that registers
	// while its server applies the intent can miss the Notify, and would
	// then wait for its 30 s pull.
	if err := mc.WaitRevision(ctx, rev1); err != nil {
		return nil, "", err
	}

	fmt.Fprintf(log, "meteor: issuing %d device certificates\n", cfg.devices)
	certs, err := issueDevices(mc.ca, cfg.devices)
	if err != nil {
		return nil, "", err
	}
	fl := &meteorFleet{timeout: 30 * time.Second}
	s.fl = fl
	defer fl.close()
	for _, a := range mc.AgentAddrs() {
		ua, err := net.ResolveUDPAddr("udp", a)
		if err != nil {
			return nil, "", err
		}
		fl.servers = append(fl.servers, ua)
	}
	for range cfg.sockets {
		pc, err := net.ListenPacket("udp", "127.0.0.1:0")
		if err != nil {
			return nil, "", err
		}
		fl.pcs = append(fl.pcs, pc)
		fl.trs = append(fl.trs, &quic.Transport{Conn: pc})
	}
	roots := mc.ca.Pool()
	for i := range cfg.devices {
		fl.devs = append(fl.devs, newDevice(deviceID(i, cfg.devices), certs[i], roots, deviceLabels(i, cfg.groups), i%len(mc.Servers)))
	}

	fleetCtx, stopFleet := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer func() {
		stopFleet()
		wg.Wait()
	}()
	fmt.Fprintf(log, "meteor: connecting %d devices, %d at a time over %d sockets\n", cfg.devices, cfg.concurrency, cfg.sockets)
	t0 := time.Now()
	failed := fl.connect(fleetCtx, &wg, cfg.concurrency)
	if failed > 0 {
		fmt.Fprintf(log, "meteor: %d devices failed their first dial and keep retrying, e.g. %v\n", failed, fl.lastErr.Load())
	}
	if err := waitAll(ctx, s.logs(), rev1, cfg.timeout, "meteor: converging on version 1", log); err != nil {
		return nil, "", fmt.Errorf("%w (last device error: %v)", err, fl.lastErr.Load())
	}
	fmt.Fprintf(log, "meteor: %d devices connected and converged on version 1 in %.1f s\n", cfg.devices, time.Since(t0).Seconds())

	var results []*levelResult
	for i, loss := range levels {
		if _, err := mc.Rest(ctx, cfg.settle); err != nil {
			return nil, "", err
		}
		version := i + 2
		res, err := measure(ctx, s, sysMeteor, version, loss, lossy, cfg.timeout, log)
		if err != nil {
			return nil, "", err
		}
		// Cross-check with the cluster's own records once the last
		// commits are in.
		if _, err := mc.Rest(ctx, 0); err != nil {
			return nil, "", err
		}
		p, err := s.serverCounts(ctx)
		if err != nil {
			return nil, "", err
		}
		res.Server = &serverCounts{Revision: p.Revision, Targeted: p.Targeted, Acknowledged: p.Acknowledged, Converged: p.Converged}
		resultRow(out, res)
		results = append(results, res)
	}
	return results, mc.Version, nil
}

// connect dials every device, concurrency at a time, and starts each
// one's session goroutine in wg; a device whose first dial fails starts
// without a session and keeps retrying. It returns how many failed.
func (f *meteorFleet) connect(ctx context.Context, wg *sync.WaitGroup, concurrency int) int {
	work := make(chan int)
	var mu sync.Mutex
	failed := 0
	var dialers sync.WaitGroup
	for range concurrency {
		dialers.Go(func() {
			for i := range work {
				d := f.devs[i]
				l, c, err := d.dial(ctx, f.trs[i%len(f.trs)], f.servers[d.home], f.timeout)
				if err != nil {
					f.lastErr.Store(fmt.Errorf("%s: %w", d.id, err))
					mu.Lock()
					failed++
					mu.Unlock()
					l = nil
				}
				wg.Go(func() { f.run(ctx, i, l, c) })
			}
		})
	}
	for i := range f.devs {
		if ctx.Err() != nil {
			break
		}
		work <- i
	}
	close(work)
	dialers.Wait()
	return failed
}

func deviceID(i, n int) string { return fmt.Sprintf("dev-%0*d", len(strconv.Itoa(n-1)), i) }

// issueDevices issues one certificate per device (ECDSA P-256), on every
// CPU.
func issueDevices(ca *clusterpki.CA, n int) ([]tls.Certificate, error) {
	certs := make([]tls.Certificate, n)
	err := benchkit.Parallel(n, func(i int) error {
		c, err := ca.IssueDevice(deviceID(i, n))
		certs[i] = c
		return err
	})
	return certs, err
}

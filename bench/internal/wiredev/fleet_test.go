package wiredev

import (
	"context"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/meteor-edge/meteor/bench/internal/benchkit"
	"github.com/meteor-edge/meteor/cluster"
	"github.com/meteor-edge/meteor/fsm/intent"
)

// TestFleetConvergesOnAChange runs a few devices against a real server in
// this process (cluster.StartLocal, Raft on disk, agents over QUIC on
// loopback): they connect and converge on an intent, then on a change of
// it, each applying it and holding the ReportAck of its report.
func TestFleetConvergesOnAChange(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	lc, err := cluster.StartLocal(ctx, cluster.LocalOptions{Servers: 1, Dir: t.TempDir(), Agents: true,
		Configure: func(_ int, c *cluster.Config) { c.TrustReportedLabels = true }})
	if err != nil {
		t.Fatal(err)
	}
	defer lc.Close()
	put := func(version int) uint64 {
		t.Helper()
		in := &intent.Intent{Name: "fleet-test", Selector: map[string]string{"fleet": "test"}, Resources: []intent.Resource{{
			ID: "conf", Type: intent.TypeFile, Spec: map[string]any{"path": "/etc/test.conf", "content": fmt.Sprintf("version %d\n", version)},
		}}}
		doc, err := in.Canonical()
		if err != nil {
			t.Fatal(err)
		}
		res, err := lc.Client(0).PutIntent(ctx, in.Name, doc, nil)
		if err != nil {
			t.Fatal(err)
		}
		return res.Revision
	}
	rev1 := put(1)

	const n = 5
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("wiredev-%d", i)
	}
	certs, err := Issue(lc.CA(), ids)
	if err != nil {
		t.Fatal(err)
	}
	labels := map[string]string{"fleet": "test"}
	devs := make([]*Device, n)
	for i := range devs {
		devs[i] = NewDevice(ids[i], certs[i], labels)
	}
	addr, err := net.ResolveUDPAddr("udp", lc.AgentAddrs()[0])
	if err != nil {
		t.Fatal(err)
	}
	fl, err := NewFleet(Config{Servers: []*net.UDPAddr{addr}, Roots: lc.CA().Pool(), Sockets: 2, Dials: 2}, devs)
	if err != nil {
		t.Fatal(err)
	}
	defer fl.Close()
	fctx, stop := context.WithCancel(ctx)
	defer func() {
		stop()
		fl.Wait()
	}()
	start := time.Now()
	fl.Start(fctx)
	waitReported := func(rev uint64) {
		t.Helper()
		err := benchkit.WaitFor(ctx, 30*time.Second, 20*time.Millisecond, nil, func(context.Context) error {
			if got := fl.CountReported(rev); got != n {
				return fmt.Errorf("%d of %d devices reported revision %d (last error: %v)", got, n, rev, fl.LastErr())
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	waitReported(rev1)
	if got := len(fl.FirstSessions(start)); got != n || fl.Attempted() != n || fl.Connected() != n {
		t.Errorf("%d first sessions, %d attempted, %d connected; want %d", got, fl.Attempted(), fl.Connected(), n)
	}
	if s := fl.SessionsByServer(); s[addr.String()] != n {
		t.Errorf("sessions by server %v", s)
	}
	if len(fl.Ports()) != 2 {
		t.Errorf("ports %v", fl.Ports())
	}

	change := time.Now()
	rev2 := put(2)
	waitReported(rev2)
	applied := benchkit.TimesSince(fl.AppliedLogs(), rev2, change)
	reported := benchkit.TimesSince(fl.ReportedLogs(), rev2, change)
	if len(applied) != n || len(reported) != n || applied[n-1] > reported[n-1] {
		t.Errorf("applied %v, reported %v", applied, reported)
	}
	if fl.Reconnects() != 0 || fl.DialFailures() != 0 {
		t.Errorf("%d reconnects, %d failed dials: %v", fl.Reconnects(), fl.DialFailures(), fl.LastErr())
	}
}

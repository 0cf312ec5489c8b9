package cluster

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-memdb"

	"github.com/meteor-edge/meteor/fsm"
	"github.com/meteor-edge/meteor/wire"
)

// BenchmarkStatusTransitions drives device status transitions through a
// 3-server cluster on loopback (fsync on): 10,000 devices each make 5
// transitions, delivered to their owners as agents' reports would be. It
// prints transitions per second, the Raft entries they took, and the delay
// from a report to its status being visible on every server, and the
// leader elections held meanwhile. Run it with make bench-status.
func BenchmarkStatusTransitions(b *testing.B) {
	const devices, perDevice, workers = 10000, 5, 2000
	c := newTestCluster(b, 3, func(cfg *Config) {
		cfg.StatusEvalInterval = time.Hour
		cfg.ClusterSecret = []byte("0123456789abcdef0123456789abcdef")
	})
	c.propose(filesIntent("store-config", 1, "v1"))
	leader := c.waitLeader()
	ctx := context.Background()

	// Register the devices as their first sessions would.
	ids := make([]string, devices)
	var wg sync.WaitGroup
	sem := make(chan struct{}, 256)
	for i := range ids {
		ids[i] = fmt.Sprintf("dev-%05d", i)
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			req := &fsm.DeviceSessionRequest{ID: ids[i], Labels: map[string]string{"region": "eu"}, SessionID: "s", Server: leader.ID(), Connected: true, AckedRevision: 1, Time: time.Now().UnixNano()}
			if _, _, err := leader.apply(ctx, fsm.DeviceSessionType, req); err != nil {
				b.Error(err)
			}
		}()
	}
	wg.Wait()
	c.waitConverged()
	servers := c.alive()
	byID := map[string]*Server{}
	for _, s := range servers {
		byID[s.ID()] = s
	}
	entriesBefore := uint64(0)
	for _, s := range servers {
		entriesBefore += s.status.entries.Load()
	}

	var delays []time.Duration
	var dmu sync.Mutex
	var failed atomic.Int64
	work := make(chan string)
	termBefore := highestTerm(servers)
	start := time.Now()
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for id := range work {
				owner := byID[servers[0].OwnerOf(id, map[string]string{"region": "eu"})]
				for seq := uint64(1); seq <= perDevice; seq++ {
					rep := &wire.Report{Seq: seq, DesiredRevision: 1, Full: true, Resources: []wire.ResourceReport{{
						Key: "store-config/f00", AppliedDigest: wire.DigestOf([]byte(fmt.Sprint(seq))), AppliedRevision: 1,
						Effective: wire.EffectiveOK, UpdatedAtUnixNano: time.Now().UnixNano(),
					}}}
					t0 := time.Now()
					if err := owner.status.ingest(ctx, id, 0, rep); err != nil {
						if failed.Add(1) == 1 {
							b.Logf("first failed report: %v", err)
						}
						continue
					}
					if seq == perDevice && id[len(id)-1] == '0' { // sample one device in ten
						d := visibleEverywhere(servers, id, seq) + time.Since(t0)
						dmu.Lock()
						delays = append(delays, d)
						dmu.Unlock()
					}
				}
			}
		}()
	}
	for _, id := range ids {
		work <- id
	}
	close(work)
	wg.Wait()
	elapsed := time.Since(start)
	elections := highestTerm(servers) - termBefore
	var entries, transitions uint64
	for _, s := range servers {
		entries += s.status.entries.Load()
		transitions += s.status.transitions.Load()
	}
	entries -= entriesBefore
	slices.Sort(delays)
	pct := func(p float64) time.Duration {
		if len(delays) == 0 {
			return 0
		}
		return delays[min(len(delays)-1, int(p*float64(len(delays))))]
	}
	b.ReportMetric(float64(transitions)/elapsed.Seconds(), "transitions/s")
	b.ReportMetric(float64(entries)*1000/float64(max(transitions, 1)), "entries/1000-transitions")
	b.ReportMetric(float64(pct(0.99).Microseconds())/1000, "p99-visible-ms")
	b.ReportMetric(float64(elections), "elections")
	fmt.Printf("\nstatus transitions: %d devices x %d through 3 servers in %s: %.0f transitions/s (goal >= 20000)\n",
		devices, perDevice, elapsed.Round(time.Millisecond), float64(transitions)/elapsed.Seconds())
	fmt.Printf("raft entries: %d for %d transitions = %.1f per 1,000 transitions\n", entries, transitions, float64(entries)*1000/float64(max(transitions, 1)))
	fmt.Printf("report to visible on every server: p50 %s, p99 %s (goal p99 < 1s), %d samples; %d reports not committed\n",
		pct(0.5).Round(time.Millisecond), pct(0.99).Round(time.Millisecond), len(delays), failed.Load())
	fmt.Printf("leader elections during the transitions: %d\n", elections)
}

// highestTerm returns the highest current Raft term of servers. Every
// election, won or not, starts a new term, so its growth over a period
// counts the elections held in it, as the bench drivers count them from
// the term in GET /v1/health.
func highestTerm(servers []*Server) uint64 {
	var top uint64
	for _, s := range servers {
		top = max(top, s.raft.CurrentTerm())
	}
	return top
}

// visibleEverywhere waits until every server's replica holds the device's
// report seq and returns how long that took after the owner's commit.
func visibleEverywhere(servers []*Server, id string, seq uint64) time.Duration {
	t0 := time.Now()
	for _, s := range servers {
		for {
			ws := memdb.NewWatchSet()
			rec, err := s.State().Read().Device(ws, id)
			if err == nil && rec.ReportSeq >= seq {
				break
			}
			ws.Watch(time.After(time.Second))
		}
	}
	return time.Since(t0)
}

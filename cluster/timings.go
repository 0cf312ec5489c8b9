package cluster

import (
	"time"

	"github.com/hashicorp/memberlist"
	"github.com/hashicorp/raft"
)

// LoopbackTimings sets cfg's Raft, gossip and membership timings for
// clusters whose servers share one machine on loopback (tests, chaos
// scenarios, local simulations), where there is no network delay but the
// host is often busy: other test processes, the race detector and
// simulated devices all compete for two cores.
//
// Raft keeps its 1 s heartbeat, election and leader-lease timeouts
// (RaftMultiplier 1): shorter ones were measured to elect under load with
// no server at fault. With the race detector and two CPU-bound processes
// beside the tests, the Go scheduler left runnable goroutines waiting up
// to several hundred milliseconds (runtime/metrics /sched/latencies), and
// a 400 ms heartbeat timeout with a 200 ms lease made clusters elect
// hundreds of times a run. Failure detection in gossip is quicker than
// memberlist's LAN defaults, but a member must miss probes for about two
// seconds before it is suspected dead.
func LoopbackTimings(cfg *Config) {
	cfg.ReconcileInterval = 200 * time.Millisecond
	cfg.ReconnectInterval = 500 * time.Millisecond
	cfg.RaftMultiplier = 1
	cfg.RaftTuning = func(rc *raft.Config) {
		// Commit quickly: tests measure latencies of single writes.
		rc.CommitTimeout = 5 * time.Millisecond
	}
	cfg.GossipTuning = func(mc *memberlist.Config) {
		mc.ProbeInterval = 500 * time.Millisecond
		mc.ProbeTimeout = 400 * time.Millisecond
		mc.GossipInterval = 100 * time.Millisecond
		mc.SuspicionMult = 4
		mc.PushPullInterval = 5 * time.Second
		mc.TCPTimeout = 2 * time.Second
	}
}

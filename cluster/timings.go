package cluster

import (
	"time"

	"github.com/hashicorp/memberlist"
	"github.com/hashicorp/raft"
)

// LoopbackTimings tightens cfg's Raft, gossip and membership timings for
// clusters whose servers share one machine on loopback (tests, chaos
// scenarios, local simulations): elections and failure detection take well
// under a second, with headroom for the race detector on a busy machine.
// Not for real networks, where they would cause needless elections.
func LoopbackTimings(cfg *Config) {
	cfg.ReconcileInterval = 200 * time.Millisecond
	cfg.ReconnectInterval = 500 * time.Millisecond
	cfg.RaftTuning = func(rc *raft.Config) {
		rc.HeartbeatTimeout = 400 * time.Millisecond
		rc.ElectionTimeout = 400 * time.Millisecond
		rc.LeaderLeaseTimeout = 200 * time.Millisecond
		rc.CommitTimeout = 5 * time.Millisecond
	}
	cfg.GossipTuning = func(mc *memberlist.Config) {
		mc.ProbeInterval = 200 * time.Millisecond
		mc.ProbeTimeout = 100 * time.Millisecond
		mc.GossipInterval = 50 * time.Millisecond
		mc.SuspicionMult = 2
		mc.PushPullInterval = 2 * time.Second
		mc.TCPTimeout = time.Second
	}
}

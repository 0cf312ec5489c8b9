// Package cluster runs a Meteor server node: Raft (raft-boltdb log and
// stable stores, file snapshots) over the replicated state in package fsm,
// memberlist gossip for discovery, bootstrap and membership changes, and the
// HTTP API operators and the CLI use.
//
// Goroutines and the state they own:
//
//   - raft's own goroutines apply committed entries to the FSM (raftFSM);
//     nothing else writes the FSM.
//   - monitorLeadership (leader.go) watches raft.LeaderCh; while this node
//     leads it runs leaderLoop, which issues a barrier before serving
//     linearizable reads and reconciles the Raft configuration with gossip
//     membership (adds joined servers, removes servers that left).
//   - bootstrapLoop (gossip.go) runs until the cluster is formed when
//     Config.BootstrapExpect is set.
//   - memberlist's goroutines deliver join/leave events to eventCh.
//   - the HTTP server's goroutines serve requests; writes and linearizable
//     reads that reach a follower are forwarded to the leader's HTTP API.
//
// Server.Shutdown stops all of them and returns when they have exited.
// Package cluster must not be imported by fsm or wire.
package cluster

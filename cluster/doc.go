// Package cluster runs a Meteor server node: Raft (raft-boltdb log and
// stable stores, file snapshots) over the replicated state in package fsm,
// memberlist gossip for discovery, bootstrap and membership changes, and the
// HTTP API operators and the CLI use.
//
// The server is assembled from components, each with its own Run(ctx)
// that owns its goroutines and takes small interfaces defined where they
// are used (proposer, stateReader, ownerView, peerView, Clock):
//
//   - raft's own goroutines apply committed entries to the FSM (raftFSM);
//     nothing else writes the FSM.
//   - leadership (leader.go) follows raft's leadership notifications;
//     while this node leads it commits a barrier before serving
//     linearizable reads, then runs the leader-only workers (LeaderWorker),
//     among them the membership reconciler, which keeps the Raft
//     configuration in step with gossip membership.
//   - membership (gossip.go, ownership.go) runs memberlist, joins and
//     rejoins servers, keeps the table of servers (eventDelegate) and
//     computes device owners over the alive ones; bootstrapLoop
//     (leader.go) forms a new cluster.
//   - the HTTP server's goroutines run httpAPI's handlers; writes and
//     linearizable reads that reach a follower are forwarded to the leader
//     through the peer client (peer.go), which makes every
//     server-to-server request.
//   - agentServer serves agents (agents.go, session.go); sessionSync keeps
//     their session records true through the sessionRecorder; statusOwner
//     turns owned devices' reports and silences into status transitions.
//
// New creates one root context; Server.Shutdown cancels it and returns
// when every goroutine has exited. Time is read through Config.Clock.
// Package cluster must not be imported by fsm or wire.
package cluster

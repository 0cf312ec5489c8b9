// Package scenario runs chaos scenarios against an in-process Meteor
// cluster and checks what the cluster promised: writes and linearizable
// reads are linearizable, every acknowledged write survives on every
// server, revisions never go backwards, and nothing leaks.
//
// It owns:
//
//   - [Harness]: N real servers (cluster.New) whose Raft and gossip traffic
//     crosses one seeded chaos.Network, with crash (Kill) and Restart.
//   - the workload: concurrent HTTP clients writing (with and without
//     If-Match) and reading a few intents, recording a porcupine history.
//   - [Model]: the sequential specification of one intent, for porcupine.
//   - the scenarios ([All]) and [Run], which injects a scenario's faults on a
//     seeded schedule, heals, waits for the cluster to converge and runs the
//     checkers, writing a report folder when one fails. A scenario with a
//     [FleetSpec] also runs simulated devices (agent/sim) and checks them.
//   - [RunDeployment] and [CheckDeployment]: the same workload and checks
//     against a real deployment, with faults from a chaos/hosts driver
//     (Docker or command templates), or injected by the operator.
//
// It must not be imported by production code (it imports chaos), and it
// changes nothing in the cluster: every fault goes through chaos.Network,
// Harness.Kill/Restart/Skew or a hosts driver, and every fault is recorded
// in the run's chaos.FaultLog.
package scenario

// Package agent is Meteor's device agent runtime: it keeps a session with
// the nearest server of the cluster, journals the desired state it is
// given, brings the device to it with the drivers, watches it for drift,
// and reports what is applied and effective.
//
// An Agent runs two long-lived goroutines (Run waits for both):
//
//   - the connection manager (conn.go) owns the QUIC transport, the server
//     table (RTTs, penalties, redirects) and, one at a time, a session
//     (session.go) on a connection: Hello/Welcome, Pull/Delta/Ack,
//     Report/ReportAck, as docs/wire.md §7 specifies. While a session
//     lasts a probe goroutine re-measures the servers' RTTs. The session
//     goroutine is the only writer of the control stream; a reader
//     goroutine only decodes frames.
//   - the reconciler (reconcile.go, planner.go) owns the drivers: level
//     based passes over the journaled desired set, each step journaled
//     before and after (journal.BeginStep/EndStep), drift checks and
//     probes on the class cadence, retries with backoff. After each pass
//     the reporter (report.go) queues a full report if anything changed.
//
// Beside them, the control socket (control.go) serves the commands run on
// the device itself (local overrides, workload locks): it writes the
// journal and wakes the reconciler.
//
// They share only the journal (package journal, safe for concurrent use),
// the settings the servers sent (settings.go) and the status view
// (status.go), each behind a mutex: the session journals a
// Delta's target set and wakes the reconciler; the reconciler queues
// reports and wakes the session. Neither waits for the other, so the
// device keeps converging offline and the session keeps answering while a
// slow apply runs.
//
// What the agent must not do: apply a revision older than one it
// journaled or acknowledged (the journal refuses, the session ignores such
// Deltas); send anything but Hello and Pull before the Welcome; take the
// device ID from anywhere but its certificate; delete what a resource
// created when the resource leaves the desired set (version 1 forgets it).
// It imports no server package; docs/wire.md is its only contract with
// the servers, and docs/agent.md describes its behaviour.
package agent

// Package journal is the agent's local, fsynced record of what it was told
// and what it did, so that after a crash or power loss it knows exactly
// where it stands instead of assuming.
//
// One bbolt file, journal.db in the agent's data directory, holds:
//
//   - the session: session ID, resume token, the highest desired revision
//     acknowledged to the control plane, and report sequence numbers;
//   - pending reports: queued but not yet acknowledged by a server, resent
//     after a reconnect (ReplaceReports keeps only the newest, for reports
//     that supersede the earlier ones);
//   - the desired set: its revision and, per resource key, the digest,
//     resource revision and body (so the agent can keep converging offline);
//   - one applied record per resource key: the digest and revision last
//     applied successfully, when, the last error and the attempt count,
//     and the body that digest stands for (AppliedBody), so the agent can
//     go back to what is applied when a newer desired body never applied;
//   - in-flight steps: BeginStep is committed before a driver runs and
//     EndStep after it returns, in the same transaction as the applied
//     record it updates;
//   - the agent's traffic counters of the current and the previous UTC
//     day (SaveTraffic), saved every few minutes and when the agent stops.
//
// Every write is one bbolt transaction committed with fsync (bbolt's
// default, NoSync false), so after a power loss a step is in exactly one
// of three states: not begun (the applied record is unchanged), in flight
// (InFlight lists it; its outcome is unknown and the agent must re-check
// the device with the driver's Current and Diff rather than trust either
// outcome), or ended (the applied record says whether it worked).
// Progress answers "which of my steps were applied" from one consistent
// read.
//
// The journal enforces invariant 2 (an agent never goes back to an older
// revision): RecordDesired, PatchDesired and AckRevision refuse a revision
// lower than one already recorded or acknowledged, and BeginStep refuses a
// resource revision lower than the one already applied, all with errors
// matching ErrRevisionRegression.
//
// The journal stores digests and bodies as opaque values; it does not
// parse resources, run drivers or talk to servers. A Journal is safe for
// concurrent use; bbolt serializes its writers.
package journal

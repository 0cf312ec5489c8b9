// Package fsm is Meteor's replicated state machine: the intents operators
// applied (with a bounded revision history), the devices the fleet knows,
// and the security state: operator and enroll tokens (stored as hashes of
// their secrets; policies and scopes are package fsm/acl), the audit log
// of operator changes, devices' control-plane labels, and revoked devices.
//
// Every server holds one FSM replica and feeds it the same committed log in
// the same order; Apply is deterministic, so replicas never diverge. The
// Raft log index is the only clock and ID source inside Apply: a wall-clock
// time the state needs travels inside the command, stamped by the proposer.
// Every successful mutation gets the next cluster-wide revision; commands
// that are rejected (a stale If-Match, a missing intent) leave the revision
// unchanged, and are rejected the same way on every replica.
//
// State lives in go-memdb, so readers get consistent snapshots without
// locks and blocking queries can watch for changes (WatchSet).
//
// fsm owns no goroutines and imports no network package: the Raft glue
// (raft.FSM, raft.FSMSnapshot) lives in package cluster, which feeds
// ApplyLog and uses Snapshot/Restore here. Encoding of commands is in
// command.go; the snapshot format, versioned, in snapshot.go.
package fsm

// Package snapshot is the file format of a Meteor backup, as `meteor
// snapshot save` writes it and `meteor snapshot restore` reads it: a copy
// of the whole replicated state (the state machine's own snapshot format,
// package fsm) in an envelope that says what it holds and carries the
// state's size and SHA-256, so that a corrupt or truncated file is refused
// before anything is restored.
//
// A file is one line of JSON (Header), then exactly Header.Size bytes of
// state, and nothing after them. The state's own first line (the fsm
// snapshot header) repeats its index and revision, which must agree with
// the envelope's.
//
// The package only frames and checks bytes: it imports nothing of
// Meteor's, so the CLI can check a file without a server. Package cluster
// writes files (GET /v1/snapshot) and restores them (PUT /v1/snapshot).
package snapshot

// Package scheduler decides what each device should hold: it turns the
// replicated intents (package fsm) into a device's desired state and the
// minimum corrective delta between that state and what the device reports
// having applied. It is pure logic over an fsm.Read view, with no network
// and no goroutines, so it is tested without a cluster. Resource bodies and
// keys are the model's (intent.ResourceBody, intent.ResourceKey); digests
// are wire.DigestOf, the definition agents verify against.
//
// The rollout decisions live here too (rollout.go): which wave a device is
// in (Assign), how far a released device is (Judge), and what a rollout does
// next (Decide: releases within the window and maxParallel, gates, the
// failure policy, approvals). They are pure; the leader's rollout worker in
// package cluster commits them through Raft (docs/architecture.md,
// docs/rollouts.md).
package scheduler

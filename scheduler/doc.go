// Package scheduler decides what each device should hold: it turns the
// replicated intents (package fsm) into a device's desired state and the
// minimum corrective delta between that state and what the device reports
// having applied. It is pure logic over an fsm.Read view, with no network
// and no goroutines, so it is tested without a cluster. Resource bodies and
// keys are the model's (intent.ResourceBody, intent.ResourceKey); digests
// are wire.DigestOf, the definition agents verify against.
//
// The rollout engine (waves, gates, windows, approvals) will live here too;
// today every intent revision is released to every matching device at once,
// and rollout blocks are stored but not acted on (docs/architecture.md).
package scheduler

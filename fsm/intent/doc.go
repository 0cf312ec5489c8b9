// Package intent owns the intent document model: the Intent and Resource
// types, parsing of intent documents written in YAML or JSON, validation, and
// the canonical encodings (Canonical, Digest) that the rest of the control
// plane compares and stores. It also owns the resource body, the one form in
// which servers send a resource to a device and agents journal it
// (ResourceBody, its Canonical encoding and DecodeResourceBody), and the
// device-wide resource key (ResourceKey, SplitResourceKey). Servers and
// agents both import this package, so neither defines its own.
//
// An intent is what an operator applies: a named set of resources that the
// devices matching its selector must hold, and how to roll them out. See
// docs/examples for real documents.
//
// # Parsing
//
// Parse reads one document and ParseAll a stream of documents separated by
// "---". Both are strict: unknown and duplicate fields are errors, as are
// merge keys (<<), binary and custom tags, and non-string map keys. Anchors
// and aliases are expanded, within a budget. Every content error is a
// *ValidationError naming the intent, the field path and the line, for
// example
//
//	intent "store-net": resources[1].sepc: unknown field (line 9)
//
// Parse reports one problem, the first in document order: decoding problems
// (syntax, unknown or duplicate fields, wrong kinds) before the rules of
// Validate. A missing field is reported at the line of its parent and
// counts as coming after what the parent does hold, so a misspelt key is
// reported as unknown before its correct spelling is reported missing.
//
// # Values
//
// Spec, Probe and Rollout hold plain values: map[string]any, []any, string,
// int64, float64, bool and nil. A number decodes as int64 when its value is
// integral and fits in an int64 (so 5, 5.0 and 5e0 are all int64(5)), and as
// float64 otherwise. This is a rule on values rather than spelling, because
// JSON does not tell 5 from 5.0: the same document in YAML and JSON, and an
// intent re-parsed from its Canonical encoding, give reflect.DeepEqual
// values. YAML timestamps decode as strings. Code that builds intents by
// hand may also use int; Canonical and Digest treat it like int64.
//
// # Rollouts
//
// Intent.Rollout keeps the rollout block as written, so canonical
// encodings do not depend on this package's defaults; RolloutSpec (or
// ParseRollout) gives its typed view, a *Rollout with every default filled
// in. The block is strict: unknown fields anywhere in it are errors, and
//
//   - waves is a list of at most 32 waves; each is a mapping (name, count,
//     percent, selector, approval, maxParallel, gate) with exactly one of
//     count, percent and selector, or a shorthand: an integer N is count N,
//     "10%" is percent 10, and "site-type=kiosk" or "a=b,c=d" a selector.
//     A count is 1 to 1,000,000; a percent, the cumulative share of the
//     targeted devices, is in (0, 100] and never below an earlier wave's;
//     wave names are DNS labels, unique, and default to wave-N;
//   - percents (percent, gate.converged, onFailure.threshold) are numbers
//     from 0 to 100 or strings such as "95%";
//   - durations (progressDeadline, gate.hold, gate.timeout) are Go
//     duration strings greater than 0, such as "10m";
//   - maxParallel is at least 1; window is "HH:MM-HH:MM" in UTC, its ends
//     different, such as "22:00-06:00" across midnight;
//   - strategy is waves (the default) or immediate, which takes no waves;
//     onFailure.action is pause (the default) or revert.
//
// Validate and Parse apply these rules. ValidateCommitted, for intents
// already in the replicated log, does not: a block committed before the
// rules existed must not make a replica drop the intent on replay. For
// such an intent RolloutSpec returns the error, and the state machine
// rolls it out at once.
//
// # Boundaries
//
// The package is pure and deterministic: no clock, no randomness, no I/O,
// no Meteor imports and no network code, so the replicated state machine can
// call it from Apply. It does not import package net; crypto/x509, used to
// check certificates, pulls net in only for its address types. Validate does
// not look at certificate validity dates, because that would need a clock.
package intent

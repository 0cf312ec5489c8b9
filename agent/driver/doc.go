// Package driver holds the agent's resource drivers: the code that reads,
// compares, applies and probes one kind of state on a device.
//
// Every driver implements the small Driver interface:
//
//   - Current reads what is on the device now (the observed state);
//   - Diff compares that observation with the resource's desired state;
//   - Apply brings the device to the desired state, idempotently;
//   - Probe checks the effective state: whether the live system actually
//     uses what was applied (a TLS port serving the new certificate, a
//     check command passing).
//
// The three states of a resource (intended, applied, effective) can all
// differ; drivers only observe and act, they never decide. Ordering,
// retries, drift policy and journaling belong to the agent's planner and to
// package journal. A driver never assumes a change happened because it ran:
// Apply re-reads or re-checks before returning success.
//
// The built-in drivers are:
//
//   - "file": atomic write of content and mode (temp file, fsync, chmod,
//     rename, fsync of the directory);
//   - "exec": a guarded command pair, check and apply, with a timeout that
//     kills the whole process group;
//   - "certificate": a certificate and key pair on disk, validity, and a
//     probe of the certificate a local TLS port actually serves;
//   - "sim": an in-memory simulated device for tests and the fleet
//     simulator.
//
// A Registry maps type names to drivers and is built from a Config that
// carries the dependencies: a Clock (used by "sim" and for certificate
// validity), a Root directory beneath which the absolute paths of "file"
// and "certificate" resources are resolved (os.Root: links out of it are
// refused), a logger, and an exec policy (which programs may run, which
// env variables a spec may set; commands never inherit the agent's
// environment). docs/security.md says what an intent can make a device do
// and how a site narrows it.
//
// Spec validation is owned by package fsm/intent; drivers still check the
// fields they use and return errors wrapping ErrInvalidSpec, which callers
// should treat as terminal (retrying cannot fix them). This package does
// not import the network or journal packages, and keeps no package-level
// state.
package driver

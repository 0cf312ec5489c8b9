// Package agentcmd is the agent's command line, one definition for both
// binaries: `meteor agent` (cmd/meteor) and `meteor-agent`
// (cmd/meteor-agent) run the command New returns, with the same flags,
// checks, enrollment and logging.
//
// It reads the flags, settles the device's identity (a certificate
// enrolled for and renewed in --data-dir, or one installed with
// --cert-file and --key-file), builds an agent.Config and runs the agent
// until the command's context ends. It must not import the server
// (cluster), the scheduler, chaos or the benchmarks: the agent binary is
// built from it and stays small (cmd/meteor-agent/deps_test.go).
package agentcmd

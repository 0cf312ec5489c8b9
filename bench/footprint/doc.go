// Command footprint measures what one idle Meteor agent costs its device:
// the bytes it sends and receives a day, its memory, its CPU and the size
// of its binary, once per link profile (fiber, cellular), each against its
// goal, and how quickly a change still reaches it.
//
// Per profile: three `meteor server` processes serving agents
// (benchkit.StartMeteor, TLS, a CA made with `meteor ca init`), one intent
// of a few file resources that the device's labels select, and one real
// agent process (`meteor agent`, or the binary -agent-bin names, which
// takes the same flags) with a device certificate from `meteor ca
// issue-device`, its file resources confined beneath a directory of the
// run (--root). The agent reaches each server through a user-space UDP
// proxy of its own on loopback (chaos.UDPProxy) that applies the profile
// in both directions and counts the datagrams and bytes each way. Once
// the device has converged (GET /v1/devices/{id}) and the Raft log has
// settled, the agent idles for -duration while nothing is measured but
// counters; then:
//
//   - bytes a day: the proxies' counts over the idle window, per server
//     (the one the agent is connected to, the others) and in total,
//     scaled to 24 h. Upload is what the agent sent (dropped datagrams
//     included: the device paid for them), download what reached it. The
//     goal counts IP bytes: UDP payload plus 28 bytes of IPv4 and UDP
//     headers per datagram. The agent does not count its own traffic yet;
//     as root with nft, an nftables table of the benchmark's
//     own (inet family, input hook, loopback only, counters and nothing
//     else, deleted on every exit path) counts the same datagrams by the
//     proxies' ports as a cross-check;
//   - the agent's RSS (VmRSS and VmHWM of /proc/PID/status) at the end of
//     the window, and its CPU over the window as a percentage of one core
//     (utime+stime of /proc/PID/stat);
//   - push latency: -pushes changes to one resource of the intent,
//     -push-gap apart, each timed from the write's answer (it is
//     committed) until a blocking read of the device (?index=N&wait=30s)
//     shows it acknowledged (acked_revision): the Notify, the Pull, the
//     Delta and the Ack through the profile's link, and the owner
//     committing the acknowledgement;
//   - the agent binary's size and whether it is static (no PT_INTERP);
//   - the Raft leader elections during the profile's run.
//
// Results go to stdout, bench/results/footprint.json and
// bench/results/footprint.md, with the summary rows bench/report gathers.
//
// Run it from the module root:
//
//	go run ./bench/footprint -meteor-bin bin/meteor
//
// -duration sets the idle window (default 10 minutes per profile),
// -profiles the links. Without -meteor-bin it builds ./cmd/meteor into the
// temporary dir.
package main

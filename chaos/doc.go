// Package chaos injects faults into Meteor's networking so that tests, the
// fleet simulator and `meteor chaos` can exercise the system on the links it
// will meet in the field: lossy cellular uplinks, partitioned server racks,
// clocks that disagree.
//
// It owns:
//
//   - [PacketConn]: a net.PacketConn wrapper (usable as quic.Transport.Conn)
//     that drops, delays, duplicates, reorders and corrupts datagrams
//     according to a [LinkProfile], per destination if asked.
//   - [UDPProxy] and [TCPProxy]: standalone proxies applying the same faults
//     between two real sockets, for processes that cannot be wrapped.
//   - [Network]: a partition table shared by the Raft stream layers
//     ([Network.StreamLayer]) and memberlist transports
//     ([Network.MemberlistTransport]) of an in-process cluster.
//   - [Clock], [RealClock] and [SkewedClock] for clock-skew scenarios.
//   - [FaultLog]: every fault injected anywhere in the package is appended to
//     a log that can be written as JSON lines, so a failing run can be
//     understood and replayed.
//
// Every random decision is drawn from a math/rand/v2 PCG source seeded by the
// caller, split into one independent stream per link: per direction and peer
// of a PacketConn or UDPProxy (numbered in the order the links first carry
// traffic, so reruns with other ephemeral ports replay the same decisions),
// and per ordered pair of node IDs in a Network. The faults a link sees thus
// depend only on the seed and the sequence of traffic on that link, not on
// how goroutines interleave other links. Timing (delays, outages) is real
// time, so a replay reproduces decisions, not schedules.
//
// chaos may import any Meteor package. Nothing may import chaos except its
// own sub-packages, tests, the simulator, the benchmarks and the `meteor`
// command; a test in this package checks that rule.
package chaos

// Command fleet benchmarks whole simulated fleets against a 3-server
// Meteor cluster on loopback, in two parts measured in one run:
//
//  1. Scale. For each fleet size of -sizes (10,000, 25,000, 50,000 and
//     100,000 by default), a fresh cluster of three `meteor server`
//     processes is started and one intent written; the fleet is started
//     and must connect and converge on it; then one change gives every
//     device a new value. It reports the time until every device had a
//     session (the row "connect 100,000 devices"), the time from the
//     write's answer until 50/90/99/100 % of the devices converged on the
//     change (the row "largest fleet converging on one change"), each
//     server's memory per session it serves (VmRSS added since before the
//     fleet started) and CPU time per connect, the simulator's memory and
//     CPU per device, the datagrams dropped by full UDP receive buffers,
//     and the leader elections. The sizes stop at the first that does not
//     connect, converge or reach 99 % within its bounds, or that would
//     drive the machine out of memory; the largest that held is the
//     figure, and a row that misses its goal says, from what was measured,
//     what limits it (CPU per connect, memory per device).
//
//     The devices are, by default (-scale-devices light), the light
//     wire-level devices of bench/internal/wiredev in this process: each
//     with its own device certificate (issued from the cluster CA as the
//     level starts), session and real QUIC connection, the agent's
//     protocol, changes applied in zero time; they share -sockets UDP
//     sockets (one quic.Transport each) and -dials dial at a time, which
//     is how 100,000 fit in one process beside the servers. Converged: the
//     device's report of the change acknowledged, which its server sends
//     once the status is committed through Raft. With -scale-devices agent
//     the fleet is full agents as in part 2 (below), started at
//     -ramp-rate a second, converged as the agents see it.
//
//  2. Retail. The 1,200-device retail mix of agent/sim (fiber stores,
//     cellular kiosks, pop-up sites that go offline and lose power) takes
//     the changes in docs/examples/retail one after another; for each, the
//     time to 50/90/99/100 % of its targeted devices converged, overall,
//     over the devices that were reachable, and per link profile, with
//     the servers' own count at the end.
//
// Full agents are agent.Agents run by agent/sim in worker processes: this
// same binary, started with METEOR_BENCH_FLEET_WORKER=1, runs one
// sim.Fleet and serves a small control API on loopback (summary, mark,
// report) to the driver. Workers exist because a simulated agent holds
// two file descriptors (its UDP socket and its bbolt journal) and the hard
// RLIMIT_NOFILE (20,000 on the reference machine) cannot be raised; each
// worker also binds its devices to its own loopback address, 127.0.1.k,
// so that the fleet is not limited to one address's ephemeral ports. The
// agents' journals go to -sim-dir (/dev/shm by default), so that a
// hundred thousand simulated disks are not one real disk's fsync queue.
// Their convergence is the agents' own view (converged at the change's
// revision, sampled every -sample-every), timed from the write's answer
// with the wall clock all processes share.
//
// As root the run raises net.core.rmem_max and wmem_max to what quic-go
// recommends and puts them back at its end (-raise-udp-buffers); every
// cluster's leader elections over its whole life are in the results.
//
// It owns every process it starts (own process group, SIGKILL on the
// driver's death, stopped on every exit path). It must not touch the
// servers except through their HTTP API and the agents' wire protocol.
// Results go to stdout, bench/results/fleet.json and bench/results/fleet.md
// (-name changes the stem), with the summary rows of benchmarks 4 and 5.
//
// Run it from the module root:
//
//	go run ./bench/fleet -meteor-bin bin/meteor
//	go run ./bench/fleet -parts retail -meteor-bin bin/meteor
//
// Without -meteor-bin it builds ./cmd/meteor into the temporary dir.
package main

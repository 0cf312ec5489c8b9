// Command sessions benchmarks agent sessions on Meteor servers, in four
// parts measured in one run:
//
//  1. Resync bytes. A device holding 50 file resources (about 300-byte
//     bodies) converges and disconnects; 100 intent revisions then change
//     3 of them; the device resumes its session and pulls. The Delta bytes
//     the server sent are compared with the changed bodies and with a
//     replay of every revision (measured by a second device that stays
//     connected and pulls after each revision). A third device resumes by
//     revision only, without its inventory, for comparison.
//  2. Reconnect time. A device reconnects N times, each time resuming its
//     session with Hello and Pull pipelined: with 0-RTT (it keeps its TLS
//     session cache and dials with DialEarly) and with a full handshake (a
//     fresh TLS configuration each time), on loopback and with 25 ms of
//     one-way delay injected on the client socket (50 ms RTT). Times to
//     the Welcome and to the first Delta are reported as p50/p99, with the
//     share of connections that really used 0-RTT.
//  3. Server memory per idle agent. `meteor server --dev` runs as its own
//     process; the driver connects 1,000 and then 10,000 devices, each with
//     its own certificate (Hello with inventory, Welcome, Pull, Delta,
//     Ack, then idle), and reads the server's VmRSS (and its live Go heap
//     from GODEBUG=gctrace=1) before and after. The connect rate and the
//     Raft entries per connect are reported too. The largest level's added
//     VmRSS per session is the summary row "server memory per idle
//     session" (goal 64 KiB), the one source of that figure.
//  4. Reconnect storm. A three-server cluster (`meteor server` processes
//     sharing the cluster secret, so that session tickets and resume
//     tokens of one are good on the others); 10,000 devices, each with its
//     own certificate, connect to one follower and converge; that server
//     gets SIGKILL and every device resumes its session on one of the
//     other two, following the agent's connection policy (the dead server
//     in penalty, the other survivor tried at once on failure, jittered
//     exponential backoff, the agent's dial timeout). Once with 0-RTT (the
//     dead server's session ticket, DialEarly) and once with full
//     handshakes (no ticket cache), each on a fresh cluster. It reports
//     the time from the kill until 50%, 99% and all devices had their
//     first Delta, whether each got its own session back without a
//     resync, the survivors' and the devices' CPU seconds, failed and
//     retried attempts, elections, and the ratios full / 0-RTT; these are
//     the run's summary rows.
//
// Parts 1 and 2 run a single dev server in this process (cluster.New), so
// its AgentStats cross-check the byte counts; part 3 needs the server alone
// in its process, part 4 three server processes. Devices are the wire-level
// devices of bench/internal/wiredev (package wire, not package agent):
// they send what the agent sends, and every frame is counted with
// wire.FrameLen.
//
// It owns every process it starts (own process group, SIGKILL on the
// driver's death, stopped on every exit path). Data and logs live in one
// temporary directory, removed after a successful run unless -keep is
// given. Results go to stdout, bench/results/sessions.json and
// bench/results/sessions.md; the JSON's "summary" holds the memory row and
// the storm's rows of the benchmark summary table, "leader_elections" the
// elections of every server and cluster over its life. As root the run
// raises net.core.rmem_max and wmem_max to what quic-go recommends for the
// run (-raise-udp-buffers) and counts datagrams dropped by full receive
// buffers while the memory part connects and during the storm.
//
// Run it from the module root:
//
//	go run ./bench/sessions -meteor-bin bin/meteor
//
// Without -meteor-bin it builds ./cmd/meteor into the temporary dir.
// -parts selects parts (resync,reconnect,memory,storm); other flags change
// the sizes (-resources, -body-size, -revisions, -changed, -churn), the
// number of reconnects and the delay (-reconnects, -delay), the fleet
// (-agents, -dial-concurrency, -sockets, -settle) and the storm
// (-storm-agents, -storm-sockets, -storm-modes, -storm-detect,
// -storm-timeout).
package main

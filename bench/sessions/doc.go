// Command sessions benchmarks agent sessions on a Meteor server, in three
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
//     Raft entries per connect are reported too.
//
// Parts 1 and 2 run a single dev server in this process (cluster.New), so
// its AgentStats cross-check the byte counts; part 3 needs the server alone
// in its process. Devices are wire-level clients written with package wire
// (not package agent): they send what the agent sends, and every frame is
// counted with wire.FrameLen.
//
// It owns every process it starts (own process group, SIGKILL on the
// driver's death, stopped on every exit path). Data and logs live in one
// temporary directory, removed after a successful run unless -keep is
// given. Results go to stdout, bench/results/sessions.json and
// bench/results/sessions.md.
//
// Run it from the module root:
//
//	go run ./bench/sessions -meteor-bin bin/meteor
//
// Without -meteor-bin it builds ./cmd/meteor into the temporary dir.
// -parts selects parts (resync,reconnect,memory); other flags change the
// sizes (-resources, -body-size, -revisions, -changed, -churn), the number
// of reconnects and the delay (-reconnects, -delay), and the fleet
// (-agents, -dial-concurrency, -sockets, -settle).
package main

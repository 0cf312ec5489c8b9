// Command fanout benchmarks fan-out convergence: one change to the desired
// state of a whole fleet, and the time until 50, 99 and 100 % of the
// devices have applied it, until their report has reached the control
// plane, and (Meteor) until the API shows the report durable, for Meteor
// and two Mosquitto brokers, on a clean loopback link and with packet loss
// applied to every system the same way.
//
// Meteor: three `meteor server` processes (the meteor binary, a cluster
// formed with --bootstrap-expect 3, each serving agents over QUIC), and
// -devices simulated devices in this process, spread round-robin over the
// three servers: the wire-level devices of bench/internal/wiredev, each
// with its own device certificate from the cluster CA, a real QUIC
// connection and TLS handshake, and the agent's protocol (Hello with its
// inventory, Welcome, Pull, Delta, Ack, Report, ReportAck; a Notify that
// carries the change's Delta on the set the device holds is taken as is,
// another Notify makes it pull, a report not acknowledged is sent again after 1 s doubling to
// 60 s, a lost session is resumed). The devices share a few client UDP
// sockets (quic.Transports), which is what lets 10,000 of them run on two
// cores next to the servers. One intent selects every device; the change
// is one PUT of it with a new resource body.
//
// Mosquitto: Debian's broker (bench/install-mosquitto.sh) as a child
// process with a generated configuration, run twice: "mosquitto" in
// plaintext with persistence off, and "mosquitto-tls" with TLS on both
// listeners, a client certificate required from every client (one per
// device, from a CA the run creates with cluster/pki), and persistence on
// (the peer of the goals). -devices MQTT 3.1.1 clients written with
// eclipse/paho.mqtt.golang, each on its own TCP connection (clean session,
// QoS 1, auto-reconnect). Device i is in group i mod -groups and
// subscribes to that group's retained desired-state topic; on a new
// version it publishes a report (QoS 1) to its own report topic, and a
// collector client, the control plane's stand-in, subscribed to every
// report topic on a second listener, records when each device's report of
// the new version arrives. The change is one retained QoS 1 publish per
// group, carrying the same bytes Meteor sends as the resource body.
//
// Applied: the device has received the new desired state and applied it
// (in zero time on every side). Reported: its report of it has reached
// the control plane: for Meteor the device holds the ReportAck for that
// report, which the server sends only once the device's status transition
// is committed through Raft; for Mosquitto the collector has received the
// report. Reported and durable (Meteor): the API shows the device
// converged at the change's revision (blocking reads of GET /v1/status
// from a follower's own replica, at most one every 50 ms). Mosquitto's
// persistence writes its database every autosave_interval and at exit,
// not before acknowledging, so its reported time stands for its durable
// one. Times run from the instant the change is submitted (the PUT is
// sent; the first retained PUBLISH is sent) and are taken by this
// process's clock on every side. The figures against Mosquitto with TLS
// and persistence are the summary rows; plaintext Mosquitto is in their
// notes.
//
// UDP: as root the run raises net.core.rmem_max and wmem_max to what
// quic-go recommends (benchkit.RaiseUDPBufferMax; -raise-udp-buffers) and
// puts them back at its end, reads the buffers every socket got (ss), and
// counts the datagrams dropped by full receive buffers during each change
// on the servers' and the devices' sockets (/proc/net/udp) and on the
// host (/proc/net/snmp).
//
// Loss: with root and nft, a table of this process's own drops the given
// percentage of packets at the input hook (loopback packets pass it once)
// whose port is a Meteor agent port (UDP, both directions) or the
// Mosquitto device listener (TCP, both directions), with `numgen random`.
// The table is deleted on every exit path; one left by a killed run is
// removed at the next start. Without root or nft the loss rows are
// skipped with a message.
//
// It owns every process it starts (own process group, SIGKILL on the
// driver's death, stopped on every exit path). Data and logs live in one
// temporary directory, removed after a successful run unless -keep is
// given. Results go to stdout, bench/results/fanout.json and
// bench/results/fanout.md; the JSON records the leader elections of each
// change and of the cluster's whole life.
//
// Run it from the module root:
//
//	go run ./bench/fanout -meteor-bin bin/meteor
//
// Without -meteor-bin it builds ./cmd/meteor into the temporary dir.
// -devices, -groups and -loss change the fleet and the links; -systems
// runs some of the systems only.
package main

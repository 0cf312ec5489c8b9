// Package wiredev holds the benchmarks' wire-level devices: simulated
// agents written with package wire, not package agent, that speak the
// agent's protocol over real QUIC, each with its own device certificate
// and session. They keep what the agent journals (session, resume token,
// acknowledged revision, the applied inventory, report sequence numbers)
// and apply a change in zero time: nothing runs.
//
// Device is one device's state and the messages it sends, with no I/O:
// bench/sessions drives it message by message to count every byte.
// Fleet runs many devices for as long as a benchmark needs them, as the
// agent would (a Notify that carries a Delta on the set the device holds
// is taken as is, another makes the device pull; a complete Delta is taken,
// acknowledged and reported; an unacknowledged report is sent again, with
// the seq it was sent with, after 1 s doubling to 60 s and after the next
// Welcome; a lost connection is dialled again with the agent's jittered
// backoff), sharing a few UDP sockets, one quic.Transport
// each, so that 100,000 of them fit in one process beside the servers:
// bench/fanout and the scale part of bench/fleet use it. The full agents
// of agent/sim remain the realistic devices (bench/fleet's retail part).
//
// It touches the servers only through the agents' wire protocol.
package wiredev

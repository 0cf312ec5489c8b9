// Package wire is Meteor's agent<->server protocol: the messages an agent
// and a server exchange, how they are framed on a QUIC stream, how the two
// sides agree on a protocol version, the resume tokens that let a session
// outlive a connection, and the TLS and QUIC configuration both sides use.
//
// What wire owns:
//
//   - Messages (hello.go, desired.go, report.go, control.go): one Go type per
//     message with Append (encode), Decode and Len, a hand-written, versioned
//     binary encoding whose byte layout is specified in docs/wire.md.
//   - Framing (frame.go): uvarint length | type byte | payload, with a frame
//     size limit checked before anything is allocated.
//   - Versioning (version.go): the ALPN protocol ID, the protocol
//     major/minor, negotiation, and the QUIC application close codes.
//   - Resume tokens (token.go): HMAC-signed session claims that any server
//     holding the cluster secret can verify, with key rotation.
//   - TLS (tls.go) and QUIC (quic.go): the identities in device and server
//     certificates (URI SANs meteor://device/<id> and meteor://server/<id>,
//     built by DeviceURI and ServerURI and read by DeviceIDFromCert and
//     ServerIDFromCert; the device ID lives in the client certificate, never
//     in a message), the TLS configurations that verify peers, shared
//     session-ticket keys so every server can resume every agent's TLS
//     session, and 0-RTT settings. Issuing certificates is not wire's: the
//     cluster's CA is package cluster/pki.
//
// What wire must not touch: it imports nothing of Meteor's own packages
// (only the standard library and quic-go). It holds no session state, runs
// no goroutines, reads no clock (callers pass now), and knows nothing of
// intents, Raft, or how a delta is computed: it moves bytes and checks that
// they are well formed. Session semantics (what a server does with a Hello,
// when it may send a Delta) are specified in docs/wire.md and implemented
// by packages cluster and agent.
//
// Decoders are strict: every byte sequence decodes to at most one message
// and a decoded message re-encodes to exactly the bytes it came from.
// Decode methods may keep references into the buffer they are given.
package wire

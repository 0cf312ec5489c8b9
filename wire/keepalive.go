package wire

import "time"

// MaxEchoAfter bounds Ping.EchoAfter: a NAT binding test longer than this
// tells nothing an agent needs (its keep-alives never go further apart).
const MaxEchoAfter = 30 * time.Minute

// MaxPingInterval bounds Ping.Interval: no agent stays silent longer, and
// the server's liveness bound (twice it, plus slack) stays far from
// overflowing.
const MaxPingInterval = time.Hour

// MaxPingPad bounds Ping.Pad.
const MaxPingPad = 64

// ResetProbePad is the padding of a Ping that asks a server which may have
// lost the connection for a stateless reset (RFC 9000 §10.3). A server
// answers only a packet longer than the smallest reset it could send (42
// bytes in quic-go) so that two endpoints can never reset each other in a
// loop; a bare Ping travels in a 34-byte datagram, too small to be
// answered. 16 bytes of padding take it past that bound with room for the
// smallest headers.
const ResetProbePad = 16

// Ping is the agent's keep-alive (protocol 1.3). It refreshes the NAT
// binding of the agent's path and tells the server how long the agent
// may now stay silent: the server ends a session it has not heard from
// for longer than LivenessBound(Interval). With EchoAfter set it is also
// a NAT binding test: the server answers with a Pong of the same Seq
// once EchoAfter has passed since it received the Ping, and the agent,
// silent meanwhile, learns whether its binding outlived that silence.
type Ping struct {
	// Seq numbers the agent's Pings in the connection; a Pong names the
	// Ping it answers.
	Seq uint64
	// Interval is the longest the agent will now stay silent. Encoded in
	// whole milliseconds; zero and above MaxPingInterval are invalid.
	Interval time.Duration
	// EchoAfter, if set, asks for a Pong that long after the server
	// received this Ping; at most MaxEchoAfter. Whole milliseconds.
	EchoAfter time.Duration
	// Pad is the length of the padding, zero bytes after the fields
	// (encoded as a length and the bytes; a plain Ping's is one byte, 0),
	// at most MaxPingPad; it carries nothing and makes the datagram long
	// enough to draw a stateless reset (ResetProbePad).
	Pad int
}

// Type implements Message.
func (*Ping) Type() MessageType { return TypePing }

// Append implements Message.
func (m *Ping) Append(b []byte) []byte {
	b = appendUvarint(b, m.Seq)
	b = appendUvarint(b, durationMillis(m.Interval))
	b = appendUvarint(b, durationMillis(m.EchoAfter))
	b = appendUvarint(b, uint64(m.Pad))
	return append(b, make([]byte, m.Pad)...)
}

// Len implements Message.
func (m *Ping) Len() int {
	return uvarintLen(m.Seq) + uvarintLen(durationMillis(m.Interval)) + uvarintLen(durationMillis(m.EchoAfter)) + uvarintLen(uint64(m.Pad)) + m.Pad
}

// Decode implements Message.
func (m *Ping) Decode(payload []byte) error {
	d := decoder{b: payload}
	*m = Ping{Seq: d.uvarint(), Interval: d.duration(), EchoAfter: d.duration()}
	if d.err == nil && m.Interval <= 0 {
		d.malformed("zero keep-alive interval")
	}
	if d.err == nil && m.Interval > MaxPingInterval {
		d.malformed("keep-alive interval %v, above %v", m.Interval, MaxPingInterval)
	}
	if d.err == nil && m.EchoAfter > MaxEchoAfter {
		d.malformed("echo after %v, above %v", m.EchoAfter, MaxEchoAfter)
	}
	pad := d.bytes(MaxPingPad, "padding")
	for _, c := range pad {
		if c != 0 {
			d.malformed("padding byte %#x, want 0", c)
			break
		}
	}
	m.Pad = len(pad)
	return d.finish("Ping")
}

// Pong answers a Ping that asked for an echo (protocol 1.3).
type Pong struct {
	// Seq is the Seq of the Ping answered.
	Seq uint64
}

// Type implements Message.
func (*Pong) Type() MessageType { return TypePong }

// Append implements Message.
func (m *Pong) Append(b []byte) []byte { return appendUvarint(b, m.Seq) }

// Len implements Message.
func (m *Pong) Len() int { return uvarintLen(m.Seq) }

// Decode implements Message.
func (m *Pong) Decode(payload []byte) error {
	d := decoder{b: payload}
	*m = Pong{Seq: d.uvarint()}
	return d.finish("Pong")
}

// KeepAliveStart is the keep-alive interval an agent of 1.3 starts a
// connection at, until it has learned how long its path may stay silent:
// below the UDP binding timeouts of most NATs. Its first Ping follows the
// Welcome at once.
const KeepAliveStart = 25 * time.Second

// LivenessSlack is what LivenessBound adds to twice the announced
// interval: room for a lost keep-alive's retransmissions on a lossy link.
const LivenessSlack = 30 * time.Second

// LivenessBound is how long a server waits, after it last heard from an
// agent that announced keep-alives every interval, before it ends the
// session as dead: one keep-alive may be lost outright.
func LivenessBound(interval time.Duration) time.Duration {
	return LivenessBoundWith(interval, LivenessSlack)
}

// LivenessBoundWith is LivenessBound with another slack.
func LivenessBoundWith(interval, slack time.Duration) time.Duration {
	return 2*interval + slack
}

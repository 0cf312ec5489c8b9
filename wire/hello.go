package wire

import "time"

// Hello is the agent's first message on the control stream. It opens a
// new session (zero SessionID) or resumes one (SessionID and ResumeToken
// from the last Welcome). The device ID is not in it: the server takes it
// from the client certificate.
type Hello struct {
	// Major and Minor are the protocol version the agent speaks.
	Major, Minor uint16
	// AgentVersion is the agent's build version, for operators.
	AgentVersion string
	// SessionID is the session to resume; zero for a new session.
	SessionID SessionID
	// ResumeToken is the token from the last Welcome of that session.
	ResumeToken []byte
	// Labels are the device's self-reported labels.
	Labels map[string]string
	// AckedRevision is the last desired revision the agent journaled and
	// acknowledged.
	AckedRevision uint64
	// AckedReportSeq is the highest report seq the agent saw acknowledged
	// in this session.
	AckedReportSeq uint64
	// Inventory says that Applied is the agent's complete applied set
	// (possibly empty); otherwise Applied is empty and the server relies on
	// the session's acknowledged revision.
	Inventory bool
	// Applied lists the resources the agent has applied.
	Applied []AppliedResource
	// Early says the agent sent this Hello in 0-RTT data, so it may be a
	// replay: the server must not commit anything derived from it before
	// the handshake completes.
	Early bool
	// Extensions carry fields added by later minor versions.
	Extensions []Extension
}

const (
	helloEarly     = 1 << 0
	helloInventory = 1 << 1
)

// Type implements Message.
func (*Hello) Type() MessageType { return TypeHello }

func (m *Hello) flags() uint8 {
	var f uint8
	if m.Early {
		f |= helloEarly
	}
	if m.Inventory {
		f |= helloInventory
	}
	return f
}

// Append implements Message.
func (m *Hello) Append(b []byte) []byte {
	b = appendU16(b, m.Major)
	b = appendU16(b, m.Minor)
	b = append(b, m.flags())
	b = appendString(b, m.AgentVersion)
	b = append(b, m.SessionID[:]...)
	b = appendBytes(b, m.ResumeToken)
	b = appendLabels(b, m.Labels)
	b = appendUvarint(b, m.AckedRevision)
	b = appendUvarint(b, m.AckedReportSeq)
	b = appendApplied(b, m.Applied)
	return appendExtensions(b, m.Extensions)
}

// Len implements Message.
func (m *Hello) Len() int {
	n := 2 + 2 + 1 + stringLen(m.AgentVersion) + len(m.SessionID) + bytesLen(m.ResumeToken)
	n += labelsLen(m.Labels)
	n += uvarintLen(m.AckedRevision) + uvarintLen(m.AckedReportSeq)
	return n + appliedLen(m.Applied) + extensionsLen(m.Extensions)
}

// Decode implements Message.
func (m *Hello) Decode(payload []byte) error {
	d := decoder{b: payload}
	*m = Hello{Major: d.u16(), Minor: d.u16()}
	f := d.flags(helloEarly | helloInventory)
	m.Early, m.Inventory = f&helloEarly != 0, f&helloInventory != 0
	m.AgentVersion = d.str(MaxNameLen, "agent version")
	d.fixed(m.SessionID[:])
	m.ResumeToken = d.bytes(MaxTokenLen, "resume token")
	m.Labels = d.labels()
	m.AckedRevision = d.uvarint()
	m.AckedReportSeq = d.uvarint()
	m.Applied = d.applied()
	m.Extensions = d.extensions()
	if d.err == nil && !m.Inventory && len(m.Applied) > 0 {
		d.malformed("applied resources without the inventory flag")
	}
	return d.finish("Hello")
}

// Welcome accepts a Hello: the session is established (or resumed) on
// this connection.
type Welcome struct {
	// Major and Minor are the server's protocol version; the session runs
	// at the lower minor of the two.
	Major, Minor uint16
	// ServerID names the server, for logs and stickiness.
	ServerID string
	// SessionID is the session's ID: the resumed one, or a new one.
	SessionID SessionID
	// ResumeToken is a fresh token for the next reconnect; it replaces any
	// earlier one.
	ResumeToken []byte
	// DesiredRevision is the device's current desired revision as this
	// server knows it; it is never below the Hello's AckedRevision.
	DesiredRevision uint64
	// AcceptedReportSeq is the highest report seq already applied in this
	// session; the agent resends its unacknowledged reports above it.
	AcceptedReportSeq uint64
	// ServerTimeUnixNano is the server's clock when it sent the Welcome.
	ServerTimeUnixNano int64
	// PullInterval is how often the agent should pull without a Notify;
	// zero leaves it to the agent. Encoded in whole milliseconds.
	PullInterval time.Duration
	// Extensions carry fields added by later minor versions.
	Extensions []Extension
}

// Type implements Message.
func (*Welcome) Type() MessageType { return TypeWelcome }

// Append implements Message.
func (m *Welcome) Append(b []byte) []byte {
	b = appendU16(b, m.Major)
	b = appendU16(b, m.Minor)
	b = appendString(b, m.ServerID)
	b = append(b, m.SessionID[:]...)
	b = appendBytes(b, m.ResumeToken)
	b = appendUvarint(b, m.DesiredRevision)
	b = appendUvarint(b, m.AcceptedReportSeq)
	b = appendI64(b, m.ServerTimeUnixNano)
	b = appendUvarint(b, durationMillis(m.PullInterval))
	return appendExtensions(b, m.Extensions)
}

// Len implements Message.
func (m *Welcome) Len() int {
	return 2 + 2 + stringLen(m.ServerID) + len(m.SessionID) + bytesLen(m.ResumeToken) +
		uvarintLen(m.DesiredRevision) + uvarintLen(m.AcceptedReportSeq) + 8 +
		uvarintLen(durationMillis(m.PullInterval)) + extensionsLen(m.Extensions)
}

// Decode implements Message.
func (m *Welcome) Decode(payload []byte) error {
	d := decoder{b: payload}
	*m = Welcome{Major: d.u16(), Minor: d.u16()}
	m.ServerID = d.str(MaxNameLen, "server ID")
	d.fixed(m.SessionID[:])
	m.ResumeToken = d.bytes(MaxTokenLen, "resume token")
	m.DesiredRevision = d.uvarint()
	m.AcceptedReportSeq = d.uvarint()
	m.ServerTimeUnixNano = d.i64()
	m.PullInterval = d.duration()
	m.Extensions = d.extensions()
	return d.finish("Welcome")
}

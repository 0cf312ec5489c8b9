package wire

import (
	"fmt"
	"time"

	"github.com/quic-go/quic-go"
)

// Code says why a server refuses a Hello (Reject) or ends a session
// (GoAway). Each code has the QUIC close code of the same number.
type Code uint8

// Refusal codes.
const (
	// CodeVersionUnsupported: the server does not speak the Hello's major
	// version.
	CodeVersionUnsupported Code = 1
	// CodeLagging: the server's state is behind what the agent has
	// acknowledged; try another server (Redirect lists candidates).
	CodeLagging Code = 2
	// CodeShuttingDown: the server is stopping; reconnect elsewhere.
	CodeShuttingDown Code = 3
	// CodeUnauthorized: the device is not allowed (unknown, revoked, or
	// the token belongs to another device).
	CodeUnauthorized Code = 4
	// CodeSessionUnknown: the session cannot be resumed (bad or expired
	// token, or no inventory to start from); reconnect with a new session
	// and a full inventory.
	CodeSessionUnknown Code = 5

	maxCode = CodeSessionUnknown
)

var codeNames = [...]string{
	CodeVersionUnsupported: "version unsupported",
	CodeLagging:            "server lagging",
	CodeShuttingDown:       "server shutting down",
	CodeUnauthorized:       "unauthorized",
	CodeSessionUnknown:     "session unknown",
}

// String returns the code's name.
func (c Code) String() string {
	if c >= 1 && c <= maxCode {
		return codeNames[c]
	}
	return fmt.Sprintf("Code(%d)", uint8(c))
}

// CloseCode returns the QUIC application close code for c.
func (c Code) CloseCode() quic.ApplicationErrorCode { return quic.ApplicationErrorCode(c) }

// Refusal is the shared body of Reject and GoAway.
type Refusal struct {
	Code Code
	// Reason is for humans and logs.
	Reason string
	// RetryAfter is how long the agent should wait before reconnecting to
	// this server; zero means at the agent's own backoff. Encoded in whole
	// milliseconds.
	RetryAfter time.Duration
	// Redirect lists server addresses (host:port) to try instead, best
	// first; it may be empty.
	Redirect []string
}

func (r *Refusal) append(b []byte) []byte {
	b = append(b, byte(r.Code))
	b = appendString(b, r.Reason)
	b = appendUvarint(b, durationMillis(r.RetryAfter))
	b = appendUvarint(b, uint64(len(r.Redirect)))
	for _, a := range r.Redirect {
		b = appendString(b, a)
	}
	return b
}

func (r *Refusal) len() int {
	n := 1 + stringLen(r.Reason) + uvarintLen(durationMillis(r.RetryAfter)) + uvarintLen(uint64(len(r.Redirect)))
	for _, a := range r.Redirect {
		n += stringLen(a)
	}
	return n
}

func (r *Refusal) decode(payload []byte, what string) error {
	d := decoder{b: payload}
	*r = Refusal{Code: Code(d.u8())}
	if d.err == nil && (r.Code < 1 || r.Code > maxCode) {
		d.malformed("undefined code %d", r.Code)
	}
	r.Reason = d.str(MaxTextLen, "reason")
	r.RetryAfter = d.duration()
	if n := d.length(MaxRedirects, 1, "redirects"); n > 0 {
		r.Redirect = make([]string, n)
		for i := range r.Redirect {
			r.Redirect[i] = d.str(MaxNameLen, "redirect address")
		}
	}
	return d.finish(what)
}

// Reject refuses a Hello. The server sends it as the only answer to the
// Hello, then closes the connection with Code.CloseCode() after a short
// grace period (the agent usually closes first).
type Reject Refusal

// Type implements Message.
func (*Reject) Type() MessageType { return TypeReject }

// Append implements Message.
func (m *Reject) Append(b []byte) []byte { return (*Refusal)(m).append(b) }

// Len implements Message.
func (m *Reject) Len() int { return (*Refusal)(m).len() }

// Decode implements Message.
func (m *Reject) Decode(payload []byte) error { return (*Refusal)(m).decode(payload, "Reject") }

// GoAway ends an established session on this connection: the server is
// shutting down, or is lagging behind what the agent acknowledged. The
// session itself survives; the agent resumes it elsewhere.
type GoAway Refusal

// Type implements Message.
func (*GoAway) Type() MessageType { return TypeGoAway }

// Append implements Message.
func (m *GoAway) Append(b []byte) []byte { return (*Refusal)(m).append(b) }

// Len implements Message.
func (m *GoAway) Len() int { return (*Refusal)(m).len() }

// Decode implements Message.
func (m *GoAway) Decode(payload []byte) error { return (*Refusal)(m).decode(payload, "GoAway") }

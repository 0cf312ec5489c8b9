package wire

import (
	"fmt"
)

// MessageType is the type byte of a frame.
type MessageType uint8

// Message types. Values are part of the protocol and never reused; 0 is
// reserved and never valid.
const (
	TypeHello     MessageType = 0x01 // agent -> server, first on the control stream
	TypeWelcome   MessageType = 0x02 // server -> agent, accepts a Hello
	TypeReject    MessageType = 0x03 // server -> agent, refuses a Hello
	TypeGoAway    MessageType = 0x04 // server -> agent, ends an established session
	TypeNotify    MessageType = 0x05 // server -> agent, "desired revision is now R"
	TypePull      MessageType = 0x06 // agent -> server, asks for a Delta
	TypeDelta     MessageType = 0x07 // server -> agent, answers a Pull
	TypeAck       MessageType = 0x08 // agent -> server, revision journaled
	TypeReport    MessageType = 0x09 // agent -> server, applied + effective state
	TypeReportAck MessageType = 0x0a // server -> agent, reports applied up to seq
	TypePing      MessageType = 0x0b // agent -> server, keep-alive (1.3)
	TypePong      MessageType = 0x0c // server -> agent, answers a Ping's echo (1.3)
	TypeSettings  MessageType = 0x0d // server -> agent, classes, windows, labels, unlocks (1.4)
)

// Message is one protocol message. Append, Len and Decode deal with the
// payload only; the frame (length and type byte) is added by AppendFrame
// and Writer, and removed by ReadMessage.
type Message interface {
	// Type returns the message's type byte.
	Type() MessageType
	// Append appends the encoded payload to b and returns the result.
	Append(b []byte) []byte
	// Len returns the length of the encoded payload.
	Len() int
	// Decode replaces the message with the one encoded in payload, which
	// must be exactly one payload. It may keep references into payload.
	Decode(payload []byte) error
}

// messageInfo is the dispatch table: one row per message type.
var messageInfo = map[MessageType]struct {
	name      string
	new       func() Message
	fromAgent bool
	early     bool
}{
	TypeHello:     {"Hello", func() Message { return new(Hello) }, true, true},
	TypeWelcome:   {"Welcome", func() Message { return new(Welcome) }, false, false},
	TypeReject:    {"Reject", func() Message { return new(Reject) }, false, false},
	TypeGoAway:    {"GoAway", func() Message { return new(GoAway) }, false, false},
	TypeNotify:    {"Notify", func() Message { return new(Notify) }, false, false},
	TypePull:      {"Pull", func() Message { return new(Pull) }, true, true},
	TypeDelta:     {"Delta", func() Message { return new(Delta) }, false, false},
	TypeAck:       {"Ack", func() Message { return new(Ack) }, true, false},
	TypeReport:    {"Report", func() Message { return new(Report) }, true, false},
	TypeReportAck: {"ReportAck", func() Message { return new(ReportAck) }, false, false},
	TypePing:      {"Ping", func() Message { return new(Ping) }, true, false},
	TypePong:      {"Pong", func() Message { return new(Pong) }, false, false},
	TypeSettings:  {"Settings", func() Message { return new(Settings) }, false, false},
}

// String returns the message type's name.
func (t MessageType) String() string {
	if info, ok := messageInfo[t]; ok {
		return info.name
	}
	return fmt.Sprintf("MessageType(%#x)", uint8(t))
}

// Known reports whether t is a message type of this protocol version.
func (t MessageType) Known() bool {
	_, ok := messageInfo[t]
	return ok
}

// SentByAgent reports whether messages of type t flow from agent to
// server. A receiver treats a known message flowing the wrong way as a
// protocol error.
func SentByAgent(t MessageType) bool { return messageInfo[t].fromAgent }

// AllowedInEarlyData reports whether a message of type t may be sent in
// QUIC 0-RTT data. 0-RTT data can be replayed by an attacker, so only
// idempotent requests qualify: Hello and Pull. A server must not act on
// anything else before the handshake completes.
func AllowedInEarlyData(t MessageType) bool { return messageInfo[t].early }

// NewMessage returns a zero message of type t, or nil if t is unknown.
func NewMessage(t MessageType) Message {
	if info, ok := messageInfo[t]; ok {
		return info.new()
	}
	return nil
}

// DecodeMessage decodes a payload of type t. An unknown type yields an
// error wrapping ErrUnknownMessage.
func DecodeMessage(t MessageType, payload []byte) (Message, error) {
	m := NewMessage(t)
	if m == nil {
		return nil, fmt.Errorf("%w: type %#x", ErrUnknownMessage, uint8(t))
	}
	if err := m.Decode(payload); err != nil {
		return nil, err
	}
	return m, nil
}

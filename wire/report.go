package wire

import (
	"fmt"
	"math"
)

// Effective is the outcome of probing a resource's live state.
type Effective uint8

// Effective states.
const (
	// EffectiveUnknown: not probed yet, or the probe could not tell.
	EffectiveUnknown Effective = 0
	// EffectiveOK: the live system matches what was applied.
	EffectiveOK Effective = 1
	// EffectiveMismatch: the live system differs from what was applied.
	EffectiveMismatch Effective = 2
)

// String returns the state's name.
func (e Effective) String() string {
	switch e {
	case EffectiveUnknown:
		return "unknown"
	case EffectiveOK:
		return "ok"
	case EffectiveMismatch:
		return "mismatch"
	}
	return fmt.Sprintf("Effective(%d)", uint8(e))
}

// ResourceReport is the agent's view of one resource.
type ResourceReport struct {
	Key               string // "intent/resourceID"
	AppliedDigest     Digest // digest of the body applied; zero if none
	AppliedRevision   uint64 // desired revision the applied body came from
	Effective         Effective
	Detail            string // what the probe saw, for humans
	LastError         string // last apply error; empty after a success
	Attempts          uint32 // apply attempts for the current body
	UpdatedAtUnixNano int64  // when the agent last changed this entry
}

const resourceReportMinLen = 1 + len(Digest{}) + 1 + 1 + 1 + 1 + 1 + 8

// Report carries applied and effective state. Seq numbers a session's
// reports from 1 upwards; the server applies a report only if its Seq is
// above the highest it applied in the session (at most once), and the
// agent resends unacknowledged reports after a reconnect. Each report
// carries the current state of every resource that changed since the last
// acknowledged report, so a skipped Seq loses nothing.
type Report struct {
	Seq             uint64
	DesiredRevision uint64 // the desired revision the agent is working towards
	// Full says Resources lists every resource the agent has; resources
	// the server knows and the report omits are then gone from the device.
	Full bool
	// Status is the agent's device-level status (e.g. "converged",
	// "progressing", "blocked").
	Status string
	// BlockedReason says what blocks the agent (a workload lock holder and
	// since when); empty if not blocked.
	BlockedReason string
	Resources     []ResourceReport
}

const reportFull = 1 << 0

// Type implements Message.
func (*Report) Type() MessageType { return TypeReport }

// Append implements Message.
func (m *Report) Append(b []byte) []byte {
	b = appendUvarint(b, m.Seq)
	b = appendUvarint(b, m.DesiredRevision)
	if m.Full {
		b = append(b, reportFull)
	} else {
		b = append(b, 0)
	}
	b = appendString(b, m.Status)
	b = appendString(b, m.BlockedReason)
	b = appendUvarint(b, uint64(len(m.Resources)))
	for i := range m.Resources {
		r := &m.Resources[i]
		b = appendString(b, r.Key)
		b = append(b, r.AppliedDigest[:]...)
		b = appendUvarint(b, r.AppliedRevision)
		b = append(b, byte(r.Effective))
		b = appendString(b, r.Detail)
		b = appendString(b, r.LastError)
		b = appendUvarint(b, uint64(r.Attempts))
		b = appendI64(b, r.UpdatedAtUnixNano)
	}
	return b
}

// Len implements Message.
func (m *Report) Len() int {
	n := uvarintLen(m.Seq) + uvarintLen(m.DesiredRevision) + 1 + stringLen(m.Status) +
		stringLen(m.BlockedReason) + uvarintLen(uint64(len(m.Resources)))
	for i := range m.Resources {
		r := &m.Resources[i]
		n += stringLen(r.Key) + len(r.AppliedDigest) + uvarintLen(r.AppliedRevision) + 1 +
			stringLen(r.Detail) + stringLen(r.LastError) + uvarintLen(uint64(r.Attempts)) + 8
	}
	return n
}

// Decode implements Message.
func (m *Report) Decode(payload []byte) error {
	d := decoder{b: payload}
	*m = Report{Seq: d.uvarint(), DesiredRevision: d.uvarint()}
	m.Full = d.flags(reportFull)&reportFull != 0
	m.Status = d.str(MaxNameLen, "status")
	m.BlockedReason = d.str(MaxTextLen, "blocked reason")
	if n := d.length(MaxResources, resourceReportMinLen, "resources"); n > 0 {
		m.Resources = make([]ResourceReport, n)
		for i := range m.Resources {
			r := &m.Resources[i]
			r.Key = d.str(MaxKeyLen, "resource key")
			d.fixed(r.AppliedDigest[:])
			r.AppliedRevision = d.uvarint()
			if r.Effective = Effective(d.u8()); r.Effective > EffectiveMismatch {
				d.malformed("undefined effective state %d", r.Effective)
			}
			r.Detail = d.str(MaxTextLen, "detail")
			r.LastError = d.str(MaxTextLen, "last error")
			if a := d.uvarint(); a <= math.MaxUint32 {
				r.Attempts = uint32(a)
			} else {
				d.malformed("attempts %d overflows 32 bits", a)
			}
			r.UpdatedAtUnixNano = d.i64()
		}
	}
	return d.finish("Report")
}

// ReportAck tells the agent that every report with Seq at or below Seq has
// been applied (or was a duplicate); the agent may forget them. The server
// sends it only once the reports are durable (committed by the owner).
type ReportAck struct {
	Seq uint64
}

// Type implements Message.
func (*ReportAck) Type() MessageType { return TypeReportAck }

// Append implements Message.
func (m *ReportAck) Append(b []byte) []byte { return appendUvarint(b, m.Seq) }

// Len implements Message.
func (m *ReportAck) Len() int { return uvarintLen(m.Seq) }

// Decode implements Message.
func (m *ReportAck) Decode(payload []byte) error {
	d := decoder{b: payload}
	*m = ReportAck{Seq: d.uvarint()}
	return d.finish("ReportAck")
}

package wire

import (
	"crypto/sha256"
	"fmt"
	"hash"
)

// DigestOf returns the digest of a resource body (the canonical encoding
// of an intent.ResourceBody): SHA-256 of its bytes. It is the one
// definition; the scheduler and agents compute digests with it.
func DigestOf(body []byte) Digest { return sha256.Sum256(body) }

// Notify tells the agent that its desired revision is now Revision. It is
// only a hint to pull sooner; agents also pull on their own cadence.
//
// From protocol 1.5 (MinorPushDelta) a Notify may carry the change itself:
// Delta, a complete Delta to Revision that patches the desired set whose
// fingerprint (SetFingerprint) is Base. An agent whose journaled desired
// set has that fingerprint, and that has no Pull outstanding, takes the
// Delta as the answer to a Pull it did not need to send; any other agent
// treats the Notify as a hint and pulls. The fingerprint makes the patch
// safe whatever crossed it on the stream: it applies only to the set it
// was computed from.
type Notify struct {
	Revision uint64
	// Base and Delta are set together, or neither (1.5).
	Base  Digest
	Delta *Delta
}

const notifyDelta = 1 << 0

// Type implements Message.
func (*Notify) Type() MessageType { return TypeNotify }

// Append implements Message.
func (m *Notify) Append(b []byte) []byte {
	b = appendUvarint(b, m.Revision)
	if m.Delta == nil {
		return b
	}
	b = append(b, notifyDelta)
	b = append(b, m.Base[:]...)
	return m.Delta.Append(b)
}

// Len implements Message.
func (m *Notify) Len() int {
	n := uvarintLen(m.Revision)
	if m.Delta != nil {
		n += 1 + len(m.Base) + m.Delta.Len()
	}
	return n
}

// Decode implements Message.
func (m *Notify) Decode(payload []byte) error {
	d := decoder{b: payload}
	*m = Notify{Revision: d.uvarint()}
	if d.err == nil && len(d.b) > 0 {
		if d.flags(notifyDelta)&notifyDelta == 0 {
			d.malformed("extended Notify without the delta flag")
		}
		d.fixed(m.Base[:])
		if d.err == nil {
			m.Delta = new(Delta)
			if err := m.Delta.Decode(d.b); err != nil {
				return fmt.Errorf("wire: decode Notify: %w", err)
			}
			d.b = nil
			switch {
			case !m.Delta.Complete:
				d.malformed("Notify carries an incomplete Delta")
			case m.Delta.TargetRevision != m.Revision:
				d.malformed("Notify of revision %d carries a Delta to %d", m.Revision, m.Delta.TargetRevision)
			}
		}
	}
	return d.finish("Notify")
}

// SetFingerprint identifies a desired set by its resources' keys and
// digests, in key order: the Base of a Notify's Delta. Servers and agents
// compute it with this one definition.
type SetFingerprint struct{ h hash.Hash }

// NewSetFingerprint starts a fingerprint; Add the resources in key order.
func NewSetFingerprint() SetFingerprint { return SetFingerprint{h: sha256.New()} }

// Add adds one resource.
func (f SetFingerprint) Add(key string, digest Digest) {
	f.h.Write([]byte(key))
	f.h.Write(digest[:])
}

// Sum returns the fingerprint of the resources added.
func (f SetFingerprint) Sum() Digest {
	var out Digest
	f.h.Sum(out[:0])
	return out
}

// Pull asks the server for the delta from what the agent has to the
// device's current desired state. It is idempotent and may be sent in
// 0-RTT data. The server answers every Pull with exactly one Delta (which
// may span several frames) or a GoAway.
type Pull struct {
	// KnownRevision is the last desired revision the agent journaled.
	KnownRevision uint64
	// Inventory says that Applied is the agent's complete applied set
	// (possibly empty) and the server must diff against it rather than
	// against KnownRevision; otherwise Applied is empty.
	Inventory bool
	// Applied lists the resources the agent has applied.
	Applied []AppliedResource
}

const pullInventory = 1 << 0

// Type implements Message.
func (*Pull) Type() MessageType { return TypePull }

// Append implements Message.
func (m *Pull) Append(b []byte) []byte {
	b = appendUvarint(b, m.KnownRevision)
	var f uint8
	if m.Inventory {
		f |= pullInventory
	}
	b = append(b, f)
	return appendApplied(b, m.Applied)
}

// Len implements Message.
func (m *Pull) Len() int { return uvarintLen(m.KnownRevision) + 1 + appliedLen(m.Applied) }

// Decode implements Message.
func (m *Pull) Decode(payload []byte) error {
	d := decoder{b: payload}
	*m = Pull{KnownRevision: d.uvarint()}
	m.Inventory = d.flags(pullInventory)&pullInventory != 0
	m.Applied = d.applied()
	if d.err == nil && !m.Inventory && len(m.Applied) > 0 {
		d.malformed("applied resources without the inventory flag")
	}
	return d.finish("Pull")
}

// Upsert is one resource the agent must bring to the given body.
type Upsert struct {
	Key      string // "<intent>/<resource id>" (intent.ResourceKey)
	Digest   Digest // DigestOf(Body)
	Revision uint64 // desired revision that last changed this resource
	Body     []byte // canonical encoding of an intent.ResourceBody; opaque to wire
}

const upsertMinLen = 1 + len(Digest{}) + 1 + 1

// Delta moves the agent from BaseRevision (what it acknowledged, or what it
// reported in a Pull) to TargetRevision. A Delta too large for one frame is
// sent as consecutive frames with the same Base and Target, all but the last
// with Complete false; the agent applies nothing until it has the frame with
// Complete true. An empty, complete Delta with Base == Target means "nothing
// to do".
type Delta struct {
	BaseRevision   uint64
	TargetRevision uint64
	// Complete is false when more frames of this Delta follow.
	Complete bool
	Upserts  []Upsert
	// Deletes are keys of resources the agent must remove.
	Deletes []string
}

const deltaComplete = 1 << 0

// Type implements Message.
func (*Delta) Type() MessageType { return TypeDelta }

// Append implements Message.
func (m *Delta) Append(b []byte) []byte {
	b = m.appendHeader(b)
	b = appendUvarint(b, uint64(len(m.Upserts)))
	for i := range m.Upserts {
		b = appendUpsert(b, &m.Upserts[i])
	}
	b = appendUvarint(b, uint64(len(m.Deletes)))
	for _, k := range m.Deletes {
		b = appendString(b, k)
	}
	return b
}

func (m *Delta) appendHeader(b []byte) []byte {
	b = appendUvarint(b, m.BaseRevision)
	b = appendUvarint(b, m.TargetRevision)
	if m.Complete {
		return append(b, deltaComplete)
	}
	return append(b, 0)
}

func appendUpsert(b []byte, u *Upsert) []byte {
	b = appendString(b, u.Key)
	b = append(b, u.Digest[:]...)
	b = appendUvarint(b, u.Revision)
	return appendBytes(b, u.Body)
}

func upsertLen(u *Upsert) int {
	return stringLen(u.Key) + uvarintLen(u.Revision) + len(u.Digest) + bytesLen(u.Body)
}

func (m *Delta) headerLen() int {
	return uvarintLen(m.BaseRevision) + uvarintLen(m.TargetRevision) + 1
}

// Len implements Message.
func (m *Delta) Len() int {
	n := m.headerLen() + uvarintLen(uint64(len(m.Upserts))) + uvarintLen(uint64(len(m.Deletes)))
	for i := range m.Upserts {
		n += upsertLen(&m.Upserts[i])
	}
	for _, k := range m.Deletes {
		n += stringLen(k)
	}
	return n
}

// Decode implements Message.
func (m *Delta) Decode(payload []byte) error {
	d := decoder{b: payload}
	*m = Delta{BaseRevision: d.uvarint(), TargetRevision: d.uvarint()}
	m.Complete = d.flags(deltaComplete)&deltaComplete != 0
	if n := d.length(MaxResources, upsertMinLen, "upserts"); n > 0 {
		m.Upserts = make([]Upsert, n)
		for i := range m.Upserts {
			u := &m.Upserts[i]
			u.Key = d.str(MaxKeyLen, "resource key")
			d.fixed(u.Digest[:])
			u.Revision = d.uvarint()
			u.Body = d.bytes(DefaultMaxFrameSize, "body")
		}
	}
	if n := d.length(MaxResources, 1, "deletes"); n > 0 {
		m.Deletes = make([]string, n)
		for i := range m.Deletes {
			m.Deletes[i] = d.str(MaxKeyLen, "resource key")
		}
	}
	return d.finish("Delta")
}

// Verify checks that every upsert's Digest is the digest of its Body.
func (m *Delta) Verify() error {
	for i := range m.Upserts {
		if u := &m.Upserts[i]; DigestOf(u.Body) != u.Digest {
			return fmt.Errorf("%w: delta upsert %q: digest does not match body", ErrMalformed, u.Key)
		}
	}
	return nil
}

// SplitDelta splits d into frames of at most maxFrame bytes (type byte plus
// payload; zero means DefaultMaxFrameSize), keeping the order of upserts,
// then deletes. Every part has d's revisions; all but the last have
// Complete false and the last has d.Complete. A single upsert too large for
// a frame yields ErrFrameTooLarge. The parts share d's bodies.
func SplitDelta(d *Delta, maxFrame int) ([]*Delta, error) {
	if maxFrame <= 0 {
		maxFrame = DefaultMaxFrameSize
	}
	if d.Len()+1 <= maxFrame {
		return []*Delta{d}, nil
	}
	// Counts are at most MaxResources, so their uvarints take at most 3
	// bytes each; budget for that and for the type byte.
	budget := maxFrame - 1 - d.headerLen() - 2*uvarintLen(MaxResources)
	var parts []*Delta
	cur := &Delta{BaseRevision: d.BaseRevision, TargetRevision: d.TargetRevision}
	used := 0
	add := func(size int, what string) error {
		if size > budget {
			return fmt.Errorf("%w: %s of %d bytes does not fit a %d-byte frame", ErrFrameTooLarge, what, size, maxFrame)
		}
		if used+size > budget || len(cur.Upserts)+len(cur.Deletes) == MaxResources {
			parts = append(parts, cur)
			cur = &Delta{BaseRevision: d.BaseRevision, TargetRevision: d.TargetRevision}
			used = 0
		}
		used += size
		return nil
	}
	for i := range d.Upserts {
		u := &d.Upserts[i]
		if err := add(upsertLen(u), fmt.Sprintf("upsert %q", u.Key)); err != nil {
			return nil, err
		}
		cur.Upserts = append(cur.Upserts, *u)
	}
	for _, k := range d.Deletes {
		if err := add(stringLen(k), fmt.Sprintf("delete %q", k)); err != nil {
			return nil, err
		}
		cur.Deletes = append(cur.Deletes, k)
	}
	cur.Complete = d.Complete
	return append(parts, cur), nil
}

// Ack acknowledges that the agent has journaled desired revision Revision
// (the TargetRevision of a complete Delta). Acks are monotonic: a server
// ignores an Ack below the session's acknowledged revision.
type Ack struct {
	Revision uint64
}

// Type implements Message.
func (*Ack) Type() MessageType { return TypeAck }

// Append implements Message.
func (m *Ack) Append(b []byte) []byte { return appendUvarint(b, m.Revision) }

// Len implements Message.
func (m *Ack) Len() int { return uvarintLen(m.Revision) }

// Decode implements Message.
func (m *Ack) Decode(payload []byte) error {
	d := decoder{b: payload}
	*m = Ack{Revision: d.uvarint()}
	return d.finish("Ack")
}

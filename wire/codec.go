package wire

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/bits"
	"slices"
	"time"
	"unicode/utf8"
)

// Limits on the fields of a message. A decoder checks each length or count
// against its limit and against the bytes left in the payload before it
// allocates anything.
const (
	// MaxKeyLen bounds a resource key ("intent/resourceID").
	MaxKeyLen = 512
	// MaxNameLen bounds short identifiers: label keys and values, the agent
	// version, a server ID, a redirect address, an agent status.
	MaxNameLen = 256
	// MaxTextLen bounds human-readable text: reasons, details, errors.
	MaxTextLen = 16 << 10
	// MaxTokenLen bounds an opaque resume token.
	MaxTokenLen = 1024
	// MaxLabels bounds the number of labels in a Hello.
	MaxLabels = 128
	// MaxResources bounds the number of entries in one list of resources
	// (applied, upserts, deletes, reports) in one message.
	MaxResources = 1 << 16
	// MaxRedirects bounds the redirect addresses in a Reject or GoAway.
	MaxRedirects = 16
	// MaxExtensions bounds the extensions of a Hello or Welcome.
	MaxExtensions = 32
	// MaxExtensionLen bounds the data of one extension.
	MaxExtensionLen = 64 << 10
)

// ErrMalformed reports bytes that are not a valid encoding: a limit
// exceeded, a non-minimal varint, an undefined enum value or flag, trailing
// bytes, unsorted or duplicate map keys, or invalid UTF-8. Truncated input
// is reported as io.ErrUnexpectedEOF instead.
var ErrMalformed = errors.New("wire: malformed message")

// Digest is the SHA-256 digest of a resource body (DigestOf).
type Digest [32]byte

// SessionID identifies a session; the zero value means "no session yet".
type SessionID [16]byte

// IsZero reports whether id is the zero session ID.
func (id SessionID) IsZero() bool { return id == SessionID{} }

// --- encoding ---

func appendUvarint(b []byte, v uint64) []byte { return binary.AppendUvarint(b, v) }

func uvarintLen(v uint64) int { return (bits.Len64(v|1) + 6) / 7 }

func appendU16(b []byte, v uint16) []byte { return binary.BigEndian.AppendUint16(b, v) }

func appendI64(b []byte, v int64) []byte { return binary.BigEndian.AppendUint64(b, uint64(v)) }

func appendBool(b []byte, v bool) []byte {
	if v {
		return append(b, 1)
	}
	return append(b, 0)
}

func appendString(b []byte, s string) []byte {
	return append(appendUvarint(b, uint64(len(s))), s...)
}

func appendBytes(b []byte, p []byte) []byte {
	return append(appendUvarint(b, uint64(len(p))), p...)
}

func stringLen(s string) int { return uvarintLen(uint64(len(s))) + len(s) }

func bytesLen(p []byte) int { return uvarintLen(uint64(len(p))) + len(p) }

// durationMillis encodes d as whole milliseconds; negative is zero.
func durationMillis(d time.Duration) uint64 {
	if d <= 0 {
		return 0
	}
	return uint64(d / time.Millisecond)
}

// --- decoding ---

// decoder reads fields from one payload. The first error sticks: later
// reads return zero values, so a decode function reads every field and
// checks d.err once at the end.
type decoder struct {
	b   []byte
	err error
}

func (d *decoder) fail(err error) {
	if d.err == nil {
		d.err = err
	}
}

func (d *decoder) malformed(format string, args ...any) {
	d.fail(fmt.Errorf("%w: %s", ErrMalformed, fmt.Sprintf(format, args...)))
}

func (d *decoder) take(n int) []byte {
	if d.err != nil {
		return nil
	}
	if n > len(d.b) {
		d.fail(io.ErrUnexpectedEOF)
		return nil
	}
	p := d.b[:n:n]
	d.b = d.b[n:]
	return p
}

// uvarint reads a minimally encoded LEB128 unsigned varint.
func (d *decoder) uvarint() uint64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.b)
	switch {
	case n == 0:
		d.fail(io.ErrUnexpectedEOF)
		return 0
	case n < 0:
		d.malformed("varint overflows 64 bits")
		return 0
	case n > 1 && d.b[n-1] == 0:
		d.malformed("non-minimal varint")
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *decoder) u8() uint8 {
	p := d.take(1)
	if p == nil {
		return 0
	}
	return p[0]
}

func (d *decoder) u16() uint16 {
	p := d.take(2)
	if p == nil {
		return 0
	}
	return binary.BigEndian.Uint16(p)
}

func (d *decoder) i64() int64 {
	p := d.take(8)
	if p == nil {
		return 0
	}
	return int64(binary.BigEndian.Uint64(p))
}

func (d *decoder) boolean() bool {
	switch v := d.u8(); v {
	case 0:
		return false
	case 1:
		return true
	default:
		d.malformed("bool byte %d", v)
		return false
	}
}

// flags reads a flags byte and rejects bits outside known.
func (d *decoder) flags(known uint8) uint8 {
	v := d.u8()
	if v&^known != 0 {
		d.malformed("undefined flag bits %#x", v&^known)
	}
	return v
}

// length reads a length or count, checking it against max and against the
// bytes left (each element takes at least minSize bytes) before the caller
// allocates anything.
func (d *decoder) length(max, minSize int, what string) int {
	v := d.uvarint()
	if d.err != nil {
		return 0
	}
	if v > uint64(max) {
		d.malformed("%s: %d exceeds limit %d", what, v, max)
		return 0
	}
	if v*uint64(minSize) > uint64(len(d.b)) {
		d.fail(io.ErrUnexpectedEOF)
		return 0
	}
	return int(v)
}

func (d *decoder) bytes(max int, what string) []byte {
	n := d.length(max, 1, what)
	if n == 0 {
		return nil
	}
	return d.take(n)
}

func (d *decoder) str(max int, what string) string {
	p := d.bytes(max, what)
	if !utf8.Valid(p) {
		d.malformed("%s: invalid UTF-8", what)
		return ""
	}
	return string(p)
}

func (d *decoder) fixed(dst []byte) {
	copy(dst, d.take(len(dst)))
}

func (d *decoder) duration() time.Duration {
	v := d.uvarint()
	if v > uint64(1<<63-1)/uint64(time.Millisecond) {
		d.malformed("duration overflows")
		return 0
	}
	return time.Duration(v) * time.Millisecond
}

// finish reports the sticky error, or ErrMalformed if bytes are left.
func (d *decoder) finish(what string) error {
	if d.err == nil && len(d.b) != 0 {
		d.malformed("%d trailing bytes", len(d.b))
	}
	if d.err != nil {
		return fmt.Errorf("wire: decode %s: %w", what, d.err)
	}
	return nil
}

// --- shared shapes ---

// Extension is an optional, typed field of a Hello or Welcome. Minor
// protocol versions add information to the handshake messages only through
// extensions; a receiver ignores extension types it does not know.
type Extension struct {
	Type uint64
	Data []byte
}

// appendExtensions encodes exts, which must be sorted by Type without
// duplicates (the only encoding a decoder accepts).
func appendExtensions(b []byte, exts []Extension) []byte {
	b = appendUvarint(b, uint64(len(exts)))
	for _, e := range exts {
		b = appendUvarint(b, e.Type)
		b = appendBytes(b, e.Data)
	}
	return b
}

func extensionsLen(exts []Extension) int {
	n := uvarintLen(uint64(len(exts)))
	for _, e := range exts {
		n += uvarintLen(e.Type) + bytesLen(e.Data)
	}
	return n
}

func (d *decoder) extensions() []Extension {
	n := d.length(MaxExtensions, 2, "extensions")
	if n == 0 {
		return nil
	}
	exts := make([]Extension, 0, n)
	for i := 0; i < n && d.err == nil; i++ {
		e := Extension{Type: d.uvarint(), Data: d.bytes(MaxExtensionLen, "extension data")}
		if i > 0 && e.Type <= exts[i-1].Type {
			d.malformed("extension types not strictly increasing")
		}
		exts = append(exts, e)
	}
	return exts
}

// AppliedResource is what an agent has applied for one resource: the
// resource key, the digest of the body it applied, and the desired
// revision that body came from.
type AppliedResource struct {
	Key      string // "intent/resourceID"
	Digest   Digest
	Revision uint64
}

const appliedMinLen = 1 + len(Digest{}) + 1

func appendApplied(b []byte, list []AppliedResource) []byte {
	b = appendUvarint(b, uint64(len(list)))
	for _, r := range list {
		b = appendString(b, r.Key)
		b = append(b, r.Digest[:]...)
		b = appendUvarint(b, r.Revision)
	}
	return b
}

func appliedLen(list []AppliedResource) int {
	n := uvarintLen(uint64(len(list)))
	for _, r := range list {
		n += stringLen(r.Key) + len(r.Digest) + uvarintLen(r.Revision)
	}
	return n
}

func (d *decoder) applied() []AppliedResource {
	n := d.length(MaxResources, appliedMinLen, "applied resources")
	if n == 0 {
		return nil
	}
	list := make([]AppliedResource, n)
	for i := range list {
		r := &list[i]
		r.Key = d.str(MaxKeyLen, "resource key")
		d.fixed(r.Digest[:])
		r.Revision = d.uvarint()
	}
	return list
}

// sortedKeys returns the keys of m in increasing byte order, the order in
// which maps are encoded.
func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

package wire

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"slices"
)

// DefaultMaxFrameSize is the largest frame a Reader accepts and a Writer
// sends unless configured otherwise. The size counts the type byte and the
// payload, not the length prefix.
const DefaultMaxFrameSize = 4 << 20

// readChunk bounds how much of a frame is allocated ahead of the bytes
// actually arriving, so a peer announcing a large frame and sending little
// cannot make the reader allocate the whole announced size.
const readChunk = 64 << 10

// keepWriteBuf is the largest frame buffer a Writer keeps between
// messages, and readBuf the read buffer of a Reader: small, since a server
// holds one of each per connected agent and most frames are small.
const (
	keepWriteBuf = 1 << 10
	readBuf      = 1 << 10
)

var (
	// ErrFrameTooLarge reports a frame whose announced size exceeds the
	// reader's limit (checked before allocating), or a message too large
	// for the writer's limit.
	ErrFrameTooLarge = errors.New("wire: frame too large")
	// ErrUnknownMessage reports a frame with a type byte this version does
	// not define. ReadMessage has consumed the whole frame, so the stream
	// is still in sync.
	ErrUnknownMessage = errors.New("wire: unknown message type")
)

// AppendFrame appends m framed as uvarint(1+len(payload)) | type | payload.
func AppendFrame(b []byte, m Message) []byte {
	n := m.Len()
	b = appendUvarint(b, uint64(n)+1)
	b = append(b, byte(m.Type()))
	return m.Append(b)
}

// FrameLen returns the size of m's frame including the length prefix.
func FrameLen(m Message) int {
	n := uint64(m.Len()) + 1
	return uvarintLen(n) + int(n)
}

// ReadMessage reads one frame from r and decodes it. max bounds the frame
// size (type byte plus payload); zero means DefaultMaxFrameSize. At a clean
// frame boundary with no more input it returns io.EOF; input ending inside
// a frame yields io.ErrUnexpectedEOF. A frame larger than max is rejected
// with ErrFrameTooLarge before any of it is read or allocated; the stream is
// then out of sync and must be closed.
func ReadMessage(r *bufio.Reader, max int) (Message, error) {
	if max <= 0 {
		max = DefaultMaxFrameSize
	}
	size, err := readLength(r)
	if err != nil {
		return nil, err
	}
	if size == 0 {
		return nil, fmt.Errorf("%w: empty frame", ErrMalformed)
	}
	if size > uint64(max) {
		return nil, fmt.Errorf("%w: %d bytes, limit %d", ErrFrameTooLarge, size, max)
	}
	tb, err := r.ReadByte()
	if err != nil {
		return nil, unexpected(err)
	}
	t := MessageType(tb)
	n := int(size) - 1
	if !t.Known() {
		if _, err := r.Discard(n); err != nil {
			return nil, unexpected(err)
		}
		return nil, fmt.Errorf("%w: type %#x", ErrUnknownMessage, tb)
	}
	payload, err := readPayload(r, n)
	if err != nil {
		return nil, err
	}
	return DecodeMessage(t, payload)
}

// readLength reads the uvarint length prefix, minimal encoding only.
func readLength(r *bufio.Reader) (uint64, error) {
	var v uint64
	for i := 0; ; i++ {
		c, err := r.ReadByte()
		if err != nil {
			if i == 0 {
				return 0, err // io.EOF at a frame boundary stays io.EOF
			}
			return 0, unexpected(err)
		}
		if i == 9 && c > 1 {
			return 0, fmt.Errorf("%w: frame length overflows", ErrMalformed)
		}
		v |= uint64(c&0x7f) << (7 * i)
		if c < 0x80 {
			if i > 0 && c == 0 {
				return 0, fmt.Errorf("%w: non-minimal frame length", ErrMalformed)
			}
			return v, nil
		}
	}
}

// readPayload reads exactly n bytes, growing the buffer as data arrives.
func readPayload(r io.Reader, n int) ([]byte, error) {
	buf := make([]byte, 0, min(n, readChunk))
	for len(buf) < n {
		if len(buf) == cap(buf) {
			buf = slices.Grow(buf, min(n-len(buf), cap(buf))) // at most doubles
		}
		m, err := r.Read(buf[len(buf):min(n, cap(buf))])
		buf = buf[:len(buf)+m]
		if err != nil && len(buf) < n {
			return nil, unexpected(err)
		}
	}
	return buf, nil
}

func unexpected(err error) error {
	if err == io.EOF {
		return io.ErrUnexpectedEOF
	}
	return err
}

// Reader reads framed messages from a stream.
type Reader struct {
	// MaxFrameSize bounds the frames accepted; zero means
	// DefaultMaxFrameSize.
	MaxFrameSize int

	r *bufio.Reader
}

// NewReader returns a Reader on r with the default frame size limit.
func NewReader(r io.Reader) *Reader {
	return &Reader{MaxFrameSize: DefaultMaxFrameSize, r: bufio.NewReaderSize(r, readBuf)}
}

// Read reads the next message; see ReadMessage for errors.
func (r *Reader) Read() (Message, error) { return ReadMessage(r.r, r.MaxFrameSize) }

// Writer writes framed messages to a stream, one Write call per frame.
// It is not safe for concurrent use.
type Writer struct {
	// MaxFrameSize bounds the frames sent, so that a sender learns of an
	// oversized message before the peer rejects it; zero means
	// DefaultMaxFrameSize.
	MaxFrameSize int

	w   io.Writer
	buf []byte
}

// NewWriter returns a Writer on w with the default frame size limit.
func NewWriter(w io.Writer) *Writer {
	return &Writer{MaxFrameSize: DefaultMaxFrameSize, w: w}
}

// Write frames m and writes it. A message whose frame would exceed
// MaxFrameSize is not written and yields ErrFrameTooLarge; split a Delta
// with SplitDelta first.
func (w *Writer) Write(m Message) error {
	max := w.MaxFrameSize
	if max <= 0 {
		max = DefaultMaxFrameSize
	}
	if size := m.Len() + 1; size > max {
		return fmt.Errorf("%w: %s of %d bytes, limit %d", ErrFrameTooLarge, m.Type(), size, max)
	}
	w.buf = AppendFrame(w.buf[:0], m)
	_, err := w.w.Write(w.buf)
	if cap(w.buf) > keepWriteBuf {
		// Do not pin a large buffer between messages: a server holds one
		// Writer per idle agent, and the first Delta is often the only big
		// frame a session sends.
		w.buf = nil
	}
	return err
}

// WriteMessage frames m and writes it to w in one Write call, enforcing
// DefaultMaxFrameSize.
func WriteMessage(w io.Writer, m Message) error {
	return (&Writer{w: w}).Write(m)
}

package snapshot

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"time"
)

// Format and Version name the envelope this package writes and reads.
const (
	Format  = "meteor-snapshot"
	Version = 1
)

// maxHeaderLine bounds the envelope's header line, and the state's own.
const maxHeaderLine = 16 << 10

// ErrInvalid is wrapped by every error about a file that is not an intact
// Meteor backup: not one at all, corrupt, truncated, or with bytes after
// the state.
var ErrInvalid = errors.New("not an intact Meteor snapshot")

// Header is the envelope's first line.
type Header struct {
	Format  string `json:"format"`
	Version int    `json:"version"`
	// Index and Revision are the Raft index and the cluster revision of
	// the state.
	Index    uint64 `json:"index"`
	Revision uint64 `json:"revision"`
	// Size is the state's length in bytes, SHA256 its hex SHA-256.
	Size   int64  `json:"size"`
	SHA256 string `json:"sha256"`
	// StateFormat and StateVersion are the format and version of the
	// state (its own header's: meteor-fsm, 1 or 2).
	StateFormat  string `json:"state_format"`
	StateVersion int    `json:"state_version"`
	// Server is the server that wrote it, MeteorVersion its release,
	// TakenAt its wall clock then; Stale says the state came from that
	// server's replica without a check that it was current (?stale=true).
	Server        string    `json:"server,omitempty"`
	MeteorVersion string    `json:"meteor_version,omitempty"`
	TakenAt       time.Time `json:"taken_at"`
	Stale         bool      `json:"stale,omitempty"`
}

// stateHeader is what this package reads of the state's own first line.
type stateHeader struct {
	Format   string `json:"format"`
	Version  int    `json:"version"`
	Index    uint64 `json:"index"`
	Revision uint64 `json:"revision"`
}

// Write writes a backup to w (Prepare, then Header.Write) and returns its
// header.
func Write(w io.Writer, h Header, state func(io.Writer) error) (*Header, error) {
	hdr, err := Prepare(h, state)
	if err != nil {
		return nil, err
	}
	return hdr, hdr.Write(w, state)
}

// Prepare measures a state and returns the header of a backup of it: h
// with the format, the state's index, revision, size, SHA-256 and version
// filled in. state writes the state to the writer it is given; it is
// called again by Header.Write, and must write the same bytes each time
// (the fsm encoding of one snapshot does).
func Prepare(h Header, state func(io.Writer) error) (*Header, error) {
	m := &measure{h: sha256.New()}
	if err := state(m); err != nil {
		return nil, fmt.Errorf("write snapshot: %w", err)
	}
	sh, err := parseStateHeader(m.first.Bytes())
	if err != nil {
		return nil, fmt.Errorf("write snapshot: %w", err)
	}
	h.Format, h.Version = Format, Version
	h.Size, h.SHA256 = m.n, hex.EncodeToString(m.h.Sum(nil))
	h.Index, h.Revision = sh.Index, sh.Revision
	h.StateFormat, h.StateVersion = sh.Format, sh.Version
	return &h, nil
}

func (h *Header) line() []byte {
	line, _ := json.Marshal(h) // a struct of strings, numbers and a time
	return append(line, '\n')
}

// Len is the length in bytes of the file h heads.
func (h *Header) Len() int64 { return int64(len(h.line())) + h.Size }

// Write writes the file h (from Prepare) heads to w: the header line, then
// the state, written again by state. If the state differs from what
// Prepare measured, Write returns an error after writing what no reader
// accepts (a corrupt file): the caller must not present it as a backup.
func (h *Header) Write(w io.Writer, state func(io.Writer) error) error {
	if _, err := w.Write(h.line()); err != nil {
		return fmt.Errorf("write snapshot header: %w", err)
	}
	again := &measure{h: sha256.New(), w: w}
	if err := state(again); err != nil {
		return fmt.Errorf("write snapshot: %w", err)
	}
	if again.n != h.Size || hex.EncodeToString(again.h.Sum(nil)) != h.SHA256 {
		return fmt.Errorf("write snapshot: the state changed between its two passes (%d bytes, then %d)", h.Size, again.n)
	}
	return nil
}

// measure counts and hashes what is written through it, keeps the first
// line, and passes everything on to w (if set).
type measure struct {
	w     io.Writer
	h     hash.Hash
	n     int64
	first bytes.Buffer
	done  bool // first holds the whole first line
}

func (m *measure) Write(p []byte) (int, error) {
	if !m.done {
		i := bytes.IndexByte(p, '\n')
		switch {
		case i >= 0:
			m.first.Write(p[:i])
			m.done = true
		case m.first.Len() < maxHeaderLine:
			m.first.Write(p)
		}
	}
	if m.w != nil {
		n, err := m.w.Write(p)
		m.h.Write(p[:n])
		m.n += int64(n)
		return n, err
	}
	m.h.Write(p)
	m.n += int64(len(p))
	return len(p), nil
}

func parseStateHeader(line []byte) (*stateHeader, error) {
	var sh stateHeader
	if err := json.Unmarshal(line, &sh); err != nil {
		return nil, fmt.Errorf("the state does not start with its header: %w", err)
	}
	if sh.Format == "" || sh.Version < 1 {
		return nil, errors.New("the state does not start with its header")
	}
	return &sh, nil
}

// Open reads a backup's header from r, checks it, and returns it with a
// reader of the state. The state reader checks as it goes: it returns
// io.EOF only after exactly Header.Size bytes whose SHA-256 is
// Header.SHA256 and with nothing after them in r, and otherwise an error
// wrapping ErrInvalid (truncated, corrupt, trailing bytes) where io.EOF
// would come. A reader of the state (fsm.Restore) thus fails rather than
// take a damaged file for a smaller state.
func Open(r io.Reader) (*Header, io.Reader, error) {
	br := bufio.NewReaderSize(r, maxHeaderLine+1)
	line, err := br.ReadSlice('\n')
	switch {
	case errors.Is(err, bufio.ErrBufferFull):
		return nil, nil, fmt.Errorf("%w: no header line in the first %d bytes", ErrInvalid, maxHeaderLine)
	case errors.Is(err, io.EOF) && len(line) == 0:
		return nil, nil, fmt.Errorf("%w: the file is empty", ErrInvalid)
	case err != nil:
		return nil, nil, fmt.Errorf("%w: the file ends inside its header line (%d bytes): %v", ErrInvalid, len(line), err)
	}
	var h Header
	if err := json.Unmarshal(line, &h); err != nil {
		return nil, nil, fmt.Errorf("%w: the header line is not JSON: %v", ErrInvalid, err)
	}
	if h.Format != Format {
		return nil, nil, fmt.Errorf("%w: format %q, want %q", ErrInvalid, h.Format, Format)
	}
	if h.Version != Version {
		return nil, nil, fmt.Errorf("snapshot file version %d: this release reads version %d; use a newer meteor", h.Version, Version)
	}
	sum, err := hex.DecodeString(h.SHA256)
	if err != nil || len(sum) != sha256.Size || h.Size <= 0 {
		return nil, nil, fmt.Errorf("%w: the header's size (%d) or SHA-256 (%q) is malformed", ErrInvalid, h.Size, h.SHA256)
	}
	v := &verifier{r: br, h: sha256.New(), left: h.Size, hdr: &h}
	// The state's own header must agree with the envelope's.
	first, err := v.firstLine()
	if err != nil {
		return nil, nil, err
	}
	sh, err := parseStateHeader(bytes.TrimSuffix(first, []byte("\n")))
	if err != nil {
		return nil, nil, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	if sh.Index != h.Index || sh.Revision != h.Revision || sh.Format != h.StateFormat || sh.Version != h.StateVersion {
		return nil, nil, fmt.Errorf("%w: the state's own header (%s version %d, index %d, revision %d) disagrees with the file's (%s version %d, index %d, revision %d)",
			ErrInvalid, sh.Format, sh.Version, sh.Index, sh.Revision, h.StateFormat, h.StateVersion, h.Index, h.Revision)
	}
	return &h, io.MultiReader(bytes.NewReader(first), v), nil
}

// Verify reads a whole backup from r and returns its header if the file is
// intact.
func Verify(r io.Reader) (*Header, error) {
	h, state, err := Open(r)
	if err != nil {
		return nil, err
	}
	if _, err := io.Copy(io.Discard, state); err != nil {
		return nil, err
	}
	return h, nil
}

// verifier reads the state, counting and hashing it.
type verifier struct {
	r    *bufio.Reader
	h    hash.Hash
	left int64
	hdr  *Header
	err  error // sticky: the verdict once the state is read
}

// firstLine reads the state's first line through the verifier.
func (v *verifier) firstLine() ([]byte, error) {
	var line []byte
	buf := make([]byte, 1)
	for len(line) < maxHeaderLine {
		n, err := v.Read(buf)
		if n == 1 {
			line = append(line, buf[0])
			if buf[0] == '\n' {
				return line, nil
			}
		}
		if err != nil {
			if err == io.EOF {
				return nil, fmt.Errorf("%w: the state is %d bytes, all of its header line", ErrInvalid, v.hdr.Size)
			}
			return nil, err
		}
	}
	return nil, fmt.Errorf("%w: no state header line in its first %d bytes", ErrInvalid, maxHeaderLine)
}

func (v *verifier) Read(p []byte) (int, error) {
	if v.err != nil {
		return 0, v.err
	}
	if v.left == 0 {
		v.err = v.finish()
		return 0, v.err
	}
	if int64(len(p)) > v.left {
		p = p[:v.left]
	}
	n, err := v.r.Read(p)
	v.h.Write(p[:n])
	v.left -= int64(n)
	switch {
	case errors.Is(err, io.EOF) && v.left > 0:
		v.err = fmt.Errorf("%w: the file is truncated: the state has %d of its %d bytes", ErrInvalid, v.hdr.Size-v.left, v.hdr.Size)
		return n, v.err
	case err != nil && !errors.Is(err, io.EOF):
		v.err = fmt.Errorf("read snapshot: %w", err)
		return n, v.err
	}
	return n, nil
}

// finish checks, once Size bytes are read, the SHA-256 and that nothing
// follows; io.EOF if the file is intact.
func (v *verifier) finish() error {
	if got := hex.EncodeToString(v.h.Sum(nil)); got != v.hdr.SHA256 {
		return fmt.Errorf("%w: the file is corrupt: the state's SHA-256 is %s, the header says %s", ErrInvalid, got, v.hdr.SHA256)
	}
	var one [1]byte
	switch n, err := io.ReadFull(v.r, one[:]); {
	case n > 0:
		return fmt.Errorf("%w: bytes follow the state's %d bytes", ErrInvalid, v.hdr.Size)
	case !errors.Is(err, io.EOF):
		return fmt.Errorf("read snapshot: %w", err)
	}
	return io.EOF
}

package snapshot

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"
	"time"
)

const state = `{"format":"meteor-fsm","version":1,"index":42,"revision":7,"history_limit":16}
{"intent":{"name":"web"}}
{"device":{"id":"d1"}}
`

func writeFile(t *testing.T, body string) []byte {
	t.Helper()
	var buf bytes.Buffer
	h, err := Write(&buf, Header{Server: "s1", MeteorVersion: "0.1.0", TakenAt: time.Unix(1, 0).UTC()}, func(w io.Writer) error {
		_, err := io.WriteString(w, body)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if h.Index != 42 || h.Revision != 7 || h.Size != int64(len(body)) || h.StateFormat != "meteor-fsm" || h.StateVersion != 1 {
		t.Fatalf("header %+v", h)
	}
	return buf.Bytes()
}

func TestRoundTrip(t *testing.T) {
	file := writeFile(t, state)
	h, r, err := Open(bytes.NewReader(file))
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(r)
	if err != nil || string(got) != state {
		t.Fatalf("state read back: %v, %q", err, got)
	}
	if h.Server != "s1" || h.Index != 42 {
		t.Fatalf("header %+v", h)
	}
	if _, err := Verify(bytes.NewReader(file)); err != nil {
		t.Fatal(err)
	}
}

// TestDamagedFilesAreRefused: every prefix of a file, a flipped byte
// anywhere in its state, bytes after it and a state whose header disagrees
// with the envelope's are refused with ErrInvalid, never read as a smaller
// state.
func TestDamagedFilesAreRefused(t *testing.T) {
	file := writeFile(t, state)
	check := func(name string, data []byte, want string) {
		t.Helper()
		_, err := Verify(bytes.NewReader(data))
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), want) {
			t.Fatalf("%s: Verify = %v, want ErrInvalid with %q", name, err, want)
		}
	}
	hdrLen := bytes.IndexByte(file, '\n') + 1
	for n := range len(file) {
		want := "truncated"
		switch {
		case n == 0:
			want = "empty"
		case n < hdrLen:
			want = "inside its header line"
		case n < hdrLen+bytes.IndexByte([]byte(state), '\n')+1:
			want = "" // inside the state's header line
		}
		check("prefix", file[:n], want)
	}
	for i := hdrLen; i < len(file); i++ {
		bad := bytes.Clone(file)
		bad[i] ^= 0x20
		_, err := Verify(bytes.NewReader(bad))
		if !errors.Is(err, ErrInvalid) {
			t.Fatalf("byte %d flipped: Verify = %v", i, err)
		}
	}
	check("trailing bytes", append(bytes.Clone(file), '\n'), "bytes follow")
	check("not a snapshot", []byte(state), "format")
	other := bytes.Replace(file, []byte(`"index":42`), []byte(`"index":41`), 1) // the envelope's, first
	check("headers disagree", other, "disagrees")
	if _, err := Verify(strings.NewReader(`{"format":"meteor-snapshot","version":9}` + "\n")); err == nil || !strings.Contains(err.Error(), "version 9") {
		t.Fatalf("a newer version: %v", err)
	}
}

// TestWriteRefusesAChangingState: a state that writes other bytes on its
// second pass is an error, not a backup.
func TestWriteRefusesAChangingState(t *testing.T) {
	pass := 0
	_, err := Write(io.Discard, Header{}, func(w io.Writer) error {
		pass++
		_, err := io.WriteString(w, strings.Replace(state, "d1", "d"+string(rune('0'+pass)), 1))
		return err
	})
	if err == nil || !strings.Contains(err.Error(), "changed between its two passes") {
		t.Fatalf("Write = %v", err)
	}
}

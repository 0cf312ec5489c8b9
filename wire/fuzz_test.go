package wire

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

var updateCorpus = flag.Bool("update-corpus", false, "rewrite the seed corpora under testdata/fuzz")

// fuzzMaxFrame keeps fuzzed frames small enough to be fast.
const fuzzMaxFrame = 1 << 16

// FuzzReadMessage feeds arbitrary bytes to the frame reader. It must never
// panic, and a frame it accepts must re-encode to exactly the bytes read.
func FuzzReadMessage(f *testing.F) {
	for _, m := range sampleMessages() {
		f.Add(AppendFrame(nil, m))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		src := bytes.NewReader(data)
		br := bufio.NewReader(src)
		m, err := ReadMessage(br, fuzzMaxFrame)
		if err != nil {
			return
		}
		consumed := len(data) - src.Len() - br.Buffered()
		if again := AppendFrame(nil, m); !bytes.Equal(again, data[:consumed]) {
			t.Fatalf("%s re-encodes differently:\n got %x\nwant %x", m.Type(), again, data[:consumed])
		}
		if FrameLen(m) != consumed {
			t.Fatalf("%s: FrameLen %d, frame %d bytes", m.Type(), FrameLen(m), consumed)
		}
	})
}

// fuzzKeyring holds a current and a previous key, both of which open.
func fuzzKeyring(t testing.TB) *Keyring { return NewKeyring(testKey(t, 2), testKey(t, 1)) }

func fuzzTokens(t testing.TB) [][]byte {
	c := testClaims(t0)
	long := c
	long.DeviceID = string(bytes.Repeat([]byte("d"), MaxDeviceIDLen))
	long.LastAckRevision = 1<<64 - 1
	return [][]byte{
		fuzzKeyring(t).Seal(c),
		NewKeyring(testKey(t, 1)).Seal(long),
	}
}

// FuzzOpenToken feeds arbitrary bytes to Keyring.Open. It must never
// panic, and a token it accepts must be the one Seal makes from the claims
// with the same key.
func FuzzOpenToken(f *testing.F) {
	for _, tok := range fuzzTokens(f) {
		f.Add(tok)
	}
	kr := fuzzKeyring(f)
	keys := map[uint32]TokenKey{1: testKey(f, 1), 2: testKey(f, 2)}
	f.Fuzz(func(t *testing.T, tok []byte) {
		c, err := kr.Open(tok, t0)
		if err != nil {
			return
		}
		id := binary.BigEndian.Uint32(tok[1:5])
		if again := NewKeyring(keys[id]).Seal(c); !bytes.Equal(again, tok) {
			t.Fatalf("token re-seals differently:\n got %x\nwant %x", again, tok)
		}
	})
}

// TestSeedCorpus checks that the committed seed corpora match the seeds
// above; run with -update-corpus to rewrite them.
func TestSeedCorpus(t *testing.T) {
	var frames [][]byte
	for _, m := range sampleMessages() {
		frames = append(frames, AppendFrame(nil, m))
	}
	for name, seeds := range map[string][][]byte{
		"FuzzReadMessage": frames,
		"FuzzOpenToken":   fuzzTokens(t),
	} {
		dir := filepath.Join("testdata", "fuzz", name)
		if *updateCorpus {
			if err := os.RemoveAll(dir); err != nil {
				t.Fatal(err)
			}
			if err := os.MkdirAll(dir, 0o755); err != nil {
				t.Fatal(err)
			}
		}
		for i, seed := range seeds {
			path := filepath.Join(dir, fmt.Sprintf("seed-%02d", i))
			want := fmt.Sprintf("go test fuzz v1\n[]byte(%q)\n", seed)
			if *updateCorpus {
				if err := os.WriteFile(path, []byte(want), 0o644); err != nil {
					t.Fatal(err)
				}
				continue
			}
			got, err := os.ReadFile(path)
			if err != nil || string(got) != want {
				t.Errorf("%s is missing or stale (err %v): run go test ./wire -run TestSeedCorpus -update-corpus", path, err)
			}
		}
	}
}

package wire

import (
	"bytes"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

var testSecret = []byte("meteor-test-cluster-secret-0123456789")

func testKey(t testing.TB, id uint32) TokenKey {
	t.Helper()
	k, err := DeriveTokenKey(testSecret, id)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func testClaims(now time.Time) Claims {
	return Claims{
		SessionID:       SessionID{0xde, 0xad, 0xbe, 0xef, 15: 1},
		DeviceID:        "store-42.pos-1",
		IssuedAt:        now,
		ExpiresAt:       now.Add(24 * time.Hour),
		LastAckRevision: 42,
	}
}

var t0 = time.Unix(1_714_557_600, 0)

func TestTokenSealOpen(t *testing.T) {
	kr := NewKeyring(testKey(t, 1))
	want := testClaims(t0)
	tok := kr.Seal(want)
	if len(tok) != tokenMinLen+len(want.DeviceID) {
		t.Errorf("token is %d bytes", len(tok))
	}
	got, err := kr.Open(tok, t0.Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("claims (-want +got):\n%s", diff)
	}
	if err := got.CheckDevice("store-42.pos-1"); err != nil {
		t.Error(err)
	}
	if err := got.CheckDevice("store-43.pos-1"); !errors.Is(err, ErrTokenWrongDevice) {
		t.Errorf("CheckDevice(other) = %v", err)
	}
	// Sub-second times are truncated to seconds.
	c := testClaims(t0.Add(999 * time.Millisecond))
	if got, err := kr.Open(kr.Seal(c), t0); err != nil || !got.IssuedAt.Equal(t0) {
		t.Errorf("IssuedAt = %v, %v; want %v", got.IssuedAt, err, t0)
	}
}

func TestTokenExpiry(t *testing.T) {
	kr := NewKeyring(testKey(t, 1))
	c := testClaims(t0)
	tok := kr.Seal(c)
	if _, err := kr.Open(tok, c.ExpiresAt.Add(-time.Second)); err != nil {
		t.Errorf("a second before expiry: %v", err)
	}
	for _, now := range []time.Time{c.ExpiresAt, c.ExpiresAt.Add(time.Hour)} {
		if _, err := kr.Open(tok, now); !errors.Is(err, ErrTokenExpired) {
			t.Errorf("at %v: err = %v, want ErrTokenExpired", now, err)
		}
	}
}

func TestTokenRotation(t *testing.T) {
	k1, k2, k3 := testKey(t, 1), testKey(t, 2), testKey(t, 3)
	old := NewKeyring(k1)
	tok1 := old.Seal(testClaims(t0))

	rotated := NewKeyring(k2, k1)
	if _, err := rotated.Open(tok1, t0); err != nil {
		t.Errorf("token of the previous key: %v", err)
	}
	tok2 := rotated.Seal(testClaims(t0))
	if !bytes.Equal(tok2[1:5], []byte{0, 0, 0, 2}) {
		t.Errorf("rotated keyring signed with key %x, want 2", tok2[1:5])
	}
	if _, err := old.Open(tok2, t0); !errors.Is(err, ErrTokenUnknownKey) {
		t.Errorf("old keyring on a new token: %v, want ErrTokenUnknownKey", err)
	}
	retired := NewKeyring(k3, k2)
	if _, err := retired.Open(tok1, t0); !errors.Is(err, ErrTokenUnknownKey) {
		t.Errorf("dropped key: %v, want ErrTokenUnknownKey", err)
	}
	// Same ID, different secret: a bad MAC, not an unknown key.
	other, err := DeriveTokenKey([]byte("another-cluster-secret-0123456"), 1)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := NewKeyring(other).Open(tok1, t0); !errors.Is(err, ErrTokenBadMAC) {
		t.Errorf("other cluster: %v, want ErrTokenBadMAC", err)
	}
}

func TestEpochKeyring(t *testing.T) {
	const period, lifetime = time.Hour, 3 * time.Hour
	at := func(now time.Time) *Keyring {
		kr, err := EpochKeyring(testSecret, now, period, lifetime)
		if err != nil {
			t.Fatal(err)
		}
		return kr
	}
	c := testClaims(t0)
	c.ExpiresAt = t0.Add(lifetime)
	tok := at(t0).Seal(c)
	for _, d := range []time.Duration{0, time.Hour, 2*time.Hour + 59*time.Minute} {
		if _, err := at(t0.Add(d)).Open(tok, t0.Add(d)); err != nil {
			t.Errorf("%v later: %v", d, err)
		}
	}
	// A server whose clock runs up to one period ahead seals with the next
	// epoch's key; a server at the right time opens it. Two periods ahead
	// is beyond the tolerance.
	ahead := at(t0.Add(period)).Seal(c)
	if _, err := at(t0).Open(ahead, t0); err != nil {
		t.Errorf("token from a server one period ahead: %v", err)
	}
	if _, err := at(t0).Open(at(t0.Add(2*period)).Seal(c), t0); !errors.Is(err, ErrTokenUnknownKey) {
		t.Errorf("token from a server two periods ahead: %v, want ErrTokenUnknownKey", err)
	}
	// Past the lifetime the key itself is gone, whatever the token says.
	if _, err := at(t0.Add(5*time.Hour)).Open(tok, t0); !errors.Is(err, ErrTokenUnknownKey) {
		t.Errorf("5h later: %v, want ErrTokenUnknownKey", err)
	}
	if _, err := EpochKeyring(testSecret, t0, time.Millisecond, lifetime); err == nil {
		t.Error("sub-second period accepted")
	}
}

func TestTokenTamper(t *testing.T) {
	kr := NewKeyring(testKey(t, 7), testKey(t, 6))
	tok := kr.Seal(testClaims(t0))
	for i := range tok {
		for _, bit := range []byte{0x01, 0x80} {
			bad := bytes.Clone(tok)
			bad[i] ^= bit
			if _, err := kr.Open(bad, t0); err == nil {
				t.Errorf("flipping bit %#x of byte %d went unnoticed", bit, i)
			}
		}
	}
	for _, n := range []int{0, 1, tokenMinLen - 1, len(tok) - 1} {
		if _, err := kr.Open(tok[:n], t0); err == nil {
			t.Errorf("token cut to %d bytes accepted", n)
		}
	}
	if _, err := kr.Open(append(bytes.Clone(tok), 0), t0); err == nil {
		t.Error("token with a trailing byte accepted")
	}
	long := append(bytes.Clone(tok), make([]byte, MaxDeviceIDLen+1)...)
	if _, err := kr.Open(long, t0); !errors.Is(err, ErrTokenMalformed) {
		t.Errorf("overlong token: %v", err)
	}
	v2 := bytes.Clone(tok)
	v2[0] = 2
	if _, err := kr.Open(v2, t0); !errors.Is(err, ErrTokenMalformed) {
		t.Errorf("version 2: %v", err)
	}
}

func TestDeriveTokenKey(t *testing.T) {
	a, b := testKey(t, 1), testKey(t, 1)
	if a != b {
		t.Error("derivation not deterministic")
	}
	if c := testKey(t, 2); c.Secret == a.Secret {
		t.Error("keys 1 and 2 share a secret")
	}
	if _, err := DeriveTokenKey([]byte("short"), 1); err == nil {
		t.Error("short secret accepted")
	}
}

func TestValidDeviceID(t *testing.T) {
	for _, id := range []string{"a", "dev-1", "store-42.pos_1", "A9", strings.Repeat("x", MaxDeviceIDLen)} {
		if err := ValidDeviceID(id); err != nil {
			t.Errorf("%q: %v", id, err)
		}
	}
	for _, id := range []string{"", "-dev", ".x", "a/b", "a b", "dév", "a?x", strings.Repeat("x", MaxDeviceIDLen+1)} {
		if err := ValidDeviceID(id); err == nil {
			t.Errorf("%q accepted", id)
		}
	}
}

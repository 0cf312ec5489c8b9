package wire

import (
	"crypto/hkdf"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"time"
)

// TokenVersion is the first byte of every resume token of this format.
const TokenVersion byte = 1

// MaxDeviceIDLen bounds a device ID (see ValidDeviceID).
const MaxDeviceIDLen = 128

// Token layout: version(1) | key ID(4) | payload | HMAC-SHA256(32), where
// payload = session ID(16) | issued-at(8) | expires-at(8) |
// last-ack-revision(8) | device ID length(1) | device ID. Integers are
// big-endian; times are Unix seconds. The MAC covers every byte before it.
const (
	tokenHeaderLen = 1 + 4
	tokenFixedLen  = 16 + 8 + 8 + 8 + 1
	tokenMACLen    = sha256.Size
	tokenMinLen    = tokenHeaderLen + tokenFixedLen + tokenMACLen
)

// Errors from Keyring.Open and Claims.CheckDevice.
var (
	ErrTokenMalformed   = errors.New("resume token malformed")
	ErrTokenUnknownKey  = errors.New("resume token signed with an unknown key")
	ErrTokenBadMAC      = errors.New("resume token signature invalid")
	ErrTokenExpired     = errors.New("resume token expired")
	ErrTokenWrongDevice = errors.New("resume token belongs to another device")
)

// TokenKey is one resume-token signing key.
type TokenKey struct {
	ID     uint32
	Secret [32]byte
}

// DeriveTokenKey derives the key with the given ID from the cluster
// secret with HKDF-SHA256, so every server computes the same key.
func DeriveTokenKey(clusterSecret []byte, id uint32) (TokenKey, error) {
	if len(clusterSecret) < MinClusterSecretLen {
		return TokenKey{}, errors.New("wire: cluster secret too short")
	}
	info := binary.BigEndian.AppendUint32([]byte("meteor resume token key v1 "), id)
	raw, err := hkdf.Key(sha256.New, clusterSecret, nil, string(info), 32)
	if err != nil {
		return TokenKey{}, fmt.Errorf("wire: derive token key %d: %w", id, err)
	}
	k := TokenKey{ID: id}
	copy(k.Secret[:], raw)
	return k, nil
}

// Claims is what a resume token vouches for.
type Claims struct {
	SessionID SessionID
	// DeviceID is the device the session belongs to; the server compares
	// it with the ID in the client certificate (CheckDevice).
	DeviceID string
	// IssuedAt and ExpiresAt have one-second precision.
	IssuedAt, ExpiresAt time.Time
	// LastAckRevision is the agent's acknowledged desired revision when
	// the token was issued.
	LastAckRevision uint64
}

// CheckDevice returns ErrTokenWrongDevice unless the claims belong to
// deviceID (taken from the client certificate).
func (c Claims) CheckDevice(deviceID string) error {
	if c.DeviceID != deviceID {
		return fmt.Errorf("%w: token for %q, certificate for %q", ErrTokenWrongDevice, c.DeviceID, deviceID)
	}
	return nil
}

// Keyring signs resume tokens with its current key and verifies them with
// any key it holds. It is immutable: rotate by building a new Keyring (see
// EpochKeyring) and swapping it in, e.g. through an atomic.Pointer. Drop a
// retired key only when every token it signed has expired.
type Keyring struct {
	current  TokenKey
	previous []TokenKey // every other key accepted (older, or the next epoch's)
}

// NewKeyring returns a keyring signing with current and also accepting
// tokens signed with previous.
func NewKeyring(current TokenKey, previous ...TokenKey) *Keyring {
	return &Keyring{current: current, previous: append([]TokenKey(nil), previous...)}
}

// EpochKeyring returns the keyring every server derives from the cluster
// secret at now: keys are numbered by epoch (Unix time / period), the
// current epoch's key signs, and the keys of the epochs a token issued
// with at most maxLifetime may still be valid in are accepted, as is the
// next epoch's key: a token sealed by a server whose clock runs up to one
// period ahead still opens here.
func EpochKeyring(clusterSecret []byte, now time.Time, period, maxLifetime time.Duration) (*Keyring, error) {
	if period < time.Second {
		return nil, errors.New("wire: key period must be at least a second")
	}
	epoch := uint32(now.Unix() / int64(period/time.Second))
	back := int((maxLifetime + period - 1) / period)
	cur, err := DeriveTokenKey(clusterSecret, epoch)
	if err != nil {
		return nil, err
	}
	next, err := DeriveTokenKey(clusterSecret, epoch+1)
	if err != nil {
		return nil, err
	}
	kr := &Keyring{current: cur, previous: []TokenKey{next}}
	for i := 1; i <= back && uint32(i) <= epoch; i++ {
		k, err := DeriveTokenKey(clusterSecret, epoch-uint32(i))
		if err != nil {
			return nil, err
		}
		kr.previous = append(kr.previous, k)
	}
	return kr, nil
}

// Seal signs c with the current key. DeviceID must satisfy ValidDeviceID;
// Seal panics otherwise, as that is a bug in the caller.
func (k *Keyring) Seal(c Claims) []byte {
	if err := ValidDeviceID(c.DeviceID); err != nil {
		panic(fmt.Sprintf("wire: Seal: %v", err))
	}
	b := make([]byte, 0, tokenMinLen+len(c.DeviceID))
	b = append(b, TokenVersion)
	b = binary.BigEndian.AppendUint32(b, k.current.ID)
	b = append(b, c.SessionID[:]...)
	b = binary.BigEndian.AppendUint64(b, uint64(c.IssuedAt.Unix()))
	b = binary.BigEndian.AppendUint64(b, uint64(c.ExpiresAt.Unix()))
	b = binary.BigEndian.AppendUint64(b, c.LastAckRevision)
	b = append(b, byte(len(c.DeviceID)))
	b = append(b, c.DeviceID...)
	return appendMAC(b, &k.current)
}

func appendMAC(b []byte, key *TokenKey) []byte {
	mac := hmac.New(sha256.New, key.Secret[:])
	mac.Write(b)
	return mac.Sum(b)
}

func (k *Keyring) key(id uint32) *TokenKey {
	if k.current.ID == id {
		return &k.current
	}
	for i := range k.previous {
		if k.previous[i].ID == id {
			return &k.previous[i]
		}
	}
	return nil
}

// Open verifies token and returns its claims. It fails with
// ErrTokenMalformed, ErrTokenUnknownKey, ErrTokenBadMAC (checked in
// constant time before any claim is trusted) or ErrTokenExpired (now at or
// after ExpiresAt). The caller must still call CheckDevice with the ID
// from the client certificate.
func (k *Keyring) Open(token []byte, now time.Time) (Claims, error) {
	if len(token) < tokenMinLen || len(token) > tokenMinLen+MaxDeviceIDLen {
		return Claims{}, fmt.Errorf("%w: %d bytes", ErrTokenMalformed, len(token))
	}
	if token[0] != TokenVersion {
		return Claims{}, fmt.Errorf("%w: version %d", ErrTokenMalformed, token[0])
	}
	body, sum := token[:len(token)-tokenMACLen], token[len(token)-tokenMACLen:]
	id := binary.BigEndian.Uint32(body[1:5])
	key := k.key(id)
	if key == nil {
		return Claims{}, fmt.Errorf("%w: key %d", ErrTokenUnknownKey, id)
	}
	mac := hmac.New(sha256.New, key.Secret[:])
	mac.Write(body)
	if !hmac.Equal(sum, mac.Sum(nil)) {
		return Claims{}, ErrTokenBadMAC
	}
	p := body[tokenHeaderLen:]
	var c Claims
	copy(c.SessionID[:], p[:16])
	c.IssuedAt = time.Unix(int64(binary.BigEndian.Uint64(p[16:24])), 0)
	c.ExpiresAt = time.Unix(int64(binary.BigEndian.Uint64(p[24:32])), 0)
	c.LastAckRevision = binary.BigEndian.Uint64(p[32:40])
	if n := int(p[40]); n != len(p)-tokenFixedLen {
		return Claims{}, fmt.Errorf("%w: device ID length %d, %d bytes left", ErrTokenMalformed, n, len(p)-tokenFixedLen)
	}
	c.DeviceID = string(p[tokenFixedLen:])
	if err := ValidDeviceID(c.DeviceID); err != nil {
		return Claims{}, fmt.Errorf("%w: %v", ErrTokenMalformed, err)
	}
	if !now.Before(c.ExpiresAt) {
		return Claims{}, fmt.Errorf("%w: at %s", ErrTokenExpired, c.ExpiresAt.UTC().Format(time.RFC3339))
	}
	return c, nil
}

// ValidDeviceID checks a device ID (server IDs follow the same rule):
// 1 to MaxDeviceIDLen bytes of ASCII letters, digits, '.', '_' and '-',
// starting with a letter or digit. The same rule holds in certificates,
// tokens and URLs.
func ValidDeviceID(id string) error {
	if id == "" || len(id) > MaxDeviceIDLen {
		return fmt.Errorf("device ID %q: length must be 1 to %d", id, MaxDeviceIDLen)
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		alnum := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
		if !alnum && (i == 0 || c != '.' && c != '_' && c != '-') {
			return fmt.Errorf("device ID %q: invalid character %q at %d", id, c, i)
		}
	}
	return nil
}

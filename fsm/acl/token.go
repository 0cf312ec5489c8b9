package acl

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"io"
	"strings"
)

// SecretPrefix starts every token secret, so a leaked one is recognisable
// (by secret scanners, in logs) as a Meteor token.
const SecretPrefix = "mtk_"

const (
	secretBytes   = 32 // 256 bits of entropy
	accessorBytes = 8  // 16 hex characters
)

// Token is a freshly generated token: the secret, shown to its owner once
// and never stored, and the accessor that names it in listings, the audit
// log and revocation.
type Token struct {
	Secret   string
	Accessor string
}

// Generate makes a token from rand (crypto/rand.Reader in production): a
// secret of SecretPrefix and 32 random bytes in unpadded base64url, and
// an accessor of 8 other random bytes in hex.
func Generate(rand io.Reader) (Token, error) {
	buf := make([]byte, secretBytes+accessorBytes)
	if _, err := io.ReadFull(rand, buf); err != nil {
		return Token{}, fmt.Errorf("generate token: %w", err)
	}
	return Token{
		Secret:   SecretPrefix + base64.RawURLEncoding.EncodeToString(buf[:secretBytes]),
		Accessor: hex.EncodeToString(buf[secretBytes:]),
	}, nil
}

// HashSecret returns what the state stores of a secret: its SHA-256, in
// hex. The secret has 256 bits of entropy, so a plain hash cannot be
// reversed by guessing, and a lookup by hash needs no constant-time
// comparison: the hash of a guess reveals nothing of the stored one.
func HashSecret(secret string) string {
	sum := sha256.Sum256([]byte(secret))
	return hex.EncodeToString(sum[:])
}

// CheckSecretFormat reports whether s has the shape of a generated secret,
// so a request carrying something else is refused before any lookup.
func CheckSecretFormat(s string) error {
	body, ok := strings.CutPrefix(s, SecretPrefix)
	if !ok {
		return fmt.Errorf("token does not start with %q", SecretPrefix)
	}
	b, err := base64.RawURLEncoding.DecodeString(body)
	if err != nil || len(b) != secretBytes {
		return fmt.Errorf("token is not %s followed by %d bytes in base64url", SecretPrefix, secretBytes)
	}
	return nil
}

// ValidAccessor reports whether a is an accessor's shape: 16 lower-case
// hex characters.
func ValidAccessor(a string) bool {
	if len(a) != 2*accessorBytes {
		return false
	}
	_, err := hex.DecodeString(a)
	return err == nil && strings.ToLower(a) == a
}

// ValidSecretHash reports whether h is the shape of HashSecret's result.
func ValidSecretHash(h string) bool {
	if len(h) != 2*sha256.Size {
		return false
	}
	_, err := hex.DecodeString(h)
	return err == nil && strings.ToLower(h) == h
}

package acl

import (
	"bytes"
	"encoding/base64"
	"encoding/hex"
	"strings"
	"testing"
)

// FuzzTokenFormats feeds arbitrary strings to the checks of a token's
// secret, accessor and secret hash. None may panic; what each accepts must
// have exactly the shape Generate and HashSecret produce: a secret is the
// prefix and 32 bytes in unpadded base64url, an accessor 8 bytes and a
// hash 32 bytes in lower-case hex. (Base64 ignores a secret's last two
// bits, so four spellings pass the format check; the state looks a secret
// up by the hash of its spelling, so only the one issued matches.)
func FuzzTokenFormats(f *testing.F) {
	tok, err := Generate(bytes.NewReader(bytes.Repeat([]byte{0xa5}, 64)))
	if err != nil {
		f.Fatal(err)
	}
	for _, s := range []string{
		tok.Secret, tok.Accessor, HashSecret(tok.Secret), "", SecretPrefix,
		SecretPrefix + strings.Repeat("A", 43), SecretPrefix + strings.Repeat("_", 43) + "=",
		tok.Secret[:len(tok.Secret)-1] + "B", strings.ToUpper(tok.Accessor), "0123456789abcdeg",
		strings.Repeat("f", 64), strings.Repeat("F", 64), " " + tok.Secret,
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if err := CheckSecretFormat(s); err == nil {
			body, ok := strings.CutPrefix(s, SecretPrefix)
			b, derr := base64.RawURLEncoding.DecodeString(body)
			if !ok || derr != nil || len(b) != secretBytes {
				t.Fatalf("secret %q accepted: not %s and %d bytes of base64url", s, SecretPrefix, secretBytes)
			}
		}
		if ValidAccessor(s) {
			b, err := hex.DecodeString(s)
			if err != nil || len(b) != accessorBytes || hex.EncodeToString(b) != s {
				t.Fatalf("accessor %q accepted: not %d bytes in lower-case hex", s, accessorBytes)
			}
		}
		if ValidSecretHash(s) {
			b, err := hex.DecodeString(s)
			if err != nil || len(b) != 32 || hex.EncodeToString(b) != s {
				t.Fatalf("secret hash %q accepted: not 32 bytes in lower-case hex", s)
			}
		}
		if h := HashSecret(s); !ValidSecretHash(h) {
			t.Fatalf("HashSecret(%q) = %q, which ValidSecretHash refuses", s, h)
		}
	})
}

package api

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"net/url"
)

// Codes of the keyring endpoints' errors.
const (
	// CodePartial: a keyring change some servers made and others did not
	// (502); the message names both.
	CodePartial = "partial"
	// CodeUnreachable: a server's keyring could not be read, so a change
	// that needs every server's was not made (503).
	CodeUnreachable = "unreachable"
)

// KeyringRequest is the body of the keyring changes
// (POST /v1/cluster/keyring/install, /use, /remove).
type KeyringRequest struct {
	// Key is the gossip key, base64 (16, 24 or 32 bytes).
	Key string `json:"key"`
}

// KeyringServer is one server's gossip keyring, or why it did not answer.
type KeyringServer struct {
	ID string `json:"id"`
	// Primary is the fingerprint (KeyFingerprint) of the key the server
	// encrypts gossip with; Keys those of every key it decrypts with,
	// the primary first.
	Primary string   `json:"primary,omitempty"`
	Keys    []string `json:"keys,omitempty"`
	// Secrets are the keys themselves, base64, in the order of Keys: only
	// for the server that answered the request, and only when asked.
	Secrets []string `json:"secrets,omitempty"`
	// Error says why this server did not answer or refused the change.
	Error string `json:"error,omitempty"`
}

// KeyringResponse answers the keyring endpoints: every server's keyring
// after the operation, by node ID. When the operation failed on some
// servers, Code and Message say so (and the status is 502).
type KeyringResponse struct {
	Servers []KeyringServer `json:"servers"`
	Code    string          `json:"code,omitempty"`
	Message string          `json:"error,omitempty"`
}

// Failed returns the servers that did not answer or refused.
func (r *KeyringResponse) Failed() []string {
	var out []string
	for _, s := range r.Servers {
		if s.Error != "" {
			out = append(out, s.ID)
		}
	}
	return out
}

// KeyFingerprint names a gossip key without revealing it: "sha256:" and
// the first 16 hex digits of the key's SHA-256.
func KeyFingerprint(key []byte) string {
	sum := sha256.Sum256(key)
	return "sha256:" + hex.EncodeToString(sum[:8])
}

// GossipKeyring lists every server's gossip keys as fingerprints; with
// secrets, the contacted server also shows its keys themselves.
func (c *Client) GossipKeyring(ctx context.Context, secrets bool) (*KeyringResponse, error) {
	var q url.Values
	if secrets {
		q = url.Values{"secrets": {"true"}}
	}
	return c.keyring(ctx, http.MethodGet, "/v1/cluster/keyring", q, nil)
}

// InstallGossipKey adds a key (base64) to every server's keyring, for
// decrypting; the primary key stays as it is.
func (c *Client) InstallGossipKey(ctx context.Context, key string) (*KeyringResponse, error) {
	return c.keyringChange(ctx, "install", key)
}

// UseGossipKey makes an installed key the one every server encrypts
// with. The servers refuse unless every one of them has the key.
func (c *Client) UseGossipKey(ctx context.Context, key string) (*KeyringResponse, error) {
	return c.keyringChange(ctx, "use", key)
}

// RemoveGossipKey removes a key from every server's keyring. The servers
// refuse while it is the primary key of any of them.
func (c *Client) RemoveGossipKey(ctx context.Context, key string) (*KeyringResponse, error) {
	return c.keyringChange(ctx, "remove", key)
}

func (c *Client) keyringChange(ctx context.Context, op, key string) (*KeyringResponse, error) {
	body, err := jsonBody(KeyringRequest{Key: key})
	if err != nil {
		return &KeyringResponse{}, err
	}
	return c.keyring(ctx, http.MethodPost, "/v1/cluster/keyring/"+op, nil, body)
}

// keyring sends one keyring request. A partial failure returns the
// servers' results with the error.
func (c *Client) keyring(ctx context.Context, method, path string, q url.Values, body []byte) (*KeyringResponse, error) {
	h := http.Header{}
	if body != nil {
		h.Set("Content-Type", "application/json")
	}
	status, data, err := c.roundTrip(ctx, method, path, q, h, body)
	if err != nil {
		return &KeyringResponse{}, err
	}
	var out KeyringResponse
	if status >= 300 {
		_ = json.Unmarshal(data, &out)
		return &out, decodeError(method, path, status, data)
	}
	if err := json.Unmarshal(data, &out); err != nil {
		return &out, decodeError(method, path, status, data)
	}
	return &out, nil
}

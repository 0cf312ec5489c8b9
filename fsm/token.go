package fsm

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"

	"github.com/hashicorp/go-memdb"

	"github.com/meteor-edge/meteor/fsm/acl"
)

// TokenInfo is a token as the API may show it: everything but the hash of
// its secret. Listings (Read.Tokens) return it.
type TokenInfo struct {
	// Accessor names the token in listings, the audit log and
	// revocation. It is public: it does not authenticate.
	Accessor string     `json:"accessor"`
	Name     string     `json:"name,omitempty"`
	Policy   acl.Policy `json:"policy"`
	// Scope, for read and operator tokens, narrows the token to the
	// devices and intents it covers (acl.Scope).
	Scope map[string]string `json:"scope,omitempty"`
	// EnrollLabels, for an enroll token, are the control-plane labels a
	// device enrolled with it gets.
	EnrollLabels map[string]string `json:"enroll_labels,omitempty"`
	// MaxUses, for an enroll token, is how many devices it may enroll;
	// zero means no limit (the CLI's default is one). Uses counts them.
	MaxUses uint64 `json:"max_uses,omitempty"`
	Uses    uint64 `json:"uses,omitempty"`
	// ExpiresAt is when the token stops working (Unix nanoseconds); zero
	// means never.
	ExpiresAt int64 `json:"expires_at,omitempty"`
	// CreatedAt is the proposer's time of creation, CreatedBy who created
	// it (the zero Actor for the bootstrap token).
	CreatedAt   int64  `json:"created_at"`
	CreatedBy   Actor  `json:"created_by,omitzero"`
	CreateIndex uint64 `json:"create_index"`
	ModifyIndex uint64 `json:"modify_index"`
}

// Grant returns what the token is allowed.
func (t *TokenInfo) Grant() acl.Grant { return acl.Grant{Policy: t.Policy, Scope: t.Scope} }

// Expired reports whether the token has expired at now (Unix nanoseconds).
func (t *TokenInfo) Expired(now int64) bool { return t.ExpiresAt != 0 && now >= t.ExpiresAt }

// Exhausted reports whether an enroll token has no uses left.
func (t *TokenInfo) Exhausted() bool { return t.MaxUses != 0 && t.Uses >= t.MaxUses }

// TokenRecord is a token as stored: its public part and the SHA-256 of its
// secret (acl.HashSecret). The secret itself is never stored.
type TokenRecord struct {
	TokenInfo
	SecretHash string `json:"secret_hash"`
}

// CreateTokenRequest creates a token. The proposer generates the secret
// (acl.Generate) and sends only its hash.
type CreateTokenRequest struct {
	Accessor     string            `json:"accessor"`
	SecretHash   string            `json:"secret_hash"`
	Name         string            `json:"name,omitempty"`
	Policy       acl.Policy        `json:"policy"`
	Scope        map[string]string `json:"scope,omitempty"`
	EnrollLabels map[string]string `json:"enroll_labels,omitempty"`
	MaxUses      uint64            `json:"max_uses,omitempty"`
	ExpiresAt    int64             `json:"expires_at,omitempty"`
	Actor        Actor             `json:"actor,omitzero"`
	Time         int64             `json:"time"`
}

// RevokeTokenRequest deletes a token.
type RevokeTokenRequest struct {
	Accessor string `json:"accessor"`
	Actor    Actor  `json:"actor,omitzero"`
	Time     int64  `json:"time"`
}

// UseEnrollTokenRequest spends one use of an enroll token to enroll a
// device: in one apply it checks the token (it exists, is an enroll token,
// has not expired at Time and has a use left), counts the use, and sets
// the device's control-plane labels to the token's (registering the device
// if it is new). ApplyResult.Labels carries the labels assigned. A refused
// use changes nothing.
type UseEnrollTokenRequest struct {
	SecretHash string `json:"secret_hash"`
	Device     string `json:"device"`
	Time       int64  `json:"time"`
}

var (
	// ErrTokenExpired is returned for a token used after its expiry.
	ErrTokenExpired = errors.New("token expired")
	// ErrTokenExhausted is returned for an enroll token with no uses left.
	ErrTokenExhausted = errors.New("token has no uses left")
	// ErrExists is returned when creating what already exists.
	ErrExists = errors.New("already exists")
)

const maxTokenName = 256

func (req *CreateTokenRequest) validate() error {
	switch {
	case !acl.ValidAccessor(req.Accessor):
		return fmt.Errorf("create token: accessor %q is not 16 lower-case hex characters", req.Accessor)
	case !acl.ValidSecretHash(req.SecretHash):
		return fmt.Errorf("create token %s: the secret hash is not a hex SHA-256", req.Accessor)
	case len(req.Name) > maxTokenName:
		return fmt.Errorf("create token %s: name longer than %d bytes", req.Accessor, maxTokenName)
	case req.MaxUses != 0 && req.Policy != acl.PolicyEnroll:
		return fmt.Errorf("create token %s: only an enroll token has a number of uses", req.Accessor)
	case req.ExpiresAt < 0 || req.ExpiresAt != 0 && req.ExpiresAt <= req.Time:
		return fmt.Errorf("create token %s: expiry %d is not after the creation time %d", req.Accessor, req.ExpiresAt, req.Time)
	}
	if err := acl.ValidateGrant(req.Policy, req.Scope, req.EnrollLabels); err != nil {
		return fmt.Errorf("create token %s: %w", req.Accessor, err)
	}
	return nil
}

func (f *FSM) applyCreateToken(txn *memdb.Txn, index uint64, body []byte) (ApplyResult, error) {
	var req CreateTokenRequest
	if err := json.Unmarshal(body, &req); err != nil {
		return ApplyResult{}, fmt.Errorf("decode: %w", err)
	}
	if err := req.validate(); err != nil {
		return rejected(txn, err)
	}
	for _, ix := range []struct{ index, value, what string }{
		{"id", req.Accessor, "accessor"},
		{"secret_hash", req.SecretHash, "secret"},
	} {
		raw, err := txn.First(tableTokens, ix.index, ix.value)
		if err != nil {
			return ApplyResult{}, err
		}
		if raw != nil {
			return rejected(txn, fmt.Errorf("create token %s: a token with this %s: %w", req.Accessor, ix.what, ErrExists))
		}
	}
	rec := &TokenRecord{SecretHash: req.SecretHash, TokenInfo: TokenInfo{
		Accessor: req.Accessor, Name: req.Name, Policy: req.Policy,
		Scope: maps.Clone(req.Scope), EnrollLabels: maps.Clone(req.EnrollLabels),
		MaxUses: req.MaxUses, ExpiresAt: req.ExpiresAt,
		CreatedAt: req.Time, CreatedBy: req.Actor, CreateIndex: index, ModifyIndex: index,
	}}
	if err := txn.Insert(tableTokens, rec); err != nil {
		return ApplyResult{}, err
	}
	summary := fmt.Sprintf("%s token %q", req.Policy, req.Name)
	return f.audited(txn, index, req.Time, req.Actor, "create-token", "token/"+req.Accessor, summary)
}

func (f *FSM) applyRevokeToken(txn *memdb.Txn, index uint64, body []byte) (ApplyResult, error) {
	var req RevokeTokenRequest
	if err := json.Unmarshal(body, &req); err != nil {
		return ApplyResult{}, fmt.Errorf("decode: %w", err)
	}
	raw, err := txn.First(tableTokens, "id", req.Accessor)
	if err != nil {
		return ApplyResult{}, err
	}
	if raw == nil {
		return rejected(txn, fmt.Errorf("revoke token %q: %w", req.Accessor, ErrNotFound))
	}
	tok := raw.(*TokenRecord)
	if err := txn.Delete(tableTokens, tok); err != nil {
		return ApplyResult{}, err
	}
	summary := fmt.Sprintf("%s token %q", tok.Policy, tok.Name)
	return f.audited(txn, index, req.Time, req.Actor, "revoke-token", "token/"+req.Accessor, summary)
}

func (f *FSM) applyUseEnrollToken(txn *memdb.Txn, index uint64, body []byte) (ApplyResult, error) {
	var req UseEnrollTokenRequest
	if err := json.Unmarshal(body, &req); err != nil {
		return ApplyResult{}, fmt.Errorf("decode: %w", err)
	}
	if req.Device == "" {
		return rejected(txn, fmt.Errorf("enroll: empty device ID"))
	}
	raw, err := txn.First(tableTokens, "secret_hash", req.SecretHash)
	if err != nil {
		return ApplyResult{}, err
	}
	if raw == nil {
		return rejected(txn, fmt.Errorf("enroll device %q: token %w", req.Device, ErrNotFound))
	}
	cur := raw.(*TokenRecord)
	switch {
	case cur.Policy != acl.PolicyEnroll:
		return rejected(txn, fmt.Errorf("enroll device %q: token %s: %w: a %s token cannot enroll", req.Device, cur.Accessor, acl.ErrForbidden, cur.Policy))
	case req.Time <= 0:
		// Expiry is judged at the proposer's time; a command without one
		// would never find a token expired.
		return rejected(txn, fmt.Errorf("enroll device %q: the command carries no proposer time", req.Device))
	case cur.Expired(req.Time):
		return rejected(txn, fmt.Errorf("enroll device %q: token %s: %w", req.Device, cur.Accessor, ErrTokenExpired))
	case cur.Exhausted():
		return rejected(txn, fmt.Errorf("enroll device %q: token %s: %w (used %d of %d)", req.Device, cur.Accessor, ErrTokenExhausted, cur.Uses, cur.MaxUses))
	}
	revoked, err := txn.First(tableRevoked, "id", req.Device)
	if err != nil {
		return ApplyResult{}, err
	}
	if revoked != nil {
		return rejected(txn, fmt.Errorf("enroll device %q: %w", req.Device, ErrDeviceRevoked))
	}
	// An enrollment token brings new devices in; it does not take over a
	// device the control plane already labelled (an operator re-labels
	// that one with set-device-labels).
	if dev, err := txn.First(tableDevices, "id", req.Device); err != nil {
		return ApplyResult{}, err
	} else if dev != nil && dev.(*DeviceRecord).LabelsControlled {
		return rejected(txn, fmt.Errorf("enroll device %q: %w: the device is enrolled already", req.Device, ErrExists))
	}
	tok := *cur
	tok.Uses++
	tok.ModifyIndex = index
	if err := txn.Insert(tableTokens, &tok); err != nil {
		return ApplyResult{}, err
	}
	labels := maps.Clone(tok.EnrollLabels)
	if labels == nil {
		labels = map[string]string{}
	}
	if err := f.setControlLabels(txn, index, req.Device, labels, req.Time, true); err != nil {
		return ApplyResult{}, err
	}
	actor := Actor{Accessor: tok.Accessor, Name: tok.Name}
	summary := fmt.Sprintf("enrolled with labels %v (use %d)", labels, tok.Uses)
	if err := f.audit(txn, index, req.Time, actor, "enroll-device", "device/"+req.Device, summary); err != nil {
		return ApplyResult{}, err
	}
	return ApplyResult{Revision: metaValue(txn, metaRevision), Labels: labels}, nil
}

// Token returns a token by accessor, or ErrNotFound. The record carries
// the secret's hash: strip it (use its TokenInfo) before showing it.
func (r *Read) Token(ws memdb.WatchSet, accessor string) (*TokenRecord, error) {
	return r.token(ws, "id", accessor)
}

// TokenBySecretHash returns the token whose secret hashes to hash
// (acl.HashSecret), or ErrNotFound: how a request is authenticated. The
// caller checks expiry with its own clock (TokenInfo.Expired).
func (r *Read) TokenBySecretHash(ws memdb.WatchSet, hash string) (*TokenRecord, error) {
	return r.token(ws, "secret_hash", hash)
}

func (r *Read) token(ws memdb.WatchSet, index, key string) (*TokenRecord, error) {
	ch, raw, err := r.txn.FirstWatch(tableTokens, index, key)
	if err != nil {
		return nil, fmt.Errorf("read token: %w", err)
	}
	r.watch(ws, ch)
	if raw == nil {
		return nil, fmt.Errorf("token: %w", ErrNotFound)
	}
	return raw.(*TokenRecord), nil
}

// Tokens lists every token without its secret hash, ordered by accessor.
func (r *Read) Tokens(ws memdb.WatchSet) ([]TokenInfo, error) {
	recs, err := readAll[*TokenRecord](r, ws, tableTokens)
	if err != nil {
		return nil, err
	}
	out := make([]TokenInfo, len(recs))
	for i, rec := range recs {
		out[i] = rec.TokenInfo
	}
	return out, nil
}

package api

import (
	"context"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/meteor-edge/meteor/fsm/acl"
)

// CreateTokenRequest is the body of POST /v1/tokens.
type CreateTokenRequest struct {
	Name   string     `json:"name,omitempty"`
	Policy acl.Policy `json:"policy"`
	// Scope narrows a read or operator token to a label selector.
	Scope map[string]string `json:"scope,omitempty"`
	// EnrollLabels are the labels an enroll token gives devices.
	EnrollLabels map[string]string `json:"enroll_labels,omitempty"`
	// TTL is how long the token lasts (a Go duration, "24h"); empty:
	// until revoked.
	TTL string `json:"ttl,omitempty"`
	// Uses is how many devices an enroll token may enroll (0: no limit).
	Uses uint64 `json:"uses,omitempty"`
}

// Token is a token's public part: never its secret or the secret's hash.
type Token struct {
	Accessor     string            `json:"accessor"`
	Name         string            `json:"name,omitempty"`
	Policy       acl.Policy        `json:"policy"`
	Scope        map[string]string `json:"scope,omitempty"`
	EnrollLabels map[string]string `json:"enroll_labels,omitempty"`
	MaxUses      uint64            `json:"max_uses,omitempty"`
	Uses         uint64            `json:"uses,omitempty"`
	ExpiresAt    *time.Time        `json:"expires_at,omitempty"`
	CreatedAt    time.Time         `json:"created_at"`
	CreatedBy    string            `json:"created_by,omitempty"`
}

// CreateTokenResponse answers POST /v1/tokens: the secret is shown only
// here, once.
type CreateTokenResponse struct {
	Secret string `json:"secret"`
	Token  Token  `json:"token"`
}

// TokenList answers GET /v1/tokens.
type TokenList struct {
	Tokens []Token `json:"tokens"`
}

// AuditRecord is one change in the audit log.
type AuditRecord struct {
	Index         uint64    `json:"index"`
	Time          time.Time `json:"time"`
	Actor         string    `json:"actor"`
	ActorAccessor string    `json:"actor_accessor,omitempty"`
	Action        string    `json:"action"`
	Target        string    `json:"target"`
	Summary       string    `json:"summary,omitempty"`
	Revision      uint64    `json:"revision"`
}

// AuditLog answers GET /v1/audit, newest first.
type AuditLog struct {
	Records []AuditRecord `json:"records"`
}

// AuditQuery selects audit records: at most Limit (0: the server's
// default of 100; negative: every retained record), of an actor (accessor, name or "system"), of a target
// (intent/web; intent/ for every intent).
type AuditQuery struct {
	Limit  int
	Actor  string
	Target string
}

// CreateToken creates a token and returns its secret (shown only once).
func (c *Client) CreateToken(ctx context.Context, req CreateTokenRequest) (*CreateTokenResponse, error) {
	body, err := jsonBody(req)
	if err != nil {
		return nil, err
	}
	var out CreateTokenResponse
	err = c.do(ctx, http.MethodPost, "/v1/tokens", nil, http.Header{"Content-Type": {"application/json"}}, body, &out)
	return &out, err
}

// Tokens lists the tokens.
func (c *Client) Tokens(ctx context.Context) (*TokenList, error) {
	var out TokenList
	err := c.do(ctx, http.MethodGet, "/v1/tokens", nil, nil, nil, &out)
	return &out, err
}

// RevokeToken revokes the token with this accessor.
func (c *Client) RevokeToken(ctx context.Context, accessor string) error {
	return c.do(ctx, http.MethodDelete, "/v1/tokens/"+url.PathEscape(accessor), nil, nil, nil, nil)
}

// Audit reads the audit log.
func (c *Client) Audit(ctx context.Context, q AuditQuery) (*AuditLog, error) {
	v := url.Values{}
	if q.Limit != 0 {
		v.Set("limit", strconv.Itoa(max(q.Limit, 0)))
	}
	if q.Actor != "" {
		v.Set("actor", q.Actor)
	}
	if q.Target != "" {
		v.Set("target", q.Target)
	}
	var out AuditLog
	err := c.do(ctx, http.MethodGet, "/v1/audit", v, nil, nil, &out)
	return &out, err
}

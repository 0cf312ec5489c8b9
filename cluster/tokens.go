package cluster

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/meteor-edge/meteor/cluster/api"
	"github.com/meteor-edge/meteor/fsm"
	"github.com/meteor-edge/meteor/fsm/acl"
)

// handleCreateToken creates a token (POST /v1/tokens): this server
// generates the secret, commits only its hash, and answers the secret once.
func (h *httpAPI) handleCreateToken(w http.ResponseWriter, r *http.Request) {
	var req api.CreateTokenRequest
	body, e := readBody(w, r, maxBodyBytes, "token request")
	if e != nil {
		writeError(w, e)
		return
	}
	err := json.Unmarshal(body, &req)
	if err != nil {
		writeError(w, badRequest("token request: %v", err))
		return
	}
	var ttl time.Duration
	if req.TTL != "" {
		if ttl, err = time.ParseDuration(req.TTL); err != nil || ttl <= 0 {
			writeError(w, badRequest("token request: ttl %q: must be a positive duration such as 24h", req.TTL))
			return
		}
	}
	tok, err := acl.Generate(rand.Reader)
	if err != nil {
		writeError(w, toAPIError(err))
		return
	}
	now := h.clock.Now().UnixNano()
	cmd := &fsm.CreateTokenRequest{
		Accessor: tok.Accessor, SecretHash: acl.HashSecret(tok.Secret), Name: req.Name,
		Policy: req.Policy, Scope: req.Scope, EnrollLabels: req.EnrollLabels, MaxUses: req.Uses,
		Actor: principalOf(r.Context()).actor(), Time: now,
	}
	if ttl > 0 {
		cmd.ExpiresAt = now + int64(ttl)
	}
	if _, _, ok := h.commit(w, r.Context(), fsm.CreateTokenType, cmd); !ok {
		return
	}
	writeJSON(w, http.StatusOK, api.CreateTokenResponse{Secret: tok.Secret, Token: api.Token{
		Accessor: tok.Accessor, Name: req.Name, Policy: req.Policy, Scope: req.Scope,
		EnrollLabels: req.EnrollLabels, MaxUses: req.Uses, ExpiresAt: unixTime(cmd.ExpiresAt),
		CreatedAt: time.Unix(0, now).UTC(),
	}})
}

func (h *httpAPI) handleListTokens(w http.ResponseWriter, r *http.Request) {
	read := h.state.Read()
	h.setReadHeaders(w, read)
	toks, err := read.Tokens(nil)
	if err != nil {
		writeError(w, toAPIError(err))
		return
	}
	out := api.TokenList{Tokens: make([]api.Token, 0, len(toks))}
	for _, t := range toks {
		out.Tokens = append(out.Tokens, api.Token{
			Accessor: t.Accessor, Name: t.Name, Policy: t.Policy, Scope: t.Scope,
			EnrollLabels: t.EnrollLabels, MaxUses: t.MaxUses, Uses: t.Uses,
			ExpiresAt: unixTime(t.ExpiresAt), CreatedAt: time.Unix(0, t.CreatedAt).UTC(), CreatedBy: t.CreatedBy.String(),
		})
	}
	writeJSON(w, http.StatusOK, out)
}

func (h *httpAPI) handleRevokeToken(w http.ResponseWriter, r *http.Request) {
	accessor := r.PathValue("accessor")
	cmd := &fsm.RevokeTokenRequest{Accessor: accessor, Actor: principalOf(r.Context()).actor(), Time: h.clock.Now().UnixNano()}
	if _, _, ok := h.commit(w, r.Context(), fsm.RevokeTokenType, cmd); !ok {
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"revoked": accessor})
}

// handleAudit serves GET /v1/audit?limit=&actor=&target=.
func (h *httpAPI) handleAudit(w http.ResponseWriter, r *http.Request) {
	q := fsm.AuditQuery{Limit: 100, Actor: r.URL.Query().Get("actor"), Target: r.URL.Query().Get("target")}
	if v := r.URL.Query().Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			writeError(w, badRequest("limit %q: must be a non-negative integer (0: every retained record)", v))
			return
		}
		q.Limit = n
	}
	read := h.state.Read()
	h.setReadHeaders(w, read)
	recs, err := read.Audit(nil, q)
	if err != nil {
		writeError(w, toAPIError(err))
		return
	}
	out := api.AuditLog{Records: make([]api.AuditRecord, 0, len(recs))}
	for _, rec := range recs {
		out.Records = append(out.Records, api.AuditRecord{
			Index: rec.Index, Time: time.Unix(0, rec.Time).UTC(), Actor: rec.Actor.String(),
			ActorAccessor: rec.Actor.Accessor, Action: rec.Action, Target: rec.Target,
			Summary: rec.Summary, Revision: rec.Revision,
		})
	}
	writeJSON(w, http.StatusOK, out)
}

// auditMember records a membership change the request asked for, with its
// outcome, in the audit log. A failure to record is logged: the change
// itself is done (or failed) already.
func (h *httpAPI) auditMember(r *http.Request, change, member string, outcome error) {
	req := &fsm.MemberChangeRequest{Change: change, Member: member, Outcome: "ok",
		Actor: principalOf(r.Context()).actor(), Time: h.clock.Now().UnixNano()}
	if outcome != nil {
		req.Outcome = outcome.Error()
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), h.cfg.ApplyTimeout)
	defer cancel()
	if _, _, err := applied(ctx, h.propose, fsm.AuditMemberChangeType, req); err != nil {
		h.logger.Error("record member change in the audit log", "change", change, "peer", member, "error", err)
	}
}

// bootstrapToken is the leader worker that creates the first admin token
// (ACLConfig.BootstrapTokenHash) when the cluster has no token at all. It
// runs on each new leader, after its replica caught up, and reads the
// state before acting, so the token is created once however often
// leadership changes. A cluster that has tokens gets none: an operator
// who revoked the bootstrap token keeps it revoked.
type bootstrapToken struct {
	hash    string
	state   stateReader
	propose proposer
	clock   Clock
}

func (b *bootstrapToken) Name() string { return "bootstrap-token" }

func (b *bootstrapToken) Run(ctx context.Context) error {
	toks, err := b.state.Read().Tokens(nil)
	if err != nil {
		return err
	}
	if len(toks) > 0 {
		return nil
	}
	tok, err := acl.Generate(rand.Reader)
	if err != nil {
		return err
	}
	_, _, err = applied(ctx, b.propose, fsm.CreateTokenType, &fsm.CreateTokenRequest{
		Accessor: tok.Accessor, SecretHash: b.hash, Name: BootstrapTokenName,
		Policy: acl.PolicyAdmin, Time: b.clock.Now().UnixNano(),
	})
	if err != nil && !errors.Is(err, fsm.ErrExists) {
		return fmt.Errorf("create the bootstrap admin token: %w", err)
	}
	return nil
}

// BootstrapTokenName names the first admin token.
const BootstrapTokenName = "bootstrap admin"

package cluster

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/time/rate"

	"github.com/meteor-edge/meteor/cluster/api"
	"github.com/meteor-edge/meteor/fsm"
	"github.com/meteor-edge/meteor/fsm/acl"
)

// ACLConfig switches on the authentication of operator requests (see
// Config.ACL and docs/security.md, "Operators").
type ACLConfig struct {
	// BootstrapTokenHash, if set, is the hash (acl.HashSecret) of the
	// first admin token's secret (`meteor tls init` writes both). The
	// leader creates that token when the cluster has no token at all.
	BootstrapTokenHash string
	// FailedAuthRate is how many failed authentications per second a
	// remote IP may make after its burst (FailedAuthBurst) before it is
	// answered 429; zero means 1 per second with a burst of 10.
	FailedAuthRate  rate.Limit
	FailedAuthBurst int
}

// Validate checks the ACL configuration.
func (c *ACLConfig) Validate() error {
	if c.BootstrapTokenHash != "" && !acl.ValidSecretHash(c.BootstrapTokenHash) {
		return errors.New("acl: the bootstrap token hash is not a hex SHA-256 (admin-token.sha256 from 'meteor tls init')")
	}
	if c.FailedAuthRate < 0 || c.FailedAuthBurst < 0 {
		return errors.New("acl: the failed-authentication rate and burst must not be negative")
	}
	return nil
}

// Headers of a request one server forwards to another's public API (a
// follower's read or member change proxied to the leader, a leaving
// server asking the leader to remove it). The signature (headerSignature)
// covers them all, so a request without a valid one carries no actor.
const (
	// headerActor is the accessor of the token the forwarding server
	// verified; empty means the server itself.
	headerActor = "X-Meteor-Actor"
	// headerSignedAt is when the forwarding server signed (Unix nanoseconds).
	headerSignedAt = "X-Meteor-Signed-At"
)

// signedRequestMaxAge bounds how far a forwarded request's signing time may
// be from the receiving server's clock, which bounds its replay.
const signedRequestMaxAge = time.Minute

// maxFailureLimiters bounds the remote IPs whose failed authentications
// are counted; beyond it the counts start over.
const maxFailureLimiters = 10000

// principal is who a request is from, once authenticated: a token, or a
// server of this cluster (a signed forwarded request without an actor). A
// nil *principal is an unauthenticated request on a server without ACL,
// which may do everything, as the zero (system) actor.
type principal struct {
	token  *fsm.TokenInfo
	server string
}

type principalKey struct{}

// principalOf returns the principal the authentication stored in ctx.
func principalOf(ctx context.Context) *principal {
	p, _ := ctx.Value(principalKey{}).(*principal)
	return p
}

// actor is who the audit log records.
func (p *principal) actor() fsm.Actor {
	if p == nil || p.token == nil {
		return fsm.Actor{}
	}
	return fsm.Actor{Accessor: p.token.Accessor, Name: p.token.Name}
}

// scoped reports whether the principal is a token with a scope.
func (p *principal) scoped() bool { return p != nil && p.token != nil && len(p.token.Scope) > 0 }

// allow checks an action on the whole cluster (acl.Grant.Allow).
func (p *principal) allow(a acl.Action) error {
	if p == nil || p.token == nil {
		return nil
	}
	return p.refusal(a, p.token.Grant().Allow(a))
}

// allowIntent checks an action on an intent with this selector.
func (p *principal) allowIntent(a acl.Action, selector map[string]string) error {
	if p == nil || p.token == nil {
		return nil
	}
	return p.refusal(a, p.token.Grant().AllowIntent(a, selector))
}

func (p *principal) refusal(a acl.Action, err error) error {
	if err == nil {
		return nil
	}
	return &api.Error{StatusCode: http.StatusForbidden, Code: api.CodeForbidden,
		Message: fmt.Sprintf("token %s (policy %s) may not %s: %v", p.token.Accessor, p.token.Policy, a, err)}
}

// authenticator verifies the credentials of operator requests: a bearer
// token looked up by its hash in the local replica, or a forwarded request
// signed by another server. It counts failed attempts per remote IP.
//
// Its failure limiters are guarded by mu; everything else is read-only.
type authenticator struct {
	cfg   *ACLConfig
	state stateReader
	clock Clock
	peers *peerClient
	// mtls: the HTTP API speaks mutual TLS with the other servers
	// (Config.PeerTLS), so a forwarded request must come from the server
	// it names, over TLS (checkServerPeer).
	mtls bool

	// catchUp, if set, brings the replica up to what the leader has
	// committed (Server.catchUp); a token this replica does not know is
	// looked up again after it (lookupFresh).
	catchUp func(context.Context) error

	mu       sync.Mutex
	failures map[string]*rate.Limiter // by remote IP; guarded by mu

	// catchMu guards the catch-up in flight (catching: closed when it
	// ends, with its outcome in catchErr) and when the last one began
	// (caughtUp): callers share one, and a stream of unknown tokens costs
	// the leader at most one question per catchUpEvery.
	catchMu  sync.Mutex
	catching chan struct{}
	caughtUp time.Time
	catchErr error
}

// catchUpWait bounds the wait for the replica to catch up with the
// leader on a token it does not know; catchUpEvery spaces catch-ups.
const (
	catchUpWait  = 3 * time.Second
	catchUpEvery = time.Second
)

// errCatchingUp answers a request whose token this server does not know
// while its replica could not catch up with the leader: the token may be
// newer than the replica (a server that just restarted replays its log).
var errCatchingUp = errors.New("catching up")

// lookupFresh finds a token in the replica and, if it is not there, once
// more after catching up with the leader: a server that just restarted,
// or trails the leader, must not refuse a token created since the state
// it has applied. find returns an error for a token it does not find.
// Only a remote address whose failed authentications are within their
// limit makes a server catch up (the refusal that follows counts
// against it), so strangers cannot make it question the leader at will.
func (a *authenticator) lookupFresh(ctx context.Context, remote string, find func(*fsm.Read) (*fsm.TokenRecord, error)) (*fsm.TokenRecord, error) {
	rec, err := find(a.state.Read())
	if err == nil || a.catchUp == nil || a.limiter(remote).Tokens() < 1 {
		return rec, err
	}
	if cerr := a.sharedCatchUp(ctx); cerr != nil {
		if rec, err := find(a.state.Read()); err == nil {
			return rec, nil
		}
		return nil, fmt.Errorf("%w: %v", errCatchingUp, cerr)
	}
	return find(a.state.Read())
}

// sharedCatchUp joins the catch-up in flight, or starts one unless the
// last began within catchUpEvery (its outcome stands), and waits for it
// as long as ctx allows.
func (a *authenticator) sharedCatchUp(ctx context.Context) error {
	a.catchMu.Lock()
	done := a.catching
	if done == nil {
		if now := a.clock.Mono(); !a.caughtUp.IsZero() && now.Sub(a.caughtUp) < catchUpEvery {
			err := a.catchErr
			a.catchMu.Unlock()
			return err
		}
		done = make(chan struct{})
		a.catching, a.caughtUp = done, a.clock.Mono()
		go func() {
			// Not the first caller's context: the others share it.
			cctx, cancel := context.WithTimeout(context.Background(), catchUpWait)
			err := a.catchUp(cctx)
			cancel()
			a.catchMu.Lock()
			a.catching, a.catchErr = nil, err
			a.catchMu.Unlock()
			close(done)
		}()
	}
	a.catchMu.Unlock()
	select {
	case <-done:
		a.catchMu.Lock()
		defer a.catchMu.Unlock()
		return a.catchErr
	case <-ctx.Done():
		return ctx.Err()
	}
}

func newAuthenticator(cfg *ACLConfig, state stateReader, clock Clock, peers *peerClient, mtls bool) *authenticator {
	return &authenticator{cfg: cfg, state: state, clock: clock, peers: peers, mtls: mtls, failures: map[string]*rate.Limiter{}}
}

// authenticate returns the request's principal, or the error to answer:
// 401 without valid credentials, 429 once the remote IP failed too often.
func (a *authenticator) authenticate(r *http.Request) (*principal, *api.Error) {
	p, err := a.verify(r)
	if err == nil {
		return p, nil
	}
	if errors.Is(err, errCatchingUp) {
		// The token may be valid; it counts against the address all the
		// same, so that unknown tokens cannot make a server wait on the
		// leader without limit.
		a.limiter(r.RemoteAddr).Allow()
		return nil, &api.Error{StatusCode: http.StatusServiceUnavailable, Code: api.CodeCatchingUp, RetryAfterMS: 1000,
			Message: "this server does not know the token yet and could not catch up with the leader (" + strings.TrimPrefix(err.Error(), errCatchingUp.Error()+": ") + "): retry, or ask another server"}
	}
	if !a.limiter(r.RemoteAddr).Allow() {
		return nil, &api.Error{StatusCode: http.StatusTooManyRequests, Code: api.CodeRateLimited,
			Message: "too many failed authentications from this address: slow down", RetryAfterMS: 1000}
	}
	return nil, &api.Error{StatusCode: http.StatusUnauthorized, Code: api.CodeUnauthenticated,
		Message: err.Error() + " (send Authorization: Bearer TOKEN; meteor takes --token, --token-file or METEOR_TOKEN)"}
}

func (a *authenticator) verify(r *http.Request) (*principal, error) {
	if r.Header.Get(headerSignature) != "" {
		return a.verifySigned(r)
	}
	secret, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok {
		return nil, errors.New("this request carries no token")
	}
	secret = strings.TrimSpace(secret)
	if err := acl.CheckSecretFormat(secret); err != nil {
		return nil, fmt.Errorf("bad token: %w", err)
	}
	hash := acl.HashSecret(secret)
	rec, err := a.lookupFresh(r.Context(), r.RemoteAddr, func(rd *fsm.Read) (*fsm.TokenRecord, error) { return rd.TokenBySecretHash(nil, hash) })
	if errors.Is(err, errCatchingUp) {
		return nil, err
	}
	if err != nil {
		return nil, errors.New("unknown or revoked token")
	}
	return a.valid(&rec.TokenInfo)
}

func (a *authenticator) valid(tok *fsm.TokenInfo) (*principal, error) {
	if tok.Expired(a.clock.Now().UnixNano()) {
		return nil, fmt.Errorf("token %s expired at %s", tok.Accessor, time.Unix(0, tok.ExpiresAt).UTC().Format(time.RFC3339))
	}
	if tok.Policy == acl.PolicyEnroll {
		return nil, fmt.Errorf("token %s is an enroll token: it enrolls devices and calls no API", tok.Accessor)
	}
	return &principal{token: tok}, nil
}

// verifySigned checks a request another server forwarded (signForwarded):
// its signature, its age, and the actor's token in this replica.
func (a *authenticator) verifySigned(r *http.Request) (*principal, error) {
	if err := checkServerPeer(a.mtls, r); err != nil {
		return nil, fmt.Errorf("forwarded request: %w", err)
	}
	digest, err := bodyDigest(r)
	if err != nil {
		return nil, fmt.Errorf("forwarded request: %w", err)
	}
	got, err := hex.DecodeString(r.Header.Get(headerSignature))
	want, _ := hex.DecodeString(a.peers.sign([]byte(forwardedString(r, digest))))
	if err != nil || !hmac.Equal(got, want) {
		return nil, errors.New("bad forwarded-request signature")
	}
	at, err := strconv.ParseInt(r.Header.Get(headerSignedAt), 10, 64)
	// Over mutual TLS no one but the servers sees or sends these requests,
	// so their age is not checked: servers whose wall clocks are minutes
	// apart (which Meteor tolerates) still forward to each other. Over
	// plain HTTP, the window limits how long a captured request can be
	// replayed.
	if age := a.clock.Now().Sub(time.Unix(0, at)); err != nil || (!a.mtls && (age > signedRequestMaxAge || age < -signedRequestMaxAge)) {
		return nil, errors.New("forwarded request signed too long ago, or by a server whose clock is off")
	}
	accessor := r.Header.Get(headerActor)
	if accessor == "" {
		return &principal{server: r.Header.Get(headerForwarded)}, nil
	}
	rec, err := a.lookupFresh(r.Context(), r.RemoteAddr, func(rd *fsm.Read) (*fsm.TokenRecord, error) { return rd.Token(nil, accessor) })
	if errors.Is(err, errCatchingUp) {
		return nil, err
	}
	if err != nil {
		return nil, fmt.Errorf("token %s of the forwarded request: unknown or revoked", accessor)
	}
	return a.valid(&rec.TokenInfo)
}

// forwardedString is what a forwarded request's signature covers: its
// method, URL, forwarding server, actor, signing time and body (digest,
// from bodyDigest), so that none of them can be changed in transit.
func forwardedString(r *http.Request, digest string) string {
	return strings.Join([]string{"forwarded", r.Method, r.URL.RequestURI(),
		r.Header.Get(headerForwarded), r.Header.Get(headerActor), r.Header.Get(headerSignedAt), digest}, "\n")
}

// bodyDigest reads r's body (at most maxBodyBytes), puts it back for
// whoever reads it next, and returns its hex SHA-256.
func bodyDigest(r *http.Request) (string, error) {
	var body []byte
	if r.Body != nil && r.Body != http.NoBody {
		b, err := io.ReadAll(io.LimitReader(r.Body, maxBodyBytes+1))
		r.Body.Close()
		if err != nil {
			return "", fmt.Errorf("read body: %w", err)
		}
		if len(b) > maxBodyBytes {
			return "", fmt.Errorf("body over %d bytes", maxBodyBytes)
		}
		body = b
		r.Body = io.NopCloser(bytes.NewReader(b))
		r.ContentLength = int64(len(b))
	}
	sum := sha256.Sum256(body)
	return hex.EncodeToString(sum[:]), nil
}

// signForwarded signs a request this server sends to another's public API
// on behalf of actor (the zero Actor: the server itself). The request's
// URL and headerForwarded must be set; its body is read and put back.
func (p *peerClient) signForwarded(r *http.Request, actor fsm.Actor, now time.Time) error {
	digest, err := bodyDigest(r)
	if err != nil {
		return err
	}
	r.Header.Del("Authorization")
	r.Header.Set(headerActor, actor.Accessor)
	r.Header.Set(headerSignedAt, strconv.FormatInt(now.UnixNano(), 10))
	r.Header.Set(headerSignature, p.sign([]byte(forwardedString(r, digest))))
	return nil
}

func (a *authenticator) limiter(remote string) *rate.Limiter {
	host, _, err := net.SplitHostPort(remote)
	if err != nil {
		host = remote
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	l, ok := a.failures[host]
	if !ok {
		if len(a.failures) >= maxFailureLimiters {
			clear(a.failures)
		}
		r, b := a.cfg.FailedAuthRate, a.cfg.FailedAuthBurst
		if r == 0 {
			r, b = 1, 10
		}
		l = rate.NewLimiter(r, max(b, 1))
		a.failures[host] = l
	}
	return l
}

// authorize wraps an operator endpoint: with the ACL on it authenticates
// the request, checks action on the whole cluster (unless action is empty:
// the handler checks an intent's selector itself) and stores the
// principal in the request's context. With the ACL off it lets every
// request through.
func (h *httpAPI) authorize(action acl.Action, next http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if h.auth == nil {
			next(w, r)
			return
		}
		p, apiErr := h.auth.authenticate(r)
		if apiErr != nil {
			if apiErr.StatusCode == http.StatusUnauthorized {
				w.Header().Set("WWW-Authenticate", `Bearer realm="meteor"`)
				// Refusals past the rate limit are not logged: they
				// would let a guesser fill the log.
				h.logger.Warn("refused request", "method", r.Method, "path", r.URL.Path, "remote", r.RemoteAddr, "error", apiErr.Message)
			}
			writeError(w, apiErr)
			return
		}
		if action != "" {
			if err := p.allow(action); err != nil {
				h.logger.Warn("forbidden request", "method", r.Method, "path", r.URL.Path, "actor", p.actor().String(), "error", err)
				writeError(w, toAPIError(err))
				return
			}
		}
		next(w, r.WithContext(context.WithValue(r.Context(), principalKey{}, p)))
	}
}

// fromServer wraps an internal read: with the ACL on, only a request
// another server signed (peerClient.status) is served.
func (h *httpAPI) fromServer(next http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if err := checkServerPeer(h.cfg.PeerTLS != nil, r); err != nil {
			writeError(w, &api.Error{StatusCode: http.StatusForbidden, Code: api.CodeForbidden, Message: "internal endpoint: " + err.Error()})
			return
		}
		if h.auth != nil {
			if p, err := h.auth.verifySigned(r); err != nil || p.token != nil {
				writeError(w, &api.Error{StatusCode: http.StatusForbidden, Code: api.CodeForbidden, Message: "internal endpoint: servers only (a request signed with the cluster secret)"})
				return
			}
		}
		next(w, r)
	}
}

package cluster

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"time"

	"github.com/meteor-edge/meteor/cluster/api"
	"github.com/meteor-edge/meteor/fsm"
)

// peerClient makes this server's requests to other servers: the internal
// endpoints (/v1/internal/self, /v1/internal/apply, /v1/internal/report),
// the API requests a follower forwards to the leader, and the member calls
// of a leave. Every one of them goes through it, so the scheme
// (Config.PeerScheme) and the HTTP client (Config.PeerClient, with its
// TLS configuration) are chosen in one place.
type peerClient struct {
	scheme string
	hc     *http.Client
	self   string // this server's node ID
	secret []byte // Config.ClusterSecret, signs request bodies
	// now is the server's wall clock, which stamps signed requests.
	now func() time.Time
}

func newPeerClient(cfg *Config) *peerClient {
	scheme := cfg.PeerScheme
	if scheme == "" {
		scheme = "http"
		if cfg.PeerTLS != nil {
			scheme = "https"
		}
	}
	hc := cfg.PeerClient
	if hc == nil {
		var tr http.RoundTripper
		if scheme == "https" && cfg.PeerTLS != nil {
			tr = cfg.PeerTLS.apiTransport()
		} else {
			tr = &http.Transport{MaxIdleConnsPerHost: 256, IdleConnTimeout: 90 * time.Second}
		}
		hc = &http.Client{Transport: drainingTransport{next: tr}}
	}
	return &peerClient{scheme: scheme, hc: hc, self: cfg.NodeID, secret: cfg.ClusterSecret, now: serverClock(cfg).Now}
}

// base is the URL of the server whose HTTP API is at addr.
func (p *peerClient) base(addr string) *url.URL { return &url.URL{Scheme: p.scheme, Host: addr} }

// api returns an API client for the server at addr. Its requests are
// signed as this server's own (signForwarded), so a server with the ACL
// on takes them from a server of the cluster, without a token.
func (p *peerClient) api(addr string) *api.Client {
	hc := *p.hc
	hc.Transport = signingTransport{p: p, next: p.transport()}
	return api.NewClient(p.base(addr).String(), &hc)
}

func (p *peerClient) transport() http.RoundTripper {
	if p.hc.Transport != nil {
		return p.hc.Transport
	}
	return http.DefaultTransport
}

// drainingTransport reads what is left of a response body (up to
// maxDrain bytes) when it is closed, so that the connection goes back to
// the pool instead of being dropped: a caller that decodes a JSON body or
// looks only at the status would otherwise cost a new connection, and
// over TLS a new handshake, per request.
type drainingTransport struct{ next http.RoundTripper }

const maxDrain = 256 << 10

func (t drainingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := t.next.RoundTrip(r)
	if err == nil && resp.Body != nil {
		resp.Body = drainOnClose{resp.Body}
	}
	return resp, err
}

func (t drainingTransport) CloseIdleConnections() {
	if c, ok := t.next.(interface{ CloseIdleConnections() }); ok {
		c.CloseIdleConnections()
	}
}

type drainOnClose struct{ io.ReadCloser }

func (b drainOnClose) Close() error {
	io.Copy(io.Discard, io.LimitReader(b.ReadCloser, maxDrain))
	return b.ReadCloser.Close()
}

// signingTransport signs each request as the server's own.
type signingTransport struct {
	p    *peerClient
	next http.RoundTripper
}

func (t signingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set(headerForwarded, t.p.self)
	if err := t.p.signForwarded(r, fsm.Actor{}, t.p.now()); err != nil {
		return nil, err
	}
	return t.next.RoundTrip(r)
}

func (p *peerClient) close() { p.hc.CloseIdleConnections() }

// sign returns the signature of a request body under the cluster secret.
func (p *peerClient) sign(body []byte) string {
	m := hmac.New(sha256.New, p.secret)
	m.Write(body)
	return hex.EncodeToString(m.Sum(nil))
}

// post sends a signed server-to-server request.
func (p *peerClient) post(ctx context.Context, addr, path string, body []byte) (*http.Response, error) {
	u := p.base(addr)
	u.Path = path
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u.String(), bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set(headerSignature, p.sign(body))
	req.Header.Set(headerForwarded, p.self)
	return p.hc.Do(req)
}

// status fetches a peer's own view (/v1/internal/self).
func (p *peerClient) status(ctx context.Context, addr string) (*selfStatus, error) {
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	u := p.base(addr)
	u.Path = "/v1/internal/self"
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set(headerForwarded, p.self)
	if err := p.signForwarded(req, fsm.Actor{}, p.now()); err != nil {
		return nil, err
	}
	resp, err := p.hc.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s answered %s", addr, resp.Status)
	}
	var st selfStatus
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		return nil, fmt.Errorf("decode status from %s: %w", addr, err)
	}
	return &st, nil
}

// apply has the leader at addr commit an encoded command
// (/v1/internal/apply). A rejection by the state machine is an *api.Error
// in ApplyResult.Err.
func (p *peerClient) apply(ctx context.Context, addr string, t fsm.MessageType, data []byte) (fsm.ApplyResult, uint64, error) {
	resp, err := p.post(ctx, addr, "/v1/internal/apply", data)
	if err != nil {
		return fsm.ApplyResult{}, 0, forwardError(addr, fmt.Sprintf("forward %s to the leader", t), err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if resp.StatusCode != http.StatusOK {
		return fsm.ApplyResult{}, 0, leaderRefusal(resp, body)
	}
	var ar applyResponse
	if err := json.Unmarshal(body, &ar); err != nil {
		return fsm.ApplyResult{}, 0, &OutcomeUnknownError{Err: fmt.Errorf("decode leader's answer: %w", err)}
	}
	return ar.result(), ar.Index, nil
}

// forwardError is the error of a request to the leader at addr that got
// no answer: nothing was written if it could not connect, and the outcome
// is unknown otherwise.
func forwardError(addr, what string, err error) error {
	var op *net.OpError
	if errors.As(err, &op) && op.Op == "dial" {
		return fmt.Errorf("%w: cannot reach the leader at %s: %v", ErrNoLeader, addr, err)
	}
	return &OutcomeUnknownError{Err: fmt.Errorf("%s: %w", what, err)}
}

// leaderRefusal is the error of a leader's answer other than 200 OK with
// the body it came with: the *api.Error it holds, or an unknown outcome.
func leaderRefusal(resp *http.Response, body []byte) error {
	e := &api.Error{StatusCode: resp.StatusCode}
	if json.Unmarshal(body, e) != nil || e.Message == "" {
		return &OutcomeUnknownError{Err: fmt.Errorf("leader answered %s: %s", resp.Status, bytes.TrimSpace(body))}
	}
	return e
}

// result is the ApplyResult an answer of the leader says, a rejection by
// the state machine as an *api.Error in Err.
func (ar *applyResponse) result() fsm.ApplyResult {
	res := fsm.ApplyResult{Revision: ar.Revision, Unchanged: ar.Unchanged}
	if ar.Rejected != nil {
		ar.Rejected.StatusCode = statusOf(ar.Rejected.Code)
		res.Err = ar.Rejected
	}
	return res
}

// report hands a device's report to its owner at addr
// (/v1/internal/report) and returns once the owner has made it durable.
func (p *peerClient) report(ctx context.Context, owner, addr string, fr *forwardedReport) error {
	body, err := json.Marshal(fr)
	if err != nil {
		return err
	}
	resp, err := p.post(ctx, addr, "/v1/internal/report", body)
	if err != nil {
		return fmt.Errorf("forward report of %s to its owner %s: %w", fr.Device, owner, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		return fmt.Errorf("owner %s refused the report of %s: %s: %s", owner, fr.Device, resp.Status, bytes.TrimSpace(msg))
	}
	return nil
}

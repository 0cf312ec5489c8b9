package api

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// Client talks to one Meteor server's HTTP API. Any server works: writes
// and linearizable reads are forwarded to the leader.
type Client struct {
	base string
	hc   *http.Client
	// RetryNoLeader, when positive, retries requests answered with
	// no_leader (which certainly had no effect) for up to this long.
	RetryNoLeader time.Duration
	// Token, if set, is the secret sent as "Authorization: Bearer" on
	// every request (servers with the ACL on require one).
	Token string
}

// NewClient returns a client for the server at addr ("host:port" or a URL).
func NewClient(addr string, hc *http.Client) *Client {
	if hc == nil {
		hc = &http.Client{Timeout: 30 * time.Second}
	}
	return &Client{base: BaseURL(addr), hc: hc, RetryNoLeader: 10 * time.Second}
}

// BaseURL returns the base URL of the server's HTTP API at addr
// ("host:port" or a URL): http:// unless addr names a scheme, no trailing
// slash. Append a path such as "/v1/intents" to it.
func BaseURL(addr string) string {
	if !strings.Contains(addr, "://") {
		addr = "http://" + addr
	}
	return strings.TrimRight(addr, "/")
}

// Addr returns the server's base URL.
func (c *Client) Addr() string { return c.base }

// ReadOptions select a read's consistency and revision.
type ReadOptions struct {
	// Stale serves the read from the contacted server's replica, without
	// confirming leadership: faster, may lag.
	Stale bool
	// Revision, when non-zero, asks what the intent said at that revision.
	Revision uint64
	// WaitIndex, when non-zero, makes the read a blocking one: the server
	// answers once its state has passed this Raft index (the Index of an
	// earlier answer), or after Wait (zero: 5 minutes; at most 10).
	WaitIndex uint64
	Wait      time.Duration
}

func (o ReadOptions) query() url.Values {
	q := url.Values{}
	if o.Stale {
		q.Set("stale", "true")
	}
	if o.Revision != 0 {
		q.Set("revision", strconv.FormatUint(o.Revision, 10))
	}
	if o.WaitIndex != 0 {
		q.Set("index", strconv.FormatUint(o.WaitIndex, 10))
		if o.Wait > 0 {
			q.Set("wait", o.Wait.String())
		}
	}
	return q
}

// DefaultBlockingWait is how long a blocking read waits when ReadOptions
// sets WaitIndex without Wait.
const DefaultBlockingWait = 5 * time.Minute

// httpClientFor returns the HTTP client for a request with query q: one
// whose timeout leaves room for the server's wait when q makes the read
// a blocking one.
func (c *Client) httpClientFor(q url.Values) *http.Client {
	if !q.Has("index") || c.hc.Timeout == 0 {
		return c.hc
	}
	wait := DefaultBlockingWait
	if d, err := time.ParseDuration(q.Get("wait")); err == nil {
		wait = d
	}
	hc := *c.hc
	hc.Timeout += wait
	return &hc
}

// PutIntent writes an intent document (YAML or JSON). ifMatch, when
// non-nil, makes the write conditional on the intent's current revision
// (0: only if it does not exist).
func (c *Client) PutIntent(ctx context.Context, name string, doc []byte, ifMatch *uint64) (*WriteResponse, error) {
	h := http.Header{"Content-Type": {"application/yaml"}}
	if json.Valid(doc) {
		h.Set("Content-Type", "application/json")
	}
	if ifMatch != nil {
		h.Set("If-Match", strconv.Quote(strconv.FormatUint(*ifMatch, 10)))
	}
	var out WriteResponse
	err := c.do(ctx, http.MethodPut, "/v1/intents/"+url.PathEscape(name), nil, h, doc, &out)
	return &out, err
}

// DeleteIntent deletes an intent.
func (c *Client) DeleteIntent(ctx context.Context, name string, ifMatch *uint64) (*WriteResponse, error) {
	h := http.Header{}
	if ifMatch != nil {
		h.Set("If-Match", strconv.Quote(strconv.FormatUint(*ifMatch, 10)))
	}
	var out WriteResponse
	err := c.do(ctx, http.MethodDelete, "/v1/intents/"+url.PathEscape(name), nil, h, nil, &out)
	return &out, err
}

// GetIntent reads one intent.
func (c *Client) GetIntent(ctx context.Context, name string, o ReadOptions) (*IntentResponse, error) {
	var out IntentResponse
	err := c.do(ctx, http.MethodGet, "/v1/intents/"+url.PathEscape(name), o.query(), nil, nil, &out)
	return &out, err
}

// ListIntents lists the current intents.
func (c *Client) ListIntents(ctx context.Context, o ReadOptions) (*IntentList, error) {
	var out IntentList
	err := c.do(ctx, http.MethodGet, "/v1/intents", o.query(), nil, nil, &out)
	return &out, err
}

// Members lists the cluster's servers.
func (c *Client) Members(ctx context.Context) (*Members, error) {
	var out Members
	err := c.do(ctx, http.MethodGet, "/v1/cluster/members", nil, nil, nil, &out)
	return &out, err
}

// Leave asks the contacted server to leave the cluster for good and shut
// down. It returns once the server has started leaving.
func (c *Client) Leave(ctx context.Context) error {
	return c.do(ctx, http.MethodPost, "/v1/cluster/leave", nil, nil, nil, nil)
}

// Health reads the contacted server's health. A server without a leader
// answers 503 with its figures: Health returns them with an *Error saying
// why it is unhealthy.
func (c *Client) Health(ctx context.Context) (*Health, error) {
	status, data, err := c.roundTrip(ctx, http.MethodGet, "/v1/health", nil, nil, nil)
	if err != nil {
		return &Health{}, err
	}
	var out Health
	if err := json.Unmarshal(data, &out); err != nil {
		return &out, decodeError(http.MethodGet, "/v1/health", status, data)
	}
	if status != http.StatusOK {
		return &out, &Error{StatusCode: status, Code: CodeNoLeader, Message: out.Message, RetryAfterMS: 1000}
	}
	return &out, nil
}

func (c *Client) do(ctx context.Context, method, path string, q url.Values, h http.Header, body []byte, out any) error {
	deadline := time.Now().Add(c.RetryNoLeader)
	backoff := 100 * time.Millisecond
	for {
		err := c.once(ctx, method, path, q, h, body, out)
		var apiErr *Error
		if !errors.As(err, &apiErr) || !apiErr.Retryable() || time.Now().Add(backoff).After(deadline) {
			return err
		}
		wait := backoff
		if apiErr.RetryAfterMS > 0 {
			wait = time.Duration(apiErr.RetryAfterMS) * time.Millisecond
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(wait):
		}
		backoff = min(backoff*2, 2*time.Second)
	}
}

func (c *Client) once(ctx context.Context, method, path string, q url.Values, h http.Header, body []byte, out any) error {
	status, data, err := c.roundTrip(ctx, method, path, q, h, body)
	if err != nil {
		return err
	}
	if status >= 300 {
		return decodeError(method, path, status, data)
	}
	if out == nil {
		return nil
	}
	if err := json.Unmarshal(data, out); err != nil {
		return fmt.Errorf("%s %s: decode response: %w", method, path, err)
	}
	return nil
}

// roundTrip sends one request and returns the status and body.
func (c *Client) roundTrip(ctx context.Context, method, path string, q url.Values, h http.Header, body []byte) (int, []byte, error) {
	u := c.base + path
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, u, rd)
	if err != nil {
		return 0, nil, fmt.Errorf("%s %s: %w", method, path, err)
	}
	for k, v := range h {
		req.Header[k] = v
	}
	if c.Token != "" {
		req.Header.Set("Authorization", "Bearer "+c.Token)
	}
	resp, err := c.httpClientFor(q).Do(req)
	if err != nil {
		return 0, nil, fmt.Errorf("%s %s: %w (is a Meteor server listening at %s? set --addr or METEOR_ADDR)", method, path, err, c.base)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return 0, nil, fmt.Errorf("%s %s: read response: %w", method, path, err)
	}
	return resp.StatusCode, data, nil
}

func jsonBody(v any) ([]byte, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("encode request: %w", err)
	}
	return b, nil
}

func decodeError(method, path string, status int, data []byte) *Error {
	e := &Error{StatusCode: status}
	if json.Unmarshal(data, e) != nil || e.Message == "" {
		e.Code, e.Message = CodeInternal, fmt.Sprintf("%s %s: %d: %s", method, path, status, strings.TrimSpace(string(data)))
		if status == http.StatusBadRequest && bytes.Contains(data, []byte("HTTP request to an HTTPS server")) {
			e.Code, e.Message = CodeBadRequest, fmt.Sprintf("%s %s: the server speaks TLS: give the cluster CA (--ca-cert or METEOR_CACERT, ca.pem from 'meteor tls init'), or an https:// address", method, path)
		}
	}
	return e
}

// ListDevices lists the devices the cluster knows.
func (c *Client) ListDevices(ctx context.Context, o ReadOptions) (*DeviceList, error) {
	return c.QueryDevices(ctx, DeviceQuery{}, o)
}

// DeviceQuery selects devices for GET /v1/devices: every field set is a
// filter a listed device passes (docs/api.md names each). Empty fields
// select everything.
type DeviceQuery struct {
	Intent        string // targeted by the intent's current revision
	IntentState   string // with Intent: converged, not-converged, not-released, failed, drifted, progressing, pending (comma-separated)
	Resource      string // holds or is meant to hold this resource key
	AppliedDigest string // with Resource: a hex prefix of the applied digest, or "none"
	Status        string // comma-separated device statuses
	Reason        string // a substring of the status reason
	Selector      string // k=v,k2=v2 on the labels the device is selected by
	Region        string
	Server        string // the server it is (or was last) connected to
	Owner         string
	Connected     *bool
	Converged     *bool
	Retried       *bool // a resource (of Intent or Resource, if given) took more than one attempt
	AckedBelow    uint64
	AckedRevision *uint64
	Limit         int
	After         string
	// GroupBy counts the matching devices per value instead of listing
	// them: status, intent-state, applied-digest, acked-revision,
	// desired-revision, region, server, owner or connected.
	GroupBy string
	// Sort orders the list: "traffic" lists the heaviest devices of the
	// day first (bytes sent and received), with Limit the top ones; empty
	// is ID order.
	Sort string
}

func (q DeviceQuery) values(v url.Values) {
	set := func(k, s string) {
		if s != "" {
			v.Set(k, s)
		}
	}
	set("intent", q.Intent)
	set("intent_state", q.IntentState)
	set("resource", q.Resource)
	set("applied_digest", q.AppliedDigest)
	set("status", q.Status)
	set("reason", q.Reason)
	set("selector", q.Selector)
	set("region", q.Region)
	set("server", q.Server)
	set("owner", q.Owner)
	set("after", q.After)
	set("group_by", q.GroupBy)
	set("sort", q.Sort)
	for k, b := range map[string]*bool{"connected": q.Connected, "converged": q.Converged, "retried": q.Retried} {
		if b != nil {
			v.Set(k, strconv.FormatBool(*b))
		}
	}
	if q.AckedBelow != 0 {
		v.Set("acked_below", strconv.FormatUint(q.AckedBelow, 10))
	}
	if q.AckedRevision != nil {
		v.Set("acked_revision", strconv.FormatUint(*q.AckedRevision, 10))
	}
	if q.Limit > 0 {
		v.Set("limit", strconv.Itoa(q.Limit))
	}
}

// QueryDevices lists the devices a query selects, or counts them per
// value of its GroupBy.
func (c *Client) QueryDevices(ctx context.Context, q DeviceQuery, o ReadOptions) (*DeviceList, error) {
	var out DeviceList
	v := o.query()
	q.values(v)
	err := c.do(ctx, http.MethodGet, "/v1/devices", v, nil, nil, &out)
	return &out, err
}

// GetDevice reads one device with its resources' three states.
func (c *Client) GetDevice(ctx context.Context, id string, o ReadOptions) (*Device, error) {
	var out Device
	err := c.do(ctx, http.MethodGet, "/v1/devices/"+url.PathEscape(id), o.query(), nil, nil, &out)
	return &out, err
}

// Ownership reads how devices are spread over the servers.
func (c *Client) Ownership(ctx context.Context) (*Ownership, error) {
	var out Ownership
	err := c.do(ctx, http.MethodGet, "/v1/cluster/ownership", nil, nil, nil, &out)
	return &out, err
}

// Timeline reads a device's status transitions.
func (c *Client) Timeline(ctx context.Context, id string, o ReadOptions) (*Timeline, error) {
	var out Timeline
	err := c.do(ctx, http.MethodGet, "/v1/devices/"+url.PathEscape(id)+"/timeline", o.query(), nil, nil, &out)
	return &out, err
}

// IntentProgress reads where the devices an intent targets are with it.
func (c *Client) IntentProgress(ctx context.Context, name string, o ReadOptions) (*IntentProgress, error) {
	var out IntentProgress
	err := c.do(ctx, http.MethodGet, "/v1/intents/"+url.PathEscape(name)+"/progress", o.query(), nil, nil, &out)
	return &out, err
}

// Status reads the fleet summary.
func (c *Client) Status(ctx context.Context, o ReadOptions) (*FleetStatus, error) {
	var out FleetStatus
	err := c.do(ctx, http.MethodGet, "/v1/status", o.query(), nil, nil, &out)
	return &out, err
}

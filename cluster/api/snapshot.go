package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
)

// SnapshotContentType is the media type of a backup (GET /v1/snapshot).
const SnapshotContentType = "application/vnd.meteor.snapshot"

// RestoreResult answers PUT /v1/snapshot.
type RestoreResult struct {
	// Index and Revision are the restored state's, as every server holds
	// it once it installed the restore; BackupIndex and BackupRevision
	// are the file's.
	Index          uint64 `json:"index"`
	Revision       uint64 `json:"revision"`
	BackupIndex    uint64 `json:"backup_index"`
	BackupRevision uint64 `json:"backup_revision"`
	// SHA256 is the file's state checksum.
	SHA256 string `json:"sha256"`
	// RestoreSeq and RestoreID name the restore (every server's health
	// reports them once it installed it).
	RestoreSeq uint64 `json:"restore_seq"`
	RestoreID  string `json:"restore_id"`
	Leader     string `json:"leader"`
	// Servers are the servers of the Raft configuration, each with
	// whether it installed the restore; Complete says all did.
	Servers  []RestoredServer `json:"servers"`
	Complete bool             `json:"complete"`
	// Carried is what the restore kept of the state it replaced.
	Carried RestoreCarried `json:"carried"`
}

// RestoreCarried is what a restore kept of the state it replaced, so
// that an older backup does not undo a revocation (docs/security.md,
// "Restoring a backup").
type RestoreCarried struct {
	// SameCluster says the replaced state was a later state of the
	// backup's cluster, Basis why or why not. Only then are tokens
	// revoked since left out.
	SameCluster bool   `json:"same_cluster"`
	Basis       string `json:"basis"`
	// BackupCredentials says the backup's tokens were restored as they
	// were, on request (RestoreOptions.RestoreCredentials).
	BackupCredentials bool `json:"backup_credentials,omitempty"`
	// KeptRevoked are the devices revoked in the replaced state and not
	// in the backup: they stay revoked.
	KeptRevoked []string `json:"kept_revoked,omitempty"`
	// TokensNotRestored are the accessors of the backup's tokens revoked
	// since: they stay revoked.
	TokensNotRestored []string `json:"tokens_not_restored,omitempty"`
	// TokenUsesKept are the accessors of the backup's enroll tokens
	// whose uses since were kept.
	TokenUsesKept []string `json:"token_uses_kept,omitempty"`
}

// RestoredServer is one server's part in a restore.
type RestoredServer struct {
	ID       string `json:"id"`
	Restored bool   `json:"restored"`
	// Error says why the server did not confirm it (down, unreachable,
	// still installing).
	Error string `json:"error,omitempty"`
}

// RestoreOptions tune PUT /v1/snapshot.
type RestoreOptions struct {
	// MinRevision, if set, is the least revision the restored state takes
	// (it takes at least one above the backup's and the replaced state's
	// anyway): see docs/operations.md, "Restoring into a new cluster".
	MinRevision uint64
	// RestoreCredentials brings the backup's tokens back as the backup
	// holds them, those revoked since included. By default a restore over
	// a later state of the same cluster leaves them out, and keeps the
	// uses enroll tokens counted since. Revoked devices stay revoked
	// either way.
	RestoreCredentials bool
}

// streaming returns a copy of the client whose requests have no overall
// timeout (the context bounds them): a snapshot can take longer than
// the usual 30 s to stream.
func (c *Client) streaming() *http.Client {
	hc := *c.hc
	hc.Timeout = 0
	return &hc
}

// SaveSnapshot streams a backup of the whole state from the server into w
// (GET /v1/snapshot) and returns the bytes written. The state is read on
// the leader after a check that it is current, or with stale from the
// contacted server's replica. The caller checks what it wrote
// (snapshot.Verify) before calling it a backup: a connection cut short
// leaves a truncated file.
func (c *Client) SaveSnapshot(ctx context.Context, w io.Writer, stale bool) (int64, error) {
	q := url.Values{}
	if stale {
		q.Set("stale", "true")
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.base+"/v1/snapshot?"+q.Encode(), nil)
	if err != nil {
		return 0, err
	}
	c.authorize(req)
	resp, err := c.streaming().Do(req)
	if err != nil {
		return 0, fmt.Errorf("GET /v1/snapshot: %w (is a Meteor server listening at %s? set --addr or METEOR_ADDR)", err, c.base)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		data, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		return 0, decodeError(http.MethodGet, "/v1/snapshot", resp.StatusCode, data)
	}
	n, err := io.Copy(w, resp.Body)
	if err != nil {
		return n, fmt.Errorf("GET /v1/snapshot: after %d bytes: %w", n, err)
	}
	return n, nil
}

// RestoreSnapshot sends a backup to the leader and restores it over the
// whole cluster (PUT /v1/snapshot). Only the leader restores: the client
// asks the contacted server who leads and sends the file there, again if
// leadership moved meanwhile, so body must read from the start each time
// (an *os.File or a bytes.Reader). A result whose Complete is false is
// returned with an error naming the servers that did not confirm.
func (c *Client) RestoreSnapshot(ctx context.Context, body io.ReadSeeker, o RestoreOptions) (*RestoreResult, error) {
	leader, err := c.leaderAddr(ctx)
	if err != nil {
		return nil, err
	}
	var last error
	for range 3 {
		if _, err := body.Seek(0, io.SeekStart); err != nil {
			return nil, err
		}
		res, err := c.restoreAt(ctx, leader, body, o)
		var apiErr *Error
		if errors.As(err, &apiErr) && apiErr.Code == CodeNotLeader && apiErr.LeaderAddr != "" {
			last, leader = err, apiErr.LeaderAddr
			continue
		}
		return res, err
	}
	return nil, last
}

// leaderAddr returns the HTTP address of the leader the contacted server
// knows.
func (c *Client) leaderAddr(ctx context.Context) (string, error) {
	m, err := c.Members(ctx)
	if err != nil {
		return "", err
	}
	for _, s := range m.Members {
		if s.ID == m.Leader && s.HTTPAddr != "" {
			return s.HTTPAddr, nil
		}
	}
	return "", &Error{StatusCode: http.StatusServiceUnavailable, Code: CodeNoLeader, RetryAfterMS: 1000,
		Message: fmt.Sprintf("the server at %s knows no leader (or not its address): a restore needs one", c.base)}
}

func (c *Client) restoreAt(ctx context.Context, addr string, body io.Reader, o RestoreOptions) (*RestoreResult, error) {
	base := c.base
	if i := strings.Index(base, "://"); i >= 0 {
		base = base[:i+3] + addr
	}
	q := url.Values{}
	if o.MinRevision > 0 {
		q.Set("min_revision", strconv.FormatUint(o.MinRevision, 10))
	}
	if o.RestoreCredentials {
		q.Set("restore_credentials", "true")
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, base+"/v1/snapshot?"+q.Encode(), io.NopCloser(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", SnapshotContentType)
	c.authorize(req)
	resp, err := c.streaming().Do(req)
	if err != nil {
		return nil, fmt.Errorf("PUT %s/v1/snapshot: %w", base, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return nil, fmt.Errorf("PUT /v1/snapshot: read response: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, decodeError(http.MethodPut, "/v1/snapshot", resp.StatusCode, data)
	}
	var res RestoreResult
	if err := json.Unmarshal(data, &res); err != nil {
		return nil, fmt.Errorf("PUT /v1/snapshot: decode response: %w", err)
	}
	if !res.Complete {
		var missing []string
		for _, s := range res.Servers {
			if !s.Restored {
				missing = append(missing, fmt.Sprintf("%s (%s)", s.ID, s.Error))
			}
		}
		return &res, fmt.Errorf("restored on %s and a majority, but not confirmed by %s: they install it from the leader when they can (check with 'meteor health' on each)", res.Leader, strings.Join(missing, ", "))
	}
	return &res, nil
}

func (c *Client) authorize(req *http.Request) {
	if c.Token != "" {
		req.Header.Set("Authorization", "Bearer "+c.Token)
	}
}

package api

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/meteor-edge/meteor/fsm/intent"
)

// ApplyIntent writes doc (YAML or JSON) as intent name and keeps trying
// through elections, lost leaders and dropped connections until the write
// is committed, the server refuses it for good (an invalid document, for
// instance), or ctx ends.
//
// It never applies the document twice. Every attempt is conditional on
// the revision read just before it (If-Match), and after an attempt whose
// outcome is unknown (unknown_outcome, timeout, a broken connection) the
// intent is read again before anything is retried: if it now holds this
// document at a newer revision, the earlier attempt took effect and its
// revision is returned (with Index 0: the index of that write is not
// known). A conflict means another writer changed the intent in between;
// the next attempt is conditional on the revision it wrote.
//
// onRetry, if non-nil, is called with each error that is retried.
func (c *Client) ApplyIntent(ctx context.Context, name string, doc []byte, onRetry func(error)) (*WriteResponse, error) {
	want, err := intent.Parse(doc)
	if err != nil {
		return nil, fmt.Errorf("apply %s: %w", name, err)
	}
	wantJSON, err := json.Marshal(want)
	if err != nil {
		return nil, fmt.Errorf("apply %s: %w", name, err)
	}
	backoff := 100 * time.Millisecond
	retry := func(err error) error {
		if onRetry != nil {
			onRetry(err)
		}
		t := time.NewTimer(backoff)
		defer t.Stop()
		backoff = min(backoff*2, 2*time.Second)
		select {
		case <-ctx.Done():
			return fmt.Errorf("apply %s: %w (last error: %v)", name, ctx.Err(), err)
		case <-t.C:
			return nil
		}
	}
	for {
		// What the intent is now: the condition of the next attempt, and
		// whether an earlier attempt already wrote this document.
		var rev uint64
		cur, err := c.GetIntent(ctx, name, ReadOptions{})
		var apiErr *Error
		switch {
		case err == nil:
			rev = cur.Revision
		case errors.As(err, &apiErr) && apiErr.Code == CodeNotFound:
			rev = 0
		case ctx.Err() != nil:
			return nil, fmt.Errorf("apply %s: %w", name, err)
		default:
			if rerr := retry(err); rerr != nil {
				return nil, rerr
			}
			continue
		}
		res, err := c.PutIntent(ctx, name, doc, &rev)
		if err == nil {
			return res, nil
		}
		if ctx.Err() != nil {
			return nil, fmt.Errorf("apply %s: %w", name, err)
		}
		if errors.As(err, &apiErr) {
			switch apiErr.Code {
			case CodeBadRequest, CodeNotFound, CodeInternal:
				return nil, fmt.Errorf("apply %s: %w", name, err)
			}
		}
		// no_leader, shutting_down, conflict, unknown_outcome, timeout or
		// a transport error: read again (and find an earlier success)
		// before the next attempt.
		if ok, got := c.holds(ctx, name, rev, wantJSON); ok {
			return got, nil
		}
		if rerr := retry(err); rerr != nil {
			return nil, rerr
		}
	}
}

// holds reports whether intent name, no longer at revision before, now
// holds the document whose normalised JSON is want, and at which revision.
func (c *Client) holds(ctx context.Context, name string, before uint64, want []byte) (bool, *WriteResponse) {
	cur, err := c.GetIntent(ctx, name, ReadOptions{})
	if err != nil || cur.Intent == nil || cur.Revision == before {
		return false, nil
	}
	got, err := json.Marshal(cur.Intent)
	if err != nil || !bytes.Equal(got, want) {
		return false, nil
	}
	return true, &WriteResponse{Name: name, Revision: cur.Revision}
}

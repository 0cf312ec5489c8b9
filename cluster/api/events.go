package api

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// EventQuery selects the events of a stream (GET /v1/events).
type EventQuery struct {
	// Kinds are the kinds to send (docs/api.md lists them); empty: all.
	Kinds []string
	// Intent keeps the events of this intent and of the devices its
	// current revision targets.
	Intent string
	Device string
	// After is the ID of the last event seen: the stream starts after it.
	// Empty: with the next event.
	After string
	// Kept asks only for the events the server keeps (after After), not
	// the ones to come: Events returns io.EOF once they are read.
	Kept bool
}

// eventIdle is how long a stream may stay silent before the client takes
// the connection for dead: servers send a keep-alive every 15 s.
const eventIdle = 45 * time.Second

// Events reads the event stream, calling fn with each event (reset events
// too) until ctx ends, fn returns an error, or the connection fails. It
// returns the ID of the last event seen, for EventQuery.After on the next
// call. An error the server answered with is an *Error; with Kept, the
// end of the events kept is io.EOF.
func (c *Client) Events(ctx context.Context, q EventQuery, fn func(Event) error) (last string, err error) {
	last = q.After
	v := url.Values{}
	if len(q.Kinds) > 0 {
		v.Set("kind", strings.Join(q.Kinds, ","))
	}
	if q.Intent != "" {
		v.Set("intent", q.Intent)
	}
	if q.Device != "" {
		v.Set("device", q.Device)
	}
	if q.Kept {
		v.Set("follow", "false")
	}
	u := c.base + "/v1/events"
	if len(v) > 0 {
		u += "?" + v.Encode()
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return last, err
	}
	req.Header.Set("Accept", "text/event-stream")
	if last != "" {
		req.Header.Set("Last-Event-ID", last)
	}
	if c.Token != "" {
		req.Header.Set("Authorization", "Bearer "+c.Token)
	}
	hc := *c.hc
	hc.Timeout = 0 // a stream lasts; the idle watchdog below ends a dead one
	resp, err := hc.Do(req)
	if err != nil {
		return last, fmt.Errorf("GET /v1/events: %w (is a Meteor server listening at %s?)", err, c.base)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		data, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		return last, decodeError(http.MethodGet, "/v1/events", resp.StatusCode, data)
	}
	idle := time.AfterFunc(eventIdle, cancel)
	defer idle.Stop()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	var id, data string
	var hasData bool
	for sc.Scan() {
		idle.Reset(eventIdle)
		line := sc.Text()
		if line == "" {
			// Dispatch: an ID alone moves the position past events the
			// server's filter skipped.
			if id != "" {
				last = id
			}
			if hasData {
				var e Event
				if err := json.Unmarshal([]byte(data), &e); err != nil {
					return last, fmt.Errorf("GET /v1/events: event %s: %w", id, err)
				}
				if err := fn(e); err != nil {
					return last, err
				}
			}
			id, data, hasData = "", "", false
			continue
		}
		field, value, _ := strings.Cut(line, ":")
		value = strings.TrimPrefix(value, " ")
		switch field {
		case "id":
			id = value
		case "data":
			if hasData {
				data += "\n"
			}
			data, hasData = data+value, true
		}
	}
	err = sc.Err()
	if err == nil {
		if q.Kept {
			return last, io.EOF
		}
		err = io.ErrUnexpectedEOF
	}
	if ctx.Err() != nil && errors.Is(err, context.Canceled) {
		err = fmt.Errorf("GET /v1/events: nothing heard for %s: %w", eventIdle, err)
	}
	return last, fmt.Errorf("GET /v1/events: stream ended: %w", err)
}

// FollowEvents reads the event stream like Events, reconnecting after a
// dropped connection (waiting up to 10 s between attempts) and resuming
// after the last event seen, so no event is lost while the server keeps
// it (a reset event says when it did not). It returns when ctx ends, fn
// fails, or the server refuses the request.
func (c *Client) FollowEvents(ctx context.Context, q EventQuery, fn func(Event) error, onRetry func(error)) error {
	backoff := 500 * time.Millisecond
	for {
		var called bool
		var fnErr error
		last, err := c.Events(ctx, q, func(e Event) error {
			called = true
			fnErr = fn(e)
			return fnErr
		})
		q.After = last
		switch {
		case fnErr != nil:
			return fnErr
		case ctx.Err() != nil:
			return ctx.Err()
		case errors.Is(err, io.EOF): // q.Kept: all read
			return nil
		}
		if apiErr := (*Error)(nil); errors.As(err, &apiErr) && apiErr.StatusCode < 500 {
			return err
		}
		if called {
			backoff = 500 * time.Millisecond
		}
		if onRetry != nil {
			onRetry(err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 10*time.Second)
	}
}

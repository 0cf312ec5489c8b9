package cluster

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/go-memdb"

	"github.com/meteor-edge/meteor/cluster/api"
	"github.com/meteor-edge/meteor/fsm"
	"github.com/meteor-edge/meteor/fsm/intent"
)

// The event stream (GET /v1/events) sends the replica's events (fsm
// events.go) as Server-Sent Events. It reads the local replica: events
// come in log order as this server applies them, and since every server
// gives an event the same ID, a client that loses its connection resumes
// on any server with Last-Event-ID. Blocking reads (?index=N&wait=D) hold
// a read until the replica has applied past N.

// eventSource is the replica's window of recent events (*fsm.FSM).
type eventSource interface {
	EventsAfter(id fsm.EventID, max int) fsm.EventBatch
	LastEventID() fsm.EventID
}

// eventKeepAlive is how often an idle stream sends a keep-alive, so
// proxies keep the connection open and a dead client is noticed.
const eventKeepAlive = 15 * time.Second

// eventWriteTimeout bounds a write to a stream's client.
const eventWriteTimeout = 30 * time.Second

// eventBatchMax bounds the events taken from the window at once.
const eventBatchMax = 512

// eventFilter selects the events a stream sends.
type eventFilter struct {
	kinds  map[string]bool // nil: every kind
	intent string
	device string
	// once sends the events kept and ends the response (?follow=false).
	once bool
}

func parseEventQuery(q url.Values, lastEventID string, now fsm.EventID) (*eventFilter, fsm.EventID, error) {
	f := &eventFilter{}
	start := now
	for key, vals := range q {
		if len(vals) != 1 {
			return nil, start, badRequest("query parameter %s given %d times; give it once (several kinds: comma-separated)", key, len(vals))
		}
		v := strings.TrimSpace(vals[0])
		var err error
		switch key {
		case "kind":
			f.kinds, err = parseSet(v, fsm.EventKinds)
		case "intent":
			f.intent = v
		case "device":
			f.device = v
		case "follow":
			var follow bool
			follow, err = strconv.ParseBool(v)
			f.once = !follow
		case "after":
			if lastEventID == "" {
				start, err = fsm.ParseEventID(v)
			}
		default:
			return nil, start, badRequest("unknown query parameter %q: GET /v1/events takes kind, intent, device, after and follow (see docs/api.md)", key)
		}
		if err != nil {
			return nil, start, badRequest("query parameter %s=%q: %v", key, v, err)
		}
	}
	if lastEventID != "" {
		id, err := fsm.ParseEventID(lastEventID)
		if err != nil {
			return nil, start, badRequest("header Last-Event-ID: %v", err)
		}
		start = id
	}
	return f, start, nil
}

// matcher answers for one batch whether events pass the filter. A device
// event passes an intent filter when the device is one the intent's
// current revision targets (by the state at the batch, as GET /v1/devices
// with ?intent would say).
type matcher struct {
	f        *eventFilter
	h        *httpAPI
	read     *fsm.Read
	irec     *fsm.IntentRecord
	targeted map[string]bool
}

func (h *httpAPI) newMatcher(f *eventFilter) *matcher {
	m := &matcher{f: f, h: h}
	if f.intent != "" {
		m.read = h.state.Read()
		m.irec, _ = m.read.Intent(nil, f.intent) // deleted or not yet written: no device is targeted
		m.targeted = map[string]bool{}
	}
	return m
}

func (m *matcher) match(e *fsm.Event) bool {
	f := m.f
	switch {
	case f.kinds != nil && !f.kinds[e.Kind]:
		return false
	case f.device != "" && e.Device != f.device:
		return false
	case f.intent == "" || e.Intent == f.intent:
		return true
	case e.Intent != "" || e.Device == "":
		return false // another intent's event
	}
	for key := range e.Resources {
		if name, _, ok := intent.SplitResourceKey(key); ok && name == f.intent {
			return true
		}
	}
	if m.irec == nil {
		return false
	}
	t, ok := m.targeted[e.Device]
	if !ok {
		rec, err := m.read.Device(nil, e.Device)
		t = err == nil && rec != nil && m.irec.Intent.Matches(m.h.cfg.recordSelection(rec))
		m.targeted[e.Device] = t
	}
	return t
}

func eventJSON(e *fsm.Event) api.Event {
	out := api.Event{
		ID: e.ID.String(), Kind: e.Kind, Action: e.Action, Index: e.ID.Index, Time: time.Unix(0, e.Time).UTC(),
		Intent: e.Intent, Revision: e.Revision, Wave: e.Wave, Device: e.Device, Status: e.Status, Reason: e.Reason,
		Message: e.Message, Devices: e.Devices, Resources: e.Resources, Actor: e.Actor,
	}
	if c := e.Counts; c != nil {
		out.Counts = &api.RolloutCounts{Targeted: c.Targeted, Released: c.Released, Acknowledged: c.Acked, Converged: c.Converged, Failed: c.Failed}
	}
	return out
}

// handleEvents streams events as Server-Sent Events until the client goes
// away or the server stops (with ?follow=false, until it has sent the
// events kept). It starts after Last-Event-ID, else after ?after, else
// with the next event.
func (h *httpAPI) handleEvents(w http.ResponseWriter, r *http.Request) {
	f, last, err := parseEventQuery(r.URL.Query(), r.Header.Get("Last-Event-ID"), h.state.LastEventID())
	if err != nil {
		writeError(w, err.(*api.Error))
		return
	}
	rc := http.NewResponseController(w)
	hd := w.Header()
	hd.Set("Content-Type", "text/event-stream")
	hd.Set("Cache-Control", "no-store")
	hd.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	// write sends and flushes; a client that takes nothing for a while
	// loses the stream (and resumes), rather than hold the server up.
	write := func(b []byte) bool {
		_ = rc.SetWriteDeadline(time.Now().Add(eventWriteTimeout))
		_, err := w.Write(b)
		return err == nil && rc.Flush() == nil
	}
	// A reconnecting EventSource waits retry ms; the first comment names
	// where the stream starts, for people reading it with curl.
	if !write(fmt.Appendf(nil, "retry: 2000\n: events from %s after %s\n\n", h.cfg.NodeID, last)) {
		return
	}
	keep := h.clock.NewTicker(eventKeepAlive)
	defer keep.Stop()
	sent := last // the ID the client last saw in an id: line
	var buf []byte
	for {
		b := h.state.EventsAfter(last, eventBatchMax)
		buf = buf[:0]
		if b.Gap {
			// Say so, and look again from the horizon: the window may
			// have moved on meanwhile, which is a gap of its own.
			reset := api.Event{ID: b.Horizon.String(), Kind: api.EventReset, Index: b.Horizon.Index, Time: h.clock.Now().UTC(),
				Message: fmt.Sprintf("events after %s are no longer kept by %s: read the state again; the stream goes on after %s", last, h.cfg.NodeID, b.Horizon)}
			if !write(appendEvent(buf, &reset)) {
				return
			}
			last, sent = b.Horizon, b.Horizon
			continue
		}
		m := h.newMatcher(f)
		for i := range b.Events {
			e := &b.Events[i]
			last = e.ID
			if m.match(e) {
				ev := eventJSON(e)
				buf = appendEvent(buf, &ev)
				sent = e.ID
			}
		}
		if len(buf) > 0 && !write(buf) {
			return
		}
		if len(b.Events) == eventBatchMax {
			continue
		}
		if f.once {
			return
		}
		select {
		case <-r.Context().Done():
			return
		case <-h.done:
			return
		case <-b.More:
		case <-keep.C():
			// An id-only message moves the client's Last-Event-ID past
			// events the filter skipped, so a resume need not scan them
			// again (or find them dropped from the window).
			line := ": keep-alive\n\n"
			if sent != last {
				line, sent = "id: "+last.String()+"\n\n", last
			}
			if !write([]byte(line)) {
				return
			}
		}
	}
}

// appendEvent appends one Server-Sent Event: its ID, kind and JSON data.
func appendEvent(buf []byte, e *api.Event) []byte {
	data, _ := json.Marshal(e) // plain data: cannot fail
	buf = append(buf, "id: "...)
	buf = append(buf, e.ID...)
	buf = append(buf, "\nevent: "...)
	buf = append(buf, e.Kind...)
	buf = append(buf, "\ndata: "...)
	buf = append(buf, data...)
	return append(buf, "\n\n"...)
}

// maxBlockingWait bounds ?wait on a blocking read; DefaultBlockingWait is
// used when ?index is given without ?wait.
const (
	maxBlockingWait     = 10 * time.Minute
	defaultBlockingWait = 5 * time.Minute
)

// blockingRead parses ?index and ?wait. ok is false when the read does
// not block.
func blockingRead(q url.Values) (index uint64, wait time.Duration, ok bool, err error) {
	iv, wv := q.Get("index"), q.Get("wait")
	if iv == "" {
		if wv != "" {
			return 0, 0, false, badRequest("query parameter wait=%q needs index: a blocking read waits for the state to pass ?index=N (the %s of an earlier answer)", wv, api.HeaderIndex)
		}
		return 0, 0, false, nil
	}
	if index, err = strconv.ParseUint(iv, 10, 64); err != nil {
		return 0, 0, false, badRequest("query parameter index=%q: want the %s of an earlier answer, a whole number", iv, api.HeaderIndex)
	}
	wait = defaultBlockingWait
	if wv != "" {
		if wait, err = time.ParseDuration(wv); err != nil || wait <= 0 || wait > maxBlockingWait {
			return 0, 0, false, badRequest("query parameter wait=%q: want a duration such as 30s, at most %s", wv, maxBlockingWait)
		}
	}
	return index, wait, true, nil
}

// waitIndex returns once the replica has applied a command past index, or
// after wait, or when the request or the server ends.
func (h *httpAPI) waitIndex(ctx context.Context, index uint64, wait time.Duration) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	t := h.clock.NewTimer(wait)
	defer t.Stop()
	go func() {
		select {
		case <-t.C():
		case <-h.done:
		case <-ctx.Done():
		}
		cancel()
	}()
	h.waiting.Add(1)
	defer h.waiting.Add(-1)
	for {
		ws := memdb.NewWatchSet()
		if h.state.Read().WatchIndex(ws) > index || ws.WatchCtx(ctx) != nil {
			return
		}
	}
}

// untilDone returns ctx, cancelled too when the server stops: for a
// request forwarded to the leader that may wait there (a blocking read),
// so that stopping this server does not wait for it.
func (h *httpAPI) untilDone(ctx context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(ctx)
	go func() {
		select {
		case <-h.done:
			cancel()
		case <-ctx.Done():
		}
	}()
	return ctx, cancel
}

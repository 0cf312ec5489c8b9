package cluster

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/meteor-edge/meteor/cluster/ui"
)

// scriptedEvents is a server for the console's live updates: it serves
// the console and /v1/status (counting the reads), and answers each
// connection to /v1/events as the test scripts it.
type scriptedEvents struct {
	t     *testing.T
	token string

	mu      sync.Mutex
	reads   int           // guarded by mu: GET /v1/status answered
	readsCh chan struct{} // signalled after each
	conns   []http.Header // guarded by mu: the headers of each /v1/events request
	connsCh chan struct{}
	// script[i] answers the i-th connection; nil: 404.
	script []func(w http.ResponseWriter, flush func())
}

func (s *scriptedEvents) handler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /ui/", ui.Handler())
	mux.HandleFunc("GET /v1/status", func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		s.reads++
		n := s.reads
		s.mu.Unlock()
		select {
		case s.readsCh <- struct{}{}:
		default:
		}
		writeJSON(w, http.StatusOK, map[string]any{"revision": 1, "index": n, "devices": 0, "by_status": map[string]int{}, "intents": []any{}})
	})
	mux.HandleFunc("GET /v1/devices", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, map[string]any{"matched": 0, "groups": []any{}})
	})
	mux.HandleFunc("GET /v1/rollouts", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, map[string]any{"rollouts": []any{}})
	})
	mux.HandleFunc("GET /v1/events", func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		i := len(s.conns)
		s.conns = append(s.conns, r.Header.Clone())
		s.mu.Unlock()
		s.connsCh <- struct{}{}
		if r.Header.Get("Authorization") != "Bearer "+s.token {
			http.Error(w, `{"code":"unauthenticated","error":"no token"}`, http.StatusUnauthorized)
			return
		}
		if i >= len(s.script) || s.script[i] == nil {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(http.StatusOK)
		fl := w.(http.Flusher)
		fl.Flush()
		s.script[i](w, fl.Flush)
	})
	return mux
}

// waitReads waits until the console has read /v1/status n times in all.
func (s *scriptedEvents) waitReads(n int, why string) {
	s.t.Helper()
	deadline := time.After(15 * time.Second)
	for {
		s.mu.Lock()
		got := s.reads
		s.mu.Unlock()
		if got >= n {
			return
		}
		select {
		case <-s.readsCh:
		case <-deadline:
			s.t.Fatalf("%s: the console read the status %d times, want %d", why, got, n)
		}
	}
}

func (s *scriptedEvents) readsNow() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.reads
}

// waitConn waits for the i-th connection to /v1/events (from 0) and
// returns its headers.
func (s *scriptedEvents) waitConn(i int) http.Header {
	s.t.Helper()
	deadline := time.After(15 * time.Second)
	for {
		s.mu.Lock()
		if i < len(s.conns) {
			h := s.conns[i]
			s.mu.Unlock()
			return h
		}
		s.mu.Unlock()
		select {
		case <-s.connsCh:
		case <-deadline:
			s.t.Fatalf("the console did not connect to /v1/events a %d. time", i+1)
		}
	}
}

// TestConsoleEventStream: the console reads /v1/events with its token,
// parses the stream however it is cut into chunks (keep-alive comments,
// CRLF and LF line ends), re-reads its page on an event, resumes a dropped
// stream with Last-Event-ID, re-reads everything on a reset, and falls back
// to polling every 2 s from a server whose /v1/events answers 404.
func TestConsoleEventStream(t *testing.T) {
	browser := chromium(t)
	send := make(chan string)
	drop := make(chan struct{})
	stream := func(w http.ResponseWriter, flush func()) {
		for {
			select {
			case chunk := <-send:
				fmt.Fprint(w, chunk)
				flush()
			case <-drop:
				return
			}
		}
	}
	s := &scriptedEvents{t: t, token: "mtk_test", readsCh: make(chan struct{}, 1), connsCh: make(chan struct{}, 4),
		script: []func(http.ResponseWriter, func()){stream, stream, nil}}
	srv := httptest.NewTLSServer(s.handler())
	t.Cleanup(srv.Close)
	b := startBrowser(t, browser, [][]byte{srv.Certificate().Raw})
	b.do(chromedp.Navigate(srv.URL + "/ui/#token=" + s.token))

	if h := s.waitConn(0); h.Get("Last-Event-ID") != "" || h.Get("Accept") != "text/event-stream" {
		t.Errorf("first connection: Last-Event-ID %q, Accept %q", h.Get("Last-Event-ID"), h.Get("Accept"))
	}
	b.poll(`document.getElementById('live').dataset.mode === 'live'`, "the page live on the stream")
	// The first render, and the read once the stream is up.
	s.waitReads(2, "before any event")

	// An event cut in the middle of a line and of its data, after a
	// keep-alive, with CRLF line ends: one more read. Comments alone: none.
	before := s.readsNow()
	send <- ": keep-alive\r\n\r\nid: 41-0\r\nevent: sta"
	send <- "tus\r\ndata: {\"id\":\"41-0\",\"kind\":\"status\",\"index\":41,\"devi"
	send <- "ce\":\"d1\",\"status\":\"failed\"}\r\n\r\n"
	s.waitReads(before+1, "after a status event")
	send <- ": keep-alive\n\n"
	send <- "id: 42-3\nevent: device\ndata: {\"id\":\"42-3\",\"kind\":\"device\",\"index\":42}\n\n"
	s.waitReads(before+2, "after a device event")

	// Dropped: the console comes back with the last ID it saw.
	drop <- struct{}{}
	if h := s.waitConn(1); h.Get("Last-Event-ID") != "42-3" || h.Get("Authorization") != "Bearer "+s.token {
		t.Errorf("reconnection: Last-Event-ID %q, Authorization %q; want 42-3 and the token", h.Get("Last-Event-ID"), h.Get("Authorization"))
	}
	b.poll(`document.getElementById('live').dataset.mode === 'live'`, "the page live again")
	before = s.readsNow()
	send <- "id: 50-0\nevent: reset\ndata: {\"id\":\"50-0\",\"kind\":\"reset\",\"index\":50}\n\n"
	s.waitReads(before+1, "after a reset")

	// A server without the stream: polling.
	drop <- struct{}{}
	s.waitConn(2)
	b.poll(`document.getElementById('live').dataset.mode === 'polling'`, "the page polling")
	before = s.readsNow()
	s.waitReads(before+2, "while polling")
	b.screenshot("polling")
}

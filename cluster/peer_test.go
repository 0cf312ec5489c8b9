package cluster

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/meteor-edge/meteor/fsm"
	"github.com/meteor-edge/meteor/wire"
)

// TestPeerClientTakesTheScheme: every internal request goes to the scheme
// and through the HTTP client of the configuration, here HTTPS with the
// test server's certificate, and the signed ones carry the signature and
// this server's name.
func TestPeerClientTakesTheScheme(t *testing.T) {
	secret := []byte("a cluster secret of 32 bytes....")
	var mu sync.Mutex
	var paths []string
	ts := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		paths = append(paths, r.Method+" "+r.URL.Path)
		mu.Unlock()
		if r.Method == http.MethodPost {
			if r.Header.Get(headerForwarded) != "s1" || r.Header.Get(headerSignature) == "" {
				http.Error(w, "unsigned", http.StatusForbidden)
				return
			}
		}
		switch r.URL.Path {
		case "/v1/internal/self":
			writeJSON(w, http.StatusOK, &selfStatus{Node: "s2", LastIndex: 7})
		case "/v1/internal/apply":
			writeJSON(w, http.StatusOK, applyResponse{Revision: 3, Index: 9})
		case "/v1/internal/report":
			writeJSON(w, http.StatusOK, map[string]uint64{"seq": 1})
		default:
			http.NotFound(w, r)
		}
	}))
	defer ts.Close()
	addr := strings.TrimPrefix(ts.URL, "https://")

	cfg := DefaultConfig()
	cfg.NodeID, cfg.ClusterSecret = "s1", secret
	cfg.PeerScheme, cfg.PeerClient = "https", ts.Client()
	p := newPeerClient(&cfg)
	defer p.close()
	ctx := context.Background()

	st, err := p.status(ctx, addr)
	if err != nil {
		t.Fatal(err)
	}
	if st.Node != "s2" || st.LastIndex != 7 {
		t.Fatalf("status %+v", st)
	}
	res, index, err := p.apply(ctx, addr, fsm.PutIntentType, []byte{byte(fsm.PutIntentType)})
	if err != nil || res.Revision != 3 || index != 9 {
		t.Fatalf("apply: revision %d, index %d, %v", res.Revision, index, err)
	}
	rep := &wire.Report{Seq: 1}
	if err := p.report(ctx, "s2", addr, &forwardedReport{Device: "d", Report: rep.Append(nil)}); err != nil {
		t.Fatal(err)
	}
	if got := p.api(addr).Addr(); got != ts.URL {
		t.Fatalf("API client at %s, want %s", got, ts.URL)
	}
	want := []string{"GET /v1/internal/self", "POST /v1/internal/apply", "POST /v1/internal/report"}
	mu.Lock()
	diff := cmp.Diff(want, paths)
	mu.Unlock()
	if diff != "" {
		t.Fatalf("requests (-want +got):\n%s", diff)
	}

	// Without a scheme the requests are plain HTTP, which a TLS server
	// refuses.
	plain := newPeerClient(&Config{NodeID: "s1"})
	defer plain.close()
	if got := plain.base(addr).String(); got != "http://"+addr {
		t.Fatalf("default base %s", got)
	}
	if _, err := plain.status(ctx, addr); err == nil {
		t.Fatal("plain HTTP to a TLS server succeeded")
	}
}

// testPeerClient is server s1's peer client, with a cluster secret and,
// if set, its TLS material; it is closed when the test ends.
func testPeerClient(t *testing.T, tls *PeerTLS) *peerClient {
	cfg := DefaultConfig()
	cfg.NodeID, cfg.ClusterSecret, cfg.PeerTLS = "s1", []byte("a cluster secret of 32 bytes...."), tls
	p := newPeerClient(&cfg)
	t.Cleanup(p.close)
	return p
}

// TestPeerClientReusesConnections: requests between servers whose answers
// the caller does not read to the end (a decoded status, a report's
// acknowledgement) still leave their connection for the next request.
// Over TLS each new connection is a handshake on both servers: without
// it, a busy fleet's report forwarding cost the servers most of their CPU.
func TestPeerClientReusesConnections(t *testing.T) {
	var mu sync.Mutex
	conns := 0
	ts := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/v1/internal/self":
			writeJSON(w, http.StatusOK, &selfStatus{Node: "s2"})
		default:
			w.Write([]byte(strings.Repeat("acknowledged\n", 100)))
		}
	}))
	ts.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			mu.Lock()
			conns++
			mu.Unlock()
		}
	}
	ts.Start()
	defer ts.Close()
	addr := strings.TrimPrefix(ts.URL, "http://")

	p := testPeerClient(t, nil)
	ctx := context.Background()
	for range 10 {
		if _, err := p.status(ctx, addr); err != nil {
			t.Fatal(err)
		}
		if err := p.report(ctx, "s2", addr, &forwardedReport{Device: "d1"}); err != nil {
			t.Fatal(err)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if conns != 1 {
		t.Fatalf("20 requests took %d connections, want 1", conns)
	}
}

// TestPeerClientBurstSharesAConnection: a burst of forwarded requests
// held open at once, as a server's reports are after a change until their
// owner commits them, goes over the one HTTP/2 connection between two
// servers: past the server's stream limit the client would open a
// connection, and a TLS handshake on both sides, for each further 250.
func TestPeerClientBurstSharesAConnection(t *testing.T) {
	_, peer := peerPKI(t)
	const burst = 1000
	var mu sync.Mutex
	conns, arrived := 0, 0
	all := make(chan struct{})
	srv := &http.Server{HTTP2: apiHTTP2(), Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v1/internal/report" {
			mu.Lock()
			if arrived++; arrived == burst {
				close(all)
			}
			mu.Unlock()
			select {
			case <-all:
			case <-r.Context().Done():
				return
			}
		}
		w.Write([]byte("acknowledged\n"))
	}), ConnState: func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			mu.Lock()
			conns++
			mu.Unlock()
		}
	}}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(tls.NewListener(ln, peer("s2").apiServerConfig()))
	defer srv.Close()

	p := testPeerClient(t, peer("s1"))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// The first request settles on HTTP/2; the burst follows it.
	if _, err := p.post(ctx, ln.Addr().String(), "/v1/internal/self", nil); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for i := range burst {
		wg.Go(func() {
			if err := p.report(ctx, "s2", ln.Addr().String(), &forwardedReport{Device: fmt.Sprintf("d%d", i)}); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	mu.Lock()
	defer mu.Unlock()
	if conns != 1 {
		t.Fatalf("%d requests, %d of them at once, took %d connections, want 1", burst+1, burst, conns)
	}
}

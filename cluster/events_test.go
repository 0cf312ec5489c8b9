package cluster

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/meteor-edge/meteor/chaos"
	"github.com/meteor-edge/meteor/cluster/api"
	"github.com/meteor-edge/meteor/fsm"
)

// streamLog collects a stream's events.
type streamLog struct {
	mu      sync.Mutex
	events  []api.Event
	retries int
}

func (l *streamLog) add(e api.Event) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.events = append(l.events, e)
	return nil
}

func (l *streamLog) retried(error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.retries++
}

func (l *streamLog) snapshot() ([]api.Event, int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.events), l.retries
}

func (l *streamLog) waitLen(t *testing.T, n int) {
	t.Helper()
	waitFor(t, 60*time.Second, func() error {
		if evs, _ := l.snapshot(); len(evs) < n {
			return fmt.Errorf("%d of %d events", len(evs), n)
		}
		return nil
	})
}

func ids(evs []api.Event) []string {
	var out []string
	for _, e := range evs {
		out = append(out, e.ID+" "+e.Kind+" "+e.Intent)
	}
	return out
}

// TestEventStreamResumesAfterDrop follows the event stream of a follower
// through a TCP proxy that resets the connection in the middle of thirty
// intent writes and refuses new ones while ten of them commit: the client
// reconnects, resumes with Last-Event-ID, and ends with exactly the events
// an unbroken stream on the leader saw, none lost, none twice. A stream
// started on the third server after the fifteenth event's ID continues
// from there.
func TestEventStreamResumesAfterDrop(t *testing.T) {
	c := newTestCluster(t, 3, nil)
	leader := c.waitLeader()
	fol := c.follower()
	var third *Server
	for _, s := range c.alive() {
		if s != leader && s != fol {
			third = s
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	proxy, err := chaos.NewTCPProxy("127.0.0.1:0", fol.HTTPAddr(), chaos.TCPProfile{}, 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	go proxy.Run(ctx)
	defer proxy.Close()

	direct := client(leader)
	direct.Token = c.AdminToken()
	viaProxy := api.NewClient("https://"+proxy.Addr().String(), operatorClient(fol))
	viaProxy.Token = c.AdminToken()
	q := api.EventQuery{Kinds: []string{fsm.KindIntent}, After: "0"}
	var ref, cut streamLog
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	wg.Go(func() { _ = direct.FollowEvents(ctx, q, ref.add, ref.retried) })
	wg.Go(func() { _ = viaProxy.FollowEvents(ctx, q, cut.add, cut.retried) })

	write := func(from, to int) {
		for i := from; i < to; i++ {
			c.propose(simpleIntent(fmt.Sprintf("ev-%02d", i), "v"))
		}
	}
	write(0, 10)
	cut.waitLen(t, 10)
	proxy.Partition(true) // resets the stream; new connections are refused
	write(10, 20)
	ref.waitLen(t, 20)
	proxy.Partition(false)
	write(20, 30)
	ref.waitLen(t, 30)
	cut.waitLen(t, 30)

	want, refRetries := ref.snapshot()
	got, retries := cut.snapshot()
	if retries == 0 {
		t.Fatal("the proxied stream never reconnected: the cut was not exercised")
	}
	if refRetries != 0 {
		t.Logf("the direct stream reconnected %d times", refRetries)
	}
	if d := cmp.Diff(ids(want), ids(got)); d != "" {
		t.Fatalf("the resumed stream differs from the unbroken one (-unbroken +resumed):\n%s", d)
	}
	for i, e := range want {
		if name := fmt.Sprintf("ev-%02d", i); e.Intent != name || e.Action != "put" || e.Revision == 0 {
			t.Fatalf("event %d = %+v, want the put of %s", i, e, name)
		}
	}

	// Resume on the third server after the fifteenth event.
	other := client(third)
	other.Token = c.AdminToken()
	var rest []api.Event
	errEnough := errors.New("enough")
	_, err = other.Events(ctx, api.EventQuery{Kinds: []string{fsm.KindIntent}, After: want[14].ID}, func(e api.Event) error {
		rest = append(rest, e)
		if len(rest) == 15 {
			return errEnough
		}
		return nil
	})
	if !errors.Is(err, errEnough) {
		t.Fatalf("stream on %s: %v", third.ID(), err)
	}
	if d := cmp.Diff(ids(want[15:]), ids(rest)); d != "" {
		t.Fatalf("resumed on %s after %s (-want +got):\n%s", third.ID(), want[14].ID, d)
	}
}

// TestEventStreamRefusals: bad parameters are 400s naming them, and the
// stream needs a token like every read.
func TestEventStreamRefusals(t *testing.T) {
	c := newACLCluster(t, 1, nil)
	s := c.waitLeader()
	for _, tc := range []struct {
		query, lastID string
		want          int
	}{
		{"kind=status,bogus", "", http.StatusBadRequest},
		{"colour=red", "", http.StatusBadRequest},
		{"after=x", "", http.StatusBadRequest},
		{"", "12-x", http.StatusBadRequest},
		{"kind=status&kind=drift", "", http.StatusBadRequest},
	} {
		req, _ := http.NewRequest(http.MethodGet, s.HTTPURL()+"/v1/events?"+tc.query, nil)
		req.Header.Set("Authorization", "Bearer "+c.admin)
		if tc.lastID != "" {
			req.Header.Set("Last-Event-ID", tc.lastID)
		}
		resp, err := operatorClient(s).Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != tc.want {
			t.Errorf("?%s Last-Event-ID %q: %d, want %d", tc.query, tc.lastID, resp.StatusCode, tc.want)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	anon := client(s)
	_, err := anon.Events(ctx, api.EventQuery{}, func(api.Event) error { return nil })
	var apiErr *api.Error
	if !errors.As(err, &apiErr) || apiErr.StatusCode != http.StatusUnauthorized {
		t.Fatalf("stream without a token: %v, want 401", err)
	}
}

// TestEventFilters checks which events pass each filter on a known state:
// two intents, a device each intent targets, a status transition and a
// drift for each.
func TestEventFilters(t *testing.T) {
	p := newLocalProposer(t)
	cfg := DefaultConfig()
	cfg.TrustReportedLabels = true
	h := &httpAPI{cfg: &cfg, state: p.state}
	commit := func(typ fsm.MessageType, req any) {
		t.Helper()
		if res, _, err := applied(context.Background(), p, typ, req); err != nil {
			t.Fatalf("%s: %v %+v", typ, err, res)
		}
	}
	net := simpleIntent("net", "v1")
	us := simpleIntent("us-only", "v1")
	us.Selector = map[string]string{"region": "us"}
	commit(fsm.PutIntentType, &fsm.PutIntentRequest{Intent: net, Time: 1})
	commit(fsm.PutIntentType, &fsm.PutIntentRequest{Intent: us, Time: 2})
	commit(fsm.DeviceSessionBatchType, &fsm.DeviceSessionBatchRequest{Sessions: []fsm.DeviceSessionRequest{
		{ID: "dev-eu", Labels: map[string]string{"region": "eu"}, SessionID: "a", Server: "s1", Connected: true, Time: 3},
		{ID: "dev-us", Labels: map[string]string{"region": "us"}, SessionID: "b", Server: "s1", Connected: true, Time: 3},
	}})
	commit(fsm.StatusBatchType, &fsm.StatusBatchRequest{Owner: "s1", Transitions: []fsm.StatusTransition{
		{Device: "dev-eu", Seq: 1, Time: 4, Revision: 3, Status: "drifted", ResourceStates: map[string]string{"net/motd": "drifted"}},
		{Device: "dev-us", Seq: 1, Time: 4, Revision: 3, Status: "unreachable", Reason: "no contact"},
	}})
	evs := p.state.EventsAfter(fsm.EventID{}, 1000).Events
	pass := func(query string) []string {
		t.Helper()
		q, err := url.ParseQuery(query)
		if err != nil {
			t.Fatal(err)
		}
		f, _, err := parseEventQuery(q, "", fsm.EventID{})
		if err != nil {
			t.Fatalf("?%s: %v", query, err)
		}
		m := h.newMatcher(f)
		var out []string
		for i := range evs {
			if e := &evs[i]; m.match(e) {
				out = append(out, e.Kind+"/"+e.Action+" "+e.Intent+e.Device)
			}
		}
		return out
	}
	for _, tc := range []struct {
		query string
		want  []string
	}{
		{"intent=net", []string{"intent/put net", "device/registered dev-eu", "session/connected dev-eu", "status/ dev-eu", "drift/drifted dev-eu"}},
		{"intent=us-only&kind=status", []string{"status/ dev-us"}},
		{"device=dev-us", []string{"device/registered dev-us", "session/connected dev-us", "status/ dev-us"}},
		{"kind=drift,intent", []string{"intent/put net", "intent/put us-only", "drift/drifted dev-eu"}},
		{"intent=gone", nil},
	} {
		if d := cmp.Diff(tc.want, pass(tc.query)); d != "" {
			t.Errorf("?%s (-want +got):\n%s", tc.query, d)
		}
	}
}

// TestBlockingRead: ?index=N&wait=D holds a read until the replica has
// applied past N, then answers with the new state and index; with nothing
// new it answers after D with the same index. Bad values are 400s.
func TestBlockingRead(t *testing.T) {
	c := newTestCluster(t, 3, nil)
	c.propose(simpleIntent("motd", "one"))
	c.waitConverged()
	fol := c.follower()
	cl := client(fol)
	cl.Token = c.AdminToken()
	ctx := context.Background()
	first, err := cl.GetIntent(ctx, "motd", api.ReadOptions{Stale: true})
	if err != nil {
		t.Fatal(err)
	}
	index := func(path string) uint64 {
		t.Helper()
		req, _ := http.NewRequest(http.MethodGet, fol.HTTPURL()+path, nil)
		req.Header.Set("Authorization", "Bearer "+c.AdminToken())
		resp, err := operatorClient(fol).Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("GET %s: %d", path, resp.StatusCode)
		}
		n, _ := strconv.ParseUint(resp.Header.Get(api.HeaderIndex), 10, 64)
		return n
	}
	now := index("/v1/intents/motd?stale=true")

	// Nothing changes: the answer comes after the wait, at the same index
	// (unless the cluster committed something of its own meanwhile).
	start := time.Now()
	got := index(fmt.Sprintf("/v1/intents/motd?stale=true&index=%d&wait=300ms", now))
	if waited := time.Since(start); got == now && waited < 300*time.Millisecond || got < now {
		t.Fatalf("idle blocking read answered at index %d after %s; want %d after its wait of 300ms", got, waited, now)
	}
	now = got

	// A write lands while the read waits, on the follower (stale) and
	// through the leader (linearizable).
	leader := c.waitLeader()
	for _, stale := range []bool{true, false} {
		o := api.ReadOptions{Stale: stale, WaitIndex: now, Wait: time.Minute}
		waiter := fol // a stale read waits on the follower, a linearizable one on the leader
		if !o.Stale {
			waiter = leader
		}
		done := make(chan *api.IntentResponse, 1)
		go func() {
			r, err := cl.GetIntent(ctx, "motd", o)
			if err != nil {
				t.Error(err)
			}
			done <- r
		}()
		waitFor(t, 20*time.Second, func() error {
			if n := waiter.api.waiting.Load(); n != 1 {
				return fmt.Errorf("%d blocking reads waiting on %s", n, waiter.ID())
			}
			return nil
		})
		c.propose(simpleIntent("motd", fmt.Sprintf("stale=%v", o.Stale)))
		r := <-done
		if r == nil {
			t.FailNow()
		}
		if r.Revision <= first.Revision {
			t.Fatalf("blocking read (%+v) answered revision %d, want the write after %d", o, r.Revision, first.Revision)
		}
		first, now = r, index("/v1/intents/motd?stale=true")
	}

	for _, q := range []string{"index=x", "index=1&wait=forever", "index=1&wait=11m", "wait=5s", "index=-1"} {
		req, _ := http.NewRequest(http.MethodGet, fol.HTTPURL()+"/v1/status?stale=true&"+q, nil)
		req.Header.Set("Authorization", "Bearer "+c.AdminToken())
		resp, err := operatorClient(fol).Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest {
			t.Errorf("?%s: %d, want 400", q, resp.StatusCode)
		}
	}
}

// TestEventStreamResets: a client whose place the server no longer keeps
// gets a reset naming where the stream goes on, then every event after
// it, none twice.
func TestEventStreamResets(t *testing.T) {
	state, err := fsm.New(fsm.Config{EventLimit: 10})
	if err != nil {
		t.Fatal(err)
	}
	p := &localProposer{state: state}
	for i := range 30 {
		if _, _, err := applied(context.Background(), p, fsm.PutIntentType, &fsm.PutIntentRequest{Intent: simpleIntent("motd", fmt.Sprint(i)), Time: int64(i + 1)}); err != nil {
			t.Fatal(err)
		}
	}
	cfg := DefaultConfig()
	h := &httpAPI{cfg: &cfg, state: state, clock: SystemClock{}}
	srv := httptest.NewServer(h.handler())
	defer srv.Close()
	var got []string
	_, err = api.NewClient(srv.URL, nil).Events(context.Background(), api.EventQuery{After: "5-0", Kept: true}, func(e api.Event) error {
		got = append(got, e.ID+" "+e.Kind)
		return nil
	})
	if !errors.Is(err, io.EOF) {
		t.Fatal(err)
	}
	want := []string{"20-0 reset"}
	for i := 21; i <= 30; i++ {
		want = append(want, fmt.Sprintf("%d-0 intent", i))
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Fatalf("a stream resumed after 5-0 of a window of the last 10 (-want +got):\n%s", d)
	}
}

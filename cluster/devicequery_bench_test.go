package cluster

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"runtime"
	"strconv"
	"testing"
	"time"

	"github.com/meteor-edge/meteor/fsm"
	"github.com/meteor-edge/meteor/scheduler"
)

// BenchmarkDeviceQueries answers the fleet questions of GET /v1/devices
// on a replica of METEOR_BENCH_DEVICES devices (default 100,000) in three
// regions, where an intent targets the eu third: 1 % of them fail its
// apply, 2.5 % took three attempts and 2 % are out of contact. Each query is timed against its peer
// measured in the same run: the sweep an operator needed before queries
// existed, one GET /v1/devices/{id} per targeted device (served in
// process, so without the network's round trips it is the cheapest such
// sweep can be). It prints a table; run it with make bench-queries. There
// is no Raft here (one replica in process), so no election can happen.
func BenchmarkDeviceQueries(b *testing.B) {
	n := 100000
	if v := os.Getenv("METEOR_BENCH_DEVICES"); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil {
			b.Fatal(err)
		}
	}
	regions := []string{"eu", "us", "apac"}
	start := time.Now()
	r := newRolloutRig(b, n, func(i int) map[string]string {
		return map[string]string{"region": regions[i%3], "site-type": "store"}
	})
	r.fleet.behave = func(device string, _ *scheduler.Resource) (bool, string, string) {
		if id, _ := strconv.Atoi(device[len("dev-"):]); id%100 == 1 {
			return false, "unknown", "exit status 1"
		}
		return true, "ok", ""
	}
	r.fleet.attempts = map[string]uint32{}
	for i, id := range r.fleet.ids {
		if i%40 == 3 {
			r.fleet.attempts[id] = 3
		}
	}
	r.put(netIntent("v1", nil))
	r.fleet.react()
	var gone []fsm.DeviceSessionRequest
	var unreachable []fsm.StatusTransition
	for i, id := range r.fleet.ids {
		if i%50 == 7 {
			gone = append(gone, fsm.DeviceSessionRequest{ID: id, SessionID: "s-" + id, Server: "s1", Connected: false, Time: 3})
			unreachable = append(unreachable, fsm.StatusTransition{Device: id, Time: 4, Status: scheduler.StatusUnreachable, Reason: "no contact for 9m (default allows 5m)"})
		}
	}
	r.fleet.commit(fsm.DeviceSessionBatchType, &fsm.DeviceSessionBatchRequest{Sessions: gone})
	r.fleet.commit(fsm.StatusBatchType, &fsm.StatusBatchRequest{Owner: "s1", Transitions: unreachable})
	built := time.Since(start)

	h := r.api()
	handler := h.handler()
	get := func(path string) int {
		w := httptest.NewRecorder()
		handler.ServeHTTP(w, httptest.NewRequest(http.MethodGet, path, nil))
		if w.Code != http.StatusOK {
			b.Fatalf("GET %s: %d %s", path, w.Code, w.Body)
		}
		return w.Body.Len()
	}
	timeIt := func(runs int, f func()) time.Duration {
		runtime.GC()
		t0 := time.Now()
		for range runs {
			f()
		}
		return time.Since(t0) / time.Duration(runs)
	}

	// The peer: one read per device the intent targets.
	var targeted []string
	for i, id := range r.fleet.ids {
		if i%3 == 0 {
			targeted = append(targeted, id)
		}
	}
	sweep := timeIt(1, func() {
		for _, id := range targeted {
			get("/v1/devices/" + id + "?stale=true")
		}
	})

	queries := []struct{ what, query string }{
		{"which devices are unreachable", "status=unreachable&limit=100"},
		{"which missed the update (not converged on net)", "intent=net&intent_state=not-converged&limit=100"},
		{"which retried (took more than one attempt)", "intent=net&retried=true&limit=100"},
		{"split by applied digest of net/policy", "intent=net&resource=net/policy&group_by=applied-digest"},
		{"devices by acknowledged revision", "group_by=acked-revision"},
		{"unreachable in eu, first page", "region=eu&status=unreachable&limit=50"},
		{"failed on net, first page", "intent=net&intent_state=failed&limit=50"},
	}
	fmt.Printf("\nGET /v1/devices on %d devices (replica built in %s; %d targeted by net; GOMAXPROCS %d)\n", n, built.Round(time.Millisecond), len(targeted), runtime.GOMAXPROCS(0))
	fmt.Printf("peer: %d GET /v1/devices/{id}, one per targeted device, in process: %s\n\n", len(targeted), sweep.Round(time.Millisecond))
	fmt.Printf("%-50s %12s %10s %12s\n", "question", "per query", "bytes", "sweep/query")
	for _, q := range queries {
		var size int
		per := timeIt(3, func() { size = get("/v1/devices?stale=true&" + q.query) })
		fmt.Printf("%-50s %12s %10d %11.1fx\n", q.what, per.Round(100*time.Microsecond), size, float64(sweep)/float64(per))
	}
	// The one look at the whole fleet, GET /v1/status: every intent's
	// progress, each counted over every device it targets; computed
	// each time, then served again as while nothing is applied, then
	// computed again after 1 % of the devices' records changed, as
	// between two polls during a change.
	status := func(forget bool) func() {
		return func() {
			if forget {
				h.fleet.mu.Lock()
				h.fleet.last = nil
				h.fleet.mu.Unlock()
			}
			w := httptest.NewRecorder()
			handler.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/v1/status?stale=true", nil))
			if w.Code != http.StatusOK {
				b.Fatalf("GET /v1/status: %d %s", w.Code, w.Body)
			}
		}
	}
	per := timeIt(3, status(true))
	fmt.Printf("%-50s %12s %10s %11.1fx\n", "the fleet at one look (GET /v1/status)", per.Round(100*time.Microsecond), "", float64(sweep)/float64(per))
	per = timeIt(3, status(false))
	fmt.Printf("%-50s %12s %10s %11.1fx\n", "the same, nothing applied since (served again)", per.Round(10*time.Microsecond), "", float64(sweep)/float64(per))
	var again time.Duration
	for round := range 3 {
		// Their owner commits the same status again: new records, the
		// same counts.
		read := r.p.state.Read()
		var trs []fsm.StatusTransition
		for i, id := range r.fleet.ids {
			if i%100 == 11+round {
				rec, err := read.Device(nil, id)
				if err != nil {
					b.Fatal(err)
				}
				trs = append(trs, fsm.StatusTransition{Device: id, Time: int64(10 + round), Status: rec.Status, Reason: rec.StatusReason, LastSeen: int64(10 + round)})
			}
		}
		r.fleet.commit(fsm.StatusBatchType, &fsm.StatusBatchRequest{Owner: "s1", Transitions: trs})
		again += timeIt(1, status(false))
	}
	per = again / 3
	fmt.Printf("%-50s %12s %10s %11.1fx\n", "the same, 1 % of the records changed since", per.Round(100*time.Microsecond), "", float64(sweep)/float64(per))
	fmt.Println("elections: 0 (one replica in process, no Raft)")
}

package main

import (
	"encoding/base64"
	"encoding/json"
	"io"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/meteor-edge/meteor/fsm/intent"
)

func TestIntentDocIsExactSizeAndValid(t *testing.T) {
	for _, keys := range []int{1, 10, 10000, 123456} {
		for _, i := range []int{0, keys / 2, keys - 1} {
			name := keyName(i, keys)
			for _, size := range []int{docOverhead(name) + 1, 200, 512, 4096} {
				var versions []string
				for v := range docVersions {
					doc, err := intentDoc(name, v, size)
					if err != nil {
						t.Fatalf("intentDoc(%q, %d, %d): %v", name, v, size, err)
					}
					if len(doc) != size {
						t.Errorf("intentDoc(%q, %d, %d) is %d bytes", name, v, size, len(doc))
					}
					in, err := intent.Parse(doc)
					if err != nil {
						t.Fatalf("intentDoc(%q, %d, %d) does not parse: %v\n%s", name, v, size, err, doc)
					}
					if in.Name != name {
						t.Errorf("parsed name %q, want %q", in.Name, name)
					}
					versions = append(versions, string(doc))
				}
				if versions[0] == versions[1] {
					t.Errorf("intentDoc(%q, v, %d): the versions are equal", name, size)
				}
			}
		}
	}
}

func TestIntentDocTooSmall(t *testing.T) {
	name := keyName(3, 10000)
	if _, err := intentDoc(name, 0, docOverhead(name)-1); err == nil {
		t.Fatal("intentDoc below the overhead: no error")
	}
	if _, err := intentDoc(name, 1, docOverhead(name)); err == nil {
		t.Fatal("a second version without content: no error")
	}
}

func TestIntentDocsDifferByName(t *testing.T) {
	a, _ := intentDoc(keyName(1, 10000), 0, 512)
	b, _ := intentDoc(keyName(2, 10000), 0, 512)
	pa := a[len(docPrefix)+len(keyName(1, 10000))+len(docMiddle):]
	pb := b[len(docPrefix)+len(keyName(2, 10000))+len(docMiddle):]
	if string(pa) == string(pb) {
		t.Error("two names got the same payload")
	}
}

func TestKeyNamesHaveOneLength(t *testing.T) {
	if got, want := keyName(7, 10000), "bench-0007"; got != want {
		t.Errorf("keyName(7, 10000) = %q, want %q", got, want)
	}
	if got, want := keyName(0, 1), "bench-0"; got != want {
		t.Errorf("keyName(0, 1) = %q, want %q", got, want)
	}
}

func TestClientKeysAreDisjointAndInRange(t *testing.T) {
	for _, tc := range []struct{ clients, keys int }{{1, 10}, {16, 10000}, {64, 10000}, {64, 64}, {3, 10}} {
		owner := map[int]int{}
		for c := range tc.clients {
			for j := range 3 * tc.keys {
				k := clientKey(c, tc.clients, j, tc.keys)
				if k < 0 || k >= tc.keys {
					t.Fatalf("clients %d keys %d: client %d request %d got key %d", tc.clients, tc.keys, c, j, k)
				}
				if o, ok := owner[k]; ok && o != c {
					t.Fatalf("clients %d keys %d: key %d used by clients %d and %d", tc.clients, tc.keys, k, o, c)
				}
				owner[k] = c
			}
		}
		if want := tc.keys / tc.clients * tc.clients; len(owner) != want {
			t.Errorf("clients %d keys %d: %d keys used, want %d", tc.clients, tc.keys, len(owner), want)
		}
	}
}

func TestEtcdBodyCarriesTheDocument(t *testing.T) {
	w, err := etcdWorkload([]string{"http://a", "http://b"}, "/v3/kv/put", 100, 512)
	if err != nil {
		t.Fatal(err)
	}
	m, err := meteorWorkload([]string{"http://a", "http://b"}, 100, 512)
	if err != nil {
		t.Fatal(err)
	}
	var req etcdPutRequest
	if err := json.Unmarshal(w.bodies[1][42], &req); err != nil {
		t.Fatal(err)
	}
	key, _ := base64.StdEncoding.DecodeString(req.Key)
	val, _ := base64.StdEncoding.DecodeString(req.Value)
	if string(key) != etcdKeyPrefix+"bench-42" {
		t.Errorf("key %q", key)
	}
	if string(val) != string(m.bodies[1][42]) {
		t.Errorf("etcd value differs from Meteor's document:\n%s\n%s", val, m.bodies[1][42])
	}
	if got, want := m.urls[1][42], "http://b/v1/intents/bench-42"; got != want {
		t.Errorf("meteor url %q, want %q", got, want)
	}
	if got, want := w.urls[0][42], "http://a/v3/kv/put"; got != want {
		t.Errorf("etcd url %q, want %q", got, want)
	}
}

func TestParseFlagsRejectsTooFewKeys(t *testing.T) {
	if _, err := parseFlags([]string{"-clients", "64", "-keys", "10"}, io.Discard); err == nil {
		t.Error("64 clients over 10 keys: no error")
	}
	if _, err := parseFlags([]string{"-doc-size", "20"}, io.Discard); err == nil {
		t.Error("20-byte documents: no error")
	}
}

func TestRatiosVerdictAndRows(t *testing.T) {
	results := []*levelResult{
		{System: "meteor", Clients: 1, WritesPerSec: 100, P99ms: 4},
		{System: "etcd", Clients: 1, WritesPerSec: 200, P99ms: 2},
		{System: "meteor", Clients: 64, WritesPerSec: 3000, P99ms: 30, ServerCPUms: 0.3, ServerCPUmsBy: map[string]float64{"meteor-1": 0.2, "meteor-2": 0.1}, Elections: 1},
		{System: "etcd", Clients: 64, WritesPerSec: 2000, P99ms: 60, ServerCPUms: 0.4},
	}
	rs := ratios(results)
	if len(rs) != 2 || rs[0].Throughput != 0.5 || rs[0].P99 != 2 || rs[1].Throughput != 1.5 || rs[1].P99 != 0.5 {
		t.Fatalf("ratios = %+v", rs)
	}
	if v := verdict(rs, results); !strings.HasPrefix(v, "writes goal MET") || !strings.Contains(v, "0.75x; goal <= 1.0x): MET") {
		t.Errorf("verdict = %q", v)
	}
	if v := verdict(rs[:1], results); !strings.HasPrefix(v, "goal not evaluated") {
		t.Errorf("verdict without 64 = %q", v)
	}
	rows := summaryRows(&report{Results: results, Ratios: rs, Versions: versionInfo{Etcd: "3.4.23"}})
	if len(rows) != 2 || rows[0].Key != "intents-writes" || rows[1].Key != "intents-cpu" {
		t.Fatalf("rows %+v", rows)
	}
	if w := rows[0]; !*w.Met || w.Ratio != "1.50 (p99 0.50)" || *w.Elections != 1 || w.PeerName != "etcd 3.4.23" {
		t.Errorf("writes row %+v", w)
	}
	if c := rows[1]; !*c.Met || c.Meteor != "0.300 ms" || c.Peer != "0.400 ms" || c.Ratio != "0.75" || !strings.Contains(c.Note, "meteor-1 0.200, meteor-2 0.100") {
		t.Errorf("cpu row %+v", c)
	}
	// Faster but with a worse p99: the writes goal is not met.
	results[2].P99ms = 90
	rs = ratios(results)
	if rows := summaryRows(&report{Results: results, Ratios: rs}); *rows[0].Met {
		t.Errorf("met with a p99 above etcd's: %+v", rows[0])
	}
}

func TestClassify(t *testing.T) {
	kind, _ := classify(&statusError{status: 503, code: "no_leader", body: "x"})
	if kind != "HTTP 503 no_leader" {
		t.Errorf("kind %q", kind)
	}
}

// TestPoolIsOneLongWindow: pooled windows give the figures of one window
// as long as all of them, not the mean of their figures.
func TestPoolIsOneLongWindow(t *testing.T) {
	ms := func(xs ...int) []time.Duration {
		var out []time.Duration
		for _, x := range xs {
			out = append(out, time.Duration(x)*time.Millisecond)
		}
		return out
	}
	fast := &window{duration: time.Second, clients: []clientResult{{latencies: ms(1, 1, 1)}, {latencies: ms(1, 1, 1)}},
		serverCPU: map[string]time.Duration{"a": 6 * time.Millisecond}, driverCPU: 3 * time.Millisecond, load1: 0.5}
	slow := &window{duration: time.Second, clients: []clientResult{{latencies: ms(9, 9), errors: map[string]int{"timeout": 2}, samples: map[string]string{"timeout": "deadline"}}},
		serverCPU: map[string]time.Duration{"a": 10 * time.Millisecond}, driverCPU: time.Millisecond, elections: 1}
	r := pool("meteor", 4, []*window{fast, slow})
	if r.Writes != 8 || r.WritesPerSec != 4 || r.WindowSec != 2 || r.Rounds != 2 {
		t.Errorf("writes %d, %v/s over %v s in %d rounds; want 8, 4/s, 2 s, 2", r.Writes, r.WritesPerSec, r.WindowSec, r.Rounds)
	}
	// 16 ms of server CPU over 8 writes, not the mean of 1 and 5 ms.
	if r.ServerCPUms != 2 || r.ServerCPUmsBy["a"] != 2 || r.DriverCPUms != 0.5 {
		t.Errorf("CPU per write: servers %v (a %v), driver %v; want 2, 2, 0.5", r.ServerCPUms, r.ServerCPUmsBy["a"], r.DriverCPUms)
	}
	if r.P50ms != 1 || r.P99ms != 9 || r.Maxms != 9 {
		t.Errorf("p50 %v, p99 %v, max %v ms; want 1, 9, 9", r.P50ms, r.P99ms, r.Maxms)
	}
	if r.Elections != 1 || r.Errors != 2 || r.ErrorKinds["timeout"] != 2 || r.Load1 != 0.5 {
		t.Errorf("elections %d, errors %d %v, load %v", r.Elections, r.Errors, r.ErrorKinds, r.Load1)
	}
	if !slices.Equal(r.RoundWritesPerSec, []float64{6, 2}) {
		t.Errorf("writes/s by round %v, want [6 2]", r.RoundWritesPerSec)
	}
	e := pool("etcd", 4, []*window{
		{duration: time.Second, clients: []clientResult{{latencies: ms(1, 1, 1)}}},
		{duration: time.Second, clients: []clientResult{{latencies: ms(1, 1, 1, 1)}}},
	})
	rs := ratios([]*levelResult{r, e})
	if len(rs) != 1 || rs[0].Throughput != 8.0/7 || !slices.Equal(rs[0].ThroughputByRound, []float64{2, 0.5}) {
		t.Errorf("ratios %+v, want 8/7 pooled and [2 0.5] by round", rs)
	}
	rs[0].Clients = goalClients
	if got, want := roundsText(paramInfo{Rounds: 2, DurationSec: 1}, rs), "2 windows of 1 s each (writes/s ratio by round 2.00 0.50)"; got != want {
		t.Errorf("roundsText %q, want %q", got, want)
	}
}

func TestSystemsTakeTurnsInAlternatingOrder(t *testing.T) {
	a, b := &system{name: "meteor"}, &system{name: "etcd"}
	var got []string
	for round := range 3 {
		for _, s := range turnOrder([]*system{a, b}, round) {
			got = append(got, s.name)
		}
	}
	if want := []string{"meteor", "etcd", "etcd", "meteor", "meteor", "etcd"}; !slices.Equal(got, want) {
		t.Errorf("order %v, want %v", got, want)
	}
}

// Meteor applies a document equal to the stored one as a no-op, so every
// write the benchmark sends must change its key's document.
func TestEveryWriteChangesTheDocument(t *testing.T) {
	m, err := meteorWorkload([]string{"http://a"}, 100, 512)
	if err != nil {
		t.Fatal(err)
	}
	last := map[int]string{}
	for j := range 1000 {
		k := clientKey(j%4, 4, j/4, m.keys())
		body := string(m.next(k))
		if prev, ok := last[k]; ok && prev == body {
			t.Fatalf("write %d of key %d sends the document its last write sent", j, k)
		}
		last[k] = body
	}
}

package agent

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestHysteresis(t *testing.T) {
	h := hysteresis{Ratio: 0.3, Margin: 5 * time.Millisecond, Probes: 3}
	ms := time.Millisecond
	for _, tc := range []struct {
		name   string
		rounds []map[string]time.Duration // "cur" is the current server
		want   []string                   // decision after each round
	}{{
		name:   "jitter never moves",
		rounds: []map[string]time.Duration{{"cur": 7 * ms, "b": 4 * ms}, {"cur": 4 * ms, "b": 6 * ms}, {"cur": 9 * ms, "b": 5 * ms}, {"cur": 6 * ms, "b": 3 * ms}},
		want:   []string{"", "", "", ""},
	}, {
		name:   "better by ratio but not margin",
		rounds: []map[string]time.Duration{{"cur": 10 * ms, "b": 6 * ms}, {"cur": 10 * ms, "b": 6 * ms}, {"cur": 10 * ms, "b": 6 * ms}},
		want:   []string{"", "", ""},
	}, {
		name:   "better by margin but not ratio",
		rounds: []map[string]time.Duration{{"cur": 60 * ms, "b": 45 * ms}, {"cur": 60 * ms, "b": 45 * ms}, {"cur": 60 * ms, "b": 45 * ms}},
		want:   []string{"", "", ""},
	}, {
		name: "clearly better three rounds in a row",
		rounds: []map[string]time.Duration{
			{"cur": 200 * ms, "b": 60 * ms, "c": 120 * ms},
			{"cur": 200 * ms, "b": 60 * ms, "c": 120 * ms},
			{"cur": 200 * ms, "b": 60 * ms, "c": 120 * ms},
		},
		want: []string{"", "", "b"},
	}, {
		name: "a bad round resets the streak",
		rounds: []map[string]time.Duration{
			{"cur": 200 * ms, "b": 60 * ms}, {"cur": 200 * ms, "b": 60 * ms}, {"cur": 200 * ms, "b": 190 * ms},
			{"cur": 200 * ms, "b": 60 * ms}, {"cur": 200 * ms, "b": 60 * ms}, {"cur": 200 * ms, "b": 60 * ms},
		},
		want: []string{"", "", "", "", "", "b"},
	}, {
		name:   "current unmeasured decides nothing",
		rounds: []map[string]time.Duration{{"b": time.Millisecond}, {"b": time.Millisecond}, {"b": time.Millisecond}},
		want:   []string{"", "", ""},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			streak := map[string]int{}
			var got []string
			for _, r := range tc.rounds {
				got = append(got, h.round("cur", r, streak))
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("decisions (-want +got):\n%s", diff)
			}
		})
	}
}

func TestRankServers(t *testing.T) {
	now := time.Unix(1000, 0)
	info := map[string]*serverInfo{
		"a:1": {rtt: 50 * time.Millisecond},
		"b:1": {rtt: 5 * time.Millisecond, penaltyUntil: now.Add(time.Second)},
		"c:1": {},
		"d:1": {rtt: 20 * time.Millisecond},
		"r:1": {},
	}
	order := []string{"a:1", "b:1", "c:1", "d:1"}
	cands, wait := rankServers(order, info, "", nil, now)
	if diff := cmp.Diff([]string{"d:1", "a:1", "c:1"}, cands); diff != "" || wait != time.Second {
		t.Errorf("ranked %v (wait %v):\n%s", cands, wait, diff)
	}
	cands, _ = rankServers(order, info, "a:1", []string{"r:1", "b:1", "d:1"}, now)
	if diff := cmp.Diff([]string{"a:1", "r:1", "d:1", "c:1"}, cands); diff != "" {
		t.Errorf("with preferred and redirects:\n%s", diff)
	}
	if cands, wait := rankServers([]string{"b:1"}, info, "", nil, now); len(cands) != 0 || wait != time.Second {
		t.Errorf("all in penalty: %v, %v", cands, wait)
	}
}

// TestProbeSchedule: rounds back off, doubling up to the cap, while no
// server looks nearer but some could not be measured; a round that
// measured every server and found none nearer goes straight to the cap;
// one that found a nearer server, or a session RTT grown clearly past its
// baseline, brings them back to the base interval.
func TestProbeSchedule(t *testing.T) {
	ms := time.Millisecond
	p := probeSchedule{base: time.Minute, max: 30 * time.Minute}
	p.reset(20 * ms)
	var got []time.Duration
	for range 7 {
		got = append(got, p.interval)
		p.after(false, false, 20*ms)
	}
	want := []time.Duration{time.Minute, 2 * time.Minute, 4 * time.Minute, 8 * time.Minute, 16 * time.Minute, 30 * time.Minute, 30 * time.Minute}
	if d := cmp.Diff(want, got); d != "" {
		t.Fatalf("intervals while a server cannot be measured (-want +got):\n%s", d)
	}
	p.after(true, true, 20*ms)
	if p.interval != time.Minute {
		t.Fatalf("after a round with a nearer contender: %v, want the base", p.interval)
	}
	p.after(false, true, 20*ms)
	if p.interval != 30*time.Minute {
		t.Fatalf("after a round that measured every server and found none nearer: %v, want the cap", p.interval)
	}
	p.after(true, true, 20*ms)
	p.after(false, false, 20*ms)
	p.after(false, false, 20*ms)
	if p.degraded(22*ms) || p.degraded(24*ms) {
		t.Fatal("jitter of the session's RTT counted as degradation")
	}
	// An idle session's RTT inflated by delayed acknowledgements (17 ms
	// over a 4.5 ms handshake, as measured on the footprint benchmark's
	// fiber path) is not degradation either.
	idle := probeSchedule{base: time.Minute, max: time.Hour}
	idle.reset(4500 * time.Microsecond)
	if idle.degraded(17 * ms) {
		t.Fatal("17 ms over a 4.5 ms baseline counted as degradation")
	}
	if !idle.degraded(200 * ms) {
		t.Fatal("200 ms over a 4.5 ms baseline is not degradation")
	}
	if !p.degraded(80 * ms) {
		t.Fatal("a session RTT of 80 ms over a 20 ms baseline is not degradation")
	}
	// A baseline taken while a busy host inflated the RTT (150 ms on a
	// 5 ms path) follows the RTT down once the host is quiet, so the path
	// turning to 200 ms is seen; readings above it never raise it.
	busy := probeSchedule{base: time.Minute, max: time.Hour}
	busy.reset(150 * ms)
	if busy.observe(200 * ms) {
		t.Fatal("200 ms over a 150 ms baseline counted as degradation")
	}
	for _, srtt := range []time.Duration{90 * ms, 30 * ms, 0, 6 * ms, 5 * ms, 12 * ms} {
		if busy.observe(srtt) {
			t.Fatalf("%v counted as degradation over a baseline of %v", srtt, busy.baseline)
		}
	}
	if busy.baseline != 5*ms {
		t.Fatalf("baseline %v after readings down to 5 ms, want 5 ms", busy.baseline)
	}
	if !busy.observe(200 * ms) {
		t.Fatal("200 ms over the 5 ms the path showed is not degradation")
	}
	if busy.baseline != 5*ms {
		t.Fatalf("a degraded reading moved the baseline to %v", busy.baseline)
	}
	slow := probeSchedule{base: time.Minute, max: time.Hour}
	slow.reset(20 * ms)
	for srtt := 20 * ms; srtt < 40*ms; srtt += 2 * ms {
		slow.observe(srtt)
	}
	if !slow.observe(40 * ms) {
		t.Fatalf("a path slowing by degrees from 20 to 40 ms dragged the baseline to %v", slow.baseline)
	}
	p.after(true, true, 80*ms) // the round the degradation brought forward
	if p.interval != time.Minute || p.baseline != 80*ms {
		t.Fatalf("after degradation: interval %v, baseline %v; want the base and the new RTT", p.interval, p.baseline)
	}
	if p.degraded(80 * ms) {
		t.Fatal("the new RTT is still taken for degradation once it is the baseline")
	}
	p.after(false, false, 80*ms)
	if p.interval != 2*time.Minute {
		t.Fatalf("degradation counted twice: %v", p.interval)
	}
}

// TestHandshakeRTTWithoutASample: quic-go's placeholder RTT (what its
// statistics hold before a sample) is not taken for a measurement.
func TestHandshakeRTTWithoutASample(t *testing.T) {
	for _, tc := range []struct {
		min, took, want time.Duration
	}{
		{5 * time.Millisecond, 12 * time.Millisecond, 5 * time.Millisecond},
		{0, 800 * time.Millisecond, 800 * time.Millisecond},
		{quicInitialRTT, 800 * time.Millisecond, 800 * time.Millisecond},
		{quicInitialRTT + time.Microsecond, 800 * time.Millisecond, quicInitialRTT + time.Microsecond},
	} {
		if got := handshakeRTT(tc.min, tc.took); got != tc.want {
			t.Errorf("handshakeRTT(%v, %v) = %v, want %v", tc.min, tc.took, got, tc.want)
		}
	}
}

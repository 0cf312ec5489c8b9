package chaos

import (
	"math"
	"net"
	"testing"
	"time"
)

func TestLinkProfileValidate(t *testing.T) {
	for _, name := range ProfileNames() {
		p, err := ProfileByName(name)
		if err != nil {
			t.Fatal(err)
		}
		if err := p.Validate(); err != nil {
			t.Errorf("profile %q: %v", name, err)
		}
	}
	if _, err := ProfileByName("dial-up"); err == nil {
		t.Error("unknown profile name accepted")
	}
	bad := []LinkProfile{
		{Loss: 1.5},
		{Corrupt: math.NaN()},
		{Delay: -time.Second},
		{BurstLen: -1},
		{OutageEvery: time.Second, OutageFor: time.Second},
		{OutageFor: time.Second},
		{Dir: DirBoth + 1},
	}
	for _, p := range bad {
		if p.Validate() == nil {
			t.Errorf("%+v validated", p)
		}
	}
}

func TestOutageWindows(t *testing.T) {
	p := LinkProfile{OutageEvery: 10 * time.Second, OutageFor: 2 * time.Second}
	for _, tc := range []struct {
		at   time.Duration
		down bool
	}{
		{0, false}, {7999 * time.Millisecond, false}, {8 * time.Second, true},
		{9999 * time.Millisecond, true}, {10 * time.Second, false}, {19 * time.Second, true},
	} {
		if got := p.inOutage(tc.at); got != tc.down {
			t.Errorf("inOutage(%v) = %v, want %v", tc.at, got, tc.down)
		}
	}
}

// runEngine pushes n datagrams through an engine with profile p and returns
// which were delivered immediately, in order.
func runEngine(t *testing.T, p LinkProfile, seed uint64, n int, log *FaultLog) []bool {
	t.Helper()
	e := newEngine(p, DirOut, seed, log, buildOptions(nil))
	defer e.close()
	delivered := make([]bool, n)
	addr := &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 9}
	for i := range n {
		out := func([]byte, net.Addr) error { delivered[i] = true; return nil }
		r := route{dir: DirOut, key: addr.String(), from: "me", to: addr.String()}
		if err := e.handle(r, []byte{byte(i)}, addr, out, false); err != nil {
			t.Fatal(err)
		}
	}
	return delivered
}

func TestBurstLossDropsRuns(t *testing.T) {
	log := NewFaultLog()
	got := runEngine(t, LinkProfile{BurstLoss: 0.03, BurstLen: 10}, 99, 2000, log)
	var runs, lost int
	for i, ok := range got {
		if !ok {
			lost++
			if i == 0 || got[i-1] {
				runs++
			}
		}
	}
	if runs == 0 {
		t.Fatal("no bursts")
	}
	mean := float64(lost) / float64(runs)
	if mean < 5 || mean > 20 {
		t.Fatalf("mean burst length %.1f over %d bursts, want about 10", mean, runs)
	}
	if log.Count(KindBurstLoss) != lost {
		t.Fatalf("logged %d burst losses, lost %d", log.Count(KindBurstLoss), lost)
	}
	// Same seed, same bursts.
	again := runEngine(t, LinkProfile{BurstLoss: 0.03, BurstLen: 10}, 99, 2000, nil)
	for i := range got {
		if got[i] != again[i] {
			t.Fatalf("datagram %d fared differently with the same seed", i)
		}
	}
}

func TestPeriodicOutageDropsEverything(t *testing.T) {
	// An outage covering all but a nanosecond of each hour: effectively down.
	log := NewFaultLog()
	p := LinkProfile{OutageEvery: time.Hour, OutageFor: time.Hour - time.Nanosecond}
	e := newEngine(p, DirOut, 1, log, buildOptions(nil))
	defer e.close()
	e.start = time.Now().Add(-time.Second) // well inside the first outage
	r := route{dir: DirOut, key: "peer", from: "me", to: "peer"}
	for range 10 {
		if err := e.handle(r, []byte("x"), nil, func([]byte, net.Addr) error {
			t.Fatal("delivered during an outage")
			return nil
		}, false); err != nil {
			t.Fatal(err)
		}
	}
	if log.Count(KindOutage) != 10 {
		t.Fatalf("fault counts: %s", log)
	}
}

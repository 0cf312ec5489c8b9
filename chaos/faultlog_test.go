package chaos

import (
	"bytes"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestFaultLogJSONLinesRoundTrip(t *testing.T) {
	l := NewFaultLog()
	at := time.Date(2025, 1, 2, 3, 4, 5, 6, time.UTC)
	want := []Fault{
		{At: at, Kind: KindLoss, From: "127.0.0.1:1", To: "127.0.0.1:2", Detail: "32 bytes"},
		{At: at.Add(time.Second), Kind: KindPartition, Detail: "heal"},
	}
	for _, f := range want {
		l.Add(f)
	}
	var buf bytes.Buffer
	if err := l.WriteJSONL(&buf); err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(buf.String(), "\n"); n != 2 {
		t.Fatalf("wrote %d lines, want 2:\n%s", n, buf.String())
	}
	got, err := ReadFaultLog(&buf)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(want) {
		t.Fatalf("read %d faults, want %d", len(got), len(want))
	}
	for i := range want {
		if !got[i].At.Equal(want[i].At) || got[i].Kind != want[i].Kind || got[i].From != want[i].From ||
			got[i].To != want[i].To || got[i].Detail != want[i].Detail {
			t.Errorf("fault %d = %+v, want %+v", i, got[i], want[i])
		}
	}
	if _, err := ReadFaultLog(strings.NewReader("{\"kind\":")); err == nil {
		t.Error("truncated log parsed")
	}
}

func TestFaultLogCountsConcurrentlyAndBounds(t *testing.T) {
	l := NewBoundedFaultLog(10)
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Go(func() {
			for i := range 100 {
				kind := KindLoss
				if i%2 == 0 {
					kind = KindDelay
				}
				l.Record(kind, "w", "", string(rune('a'+w)))
			}
		})
	}
	wg.Wait()
	if l.Len() != 800 || l.Count(KindLoss) != 400 || l.Count(KindDelay) != 400 {
		t.Fatalf("len %d counts %v", l.Len(), l.Counts())
	}
	if got := len(l.Faults()); got != 10 {
		t.Fatalf("bounded log retains %d, want 10", got)
	}
	if s := l.String(); s != "delay=400 loss=400" {
		t.Fatalf("String() = %q", s)
	}

	// Oldest first after wrapping.
	r := NewBoundedFaultLog(3)
	for i := range 5 {
		r.Record(KindLoss, "", "", string(rune('0'+i)))
	}
	var details string
	for _, f := range r.Faults() {
		details += f.Detail
	}
	if details != "234" {
		t.Fatalf("bounded log keeps %q, want the last three in order", details)
	}

	var nilLog *FaultLog
	nilLog.Record(KindLoss, "", "", "")
	if nilLog.Len() != 0 || nilLog.Faults() != nil {
		t.Fatal("nil log recorded something")
	}
}

func TestSkewedClock(t *testing.T) {
	c := NewSkewedClock(nil, time.Hour)
	if d := c.Now().Sub(time.Now()); d < 59*time.Minute || d > 61*time.Minute {
		t.Fatalf("skewed by %v, want about an hour", d)
	}
	c.SetSkew(-time.Hour)
	if got := c.AddSkew(30 * time.Minute); got != -30*time.Minute || c.Skew() != -30*time.Minute {
		t.Fatalf("skew = %v", got)
	}
	if c.Now().After(time.Now()) {
		t.Fatal("negative skew is in the future")
	}
	// Durations are not skewed.
	tm := c.NewTimer(time.Millisecond)
	select {
	case <-tm.C():
	case <-time.After(5 * time.Second):
		t.Fatal("timer of a skewed clock did not fire")
	}
	tm.Stop()
	select {
	case <-c.After(time.Millisecond):
	case <-time.After(5 * time.Second):
		t.Fatal("After of a skewed clock did not fire")
	}
	var _ Clock = RealClock{}
}

package intent

import (
	"strings"
	"testing"
	"time"
	_ "time/tzdata" // the zones, whatever the host has
)

// TestMaintenanceWindowSchedule reads a window's schedule in a site's
// local time (America/New_York, across the start of daylight saving
// time): open and next-open times, spans crossing midnight into the next
// day, and a schedule that never opens.
func TestMaintenanceWindowSchedule(t *testing.T) {
	ws, err := ParseMaintenanceWindows([]byte(`
kind: maintenance-window
name: store-nights
selector: {role: pos-gateway}
schedule:
  - {days: mon-fri, from: "22:00", to: "05:00"}
  - {days: sun, from: "02:30", to: "04:00"}
---
name: weekends
schedule:
  - {days: "sat,sun", from: "00:00", to: "23:59"}
`))
	if err != nil {
		t.Fatal(err)
	}
	if len(ws) != 2 || ws[1].Spans[0].Days != 0x60 {
		t.Fatalf("windows %+v", ws)
	}
	w := ws[0]
	if got := w.Spans[0].String() + " / " + w.Spans[1].String(); got != "mon-fri 22:00-05:00 / sun 02:30-04:00" {
		t.Errorf("spans %s", got)
	}
	ny, err := time.LoadLocation("America/New_York")
	if err != nil {
		t.Fatal(err)
	}
	at := func(s string) time.Time {
		t.Helper()
		v, err := time.ParseInLocation("2006-01-02 15:04", s, ny)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	for _, tc := range []struct {
		now, next string // local New York times; next == now: open
	}{
		{"2026-03-06 21:59", "2026-03-06 22:00"}, // Friday evening
		{"2026-03-06 23:30", "2026-03-06 23:30"}, // Friday night: open
		{"2026-03-07 04:59", "2026-03-07 04:59"}, // Saturday early: Friday's span goes on
		{"2026-03-07 05:00", "2026-03-08 03:30"}, // Saturday: Sunday's 02:30 does not exist (DST starts): 03:30 EDT
		{"2026-03-08 03:45", "2026-03-08 03:45"}, // open
		{"2026-03-08 04:00", "2026-03-09 22:00"}, // then Monday night
		{"2026-03-10 12:00", "2026-03-10 22:00"},
	} {
		now := at(tc.now)
		got := SpansNextOpen(w.Spans, now, ny)
		if want := at(tc.next); !got.Equal(want) {
			t.Errorf("at %s: next open %s, want %s", tc.now, got.In(ny).Format("2006-01-02 15:04 MST"), want.Format("2006-01-02 15:04 MST"))
		}
		if open := SpansOpen(w.Spans, now, ny); open != (tc.now == tc.next) {
			t.Errorf("at %s: open %v", tc.now, open)
		}
	}
	// Local time decides: Friday 21:30 in New York is Saturday 02:30 UTC,
	// inside Friday's span read in UTC.
	if SpansOpen(w.Spans, at("2026-03-06 21:30"), ny) || !SpansOpen(w.Spans, at("2026-03-06 21:30"), time.UTC) {
		t.Error("the window is read in UTC, not in the site's zone")
	}
	if !w.Matches(map[string]string{"role": "pos-gateway", "site": "s1"}) || w.Matches(map[string]string{"role": "kiosk"}) {
		t.Error("selector")
	}
}

func TestParseMaintenanceWindowsErrors(t *testing.T) {
	for doc, want := range map[string]string{
		"name: w\nschedule: [{days: mon, from: '22:00', to: '22:00'}]\n":  "from and to are the same time",
		"name: w\nschedule: [{days: funday, from: '1:00', to: '2:00'}]\n": `days "funday"`,
		"name: w\nschedule: [{days: mon, from: '1:00', to: '02:00'}]\n":   `from and to must be "HH:MM"`,
		"name: w\nschedule: [{days: mon, from: '01:00', to: '24:00'}]\n":  `from and to must be "HH:MM"`,
		"name: w\n":              "at least one span is required",
		"kind: class\nname: w\n": `kind "class", want maintenance-window`,
		"name: W\nschedule: [{days: daily, from: '01:00', to: '02:00'}]\n":                                                                      "name must be a DNS label",
		"name: w\nselector: {a: 'b/c'}\nschedule: [{days: daily, from: '01:00', to: '02:00'}]\n":                                                "invalid label value",
		"name: w\nschedule: [{days: daily, from: '01:00', to: '02:00'}]\n---\nname: w\nschedule: [{days: daily, from: '01:00', to: '02:00'}]\n": `window "w" given twice`,
		"name: w\nwhen: always\n": "field when not found",
	} {
		if _, err := ParseMaintenanceWindows([]byte(doc)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: %v, want %q", doc, err, want)
		}
	}
	for s, want := range map[string]uint8{"daily": 0x7f, "weekdays": 0x1f, "sat,sun": 0x60, "fri-mon": 0x1 | 0x2<<3 | 0x20 | 0x40 | 0x10, "Tue": 0x2} {
		got, err := parseDays(s)
		if err != nil || got != want {
			t.Errorf("parseDays(%q) = %#x, %v; want %#x", s, got, err, want)
		}
		if back, _ := parseDays(FormatDays(got)); back != got {
			t.Errorf("FormatDays(%#x) = %q reads back as %#x", got, FormatDays(got), back)
		}
	}
}

func TestDisruptiveField(t *testing.T) {
	in, err := Parse([]byte("name: x\nresources:\n  - {id: a, type: sim, spec: {value: 1}, disruptive: true}\n  - {id: b, type: sim, spec: {value: 1}}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if !in.Resources[0].Disruptive || in.Resources[1].Disruptive {
		t.Errorf("disruptive: %v %v", in.Resources[0].Disruptive, in.Resources[1].Disruptive)
	}
	if _, err := Parse([]byte("name: x\nresources:\n  - {id: a, type: sim, spec: {value: 1}, disruptive: yes please}\n")); err == nil || !strings.Contains(err.Error(), "disruptive: must be true or false") {
		t.Errorf("a disruptive that is not a bool: %v", err)
	}
}

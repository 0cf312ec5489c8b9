package intent

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"
)

// MaintenanceWindow is when the devices its selector matches may take
// disruptive steps (a resource marked disruptive: a service restart, an
// exec step that interrupts the site): a weekly schedule in each site's
// local time. A device that no window selects is not held; one that some
// select may take a disruptive step while any of them is open. Windows are
// replicated configuration (meteor window apply).
type MaintenanceWindow struct {
	Name        string `json:"name"`
	Description string `json:"description,omitempty"`
	// Selector picks devices by label, as an intent's does; empty selects
	// every device.
	Selector map[string]string `json:"selector,omitempty"`
	// Spans are the weekly times the window is open, in the device's
	// local time (DeviceZone).
	Spans []WindowSpan `json:"spans"`
}

// WindowSpan is a part of a maintenance window: on the days of Days, from
// Start to End minutes after local midnight; End < Start crosses
// midnight, into the next day.
type WindowSpan struct {
	// Days has bit 0 for Monday up to bit 6 for Sunday.
	Days  uint8 `json:"days"`
	Start int   `json:"start"`
	End   int   `json:"end"`
}

// Limits of maintenance windows.
const (
	MaxWindows     = 64
	MaxWindowSpans = 16
	minutesPerDay  = 24 * 60
)

// ZoneLabel is the label that gives a device's IANA time zone, with '.'
// in place of '/' (labels take no '/'): timezone=Europe.Berlin. The
// control plane's label wins over the one the device reports.
const ZoneLabel = "timezone"

// ZoneOf returns the IANA zone name a label value stands for
// ("Europe.Berlin" is "Europe/Berlin").
func ZoneOf(label string) string { return strings.ReplaceAll(label, ".", "/") }

// ZoneLabelValue returns the label value of an IANA zone name.
func ZoneLabelValue(zone string) string { return strings.ReplaceAll(zone, "/", ".") }

// Matches reports whether the window selects a device with these labels.
func (w *MaintenanceWindow) Matches(labels map[string]string) bool {
	return (&Intent{Selector: w.Selector}).Matches(labels)
}

// weekday numbers t's day of the week from Monday (0) to Sunday (6).
func weekday(t time.Time) int { return (int(t.Weekday()) + 6) % 7 }

// SpansOpen reports whether spans are open at t, read in loc.
func SpansOpen(spans []WindowSpan, t time.Time, loc *time.Location) bool {
	lt := t.In(loc)
	wd, m := weekday(lt), lt.Hour()*60+lt.Minute()
	on := func(s WindowSpan, day int) bool { return s.Days&(1<<((day+7)%7)) != 0 }
	for _, s := range spans {
		if s.Start < s.End {
			if on(s, wd) && m >= s.Start && m < s.End {
				return true
			}
			continue
		}
		if on(s, wd) && m >= s.Start || on(s, wd-1) && m < s.End {
			return true
		}
	}
	return false
}

// SpansNextOpen returns t itself if spans are open at t (read in loc),
// else the next time they open, within a week; the zero time if they
// never open.
func SpansNextOpen(spans []WindowSpan, t time.Time, loc *time.Location) time.Time {
	if SpansOpen(spans, t, loc) {
		return t
	}
	lt := t.In(loc)
	var best time.Time
	for d := 0; d <= 7; d++ {
		day := time.Date(lt.Year(), lt.Month(), lt.Day()+d, 0, 0, 0, 0, loc)
		for _, s := range spans {
			if s.Days&(1<<weekday(day)) == 0 {
				continue
			}
			at := time.Date(day.Year(), day.Month(), day.Day(), 0, s.Start, 0, 0, loc)
			if got := at.Hour()*60 + at.Minute(); got < s.Start && at.Day() == day.Day() {
				// A time a change to daylight saving skips (02:30 on the
				// day clocks go from 02:00 to 03:00): time.Date may give
				// the time before the gap; the window opens after it.
				at = at.Add(time.Duration(s.Start-got) * time.Minute)
			}
			if at.After(t) && (best.IsZero() || at.Before(best)) {
				best = at
			}
		}
		if !best.IsZero() {
			return best
		}
	}
	return best
}

// Validate reports what is wrong with the window.
func (w *MaintenanceWindow) Validate() error {
	var errs []string
	if msg := dnsLabelMsg(w.Name); msg != "" {
		errs = append(errs, "name "+msg)
	}
	for k, v := range w.Selector {
		if err := CheckLabel(k, v); err != nil {
			errs = append(errs, "selector "+err.Error())
		}
	}
	switch {
	case len(w.Spans) == 0:
		errs = append(errs, "schedule: at least one span is required")
	case len(w.Spans) > MaxWindowSpans:
		errs = append(errs, fmt.Sprintf("schedule: %d spans, at most %d", len(w.Spans), MaxWindowSpans))
	}
	for i, s := range w.Spans {
		switch {
		case s.Days == 0 || s.Days&0x80 != 0:
			errs = append(errs, fmt.Sprintf("schedule[%d]: no days", i))
		case s.Start < 0 || s.Start >= minutesPerDay || s.End < 0 || s.End >= minutesPerDay:
			errs = append(errs, fmt.Sprintf("schedule[%d]: times must be 00:00 to 23:59", i))
		case s.Start == s.End:
			errs = append(errs, fmt.Sprintf("schedule[%d]: from and to are the same time", i))
		}
	}
	if len(w.Description) > 1024 {
		errs = append(errs, fmt.Sprintf("description must be at most 1024 bytes, got %d", len(w.Description)))
	}
	if len(errs) > 0 {
		return fmt.Errorf("maintenance window %q: %s", w.Name, strings.Join(errs, "; "))
	}
	return nil
}

// dayNames are the day names a schedule is written with, from Monday.
var dayNames = []string{"mon", "tue", "wed", "thu", "fri", "sat", "sun"}

// parseDays reads "mon-fri", "sat,sun", "daily" or "weekdays".
func parseDays(s string) (uint8, error) {
	switch s = strings.ToLower(strings.TrimSpace(s)); s {
	case "daily", "every day":
		return 0x7f, nil
	case "weekdays":
		return 0x1f, nil
	case "weekends":
		return 0x60, nil
	}
	var out uint8
	for part := range strings.SplitSeq(s, ",") {
		from, to, isRange := strings.Cut(strings.TrimSpace(part), "-")
		a, b := slices.Index(dayNames, from), slices.Index(dayNames, to)
		if !isRange {
			b = a
		}
		if a < 0 || b < 0 {
			return 0, fmt.Errorf("days %q: want day names (mon, tue, ...), ranges (mon-fri) separated by commas, or daily, weekdays, weekends", s)
		}
		for d := a; ; d = (d + 1) % 7 {
			out |= 1 << d
			if d == b {
				break
			}
		}
	}
	return out, nil
}

// FormatDays writes a span's days as ParseMaintenanceWindows reads them.
func FormatDays(days uint8) string {
	switch days {
	case 0x7f:
		return "daily"
	case 0x1f:
		return "mon-fri"
	case 0x60:
		return "sat,sun"
	}
	var parts []string
	for d := 0; d < 7; d++ {
		if days&(1<<d) == 0 {
			continue
		}
		e := d
		for e+1 < 7 && days&(1<<(e+1)) != 0 {
			e++
		}
		if e > d {
			parts = append(parts, dayNames[d]+"-"+dayNames[e])
		} else {
			parts = append(parts, dayNames[d])
		}
		d = e
	}
	return strings.Join(parts, ",")
}

// String writes the span as "mon-fri 22:00-05:00".
func (s WindowSpan) String() string {
	return fmt.Sprintf("%s %02d:%02d-%02d:%02d", FormatDays(s.Days), s.Start/60, s.Start%60, s.End/60, s.End%60)
}

// windowDoc is a maintenance window as written in a file.
type windowDoc struct {
	Kind        string            `yaml:"kind"`
	Name        string            `yaml:"name"`
	Description string            `yaml:"description"`
	Selector    map[string]string `yaml:"selector"`
	Schedule    []struct {
		Days string `yaml:"days"`
		From string `yaml:"from"`
		To   string `yaml:"to"`
	} `yaml:"schedule"`
}

// ParseMaintenanceWindows parses a stream of maintenance window documents
// (YAML or JSON, separated by "---"):
//
//	kind: maintenance-window
//	name: store-nights
//	selector: {role: pos-gateway}
//	schedule:
//	  - {days: mon-fri, from: "22:00", to: "05:00"}
//	  - {days: "sat,sun", from: "00:00", to: "23:59"}
//
// Times are the local time of each device (its timezone label); a span
// whose "to" is earlier than its "from" ends the next day. Every window
// is validated; names must be unique.
func ParseMaintenanceWindows(data []byte) ([]MaintenanceWindow, error) {
	return parseConfigDocs(data, "maintenance window", func(doc *windowDoc) (MaintenanceWindow, string, error) {
		if doc.Name == "" && doc.Kind == "" && len(doc.Schedule) == 0 {
			return MaintenanceWindow{}, "", nil
		}
		if doc.Kind != "" && doc.Kind != "maintenance-window" {
			return MaintenanceWindow{}, "", fmt.Errorf("kind %q, want maintenance-window", doc.Kind)
		}
		w := MaintenanceWindow{Name: doc.Name, Description: doc.Description, Selector: doc.Selector}
		for i, s := range doc.Schedule {
			days, err := parseDays(s.Days)
			if err != nil {
				return w, "", fmt.Errorf("maintenance window %q: schedule[%d]: %w", doc.Name, i, err)
			}
			from, okF := parseClock(s.From)
			to, okT := parseClock(s.To)
			if !okF || !okT {
				return w, "", fmt.Errorf(`maintenance window %q: schedule[%d]: from and to must be "HH:MM" (00:00 to 23:59), got %q and %q`, doc.Name, i, s.From, s.To)
			}
			w.Spans = append(w.Spans, WindowSpan{Days: days, Start: from, End: to})
		}
		return w, w.Name, w.Validate()
	})
}

// WindowsFor returns the windows of all that select a device with these
// labels, sorted by name.
func WindowsFor(all map[string]MaintenanceWindow, labels map[string]string) []MaintenanceWindow {
	var out []MaintenanceWindow
	for _, name := range slices.Sorted(maps.Keys(all)) {
		if w := all[name]; w.Matches(labels) {
			out = append(out, w)
		}
	}
	return out
}

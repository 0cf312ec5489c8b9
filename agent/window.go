package agent

import (
	"time"
	_ "time/tzdata" // site time zones, whatever the device has installed

	"github.com/meteor-edge/meteor/fsm/intent"
	"github.com/meteor-edge/meteor/wire"
)

// maintenanceHold says whether a disruptive step may run at now: the zero
// Hold if it may (a maintenance window that selects the device is open,
// or none selects it), else a window hold until the earliest of the
// device's windows opens, in the device's time zone.
func (b *settingsBook) maintenanceHold(now time.Time) wire.Hold {
	b.mu.Lock()
	s := b.s
	b.mu.Unlock()
	if s == nil || len(s.Windows) == 0 {
		return wire.Hold{}
	}
	loc, zone := time.UTC, "UTC"
	if s.Zone != "" {
		if l, err := time.LoadLocation(s.Zone); err == nil {
			loc, zone = l, s.Zone
		} else {
			zone = "UTC (zone " + s.Zone + " unknown here)"
		}
	}
	var hold wire.Hold
	for _, w := range s.Windows {
		spans := make([]intent.WindowSpan, len(w.Spans))
		for i, sp := range w.Spans {
			spans[i] = intent.WindowSpan{Days: sp.Days, Start: int(sp.Start), End: int(sp.End)}
		}
		if intent.SpansOpen(spans, now, loc) {
			return wire.Hold{}
		}
		next := intent.SpansNextOpen(spans, now, loc)
		if !next.IsZero() && (hold.Kind == wire.HoldNone || next.UnixNano() < hold.Until) {
			hold = wire.Hold{Kind: wire.HoldWindow, Until: next.UnixNano(), Holder: w.Name, Note: zone}
		}
	}
	return hold
}

// windowText says what a window hold waits for.
func windowText(h wire.Hold) string {
	return "held for maintenance window " + h.Holder + ": opens at " + time.Unix(0, h.Until).UTC().Format(time.RFC3339) + " (" + h.Note + ")"
}

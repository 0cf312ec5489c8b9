package wire

import (
	"math"
	"time"
)

// Limits of a Settings message.
const (
	// MaxClasses bounds the reconcile classes of a Settings.
	MaxClasses = 256
	// MaxWindows bounds the maintenance windows of a Settings, and
	// MaxSpans the spans of one window.
	MaxWindows = 64
	MaxSpans   = 16
	// MaxUnlocks bounds the lock breaks of a Settings and the unlock
	// results of a Report.
	MaxUnlocks = 16
	// MinutesPerDay bounds a span's start and end.
	MinutesPerDay = 24 * 60
)

// Settings is what the control plane configures on a device beyond its
// desired state (protocol 1.4, server to agent): the reconcile classes in
// effect, the device's maintenance windows and time zone, its
// control-plane labels, and the lock breaks an operator asked for. The
// server sends one after the Welcome of a session at minor 4 or above,
// and another whenever any of it changes; each is complete, replacing the
// one before. The agent journals it, so it holds offline and after a
// restart.
type Settings struct {
	// Seq orders the Settings a server sends (the Raft index of the state
	// it was read from); an agent keeps the newest it received and
	// ignores an older one.
	Seq uint64
	// Classes are the reconcile classes in effect, sorted by name without
	// duplicates; the agent reconciles each resource on its class's
	// cadence (a class it is not sent: the "default" class's).
	Classes []SettingsClass
	// Zone is the device's IANA time zone ("Europe/Berlin"), in which its
	// maintenance windows are read; empty means UTC.
	Zone string
	// Windows are the maintenance windows whose selector matches the
	// device, sorted by name without duplicates: disruptive steps wait
	// until one is open. None means disruptive steps are not held.
	Windows []MaintenanceWindow
	// Labels are the device's control-plane labels (the ones its intents
	// are selected by), which preconditions ("label:site-open=yes") are
	// checked against.
	Labels map[string]string
	// Unlocks are the lock breaks operators asked for, by increasing
	// Index; the agent acts on each once.
	Unlocks []Unlock
}

// SettingsClass is a reconcile class's cadences, as an agent needs them.
type SettingsClass struct {
	Name string
	// PullInterval, ProbeInterval and ReportInterval are the class's
	// cadences; RetryBase and RetryMax bound its retry backoff, of which
	// a fraction RetryJitter (in [0, 1], sent in thousandths) is drawn at
	// random. All positive, in whole milliseconds.
	PullInterval, ProbeInterval, ReportInterval time.Duration
	RetryBase, RetryMax                         time.Duration
	RetryJitter                                 float64
}

// MaintenanceWindow is a weekly schedule in the device's local time.
type MaintenanceWindow struct {
	Name  string
	Spans []Span
}

// Span is one part of a window: on the days of Days, from Start to End
// minutes after local midnight (End < Start crosses midnight into the
// next day).
type Span struct {
	// Days has bit 0 for Monday up to bit 6 for Sunday; at least one.
	Days uint8
	// Start and End are minutes after midnight, below MinutesPerDay and
	// different.
	Start, End uint16
}

// Unlock is an operator's order to break a lock held on the device: the
// lock named Lock, held since Since (Unix ns), and no other (a lock taken
// again since is not broken).
type Unlock struct {
	// Index is the Raft index of the order, which numbers it.
	Index  uint64
	Lock   string
	Since  int64
	Reason string
	Actor  string
}

// Type implements Message.
func (*Settings) Type() MessageType { return TypeSettings }

// Append implements Message.
func (m *Settings) Append(b []byte) []byte {
	b = appendUvarint(b, m.Seq)
	b = appendUvarint(b, uint64(len(m.Classes)))
	for _, c := range m.Classes {
		b = appendString(b, c.Name)
		for _, d := range []time.Duration{c.PullInterval, c.ProbeInterval, c.ReportInterval, c.RetryBase, c.RetryMax} {
			b = appendUvarint(b, durationMillis(d))
		}
		b = appendU16(b, jitterMille(c.RetryJitter))
	}
	b = appendString(b, m.Zone)
	b = appendUvarint(b, uint64(len(m.Windows)))
	for _, w := range m.Windows {
		b = appendString(b, w.Name)
		b = appendUvarint(b, uint64(len(w.Spans)))
		for _, s := range w.Spans {
			b = append(b, s.Days)
			b = appendU16(b, s.Start)
			b = appendU16(b, s.End)
		}
	}
	b = appendLabels(b, m.Labels)
	b = appendUvarint(b, uint64(len(m.Unlocks)))
	for _, u := range m.Unlocks {
		b = appendUnlock(b, u)
	}
	return b
}

// Len implements Message.
func (m *Settings) Len() int {
	n := uvarintLen(m.Seq) + uvarintLen(uint64(len(m.Classes)))
	for _, c := range m.Classes {
		n += stringLen(c.Name) + 2
		for _, d := range []time.Duration{c.PullInterval, c.ProbeInterval, c.ReportInterval, c.RetryBase, c.RetryMax} {
			n += uvarintLen(durationMillis(d))
		}
	}
	n += stringLen(m.Zone) + uvarintLen(uint64(len(m.Windows)))
	for _, w := range m.Windows {
		n += stringLen(w.Name) + uvarintLen(uint64(len(w.Spans))) + 5*len(w.Spans)
	}
	n += labelsLen(m.Labels) + uvarintLen(uint64(len(m.Unlocks)))
	for _, u := range m.Unlocks {
		n += unlockLen(u)
	}
	return n
}

// Decode implements Message.
func (m *Settings) Decode(payload []byte) error {
	d := decoder{b: payload}
	*m = Settings{Seq: d.uvarint()}
	if n := d.length(MaxClasses, 1+5+2, "classes"); n > 0 {
		m.Classes = make([]SettingsClass, n)
		for i := range m.Classes {
			c := &m.Classes[i]
			c.Name = d.str(MaxNameLen, "class name")
			for _, to := range []*time.Duration{&c.PullInterval, &c.ProbeInterval, &c.ReportInterval, &c.RetryBase, &c.RetryMax} {
				if *to = d.duration(); d.err == nil && *to == 0 {
					d.malformed("class %q: zero interval", c.Name)
				}
			}
			j := d.u16()
			if j > 1000 {
				d.malformed("class %q: jitter %d thousandths", c.Name, j)
			}
			c.RetryJitter = float64(j) / 1000
			switch {
			case d.err != nil:
			case c.Name == "":
				d.malformed("class without a name")
			case i > 0 && c.Name <= m.Classes[i-1].Name:
				d.malformed("class names not strictly increasing")
			case c.RetryBase > c.RetryMax:
				d.malformed("class %q: retry base above retry max", c.Name)
			}
		}
	}
	m.Zone = d.str(MaxNameLen, "zone")
	if n := d.length(MaxWindows, 2, "windows"); n > 0 {
		m.Windows = make([]MaintenanceWindow, n)
		for i := range m.Windows {
			w := &m.Windows[i]
			w.Name = d.str(MaxNameLen, "window name")
			k := d.length(MaxSpans, 5, "window spans")
			switch {
			case d.err != nil:
			case w.Name == "":
				d.malformed("window without a name")
			case i > 0 && w.Name <= m.Windows[i-1].Name:
				d.malformed("window names not strictly increasing")
			case k == 0:
				d.malformed("window %q without spans", w.Name)
			}
			if k > 0 {
				w.Spans = make([]Span, k)
			}
			for j := range w.Spans {
				s := Span{Days: d.u8(), Start: d.u16(), End: d.u16()}
				switch {
				case d.err != nil:
				case s.Days == 0 || s.Days&0x80 != 0:
					d.malformed("window %q: days %#x", w.Name, s.Days)
				case s.Start >= MinutesPerDay || s.End >= MinutesPerDay || s.Start == s.End:
					d.malformed("window %q: span %d-%d", w.Name, s.Start, s.End)
				}
				w.Spans[j] = s
			}
		}
	}
	m.Labels = d.labels()
	if n := d.length(MaxUnlocks, unlockMinLen, "unlocks"); n > 0 {
		m.Unlocks = make([]Unlock, n)
		for i := range m.Unlocks {
			m.Unlocks[i] = d.unlock()
			if d.err == nil && i > 0 && m.Unlocks[i].Index <= m.Unlocks[i-1].Index {
				d.malformed("unlock indexes not strictly increasing")
			}
		}
	}
	return d.finish("Settings")
}

// jitterMille is a jitter fraction in thousandths, clamped to [0, 1000].
func jitterMille(j float64) uint16 {
	switch {
	case !(j > 0):
		return 0
	case j >= 1:
		return 1000
	}
	return uint16(math.Round(j * 1000))
}

const unlockMinLen = 1 + 1 + 8 + 1 + 1

func appendUnlock(b []byte, u Unlock) []byte {
	b = appendUvarint(b, u.Index)
	b = appendString(b, u.Lock)
	b = appendI64(b, u.Since)
	b = appendString(b, u.Reason)
	return appendString(b, u.Actor)
}

func unlockLen(u Unlock) int {
	return uvarintLen(u.Index) + stringLen(u.Lock) + 8 + stringLen(u.Reason) + stringLen(u.Actor)
}

func (d *decoder) unlock() Unlock {
	u := Unlock{Index: d.uvarint(), Lock: d.str(MaxNameLen, "lock name"), Since: d.i64(),
		Reason: d.str(MaxTextLen, "unlock reason"), Actor: d.str(MaxNameLen, "unlock actor")}
	if d.err == nil && u.Lock == "" {
		d.malformed("unlock of no lock")
	}
	return u
}

// appendLabels encodes a label map, keys in increasing byte order.
func appendLabels(b []byte, labels map[string]string) []byte {
	b = appendUvarint(b, uint64(len(labels)))
	for _, k := range sortedKeys(labels) {
		b = appendString(b, k)
		b = appendString(b, labels[k])
	}
	return b
}

func labelsLen(labels map[string]string) int {
	n := uvarintLen(uint64(len(labels)))
	for k, v := range labels {
		n += stringLen(k) + stringLen(v)
	}
	return n
}

// labels decodes a label map: at most MaxLabels, keys strictly
// increasing.
func (d *decoder) labels() map[string]string {
	n := d.length(MaxLabels, 2, "labels")
	if n == 0 {
		return nil
	}
	out := make(map[string]string, n)
	prev := ""
	for i := 0; i < n && d.err == nil; i++ {
		k := d.str(MaxNameLen, "label key")
		v := d.str(MaxNameLen, "label value")
		if i > 0 && k <= prev {
			d.malformed("label keys not strictly increasing")
		}
		out[k], prev = v, k
	}
	return out
}

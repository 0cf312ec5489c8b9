package intent

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

// Rollout is the typed view of an intent's rollout block: how the devices
// the intent targets move to a new revision. RolloutSpec and ParseRollout
// build it from the block with every default filled in; Intent.Rollout
// keeps the block as written.
//
// A block in YAML, with every field (see the package documentation for
// the spellings each accepts):
//
//	rollout:
//	  strategy: waves            # or immediate: every device at once, no waves
//	  waves:                     # in order, at most 32
//	    - name: pilot            # optional DNS label, default wave-N
//	      count: 1               # one of count, percent and selector
//	      maxParallel: 1         # overrides the rollout's
//	    - percent: 10            # cumulative share of the targeted devices
//	      approval: true         # wait for `meteor rollout approve`
//	      gate: {hold: 1h}       # overrides fields of the rollout's gate
//	    - selector: {site-type: kiosk}
//	    - 100%                   # shorthand: 5 is count 5, "site-type=kiosk" a selector
//	  maxParallel: 20            # devices in progress at once per wave
//	  gate:                      # when a wave is done and the next may start
//	    converged: 95%           # share of the wave converged, probe included
//	    hold: 10m                # for this long
//	    timeout: 2h              # else pause
//	  onFailure:
//	    threshold: 5%            # failed, stuck or unhealthy share above which
//	    action: revert           # pause or revert
//	  progressDeadline: 30m      # a released device not converged by then is stuck
//	  window: "22:00-06:00"      # UTC; releases only then, or "maintenance":
//	                             # each device while one of its maintenance
//	                             # windows is open, in its local time
type Rollout struct {
	// Strategy is "waves" (the default) or "immediate": no waves,
	// everything at once.
	Strategy string
	// Waves are the waves in order. The typed view of a block with
	// strategy waves and no waves holds one wave of 100%; with strategy
	// immediate it is empty.
	Waves []Wave
	// MaxParallel bounds the devices in progress at once per wave; 0 means
	// no limit. A wave may override it (WaveMaxParallel).
	MaxParallel int
	// Gate is the default gate of every wave (WaveGate).
	Gate Gate
	// OnFailure says what happens when devices of a wave fail.
	OnFailure OnFailure
	// ProgressDeadline is how long a released device may take to
	// converge before it counts as stuck; default 30m.
	ProgressDeadline time.Duration
	// Window restricts when devices are released; nil means any time.
	Window *Window
	// Maintenance ("window: maintenance") releases each device only while
	// one of the maintenance windows that select it is open, in its local
	// time; a device no window selects is released any time.
	Maintenance bool
}

// Wave is one step of a rollout: the devices it adds, whether it waits for
// an operator, and what must hold before the next wave starts.
type Wave struct {
	// Name is a DNS label, unique in the rollout. The typed view names a
	// wave without one "wave-N", N counting from 1.
	Name string
	// Exactly one of Count, Percent and Selector is set.
	//
	// Count is a number of devices, 1 to 1,000,000.
	Count int
	// Percent is the cumulative share of the targeted devices, in percent,
	// in (0, 100]. Percent waves never decrease.
	Percent float64
	// Selector picks devices by label, with the rules of the intent's
	// selector ("*" matches any value); never empty.
	Selector map[string]string
	// Approval makes the wave wait for `meteor rollout approve` before it
	// releases any device.
	Approval bool
	// MaxParallel is the wave's own bound on devices in progress at once;
	// 0 means the rollout's.
	MaxParallel int
	// Gate is the wave's own gate; nil means the rollout's. The typed view
	// fills the fields a wave's gate does not set from the rollout's gate.
	Gate *Gate
}

// Gate is what must hold before the wave after this one may start.
type Gate struct {
	// Converged is the percent of the wave's devices that must be
	// converged, their effective-state probe included; default 100.
	Converged float64
	// Hold is how long that share must hold; default 0.
	Hold time.Duration
	// Timeout bounds the wait for the gate; after it the rollout pauses
	// with a reason. 0 means no timeout.
	Timeout time.Duration
}

// OnFailure is the policy for devices that fail during a wave.
type OnFailure struct {
	// Threshold is the percent of the wave's devices failed, stuck or
	// unhealthy above which Action runs; default 0, so any one does.
	Threshold float64
	// Action is "pause" (the default) or "revert".
	Action string
}

// Window is a daily time window in UTC, in minutes after 00:00: a time is
// in it from Start up to, not including, End. End < Start crosses
// midnight. A valid window has Start != End, both in [0, 1440); a Window
// with Start == End contains every time.
type Window struct{ Start, End int }

// Contains reports whether t (in any location) falls in the window.
func (w Window) Contains(t time.Time) bool {
	t = t.UTC()
	m := t.Hour()*60 + t.Minute()
	if w.Start < w.End {
		return m >= w.Start && m < w.End
	}
	return m >= w.Start || m < w.End
}

// NextOpen returns t itself if the window contains it, and otherwise the
// next time the window opens after t, in t's location.
func (w Window) NextOpen(t time.Time) time.Time {
	if w.Contains(t) {
		return t
	}
	u := t.UTC()
	open := time.Date(u.Year(), u.Month(), u.Day(), 0, w.Start, 0, 0, time.UTC)
	if !open.After(u) {
		open = open.AddDate(0, 0, 1)
	}
	return open.In(t.Location())
}

// String renders the window as written, with its zone: "22:00-06:00 UTC".
func (w Window) String() string {
	return fmt.Sprintf("%02d:%02d-%02d:%02d UTC", w.Start/60, w.Start%60, w.End/60, w.End%60)
}

// WaveGate returns the gate of wave i: its own, or the rollout's.
func (r *Rollout) WaveGate(i int) Gate {
	if i >= 0 && i < len(r.Waves) && r.Waves[i].Gate != nil {
		return *r.Waves[i].Gate
	}
	return r.Gate
}

// WaveMaxParallel returns the bound on devices in progress at once in wave
// i: its own, or the rollout's; 0 means no limit.
func (r *Rollout) WaveMaxParallel(i int) int {
	if i >= 0 && i < len(r.Waves) && r.Waves[i].MaxParallel > 0 {
		return r.Waves[i].MaxParallel
	}
	return r.MaxParallel
}

// Values and limits of rollout blocks.
const (
	StrategyWaves     = "waves"
	StrategyImmediate = "immediate"
	ActionPause       = "pause"
	ActionRevert      = "revert"

	maxWaves                = 32
	maxWaveCount            = 1_000_000
	defaultProgressDeadline = 30 * time.Minute
)

// RolloutSpec returns the typed view of the intent's rollout block, with
// defaults filled in, or nil and no error when the intent has none. A
// block that breaks the rollout rules gives a *ValidationError, without a
// line, as Validate would report it.
func (in *Intent) RolloutSpec() (*Rollout, error) {
	name := in.Name
	if dnsLabelMsg(name) != "" {
		name = ""
	}
	return parseRollout(name, in.Rollout)
}

// ParseRollout returns the typed view of a rollout block (the value of
// Intent.Rollout), with defaults filled in, or nil and no error for an
// empty block, which means no rollout. Errors are *ValidationError with
// fields named from "rollout", such as rollout.waves[1].percent.
func ParseRollout(m map[string]any) (*Rollout, error) {
	return parseRollout("", m)
}

func parseRollout(intent string, m map[string]any) (*Rollout, error) {
	if len(m) == 0 {
		return nil, nil
	}
	c := &checker{intent: intent}
	p := path{".rollout"}
	c.values(p, m)
	if len(c.found) > 0 {
		return nil, c.first()
	}
	r := c.rollout(p, m)
	if err := c.first(); err != nil {
		return nil, err
	}
	return r, nil
}

// rollout checks a rollout block whose values passed c.values, and returns
// its typed view; the view is meaningful only if nothing was reported.
// A key set to null counts as absent.
func (c *checker) rollout(p path, m map[string]any) *Rollout {
	c.keys(p, m, "gate", "maxParallel", "onFailure", "progressDeadline", "strategy", "waves", "window")
	r := &Rollout{
		Strategy:         StrategyWaves,
		Gate:             Gate{Converged: 100},
		OnFailure:        OnFailure{Action: ActionPause},
		ProgressDeadline: defaultProgressDeadline,
	}
	if s, ok := c.str(p, m, "strategy", false); ok {
		switch s {
		case StrategyWaves, StrategyImmediate:
			r.Strategy = s
		default:
			c.fail(p.field("strategy"), "unknown strategy %s; allowed: %s, %s", quote(s), StrategyWaves, StrategyImmediate)
		}
	}
	r.MaxParallel = c.maxParallel(p, m)
	if g, ok := c.mapping(p, m, "gate"); ok {
		r.Gate = c.gate(p.field("gate"), g, r.Gate)
	}
	if f, ok := c.mapping(p, m, "onFailure"); ok {
		r.OnFailure = c.onFailure(p.field("onFailure"), f, r.OnFailure)
	}
	if d, ok := c.duration(p, m, "progressDeadline", false, 0); ok {
		r.ProgressDeadline = d
	}
	if s, ok := c.str(p, m, "window", false); ok {
		if s == "maintenance" {
			r.Maintenance = true
		} else {
			r.Window = c.window(p.field("window"), s)
		}
	}
	r.Waves = c.waves(p, m, r)
	return r
}

func (c *checker) gate(p path, m map[string]any, g Gate) Gate {
	c.keys(p, m, "converged", "hold", "timeout")
	if f, ok := c.percent(p, m, "converged"); ok {
		g.Converged = f
	}
	if d, ok := c.duration(p, m, "hold", false, 0); ok {
		g.Hold = d
	}
	if d, ok := c.duration(p, m, "timeout", false, 0); ok {
		g.Timeout = d
	}
	return g
}

func (c *checker) onFailure(p path, m map[string]any, f OnFailure) OnFailure {
	c.keys(p, m, "action", "threshold")
	if t, ok := c.percent(p, m, "threshold"); ok {
		f.Threshold = t
	}
	if s, ok := c.str(p, m, "action", false); ok {
		switch s {
		case ActionPause, ActionRevert:
			f.Action = s
		default:
			c.fail(p.field("action"), "unknown action %s; allowed: %s, %s", quote(s), ActionPause, ActionRevert)
		}
	}
	return f
}

func (c *checker) window(p path, s string) *Window {
	start, end, ok := strings.Cut(s, "-")
	a, okA := parseClock(start)
	b, okB := parseClock(end)
	switch {
	case !ok || !okA || !okB:
		c.fail(p, `must be "HH:MM-HH:MM" in UTC, such as "22:00-06:00", or "maintenance", got %s`, quote(s))
	case a == b:
		c.fail(p, "must end at another time than it starts; leave window out to allow any time")
	default:
		return &Window{Start: a, End: b}
	}
	return nil
}

// parseClock reads "HH:MM" (24 h) as minutes after midnight.
func parseClock(s string) (int, bool) {
	if len(s) != 5 || s[2] != ':' {
		return 0, false
	}
	for _, i := range []int{0, 1, 3, 4} {
		if s[i] < '0' || s[i] > '9' {
			return 0, false
		}
	}
	h := int(s[0]-'0')*10 + int(s[1]-'0')
	m := int(s[3]-'0')*10 + int(s[4]-'0')
	if h > 23 || m > 59 {
		return 0, false
	}
	return h*60 + m, true
}

// waveInfo is what waves needs to know of a wave beyond its typed view.
type waveInfo struct {
	named   bool   // the name was written
	percent path   // where the wave's percent is written, nil if it has none
	prefix  string // names the percent in messages at percent
}

func (c *checker) waves(p path, m map[string]any, r *Rollout) []Wave {
	wp := p.field("waves")
	var list []any
	switch v := m["waves"].(type) {
	case nil:
	case []any:
		list = v
	default:
		c.fail(wp, "must be a list, got %s", kindOf(v))
		return nil
	}
	switch {
	case r.Strategy == StrategyImmediate:
		if len(list) > 0 {
			c.fail(wp, `not allowed with strategy "immediate", which releases every device at once; remove waves or use strategy "waves"`)
		}
		return nil
	case len(list) > maxWaves:
		c.fail(wp, "at most %d waves are allowed, got %d", maxWaves, len(list))
		return nil
	case len(list) == 0:
		return []Wave{{Name: "wave-1", Percent: 100}}
	}

	waves := make([]Wave, len(list))
	info := make([]waveInfo, len(list))
	for i, e := range list {
		waves[i], info[i] = c.wave(wp.index(i), e, r.Gate)
	}

	named := make(map[string]int, len(waves)) // written name -> first wave with it
	for i := range waves {
		if !info[i].named {
			continue
		}
		if first, dup := named[waves[i].Name]; dup {
			c.fail(wp.index(i).field("name"), "duplicate wave name %s (first in waves[%d])", quote(waves[i].Name), first)
		} else {
			named[waves[i].Name] = i
		}
	}
	for i := range waves {
		if info[i].named {
			continue
		}
		waves[i].Name = "wave-" + strconv.Itoa(i+1)
		if other, taken := named[waves[i].Name]; taken {
			c.fail(wp.index(i), "the default name %s is taken by waves[%d]; name this wave", quote(waves[i].Name), other)
		}
	}

	prev := -1 // the last wave with a percent
	for i := range waves {
		if info[i].percent == nil {
			continue
		}
		if prev >= 0 && waves[i].Percent < waves[prev].Percent {
			c.fail(info[i].percent, "%smust be at least %s, the percent of waves[%d], as percents are cumulative",
				info[i].prefix, formatFloat(waves[prev].Percent), prev)
		}
		prev = i
	}
	return waves
}

// wave reads one element of waves: a mapping or a shorthand scalar. gate
// is the rollout's, which a wave's own gate starts from.
func (c *checker) wave(p path, v any, gate Gate) (Wave, waveInfo) {
	var w Wave
	var info waveInfo
	switch v := v.(type) {
	case int, int64, float64:
		w.Count = c.count(p, "count ", v)
	case string:
		switch {
		case strings.HasSuffix(v, "%"):
			if f, ok := c.wavePercent(p, "percent ", v); ok {
				w.Percent, info.percent, info.prefix = f, p, "percent "
			}
		case strings.Contains(v, "="):
			w.Selector = c.selectorString(p, "selector ", v)
		default:
			c.fail(p, `must be a count such as 5, a percent such as "10%%", a selector such as "site-type=kiosk" or a mapping, got %s`, quote(v))
		}
	case map[string]any:
		info = c.waveMapping(p, v, gate, &w)
	default:
		c.fail(p, `must be a mapping, a count such as 5, a percent such as "10%%" or a selector such as "site-type=kiosk", got %s`, kindOf(v))
	}
	return w, info
}

func (c *checker) waveMapping(p path, m map[string]any, gate Gate, w *Wave) waveInfo {
	var info waveInfo
	c.keys(p, m, "approval", "count", "gate", "maxParallel", "name", "percent", "selector")
	if s, ok := c.str(p, m, "name", false); ok {
		if s == "" {
			c.fail(p.field("name"), "must not be empty; leave name out for the default wave-N")
		} else if msg := dnsLabelMsg(s); msg != "" {
			c.fail(p.field("name"), "%s", msg)
		} else {
			w.Name, info.named = s, true
		}
	}
	var set []string
	for _, k := range []string{"count", "percent", "selector"} {
		if m[k] != nil {
			set = append(set, k)
		}
	}
	switch {
	case len(set) == 0:
		c.fail(p, "one of count, percent and selector is required")
	case len(set) > 1:
		c.fail(p.field(set[1]), "conflicts with %s; set one of count, percent and selector", set[0])
	case set[0] == "count":
		w.Count = c.count(p.field("count"), "", m["count"])
	case set[0] == "percent":
		if f, ok := c.wavePercent(p.field("percent"), "", m["percent"]); ok {
			w.Percent, info.percent = f, p.field("percent")
		}
	default:
		w.Selector = c.waveSelector(p.field("selector"), m["selector"])
	}
	switch v := m["approval"].(type) {
	case nil:
	case bool:
		w.Approval = v
	default:
		c.fail(p.field("approval"), "must be true or false, got %s", kindOf(v))
	}
	w.MaxParallel = c.maxParallel(p, m)
	if g, ok := c.mapping(p, m, "gate"); ok {
		own := c.gate(p.field("gate"), g, gate)
		w.Gate = &own
	}
	return info
}

// count reads a wave's count; prefix names it in messages when p is the
// wave itself (a shorthand).
func (c *checker) count(p path, prefix string, v any) int {
	n, ok := c.integer(p, prefix, v, 1, maxWaveCount)
	if !ok {
		return 0
	}
	return int(n)
}

// maxParallel reads the optional m["maxParallel"], 0 when absent.
func (c *checker) maxParallel(p path, m map[string]any) int {
	v := m["maxParallel"]
	if v == nil {
		return 0
	}
	n, ok := c.integer(p.field("maxParallel"), "", v, 1, math.MaxInt)
	if !ok {
		return 0
	}
	return int(n)
}

// integer reads v as a whole number in [lo, hi].
func (c *checker) integer(p path, prefix string, v any, lo, hi int64) (int64, bool) {
	var n int64
	switch v := v.(type) {
	case int:
		n = int64(v)
	case int64:
		n = v
	case float64:
		switch {
		case v != math.Trunc(v):
			c.fail(p, "%smust be a whole number, got %s", prefix, formatFloat(v))
			return 0, false
		case v < -0x1p63 || v >= 0x1p63:
			n = math.MaxInt64 // out of every range; reported below
			if v < 0 {
				n = math.MinInt64
			}
		default:
			n = int64(v)
		}
	default:
		c.fail(p, "%smust be a whole number, got %s", prefix, kindOf(v))
		return 0, false
	}
	if n < lo || n > hi {
		got := fmt.Sprint(v)
		if f, ok := v.(float64); ok {
			got = formatFloat(f)
		}
		if hi == math.MaxInt {
			c.fail(p, "%smust be at least %d, got %s", prefix, lo, got)
		} else {
			c.fail(p, "%smust be between %d and %d, got %s", prefix, lo, hi, got)
		}
		return 0, false
	}
	return n, true
}

// percent reads the optional m[key] as a percentage in [0, 100].
func (c *checker) percent(p path, m map[string]any, key string) (float64, bool) {
	v := m[key]
	if v == nil {
		return 0, false
	}
	kp := p.field(key)
	f, msg := percentOf(v)
	switch {
	case msg != "":
		c.fail(kp, "%s", msg)
	case f < 0 || f > 100:
		c.fail(kp, "must be between 0 and 100, got %s", formatFloat(f))
	default:
		return f, true
	}
	return 0, false
}

// wavePercent reads a wave's percent, in (0, 100].
func (c *checker) wavePercent(p path, prefix string, v any) (float64, bool) {
	f, msg := percentOf(v)
	switch {
	case msg != "":
		c.fail(p, "%s", msg)
	case f < 0 || f > 100:
		c.fail(p, "%smust be between 0 and 100, got %s", prefix, formatFloat(f))
	case f == 0:
		c.fail(p, "%smust be greater than 0", prefix)
	default:
		return f, true
	}
	return 0, false
}

// percentOf reads a percentage written as a number or as a string such as
// "95%" or "12.5%". It returns what is wrong with v, or "".
func percentOf(v any) (float64, string) {
	const want = `must be a percent such as 95 or "95%%", got %s`
	switch v := v.(type) {
	case int:
		return float64(v), ""
	case int64:
		return float64(v), ""
	case float64:
		return v, ""
	case string:
		num, ok := strings.CutSuffix(v, "%")
		if !ok || !isDecimal(num) {
			return 0, fmt.Sprintf(want, quote(v))
		}
		f, err := strconv.ParseFloat(num, 64)
		if err != nil {
			return 0, fmt.Sprintf(want, quote(v))
		}
		return f, ""
	default:
		return 0, fmt.Sprintf(want, kindOf(v))
	}
}

// isDecimal reports whether s is an optional '-', digits, and optionally a
// '.' and more digits.
func isDecimal(s string) bool {
	s = strings.TrimPrefix(s, "-")
	whole, frac, dot := strings.Cut(s, ".")
	digits := func(t string) bool {
		for i := 0; i < len(t); i++ {
			if t[i] < '0' || t[i] > '9' {
				return false
			}
		}
		return t != ""
	}
	return digits(whole) && (!dot || digits(frac))
}

// waveSelector reads a wave's selector field: a mapping of labels or the
// string form "a=b,c=d".
func (c *checker) waveSelector(p path, v any) map[string]string {
	switch v := v.(type) {
	case string:
		return c.selectorString(p, "", v)
	case map[string]any:
		if len(v) == 0 {
			c.fail(p, "must not be empty")
			return nil
		}
		sel := make(map[string]string, len(v))
		for _, k := range sortedKeys(v) {
			kp := p.field(k)
			s, ok := v[k].(string)
			switch {
			case !ok:
				c.fail(kp, "must be a string, got %s", kindOf(v[k]))
			case labelKeyMsg(k) != "":
				c.fail(kp, "%s", labelKeyMsg(k))
			case labelValueMsg(s) != "":
				c.fail(kp, "%s", labelValueMsg(s))
			default:
				sel[k] = s
			}
		}
		return sel
	default:
		c.fail(p, `must be a mapping of labels or a string such as "site-type=kiosk", got %s`, kindOf(v))
		return nil
	}
}

// selectorString reads the string form of a selector, "key=value" terms
// separated by commas, such as "site-type=kiosk,region=eu-west".
func (c *checker) selectorString(p path, prefix, s string) map[string]string {
	if strings.TrimSpace(s) == "" {
		c.fail(p, "%smust not be empty", prefix)
		return nil
	}
	sel := map[string]string{}
	for term := range strings.SplitSeq(s, ",") {
		key, value, ok := strings.Cut(strings.TrimSpace(term), "=")
		key, value = strings.TrimSpace(key), strings.TrimSpace(value)
		switch {
		case !ok:
			c.fail(p, `%sterm %s is not "key=value"`, prefix, quote(term))
		case labelKeyMsg(key) != "":
			c.fail(p, "%s%s: %s", prefix, quote(key), labelKeyMsg(key))
		case labelValueMsg(value) != "":
			c.fail(p, "%s%s: %s", prefix, quote(key), labelValueMsg(value))
		default:
			if _, dup := sel[key]; dup {
				c.fail(p, "%slabel %s is given twice", prefix, quote(key))
			}
			sel[key] = value
			continue
		}
		return nil
	}
	return sel
}

// mapping returns the optional m[key] if it is a mapping, reporting
// another kind.
func (c *checker) mapping(p path, m map[string]any, key string) (map[string]any, bool) {
	switch v := m[key].(type) {
	case nil:
		return nil, false
	case map[string]any:
		return v, true
	default:
		c.fail(p.field(key), "must be a mapping, got %s", kindOf(v))
		return nil, false
	}
}

func formatFloat(f float64) string {
	return strconv.FormatFloat(f, 'g', -1, 64)
}

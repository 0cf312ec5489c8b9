package agent

import (
	"cmp"
	"slices"
	"time"
)

// hysteresis decides when the agent moves to a nearer server: only when
// another server's round-trip time beats the current one's by more than
// Ratio (a fraction of the current RTT) and by more than Margin, in Probes
// consecutive probe rounds. Jitter and a single lucky sample thus never
// move the agent; a server that became clearly slower does, after a few
// rounds.
type hysteresis struct {
	Ratio  float64
	Margin time.Duration
	Probes int
}

// clearlyBetter reports whether rtt beats cur by the ratio and margin.
func (h hysteresis) clearlyBetter(rtt, cur time.Duration) bool {
	if rtt <= 0 || cur <= 0 {
		return false
	}
	return float64(rtt) < float64(cur)*(1-h.Ratio) && cur-rtt > h.Margin
}

// round feeds one probe round: rtts holds the RTT measured to each server
// this round (absent or 0: the probe failed), streak the consecutive
// rounds each server was clearly better than current, which round
// updates. It returns the server to move to, or "" to stay. When the
// current server's own probe failed the round decides nothing: losing the
// connection is what moves the agent then.
func (h hysteresis) round(current string, rtts map[string]time.Duration, streak map[string]int) string {
	cur := rtts[current]
	if cur <= 0 {
		return ""
	}
	best := ""
	for _, s := range slices.Sorted(mapKeys(streak, rtts)) {
		if s == current || !h.clearlyBetter(rtts[s], cur) {
			delete(streak, s)
			continue
		}
		streak[s]++
		if streak[s] >= max(h.Probes, 1) && (best == "" || rtts[s] < rtts[best]) {
			best = s
		}
	}
	return best
}

// mapKeys returns the union of the keys of a and b.
func mapKeys[A, B any](a map[string]A, b map[string]B) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range a {
			if !yield(k) {
				return
			}
		}
		for k := range b {
			if _, dup := a[k]; dup {
				continue
			}
			if !yield(k) {
				return
			}
		}
	}
}

// rankServers orders candidate servers: the preferred one (a move to a
// nearer server), then redirects in the order given, then servers with a
// known RTT (lowest first), then the rest in configuration order.
// Servers in penalty are left out; wait is how long until the first of
// them leaves it (0 when none is in penalty).
func rankServers(order []string, info map[string]*serverInfo, preferred string, redirects []string, now time.Time) (cands []string, wait time.Duration) {
	seen := map[string]bool{}
	var earliest time.Time
	usable := func(s string) bool {
		if seen[s] {
			return false
		}
		seen[s] = true
		si := info[s]
		if si != nil && now.Before(si.penaltyUntil) {
			if earliest.IsZero() || si.penaltyUntil.Before(earliest) {
				earliest = si.penaltyUntil
			}
			return false
		}
		return true
	}
	if preferred != "" && usable(preferred) {
		cands = append(cands, preferred)
	}
	for _, r := range redirects {
		if usable(r) {
			cands = append(cands, r)
		}
	}
	var known, unknown []string
	for _, s := range order {
		if !usable(s) {
			continue
		}
		if si := info[s]; si != nil && si.rtt > 0 {
			known = append(known, s)
		} else {
			unknown = append(unknown, s)
		}
	}
	slices.SortStableFunc(known, func(a, b string) int { return cmp.Compare(info[a].rtt, info[b].rtt) })
	cands = append(append(cands, known...), unknown...)
	if !earliest.IsZero() {
		wait = earliest.Sub(now)
	}
	return cands, wait
}

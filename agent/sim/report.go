package sim

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"strings"
	"time"
)

// Summary counts the devices at the last sample.
type Summary struct {
	// Elapsed is the time since the mark (Run's start until Mark).
	Elapsed time.Duration
	// Devices is the fleet's size; Started the devices whose agent the
	// ramp has started; Connected those with a session; Converged those
	// whose agent reports converged at the marked revision.
	Devices, Started, Connected, Converged int
	// Links breaks the counts down by link name.
	Links map[string]Counts
}

// Counts are the device counts of one link.
type Counts struct {
	Devices, Started, Connected, Converged int
}

// String renders the summary as one line.
func (s Summary) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%7.1fs  started %d/%d  connected %d  converged %d", s.Elapsed.Seconds(), s.Started, s.Devices, s.Connected, s.Converged)
	for _, name := range sortedKeys(s.Links) {
		c := s.Links[name]
		fmt.Fprintf(&b, "  | %s %d: conn %d conv %d", name, c.Devices, c.Connected, c.Converged)
	}
	return b.String()
}

// Summary returns the counts of the last sample.
func (f *Fleet) Summary() Summary {
	f.mu.Lock()
	markAt := f.markAt
	f.mu.Unlock()
	s := Summary{Devices: len(f.devices), Links: map[string]Counts{}}
	if !markAt.IsZero() {
		s.Elapsed = time.Since(markAt)
	}
	for _, d := range f.devices {
		c := s.Links[d.plan.link.name]
		c.Devices++
		d.mu.Lock()
		if d.started {
			c.Started++
		}
		if d.connected {
			c.Connected++
		}
		if d.converged {
			c.Converged++
		}
		d.mu.Unlock()
		s.Links[d.plan.link.name] = c
	}
	for _, c := range s.Links {
		s.Started += c.Started
		s.Connected += c.Connected
		s.Converged += c.Converged
	}
	return s
}

// Report is the fleet's result, written as JSON. Durations are in
// seconds.
type Report struct {
	Profile      string    `json:"profile"`
	Seed         uint64    `json:"seed"`
	Devices      int       `json:"devices"`
	Servers      []string  `json:"servers"`
	Started      time.Time `json:"started"`
	Mark         time.Time `json:"mark"`
	MarkRevision uint64    `json:"mark_revision"`
	// Elapsed is the time from the mark to the report.
	Elapsed float64 `json:"elapsed_s"`
	// Links holds one entry per link name present in the fleet.
	Links map[string]*LinkReport `json:"links"`
	// DeviceReports lists every device, in fleet order.
	DeviceReports []DeviceReport `json:"devices_detail"`
}

// LinkReport summarises the devices of one link.
type LinkReport struct {
	Devices   int `json:"devices"`
	Connected int `json:"connected"`
	Converged int `json:"converged"`
	// TimeToConverged is the time from the mark until 50, 90, 99 and
	// 100 % of the link's devices had converged; null when not reached.
	TimeToConverged Percentiles `json:"time_to_converged_s"`
	// SentBytes and ReceivedBytes are per device: UDP payload bytes the
	// agent wrote, and bytes delivered to it (after the link's faults).
	SentBytes     ByteStats `json:"sent_bytes"`
	ReceivedBytes ByteStats `json:"received_bytes"`
	// Restarts counts power losses, Outages offline periods of the
	// socket (both on pop-up links only), Interrupted the steps a power
	// loss left in flight (mid-apply), which the restarted agents resolved.
	Restarts    int `json:"restarts"`
	Outages     int `json:"outages"`
	Interrupted int `json:"interrupted_steps"`
}

// Percentiles are times in seconds; nil when not reached.
type Percentiles struct {
	P50  *float64 `json:"50"`
	P90  *float64 `json:"90"`
	P99  *float64 `json:"99"`
	P100 *float64 `json:"100"`
}

// ByteStats describes a per-device byte count over the devices of a link.
type ByteStats struct {
	Total uint64  `json:"total"`
	Mean  float64 `json:"mean"`
	P50   uint64  `json:"p50"`
	Max   uint64  `json:"max"`
}

// DeviceReport is one device's result.
type DeviceReport struct {
	ID     string            `json:"id"`
	Link   string            `json:"link"`
	Labels map[string]string `json:"labels"`
	// Server is the agent endpoint of its session at the last sample.
	Server    string `json:"server,omitempty"`
	Connected bool   `json:"connected"`
	Converged bool   `json:"converged"`
	// ConvergedAfter is the time from the mark to its first converged
	// sample; nil if it has not converged since the mark.
	ConvergedAfter *float64 `json:"converged_after_s"`
	SentBytes      uint64   `json:"sent_bytes"`
	ReceivedBytes  uint64   `json:"received_bytes"`
	DroppedOut     uint64   `json:"dropped_out_packets"`
	DroppedIn      uint64   `json:"dropped_in_packets"`
	Restarts       int      `json:"restarts"`
	Outages        int      `json:"outages"`
	Interrupted    int      `json:"interrupted_steps"`
}

// Report returns the fleet's result so far.
func (f *Fleet) Report() *Report {
	now := time.Now()
	f.mu.Lock()
	r := &Report{
		Profile: f.opts.Profile, Seed: f.opts.Seed, Devices: len(f.devices), Servers: f.opts.Servers,
		Started: f.started, Mark: f.markAt, MarkRevision: f.markRev, Links: map[string]*LinkReport{},
	}
	f.mu.Unlock()
	if !r.Mark.IsZero() {
		r.Elapsed = now.Sub(r.Mark).Seconds()
	}
	times := map[string][]float64{}
	sent, recv := map[string][]uint64{}, map[string][]uint64{}
	for _, d := range f.devices {
		name := d.plan.link.name
		lr := r.Links[name]
		if lr == nil {
			lr = &LinkReport{}
			r.Links[name] = lr
		}
		d.mu.Lock()
		st := d.statsLocked()
		interrupted := d.interrupted
		if d.ag != nil {
			interrupted += d.ag.Status().Interrupted
		}
		dr := DeviceReport{
			ID: d.plan.id, Link: name, Labels: d.plan.labels, Server: d.server,
			Connected: d.connected, Converged: d.converged,
			SentBytes: st.Out.Bytes, ReceivedBytes: st.In.SentBytes,
			DroppedOut: st.Out.Dropped, DroppedIn: st.In.Dropped,
			Restarts: d.restarts, Outages: d.outages, Interrupted: interrupted,
		}
		if !d.convergedAt.IsZero() {
			s := d.convergedAt.Sub(r.Mark).Seconds()
			dr.ConvergedAfter = &s
			times[name] = append(times[name], s)
		}
		d.mu.Unlock()
		r.DeviceReports = append(r.DeviceReports, dr)
		lr.Devices++
		lr.Restarts += dr.Restarts
		lr.Outages += dr.Outages
		lr.Interrupted += dr.Interrupted
		if dr.Connected {
			lr.Connected++
		}
		if dr.Converged {
			lr.Converged++
		}
		sent[name] = append(sent[name], dr.SentBytes)
		recv[name] = append(recv[name], dr.ReceivedBytes)
	}
	for name, lr := range r.Links {
		lr.TimeToConverged = percentiles(times[name], lr.Devices)
		lr.SentBytes, lr.ReceivedBytes = byteStats(sent[name]), byteStats(recv[name])
	}
	return r
}

// percentiles returns the times by which 50, 90, 99 and 100 % of n
// devices had converged, given the convergence times of those that did.
func percentiles(times []float64, n int) Percentiles {
	slices.Sort(times)
	at := func(pct float64) *float64 {
		k := int(math.Ceil(pct / 100 * float64(n)))
		if k < 1 {
			k = 1
		}
		if n == 0 || k > len(times) {
			return nil
		}
		v := times[k-1]
		return &v
	}
	return Percentiles{P50: at(50), P90: at(90), P99: at(99), P100: at(100)}
}

func byteStats(v []uint64) ByteStats {
	if len(v) == 0 {
		return ByteStats{}
	}
	slices.Sort(v)
	var s ByteStats
	for _, x := range v {
		s.Total += x
	}
	s.Mean = float64(s.Total) / float64(len(v))
	s.P50, s.Max = v[(len(v)-1)/2], v[len(v)-1]
	return s
}

// WriteTo writes the report as indented JSON.
func (r *Report) WriteTo(w io.Writer) (int64, error) {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return 0, fmt.Errorf("sim report: %w", err)
	}
	n, err := w.Write(append(b, '\n'))
	return int64(n), err
}

// WriteFile writes the report as indented JSON to path.
func (r *Report) WriteFile(path string) error {
	fh, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("sim report: %w", err)
	}
	if _, err := r.WriteTo(fh); err != nil {
		fh.Close()
		return fmt.Errorf("sim report %s: %w", path, err)
	}
	if err := fh.Close(); err != nil {
		return fmt.Errorf("sim report %s: %w", path, err)
	}
	return nil
}

// LinkNames returns the report's link names, sorted.
func (r *Report) LinkNames() []string { return sortedKeys(r.Links) }

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

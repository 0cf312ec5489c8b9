package main

import (
	"bufio"
	"bytes"
	"fmt"
	"math/bits"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/meteor-edge/meteor/wire"
)

// deltaBytes splits the encoded size of a Delta (one or more frames) into
// resource bodies, what each resource adds around its body, and what each
// frame adds whatever it carries. Total = Bodies + PerResource + Header.
type deltaBytes struct {
	Frames  int `json:"frames"`
	Upserts int `json:"upserts"`
	Deletes int `json:"deletes"`
	// Total is the sum of the frames' sizes (wire.FrameLen: length
	// prefix, type byte and payload), the bytes on the control stream.
	Total int `json:"total_bytes"`
	// Bodies is the sum of the upserts' bodies.
	Bodies int `json:"body_bytes"`
	// PerResource is the rest of each upsert (key, digest, revision, body
	// length) and each delete's key.
	PerResource int `json:"per_resource_bytes"`
	// Header is what every frame costs however many resources it holds:
	// length prefix, type byte, base and target revisions, flags and the
	// two list counts.
	Header int `json:"header_bytes"`
}

// add accumulates another Delta's figures (for a replay of many).
func (a *deltaBytes) add(b deltaBytes) {
	a.Frames += b.Frames
	a.Upserts += b.Upserts
	a.Deletes += b.Deletes
	a.Total += b.Total
	a.Bodies += b.Bodies
	a.PerResource += b.PerResource
	a.Header += b.Header
}

// accountDelta measures the frames of one Delta as they are encoded on the
// wire.
func accountDelta(frames []*wire.Delta) deltaBytes {
	var a deltaBytes
	for _, f := range frames {
		n := wire.FrameLen(f)
		inner := 0
		for i := range f.Upserts {
			u := &f.Upserts[i]
			around := stringLen(u.Key) + len(u.Digest) + uvarintLen(u.Revision) + uvarintLen(uint64(len(u.Body)))
			a.Bodies += len(u.Body)
			a.PerResource += around
			inner += around + len(u.Body)
		}
		for _, k := range f.Deletes {
			a.PerResource += stringLen(k)
			inner += stringLen(k)
		}
		a.Frames++
		a.Upserts += len(f.Upserts)
		a.Deletes += len(f.Deletes)
		a.Total += n
		a.Header += n - inner
	}
	return a
}

// resyncGoalRatio is the goal: a resync costs at most 1.2 times the bodies
// it carries, plus a fixed header.
const resyncGoalRatio = 1.2

// resyncRatio returns (Total - Header) / Bodies, the figure the goal is
// about, and Total / Bodies. Both are 0 without bodies.
func resyncRatio(a deltaBytes) (exclHeader, raw float64) {
	if a.Bodies == 0 {
		return 0, 0
	}
	return float64(a.Total-a.Header) / float64(a.Bodies), float64(a.Total) / float64(a.Bodies)
}

func uvarintLen(v uint64) int { return (bits.Len64(v|1) + 6) / 7 }

func stringLen(s string) int { return uvarintLen(uint64(len(s))) + len(s) }

// traffic counts the frames and bytes of one direction of a control
// stream, per message type.
type traffic struct {
	Frames [16]int
	Bytes  [16]int
}

func (t *traffic) add(m wire.Message) {
	i := int(m.Type()) & 15
	t.Frames[i]++
	t.Bytes[i] += wire.FrameLen(m)
}

// bytesOf sums the bytes of the given message types.
func (t *traffic) bytesOf(types ...wire.MessageType) int {
	n := 0
	for _, ty := range types {
		n += t.Bytes[int(ty)&15]
	}
	return n
}

// procStatusKB reads a "Name:   123 kB" field of /proc/PID/status.
func procStatusKB(status []byte, name string) (int64, error) {
	sc := bufio.NewScanner(bytes.NewReader(status))
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if !ok || k != name {
			continue
		}
		f := strings.Fields(v)
		if len(f) == 0 {
			break
		}
		n, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil {
			return 0, fmt.Errorf("/proc status %s: %w", name, err)
		}
		return n, nil
	}
	return 0, fmt.Errorf("/proc status: no %s", name)
}

// gcTrace is one line the Go runtime prints with GODEBUG=gctrace=1.
type gcTrace struct {
	Seq int `json:"gc"`
	// At is the time since the process started.
	At time.Duration `json:"-"`
	// HeapLiveMB is the heap marked live by that cycle; GoalMB the next
	// goal; StacksMB the scannable goroutine stacks.
	HeapLiveMB int `json:"heap_live_mb"`
	GoalMB     int `json:"heap_goal_mb"`
	StacksMB   int `json:"stacks_mb"`
}

// gcLine matches "gc 12 @3.456s 2%: ... 45->46->23 MB, 47 MB goal, 1 MB stacks".
var gcLine = regexp.MustCompile(`^gc (\d+) @([0-9.]+)s [^:]*:.* (\d+)->(\d+)->(\d+) MB, (\d+) MB goal, (\d+) MB stacks`)

// parseGCTrace parses one gctrace line; ok is false for any other line.
func parseGCTrace(line string) (gcTrace, bool) {
	m := gcLine.FindStringSubmatch(line)
	if m == nil {
		return gcTrace{}, false
	}
	var g gcTrace
	var err error
	atoi := func(s string) int {
		n, e := strconv.Atoi(s)
		if e != nil {
			err = e
		}
		return n
	}
	g.Seq = atoi(m[1])
	sec, e := strconv.ParseFloat(m[2], 64)
	if e != nil {
		return gcTrace{}, false
	}
	g.At = time.Duration(sec * float64(time.Second))
	g.HeapLiveMB, g.GoalMB, g.StacksMB = atoi(m[5]), atoi(m[6]), atoi(m[7])
	if err != nil {
		return gcTrace{}, false
	}
	return g, true
}

// lastGCTrace returns the last gctrace line in log, if any.
func lastGCTrace(log []byte) (gcTrace, bool) {
	var last gcTrace
	found := false
	sc := bufio.NewScanner(bytes.NewReader(log))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		if g, ok := parseGCTrace(sc.Text()); ok {
			last, found = g, true
		}
	}
	return last, found
}

// perAgentKiB returns (after - before) / agents in KiB, for byte counts.
func perAgentKiB(before, after int64, agents int) float64 {
	if agents <= 0 {
		return 0
	}
	return float64(after-before) / 1024 / float64(agents)
}

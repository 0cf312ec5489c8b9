package main

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/meteor-edge/meteor/bench/internal/benchkit"
	"github.com/meteor-edge/meteor/fsm"
	"github.com/meteor-edge/meteor/scheduler"
	"github.com/meteor-edge/meteor/wire"
)

func upsert(key string, rev uint64, bodyLen int) wire.Upsert {
	body := []byte(strings.Repeat("b", bodyLen))
	return wire.Upsert{Key: key, Digest: wire.DigestOf(body), Revision: rev, Body: body}
}

// TestAccountDeltaSplitsEveryByte checks that bodies, per-resource bytes
// and headers add up to the encoded frames, and that the header is what an
// empty Delta with the same revisions costs.
func TestAccountDeltaSplitsEveryByte(t *testing.T) {
	tests := []struct {
		name string
		d    *wire.Delta
	}{
		{"empty", &wire.Delta{BaseRevision: 7, TargetRevision: 7, Complete: true}},
		{"one small upsert", &wire.Delta{BaseRevision: 1, TargetRevision: 2, Complete: true, Upserts: []wire.Upsert{upsert("a/b", 2, 10)}}},
		{"three 300-byte upserts", &wire.Delta{BaseRevision: 105, TargetRevision: 310, Complete: true, Upserts: []wire.Upsert{
			upsert("fleet-config/r00", 300, 300), upsert("fleet-config/r01", 300, 300), upsert("fleet-config/r02", 310, 300)}}},
		{"upserts and deletes", &wire.Delta{BaseRevision: 1 << 20, TargetRevision: 1<<20 + 1, Complete: true,
			Upserts: []wire.Upsert{upsert("x/big", 1<<20, 70000)}, Deletes: []string{"gone/a", "gone/bb"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := accountDelta([]*wire.Delta{tt.d})
			if want := wire.FrameLen(tt.d); a.Total != want {
				t.Errorf("Total %d, want FrameLen %d", a.Total, want)
			}
			if a.Bodies+a.PerResource+a.Header != a.Total {
				t.Errorf("bodies %d + per resource %d + header %d != total %d", a.Bodies, a.PerResource, a.Header, a.Total)
			}
			empty := wire.FrameLen(&wire.Delta{BaseRevision: tt.d.BaseRevision, TargetRevision: tt.d.TargetRevision, Complete: tt.d.Complete})
			// The length prefix grows by a byte at 128 and 16384 bytes of
			// payload; the list counts stay one byte here.
			grow := uvarintLen(uint64(tt.d.Len()+1)) - 1
			if a.Header != empty+grow {
				t.Errorf("header %d, want %d (empty Delta) + %d (longer length prefix)", a.Header, empty, grow)
			}
			if a.Upserts != len(tt.d.Upserts) || a.Deletes != len(tt.d.Deletes) || a.Frames != 1 {
				t.Errorf("counted %d upserts, %d deletes, %d frames", a.Upserts, a.Deletes, a.Frames)
			}
		})
	}
}

func TestAccountDeltaCountsEveryFrame(t *testing.T) {
	d := &wire.Delta{BaseRevision: 3, TargetRevision: 9, Complete: true}
	for i := range 40 {
		d.Upserts = append(d.Upserts, upsert(fmt.Sprintf("i/r%02d", i), 9, 1000))
	}
	frames, err := wire.SplitDelta(d, 4096)
	if err != nil {
		t.Fatal(err)
	}
	if len(frames) < 2 {
		t.Fatalf("split into %d frames", len(frames))
	}
	a := accountDelta(frames)
	whole := accountDelta([]*wire.Delta{d})
	if a.Frames != len(frames) || a.Upserts != 40 || a.Bodies != whole.Bodies || a.PerResource != whole.PerResource {
		t.Errorf("split %+v, whole %+v", a, whole)
	}
	sum := 0
	for _, f := range frames {
		sum += wire.FrameLen(f)
	}
	if a.Total != sum || a.Header <= whole.Header {
		t.Errorf("total %d (frames sum %d), header %d (whole Delta's %d)", a.Total, sum, a.Header, whole.Header)
	}
	var acc deltaBytes
	acc.add(a)
	acc.add(whole)
	if acc.Total != a.Total+whole.Total || acc.Frames != a.Frames+1 {
		t.Errorf("add: %+v", acc)
	}
}

func TestResyncRatioAndVerdict(t *testing.T) {
	a := deltaBytes{Total: 1064, Bodies: 900, PerResource: 156, Header: 8, Upserts: 3, Frames: 1}
	excl, raw := resyncRatio(a)
	if excl != 1056.0/900 || raw != 1064.0/900 {
		t.Errorf("ratios %v %v", excl, raw)
	}
	if e, r := resyncRatio(deltaBytes{Total: 8, Header: 8}); e != 0 || r != 0 {
		t.Errorf("no bodies: %v %v", e, r)
	}
	r := &resyncResult{Resync: a, Revisions: 100, RatioExclHeader: excl, RatioReplay: 100}
	if v := resyncVerdict(r); !strings.HasPrefix(v, "resync goal MET") {
		t.Errorf("verdict %q", v)
	}
	r.RatioExclHeader = 1.21
	if v := resyncVerdict(r); !strings.HasPrefix(v, "resync goal NOT MET") {
		t.Errorf("verdict %q", v)
	}
}

func TestMemoryVerdict(t *testing.T) {
	m := &memoryResult{Levels: []*memoryLevel{{Agents: 1000, RSSKiB: 40}, {Agents: 10000, RSSKiB: 63.9}}}
	if v := memoryVerdict(m); !strings.HasPrefix(v, "memory goal MET") {
		t.Errorf("verdict %q", v)
	}
	m.Levels[1].RSSKiB = 64
	if v := memoryVerdict(m); !strings.HasPrefix(v, "memory goal NOT MET") {
		t.Errorf("verdict %q", v)
	}
	m.Levels[1].RSSKiB, m.Levels[0].Failed = 10, 1
	if v := memoryVerdict(m); !strings.HasPrefix(v, "memory goal NOT MET") || !strings.Contains(v, "1 failed") {
		t.Errorf("verdict with a failed device %q", v)
	}
	if v := memoryVerdict(&memoryResult{}); !strings.Contains(v, "not evaluated") {
		t.Errorf("verdict %q", v)
	}
}

func TestMemorySummaryIsTheLargestLevel(t *testing.T) {
	m := &memoryResult{Levels: []*memoryLevel{
		{Agents: 1000, Added: 1000, RSSKiB: 150, HeapKiB: 60},
		{Agents: 10000, Added: 9000, RSSKiB: 60.5, HeapKiB: 30, MarginalRSSKiB: 50, Elections: 1, UDP: &benchkit.UDPDrops{Servers: 2}},
	}}
	rows := memorySummary(m)
	if len(rows) != 1 {
		t.Fatalf("rows %+v", rows)
	}
	r := rows[0]
	if r.Key != "sessions-memory" || r.Meteor != "60.5 KiB (live Go heap 30.0 KiB)" || r.Met == nil || !*r.Met || *r.Elections != 1 ||
		!strings.Contains(r.Figure, "10,000 idle sessions") || !strings.Contains(r.Note, "marginal between the two levels 50.0 KiB") || !strings.Contains(r.Note, "2 on the servers'") {
		t.Errorf("row %+v", r)
	}
	m.Levels[1].Failed = 3
	if r := memorySummary(m)[0]; *r.Met {
		t.Error("met with devices that never connected")
	}
	if memorySummary(&memoryResult{}) != nil {
		t.Error("a row without levels")
	}
}

func TestPerAgentKiB(t *testing.T) {
	if got := perAgentKiB(1<<20, 1<<20+1000*64*1024, 1000); got != 64 {
		t.Errorf("got %v", got)
	}
	if got := perAgentKiB(0, 100, 0); got != 0 {
		t.Errorf("no agents: %v", got)
	}
}

// TestResourceBodiesAreExactAndAsServed checks that every version of every
// resource has the requested body size and that the bytes equal what the
// server's planner sends.
func TestResourceBodiesAreExactAndAsServed(t *testing.T) {
	f, err := newFleetIntent(50, 300)
	if err != nil {
		t.Fatal(err)
	}
	for k := 1; k <= 3; k++ {
		f.revise(k*37, 3, "same")
	}
	in := f.intent()
	if err := in.Validate(); err != nil {
		t.Fatal(err)
	}
	state, err := fsm.New(fsm.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	cmd, err := fsm.Encode(fsm.PutIntentType, &fsm.PutIntentRequest{Intent: in})
	if err != nil {
		t.Fatal(err)
	}
	if res := state.Apply(1, cmd); res.Err != nil {
		t.Fatal(res.Err)
	}
	desired, err := scheduler.NewPlanner().Desired(state.Read(), "bench-device", deviceLabels())
	if err != nil {
		t.Fatal(err)
	}
	if len(desired.Resources) != 50 {
		t.Fatalf("%d desired resources", len(desired.Resources))
	}
	for i, r := range desired.Resources {
		want, err := resourceBody(in.Resources[i])
		if err != nil {
			t.Fatal(err)
		}
		if r.Key != resourceKey(i) || string(r.Body) != string(want) || len(r.Body) != 300 {
			t.Errorf("resource %d: key %s, %d-byte body, want %s and our %d-byte encoding", i, r.Key, len(r.Body), resourceKey(i), len(want))
		}
	}
	if _, err := newFleetIntent(5, 50); err == nil {
		t.Error("a 50-byte body: no error")
	}
}

func TestChangedAt(t *testing.T) {
	if diff := cmp.Diff([]int{0, 1, 2}, changedAt(17, 3, "same")); diff != "" {
		t.Error(diff)
	}
	var got []int
	for k := 1; k <= 6; k++ {
		got = append(got, changedAt(k, 3, "rotate")...)
	}
	if diff := cmp.Diff([]int{0, 1, 2, 0, 1, 2}, got); diff != "" {
		t.Error(diff)
	}
	f, _ := newFleetIntent(5, 300)
	f.revise(4, 3, "rotate")
	if diff := cmp.Diff([]int{4, 0, 0, 0, 0}, f.versions); diff != "" {
		t.Error(diff)
	}
}

func TestTraffic(t *testing.T) {
	var tr traffic
	tr.add(&wire.Ack{Revision: 300})
	tr.add(&wire.Pull{KnownRevision: 1})
	tr.add(&wire.Ack{Revision: 1})
	if got, want := tr.bytesOf(wire.TypeAck), wire.FrameLen(&wire.Ack{Revision: 300})+wire.FrameLen(&wire.Ack{Revision: 1}); got != want {
		t.Errorf("ack bytes %d, want %d", got, want)
	}
	if tr.Frames[wire.TypeAck] != 2 || tr.bytesOf(wire.TypeHello) != 0 {
		t.Errorf("traffic %+v", tr)
	}
}

func TestParseGCTrace(t *testing.T) {
	line := "gc 39 @60.624s 6%: 0.41+981+0.068 ms clock, 0.82+136/499/283+0.13 ms cpu, 1425->1516->821 MB, 1584 MB goal, 38 MB stacks, 0 MB globals, 2 P"
	g, ok := parseGCTrace(line)
	want := gcTrace{Seq: 39, At: 60624 * time.Millisecond, HeapLiveMB: 821, GoalMB: 1584, StacksMB: 38}
	if !ok || g != want {
		t.Errorf("parse: %+v %v, want %+v", g, ok, want)
	}
	forced := "gc 7 @120.003s 0%: 0.01+0.5+0.002 ms clock, 0.03+0/0.4/0+0.005 ms cpu, 3->3->1 MB, 4 MB goal, 0 MB stacks, 0 MB globals, 2 P (forced)"
	for _, bad := range []string{"", "2026-11-29T15:21:32Z [INFO] meteor.server: gc 1 @1s", "gc x @1s 1%: 1->2->3 MB, 4 MB goal, 0 MB stacks"} {
		if _, ok := parseGCTrace(bad); ok {
			t.Errorf("parsed %q", bad)
		}
	}
	log := strings.Join([]string{"gc 1 @0.5s 1%: x, 4->4->2 MB, 5 MB goal, 0 MB stacks, 0 MB globals, 2 P", "other", forced, "tail"}, "\n")
	last, ok := lastGCTrace([]byte(log))
	if !ok || last.Seq != 7 || last.HeapLiveMB != 1 {
		t.Errorf("last %+v %v", last, ok)
	}
	if _, ok := lastGCTrace([]byte("no gc here\n")); ok {
		t.Error("found a GC in a log without one")
	}
}

func TestProcStatusKB(t *testing.T) {
	status := []byte("Name:\tmeteor\nVmHWM:\t  204800 kB\nVmRSS:\t  196000 kB\nRssAnon:\t  180000 kB\nThreads:\t8\n")
	for name, want := range map[string]int64{"VmRSS": 196000, "VmHWM": 204800, "RssAnon": 180000, "Threads": 8} {
		if got, err := procStatusKB(status, name); err != nil || got != want {
			t.Errorf("%s = %d, %v; want %d", name, got, err, want)
		}
	}
	if _, err := procStatusKB(status, "VmSwap"); err == nil {
		t.Error("missing field: no error")
	}
}

func TestParseFlags(t *testing.T) {
	c, err := parseFlags(nil, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(c.parts, []string{"resync", "reconnect", "memory", "storm", "drain"}) || !slices.Equal(c.agents, []int{1000, 10000}) ||
		c.resources != 50 || c.bodySize != 300 || c.revisions != 100 || c.changed != 3 || c.reconnects != 200 || c.delay != 25*time.Millisecond {
		t.Errorf("defaults %+v", c)
	}
	c, err = parseFlags([]string{"-agents", "500, 20,500", "-parts", "memory,resync,memory", "-churn", "rotate"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(c.agents, []int{20, 500}) || !slices.Equal(c.parts, []string{"memory", "resync"}) || c.churn != "rotate" {
		t.Errorf("parsed %+v", c)
	}
	for _, args := range [][]string{
		{"-agents", "0"}, {"-agents", "x"}, {"-parts", "cpu"}, {"-churn", "all"},
		{"-changed", "51"}, {"-resources", "0"}, {"-reconnects", "0"}, {"-timeout", "0s"}, {"extra"},
	} {
		if _, err := parseFlags(args, io.Discard); err == nil {
			t.Errorf("parseFlags(%q): no error", args)
		}
	}
}

func TestMarkdownHasEverySection(t *testing.T) {
	rep := &report{
		Date:    "2026-01-01T00:00:00Z",
		Machine: benchkit.Machine{NProc: 2, LoadAvgStart: "1 1 1", LoadAvgEnd: "2 2 2"},
		Params:  paramInfo{Agents: []int{10}, Resources: 50},
		Resync:  &resyncResult{Resync: deltaBytes{Total: 10, Bodies: 9}},
		Reconnect: []*reconnectRow{
			{Link: "loopback", Mode: "0-RTT resumption", N: 1, Used0RTTFrac: 1},
			{Link: "loopback", Mode: "full handshake", N: 1},
		},
		Memory: &memoryResult{Levels: []*memoryLevel{{Agents: 10}}},
		Storm: &stormResult{Agents: 10, Detect: detectKill, Modes: []*stormMode{
			{Key: storm0RTT, Mode: "0-RTT resumption", Agents: 10, Opened: 10, ResumedAllms: 100, PerServer: map[string]int{"s2": 10}},
			{Key: stormFull, Mode: "full handshake", Agents: 10, Opened: 10, ResumedAllms: 150},
		}},
		Verdicts: []string{"verdict one"},
		Notes:    []string{"note one"},
	}
	md := markdown(rep)
	for _, want := range []string{"## Resync bytes", "## Reconnect time", "## Server memory per idle agent", "## Reconnect storm", "s2 10", "1.50x (full / 0-RTT)", "verdict one", "note one", "2 2 2"} {
		if !strings.Contains(md, want) {
			t.Errorf("markdown lacks %q", want)
		}
	}
	if v := reconnectVerdict(rep.Reconnect); !strings.Contains(v, "0-RTT used on 100% of 1") {
		t.Errorf("reconnect verdict %q", v)
	}
}

package wire

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

func digest(s string) Digest { return DigestOf([]byte(s)) }

// sampleMessages returns, for every message type, a zero message and one
// with every field set (including extreme values). They also seed the fuzz
// corpus, so they must stay deterministic.
func sampleMessages() []Message {
	body := []byte(`{"intent":"pos","type":"file","id":"tls-cert","spec":{"path":"/etc/pos/tls.crt"}}`)
	applied := []AppliedResource{
		{Key: "pos/tls-cert", Digest: digest("a"), Revision: 7},
		{Key: "net/firewall", Digest: digest("b"), Revision: math.MaxUint64},
	}
	return []Message{
		&Hello{},
		&Hello{
			Major: ProtocolMajor, Minor: ProtocolMinor, AgentVersion: "meteor-agent 1.2.3",
			SessionID:   SessionID{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16},
			ResumeToken: []byte{0x01, 0xff, 0x00}, Labels: map[string]string{"region": "eu", "link": "cellular", "site": "store-42"},
			AckedRevision: 41, AckedReportSeq: 300, Inventory: true, Applied: applied, Early: true,
			Extensions: []Extension{{Type: 1, Data: []byte("x")}, {Type: 1 << 40}},
		},
		&Welcome{},
		&Welcome{
			Major: 1, Minor: 3, ServerID: "s-eu-1", SessionID: SessionID{0xaa},
			ResumeToken: bytes.Repeat([]byte{7}, 80), DesiredRevision: 42, AcceptedReportSeq: 299,
			ServerTimeUnixNano: -1, PullInterval: 5 * time.Minute,
			Extensions: []Extension{{Type: 0, Data: []byte{0}}},
		},
		&Reject{Code: CodeVersionUnsupported},
		&Reject{Code: CodeLagging, Reason: "behind revision 42", RetryAfter: 1500 * time.Millisecond, Redirect: []string{"10.0.0.2:7443", "s2.example:7443"}},
		&GoAway{Code: CodeShuttingDown, Reason: "draining", RetryAfter: time.Second},
		&Notify{},
		&Notify{Revision: 1 << 63},
		&Notify{Revision: 42, Base: digest("base"), Delta: &Delta{BaseRevision: 40, TargetRevision: 42, Complete: true}},
		&Notify{
			Revision: 42, Base: digest("base"),
			Delta: &Delta{
				BaseRevision: 40, TargetRevision: 42, Complete: true,
				Upserts: []Upsert{{Key: "pos/tls-cert", Revision: 42, Digest: DigestOf(body), Body: body}},
				Deletes: []string{"pos/old"},
			},
		},
		&Pull{},
		&Pull{KnownRevision: 40, Inventory: true},
		&Pull{KnownRevision: 40, Inventory: true, Applied: applied},
		&Delta{},
		&Delta{
			BaseRevision: 40, TargetRevision: 42, Complete: true,
			Upserts: []Upsert{{Key: "pos/tls-cert", Revision: 42, Digest: DigestOf(body), Body: body}, {Key: "pos/empty", Revision: 41, Digest: DigestOf(nil)}},
			Deletes: []string{"pos/old", "net/legacy"},
		},
		&Ack{Revision: 42},
		&Report{},
		&Report{
			Seq: 301, DesiredRevision: 42, Full: true, Status: "blocked", BlockedReason: "lock held by pos-sync since 2024-05-01T10:00:00Z",
			Resources: []ResourceReport{
				{Key: "pos/tls-cert", AppliedDigest: digest("a"), AppliedRevision: 42, Effective: EffectiveMismatch,
					Detail: "port 8443 serves cert v6", LastError: "", Attempts: math.MaxUint32, UpdatedAtUnixNano: 1714557600000000000},
				{Key: "net/firewall", Effective: EffectiveUnknown, LastError: "iptables: exit 1", Attempts: 1, UpdatedAtUnixNano: math.MinInt64},
			},
		},
		&Report{States: true},
		&Report{
			Seq: 302, DesiredRevision: 42, Status: "failed", States: true,
			Resources: []ResourceReport{
				{Key: "pos/a", State: StatePending},
				{Key: "pos/b", State: StateProgressing, AppliedDigest: digest("b"), AppliedRevision: 41},
				{Key: "pos/c", State: StateConverged, Effective: EffectiveOK, Detail: "content and mode match"},
				{Key: "pos/d", State: StateDrifted, Effective: EffectiveMismatch, Detail: "drift reported, not corrected: mode 0600"},
				{Key: "pos/e", State: StateOverridden, Effective: EffectiveMismatch, Detail: "local override tolerated: port 8080"},
				{Key: "pos/f", State: StateBlocked, Detail: "requires pos/g, which is failed"},
				{Key: "pos/g", State: StateFailed, LastError: "exit 1", Attempts: 3, Detail: "retrying at 2024-05-01T10:00:00Z", UpdatedAtUnixNano: 1},
			},
		},
		&Report{
			Seq: 303, Status: "converged", States: true, Corrections: true,
			Resources: []ResourceReport{
				{Key: "pos/a", State: StateConverged, Effective: EffectiveOK, Corrections: 11},
				{Key: "pos/b", State: StateDrifted, Corrections: math.MaxUint32},
				{Key: "pos/c", State: StatePending},
			},
		},
		&Report{Traffic: &Traffic{}},
		&Report{
			Seq: 304, Status: "converged", States: true, Corrections: true,
			Resources: []ResourceReport{{Key: "pos/a", State: StateConverged, Effective: EffectiveOK, Corrections: 1}},
			Traffic: &Traffic{
				Day: 20789,
				Servers: []ServerTraffic{
					{Server: "10.0.0.1:7443", TrafficCounts: TrafficCounts{SentBytes: 23_040, RecvBytes: 18_610, SentPackets: 101, RecvPackets: 88}},
					{Server: "[2001:db8::2]:7443", TrafficCounts: TrafficCounts{SentBytes: 5_904, RecvBytes: 4_800, SentPackets: 6, RecvPackets: 5}},
					{Server: "s3.example:7443", TrafficCounts: TrafficCounts{SentBytes: math.MaxUint64, RecvBytes: 1, SentPackets: math.MaxUint64}},
				},
				Previous: TrafficCounts{SentBytes: 190_300, RecvBytes: 150_000, SentPackets: 900, RecvPackets: 850},
			},
		},
		&ReportAck{Seq: 301},
		&Ping{Seq: 1, Interval: 25 * time.Second},
		&Ping{Seq: 7, Interval: 3 * time.Minute, EchoAfter: 200 * time.Second},
		&Ping{Seq: 8, Interval: 2 * time.Minute, Pad: ResetProbePad},
		&Pong{Seq: 7},
		&Settings{},
		&Settings{
			Seq: 1 << 40,
			Classes: []SettingsClass{
				{Name: "default", PullInterval: 10 * time.Minute, ProbeInterval: time.Minute, ReportInterval: 6 * time.Hour, RetryBase: time.Second, RetryMax: 5 * time.Minute, RetryJitter: 0.1},
				{Name: "network-policy", PullInterval: time.Minute, ProbeInterval: 15 * time.Second, ReportInterval: time.Hour, RetryBase: time.Second, RetryMax: 30 * time.Second, RetryJitter: 1},
			},
			Zone: "Europe/Berlin",
			Windows: []MaintenanceWindow{
				{Name: "store-nights", Spans: []Span{{Days: 0x1f, Start: 22 * 60, End: 5 * 60}, {Days: 0x60, Start: 0, End: 23*60 + 59}}},
			},
			Labels:  map[string]string{"region": "eu", "site": "store-42", "timezone": "Europe/Berlin"},
			Unlocks: []Unlock{{Index: 9, Lock: "pos-sync", Since: 1714557600000000000, Reason: "sync hung since Friday", Actor: "alice (4f1c)"}, {Index: math.MaxUint64, Lock: "x", Since: math.MinInt64}},
		},
		&Report{Edge: true},
		&Report{
			Seq: 305, Status: "blocked", States: true, Corrections: true, Edge: true, BlockedReason: "pos/restart: lock pos-sync held by pos-sync since 2024-05-01T10:00:00Z",
			Resources: []ResourceReport{
				{Key: "pos/a", State: StateOverridden, Hold: Hold{Kind: HoldOverride, Since: 1, Until: 86400e9, Holder: "uid 0 (root)", Note: "vendor hotfix on this till"}},
				{Key: "pos/b", State: StateDrifted, Corrections: 11, Hold: Hold{Kind: HoldFighting, Since: 2, Until: 3, Count: math.MaxUint32}},
				{Key: "pos/c", State: StateBlocked, Hold: Hold{Kind: HoldWindow, Until: 4, Holder: "store-nights", Note: "Europe/Berlin"}},
				{Key: "pos/d", State: StateBlocked, Hold: Hold{Kind: HoldLock, Since: math.MinInt64, Until: math.MaxInt64, Holder: "pos-sync", Note: "pos-sync"}},
				{Key: "pos/e", State: StateBlocked, Hold: Hold{Kind: HoldPrecondition, Note: "disk:/var>=2GiB: 1.2 GiB free"}},
				{Key: "pos/f", State: StatePending, Hold: Hold{Kind: HoldSchedule, Until: 5}},
				{Key: "pos/g", State: StateConverged},
			},
			Locks: []Lock{
				{Name: "backup", Holder: "pid 4242", Since: 7, Source: LockFile},
				{Name: "pos-sync", Holder: "pos-sync", Since: 1714557600000000000, MaxHold: 2 * time.Hour, Source: LockAgent},
			},
			Recovery: &Recovery{At: 8, Unclean: true, Total: 5, Applied: 2, Steps: []RecoveredStep{
				{Key: "pos/c", Digest: digest("c"), Outcome: StepAppliedAgain, Child: ChildEnded},
				{Key: "pos/d", Digest: digest("d"), Outcome: StepAlreadyApplied, Child: ChildWaited},
				{Key: "pos/x", Outcome: StepDropped},
			}},
			Unlocked: []UnlockResult{{Index: 9, Lock: "pos-sync", Outcome: UnlockBroken, At: 10}, {Index: 12, Lock: "x", Outcome: UnlockRetaken, At: 11}},
		},
		&Report{Edge: true, Recovery: &Recovery{At: 1}},
	}
}

func settingsClass(name string) SettingsClass {
	return SettingsClass{Name: name, PullInterval: time.Minute, ProbeInterval: time.Minute, ReportInterval: time.Hour, RetryBase: time.Second, RetryMax: time.Minute}
}

func TestResourceStateNames(t *testing.T) {
	for s := StatePending; s <= stateMax; s++ {
		got, ok := ParseResourceState(s.String())
		if !ok || got != s {
			t.Errorf("ParseResourceState(%q) = %v, %v; want %v", s.String(), got, ok, s)
		}
	}
	for _, name := range []string{"", "unknown", "Converged", "stuck"} {
		if s, ok := ParseResourceState(name); ok || s != StateUnknown {
			t.Errorf("ParseResourceState(%q) = %v, %v; want unknown, false", name, s, ok)
		}
	}
	if got := ResourceState(8).String(); got != "ResourceState(8)" {
		t.Errorf("String = %q", got)
	}
}

var cmpOpts = cmp.Options{cmpopts.EquateEmpty()}

func TestRoundTrip(t *testing.T) {
	for i, m := range sampleMessages() {
		t.Run(fmt.Sprintf("%d-%s", i, m.Type()), func(t *testing.T) {
			payload := m.Append(nil)
			if got := m.Len(); got != len(payload) {
				t.Errorf("Len() = %d, encoded %d bytes", got, len(payload))
			}
			got, err := DecodeMessage(m.Type(), payload)
			if err != nil {
				t.Fatalf("decode: %v", err)
			}
			if diff := cmp.Diff(m, got, cmpOpts); diff != "" {
				t.Errorf("round trip (-want +got):\n%s", diff)
			}
			if again := got.Append(nil); !bytes.Equal(again, payload) {
				t.Errorf("re-encoding differs:\n got %x\nwant %x", again, payload)
			}

			// Through a frame.
			var buf bytes.Buffer
			if err := WriteMessage(&buf, m); err != nil {
				t.Fatal(err)
			}
			if buf.Len() != FrameLen(m) {
				t.Errorf("FrameLen = %d, wrote %d", FrameLen(m), buf.Len())
			}
			r := NewReader(&buf)
			fm, err := r.Read()
			if err != nil {
				t.Fatalf("read frame: %v", err)
			}
			if diff := cmp.Diff(m, fm, cmpOpts); diff != "" {
				t.Errorf("frame round trip (-want +got):\n%s", diff)
			}
			if _, err := r.Read(); err != io.EOF {
				t.Errorf("read after last frame: %v, want io.EOF", err)
			}
		})
	}
}

// TestTruncated decodes every strict prefix of every payload and frame:
// each must fail cleanly, frames with io.ErrUnexpectedEOF (io.EOF when
// empty). The one exception is by design: a Notify that carries a Delta
// cut right after its revision is a complete plain Notify.
func TestTruncated(t *testing.T) {
	for i, m := range sampleMessages() {
		payload := m.Append(nil)
		plain := -1
		if n, ok := m.(*Notify); ok && n.Delta != nil {
			plain = uvarintLen(n.Revision)
		}
		for n := range len(payload) {
			if n == plain {
				got, err := DecodeMessage(m.Type(), payload[:n])
				if err != nil || got.(*Notify).Delta != nil {
					t.Errorf("msg %d (%s) payload prefix %d/%d: %v, %v; want a plain Notify", i, m.Type(), n, len(payload), got, err)
				}
				continue
			}
			if _, err := DecodeMessage(m.Type(), payload[:n]); !errors.Is(err, io.ErrUnexpectedEOF) {
				t.Errorf("msg %d (%s) payload prefix %d/%d: err = %v, want io.ErrUnexpectedEOF", i, m.Type(), n, len(payload), err)
			}
		}
		frame := AppendFrame(nil, m)
		for n := range len(frame) {
			want := io.ErrUnexpectedEOF
			if n == 0 {
				want = io.EOF
			}
			_, err := ReadMessage(bufio.NewReader(bytes.NewReader(frame[:n])), 0)
			if err != want {
				t.Errorf("msg %d (%s) frame prefix %d/%d: err = %v, want %v", i, m.Type(), n, len(frame), err, want)
			}
		}
	}
}

func TestMalformed(t *testing.T) {
	hello := (&Hello{Labels: map[string]string{"a": "1", "b": "2"}}).Append(nil)
	// Offset of the label count: major(2) minor(2) flags(1) version(1) session(16) token(1).
	const labels = 2 + 2 + 1 + 1 + 16 + 1
	swapped := bytes.Clone(hello)
	copy(swapped[labels+1:], []byte{1, 'b', 1, '2', 1, 'a', 1, '1'})
	dup := bytes.Clone(hello)
	copy(dup[labels+1:], []byte{1, 'a', 1, '1', 1, 'a', 1, '2'})

	for _, tc := range []struct {
		name    string
		t       MessageType
		payload []byte
	}{
		{"trailing byte", TypeAck, []byte{1, 0}},
		{"non-minimal varint", TypeAck, []byte{0x81, 0x00}},
		{"varint overflow", TypeAck, []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x02}},
		{"undefined hello flag", TypeHello, func() []byte { b := (&Hello{}).Append(nil); b[4] = 0x80; return b }()},
		{"applied without inventory", TypePull, append([]byte{0, 0, 1, 1, 'k'}, make([]byte, 33)...)},
		{"unsorted labels", TypeHello, swapped},
		{"duplicate labels", TypeHello, dup},
		{"notify tail without the delta flag", TypeNotify, append([]byte{42, 0}, make([]byte, 32+4)...)},
		{"notify with an undefined flag", TypeNotify, append([]byte{42, 3}, (&Delta{TargetRevision: 42, Complete: true}).Append(make([]byte, 32))...)},
		{"notify with an incomplete delta", TypeNotify, (&Notify{Revision: 42, Delta: &Delta{BaseRevision: 40, TargetRevision: 42}}).Append(nil)},
		{"notify with a delta to another revision", TypeNotify, (&Notify{Revision: 42, Delta: &Delta{BaseRevision: 40, TargetRevision: 41, Complete: true}}).Append(nil)},
		{"notify with a malformed delta", TypeNotify, append((&Notify{Revision: 42, Delta: &Delta{TargetRevision: 42, Complete: true}}).Append(nil), 0)},
		{"undefined refusal code", TypeReject, []byte{9, 0, 0, 0}},
		{"zero refusal code", TypeGoAway, []byte{0, 0, 0, 0}},
		{"too many redirects", TypeReject, []byte{1, 0, 0, MaxRedirects + 1}},
		{"invalid UTF-8", TypeReject, []byte{1, 1, 0xff, 0, 0}},
		{"undefined effective", TypeReport, func() []byte {
			b := (&Report{Resources: []ResourceReport{{}}}).Append(nil)
			b[3+1+1+1+1+32+1] = 3
			return b
		}()},
		{"undefined report flag", TypeReport, []byte{0, 0, 32, 0, 0, 0}},
		{"undefined hold", TypeReport, (&Report{Edge: true, Resources: []ResourceReport{{Hold: Hold{Kind: holdMax + 1}}}}).Append(nil)},
		{"lock without a name", TypeReport, (&Report{Edge: true, Locks: []Lock{{Source: LockAgent}}}).Append(nil)},
		{"undefined lock source", TypeReport, (&Report{Edge: true, Locks: []Lock{{Name: "a"}}}).Append(nil)},
		{"unsorted locks", TypeReport, (&Report{Edge: true, Locks: []Lock{{Name: "b", Source: LockFile}, {Name: "a", Source: LockFile}}}).Append(nil)},
		{"recovery applied above total", TypeReport, (&Report{Edge: true, Recovery: &Recovery{Total: 1, Applied: 2}}).Append(nil)},
		{"undefined step outcome", TypeReport, (&Report{Edge: true, Recovery: &Recovery{Steps: []RecoveredStep{{Key: "a/b"}}}}).Append(nil)},
		{"undefined unlock outcome", TypeReport, (&Report{Edge: true, Unlocked: []UnlockResult{{Index: 1, Lock: "l"}}}).Append(nil)},
		{"unsorted unlock results", TypeReport, (&Report{Edge: true, Unlocked: []UnlockResult{{Index: 2, Lock: "l", Outcome: UnlockBroken}, {Index: 1, Lock: "l", Outcome: UnlockBroken}}}).Append(nil)},
		{"zero class interval", TypeSettings, (&Settings{Classes: []SettingsClass{{Name: "a", ProbeInterval: time.Second, ReportInterval: time.Second, RetryBase: time.Second, RetryMax: time.Second}}}).Append(nil)},
		{"class jitter above 1000", TypeSettings, func() []byte {
			b := (&Settings{Classes: []SettingsClass{settingsClass("a")}}).Append(nil)
			// The jitter (u16) ends the class; zone, windows, labels and
			// unlocks follow, one byte each.
			b[len(b)-6], b[len(b)-5] = 0x03, 0xe9 // 1001
			return b
		}()},
		{"unsorted classes", TypeSettings, (&Settings{Classes: []SettingsClass{settingsClass("b"), settingsClass("a")}}).Append(nil)},
		{"retry base above max", TypeSettings, func() []byte {
			c := settingsClass("a")
			c.RetryBase = time.Hour
			return (&Settings{Classes: []SettingsClass{c}}).Append(nil)
		}()},
		{"window without spans", TypeSettings, (&Settings{Windows: []MaintenanceWindow{{Name: "w"}}}).Append(nil)},
		{"window on no day", TypeSettings, (&Settings{Windows: []MaintenanceWindow{{Name: "w", Spans: []Span{{Start: 1, End: 2}}}}}).Append(nil)},
		{"window day bit 7", TypeSettings, (&Settings{Windows: []MaintenanceWindow{{Name: "w", Spans: []Span{{Days: 0x80 | 1, Start: 1, End: 2}}}}}).Append(nil)},
		{"empty span", TypeSettings, (&Settings{Windows: []MaintenanceWindow{{Name: "w", Spans: []Span{{Days: 1, Start: 60, End: 60}}}}}).Append(nil)},
		{"span past midnight", TypeSettings, (&Settings{Windows: []MaintenanceWindow{{Name: "w", Spans: []Span{{Days: 1, Start: 60, End: MinutesPerDay}}}}}).Append(nil)},
		{"unsorted windows", TypeSettings, (&Settings{Windows: []MaintenanceWindow{{Name: "b", Spans: []Span{{Days: 1, End: 1}}}, {Name: "a", Spans: []Span{{Days: 1, End: 1}}}}}).Append(nil)},
		{"unlock of no lock", TypeSettings, (&Settings{Unlocks: []Unlock{{Index: 1}}}).Append(nil)},
		{"unsorted unlocks", TypeSettings, (&Settings{Unlocks: []Unlock{{Index: 2, Lock: "a"}, {Index: 2, Lock: "b"}}}).Append(nil)},
		{"traffic day overflow", TypeReport, append([]byte{0, 0, reportTraffic, 0, 0, 0}, 0x80, 0x80, 0x80, 0x80, 0x10, 0, 0, 0, 0, 0)},
		{"too many traffic servers", TypeReport, append([]byte{0, 0, reportTraffic, 0, 0, 0, 1, MaxTrafficServers + 1}, make([]byte, 5*(MaxTrafficServers+1)+4)...)},
		{"empty traffic server", TypeReport, (&Report{Traffic: &Traffic{Servers: []ServerTraffic{{}}}}).Append(nil)},
		{"unsorted traffic servers", TypeReport, (&Report{Traffic: &Traffic{Servers: []ServerTraffic{{Server: "b:1"}, {Server: "a:1"}}}}).Append(nil)},
		{"duplicate traffic servers", TypeReport, (&Report{Traffic: &Traffic{Servers: []ServerTraffic{{Server: "a:1"}, {Server: "a:1"}}}}).Append(nil)},
		{"unknown resource state", TypeReport, func() []byte {
			b := (&Report{States: true, Resources: []ResourceReport{{State: StatePending}}}).Append(nil)
			b[3+1+1+1+1+32+1+1] = byte(StateUnknown)
			return b
		}()},
		{"undefined resource state", TypeReport, func() []byte {
			b := (&Report{States: true, Resources: []ResourceReport{{State: StatePending}}}).Append(nil)
			b[3+1+1+1+1+32+1+1] = byte(stateMax + 1)
			return b
		}()},
		{"delta flag", TypeDelta, []byte{0, 0, 2, 0, 0}},
		{"unsorted extensions", TypeWelcome, func() []byte {
			return (&Welcome{Extensions: []Extension{{Type: 2}, {Type: 1}}}).Append(nil)
		}()},
		{"zero keep-alive interval", TypePing, []byte{1, 0, 0}},
		{"keep-alive interval too long", TypePing, (&Ping{Interval: MaxPingInterval + time.Millisecond}).Append(nil)},
		{"echo after too long", TypePing, (&Ping{Interval: time.Second, EchoAfter: MaxEchoAfter + time.Millisecond}).Append(nil)},
		{"padding not zero", TypePing, append((&Ping{Interval: time.Second}).Append(nil)[:4], 1, 1)},
		{"padding too long", TypePing, (&Ping{Interval: time.Second, Pad: MaxPingPad + 1}).Append(nil)},
		{"key too long", TypeDelta, append([]byte{0, 0, 0, 0, 1, 0x81, 0x04}, make([]byte, 513)...)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := DecodeMessage(tc.t, tc.payload); !errors.Is(err, ErrMalformed) {
				t.Errorf("err = %v, want ErrMalformed", err)
			}
		})
	}
}

// limitedReader fails the test if the frame reader reads beyond what it
// has been given.
type limitedReader struct {
	t    *testing.T
	data []byte
}

func (r *limitedReader) Read(p []byte) (int, error) {
	if len(r.data) == 0 {
		r.t.Error("reader read past the announced frame header")
		return 0, io.EOF
	}
	n := copy(p, r.data)
	r.data = r.data[n:]
	return n, nil
}

func allocated(f func()) uint64 {
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	f()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

func TestFrameTooLarge(t *testing.T) {
	header := appendUvarint(nil, 1<<30) // a 1 GiB frame, never sent
	var err error
	n := allocated(func() {
		_, err = ReadMessage(bufio.NewReader(&limitedReader{t: t, data: header}), DefaultMaxFrameSize)
	})
	if !errors.Is(err, ErrFrameTooLarge) {
		t.Fatalf("err = %v, want ErrFrameTooLarge", err)
	}
	if n > 1<<20 {
		t.Errorf("rejecting an oversize frame allocated %d bytes", n)
	}

	// Under the limit but truncated: allocation follows the data, not the
	// announcement.
	frame := append(appendUvarint(nil, 3<<20), byte(TypeDelta), 1, 2, 3)
	n = allocated(func() {
		_, err = ReadMessage(bufio.NewReader(bytes.NewReader(frame)), DefaultMaxFrameSize)
	})
	if err != io.ErrUnexpectedEOF {
		t.Fatalf("err = %v, want io.ErrUnexpectedEOF", err)
	}
	if n > 1<<20 {
		t.Errorf("truncated 3 MiB frame allocated %d bytes", n)
	}

	// A configurable limit, and the writer's own check.
	r := NewReader(bytes.NewReader(AppendFrame(nil, &Report{Status: strings.Repeat("x", 200)})))
	r.MaxFrameSize = 100
	if _, err := r.Read(); !errors.Is(err, ErrFrameTooLarge) {
		t.Errorf("reader with limit 100: err = %v, want ErrFrameTooLarge", err)
	}
	w := NewWriter(io.Discard)
	w.MaxFrameSize = 100
	if err := w.Write(&Report{Status: strings.Repeat("x", 200)}); !errors.Is(err, ErrFrameTooLarge) {
		t.Errorf("writer with limit 100: err = %v, want ErrFrameTooLarge", err)
	}
}

func TestFrameErrors(t *testing.T) {
	// An unknown type is skipped whole: the next frame still reads.
	stream := append([]byte{4, 0x7f, 1, 2, 3}, AppendFrame(nil, &Ack{Revision: 9})...)
	r := NewReader(bytes.NewReader(stream))
	if _, err := r.Read(); !errors.Is(err, ErrUnknownMessage) {
		t.Fatalf("err = %v, want ErrUnknownMessage", err)
	}
	m, err := r.Read()
	if err != nil || m.(*Ack).Revision != 9 {
		t.Fatalf("after unknown frame: %v, %v", m, err)
	}
	for name, frame := range map[string][]byte{
		"empty frame":         {0},
		"non-minimal length":  {0x82, 0x00, byte(TypeAck), 1},
		"length overflow":     {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f},
		"malformed payload":   {3, byte(TypeAck), 0x81, 0x00},
		"reserved type 0 len": {1, 0},
	} {
		_, err := ReadMessage(bufio.NewReader(bytes.NewReader(frame)), 0)
		want := ErrMalformed
		if name == "reserved type 0 len" {
			want = ErrUnknownMessage
		}
		if !errors.Is(err, want) {
			t.Errorf("%s: err = %v, want %v", name, err, want)
		}
	}
}

func TestSplitDelta(t *testing.T) {
	d := &Delta{BaseRevision: 10, TargetRevision: 20, Complete: true}
	for i := range 50 {
		body := bytes.Repeat([]byte{byte(i)}, 100+i)
		d.Upserts = append(d.Upserts, Upsert{Key: fmt.Sprintf("i/r%02d", i), Revision: uint64(11 + i%9), Digest: DigestOf(body), Body: body})
		d.Deletes = append(d.Deletes, fmt.Sprintf("i/gone%02d", i))
	}
	const max = 1000
	parts, err := SplitDelta(d, max)
	if err != nil {
		t.Fatal(err)
	}
	if len(parts) < 6 {
		t.Fatalf("%d parts, want several", len(parts))
	}
	joined := &Delta{BaseRevision: 10, TargetRevision: 20}
	for i, p := range parts {
		if p.Len()+1 > max {
			t.Errorf("part %d: frame of %d bytes exceeds %d", i, p.Len()+1, max)
		}
		if p.Complete != (i == len(parts)-1) {
			t.Errorf("part %d: Complete = %v", i, p.Complete)
		}
		if p.BaseRevision != 10 || p.TargetRevision != 20 {
			t.Errorf("part %d: revisions %d..%d", i, p.BaseRevision, p.TargetRevision)
		}
		if err := p.Verify(); err != nil {
			t.Error(err)
		}
		joined.Upserts = append(joined.Upserts, p.Upserts...)
		joined.Deletes = append(joined.Deletes, p.Deletes...)
	}
	joined.Complete = true
	if diff := cmp.Diff(d, joined, cmpOpts); diff != "" {
		t.Errorf("joined parts differ (-want +got):\n%s", diff)
	}

	if parts, err := SplitDelta(d, 0); err != nil || len(parts) != 1 || parts[0] != d {
		t.Errorf("SplitDelta under the default limit: %d parts, %v", len(parts), err)
	}
	big := &Delta{Upserts: []Upsert{{Key: "i/big", Body: make([]byte, 2*max)}}}
	if _, err := SplitDelta(big, max); !errors.Is(err, ErrFrameTooLarge) {
		t.Errorf("oversize upsert: err = %v, want ErrFrameTooLarge", err)
	}
	d.Upserts[3].Body = []byte("tampered")
	if err := d.Verify(); !errors.Is(err, ErrMalformed) {
		t.Errorf("Verify on a tampered body: %v", err)
	}
}

func TestMessageTable(t *testing.T) {
	early := map[MessageType]bool{TypeHello: true, TypePull: true}
	fromAgent := map[MessageType]bool{TypeHello: true, TypePull: true, TypeAck: true, TypeReport: true, TypePing: true}
	for t8 := range 256 {
		mt := MessageType(t8)
		if got := AllowedInEarlyData(mt); got != early[mt] {
			t.Errorf("AllowedInEarlyData(%s) = %v", mt, got)
		}
		if got := SentByAgent(mt); got != fromAgent[mt] {
			t.Errorf("SentByAgent(%s) = %v", mt, got)
		}
		if m := NewMessage(mt); (m != nil) != mt.Known() || m != nil && m.Type() != mt {
			t.Errorf("NewMessage(%s) = %T", mt, m)
		}
	}
	if got := MessageType(0x42).String(); got != "MessageType(0x42)" {
		t.Errorf("String = %q", got)
	}
}

// TestWithoutTraffic: a report for a peer below protocol 1.3 loses the
// traffic flag and counters and nothing else; the agent's report is left
// as it was.
func TestWithoutTraffic(t *testing.T) {
	rep := &Report{Seq: 9, States: true, Corrections: true, Resources: []ResourceReport{{Key: "a/b", State: StateConverged, Corrections: 2}},
		Traffic: &Traffic{Day: 3, Servers: []ServerTraffic{{Server: "s1:7443", TrafficCounts: TrafficCounts{SentBytes: 100, SentPackets: 1}}}}}
	old := rep.WithoutTraffic()
	if old.Traffic != nil || rep.Traffic == nil {
		t.Fatalf("WithoutTraffic: traffic %v, the original's %v", old.Traffic, rep.Traffic)
	}
	back, err := DecodeMessage(TypeReport, old.Append(nil))
	if err != nil {
		t.Fatal(err)
	}
	want := *rep
	want.Traffic = nil
	if diff := cmp.Diff(&want, back, cmpOpts); diff != "" {
		t.Errorf("stripped report (-want +got):\n%s", diff)
	}
	if flags := old.Append(nil)[2]; flags&reportTraffic != 0 {
		t.Errorf("flags %#x carry the traffic bit", flags)
	}
	if none := old.WithoutTraffic(); none != old {
		t.Error("WithoutTraffic of a report without traffic copied it")
	}
}

// TestTrafficDay: days are UTC days since 1970-01-01, from their first
// second to their last.
func TestTrafficDay(t *testing.T) {
	for _, tc := range []struct {
		t    time.Time
		want uint32
	}{
		{time.Unix(0, 0), 0},
		{time.Unix(-1, 0), 0},
		{time.Date(2026, 12, 2, 0, 0, 0, 0, time.UTC), 20789},
		{time.Date(2026, 12, 2, 23, 59, 59, 999, time.UTC), 20789},
		{time.Date(2026, 12, 3, 0, 30, 0, 0, time.FixedZone("CET", 3600)), 20789},
	} {
		if got := TrafficDay(tc.t); got != tc.want {
			t.Errorf("TrafficDay(%v) = %d, want %d", tc.t, got, tc.want)
		}
	}
	if got := TrafficDayStart(20789); !got.Equal(time.Date(2026, 12, 2, 0, 0, 0, 0, time.UTC)) {
		t.Errorf("TrafficDayStart(20789) = %v", got)
	}
	tr := Traffic{Servers: []ServerTraffic{{Server: "a", TrafficCounts: TrafficCounts{1, 2, 3, 4}}, {Server: "b", TrafficCounts: TrafficCounts{10, 20, 30, 40}}}}
	if got := tr.Total(); got != (TrafficCounts{11, 22, 33, 44}) || got.Bytes() != 33 {
		t.Errorf("Total = %+v", got)
	}
}

package fsm

import (
	"encoding/json"
	"fmt"
	"runtime"
	"strings"
	"testing"

	"github.com/meteor-edge/meteor/fsm/intent"
)

// BenchmarkApplyPutIntent applies put-intent commands of about 512-byte
// documents to one replica, cycling through 1,000 names, as the
// benchmark of intent writes (bench/intents) does on every server: every
// command changes its intent's document. Raft hands committed entries to
// the state machine in batches (ApplyBatch, one state-store transaction
// each); at 64 clients the leader commits about ten entries an append, so
// batch-10 is the case of a busy cluster and batch-1 that of a quiet one.
func BenchmarkApplyPutIntent(b *testing.B) {
	for _, batch := range []int{1, 10} {
		b.Run(fmt.Sprintf("batch-%d", batch), func(b *testing.B) {
			f := newTestFSM(b, 0)
			cmds := make([][]byte, 1000)
			for i := range cmds {
				cmds[i] = mustEncode(b, PutIntentType, &PutIntentRequest{Intent: benchIntent(i), Time: 1})
			}
			// The same document again changes nothing; vary it so every
			// apply writes a revision. Prepared before the timer starts.
			const versions = 26
			varied := make([][]byte, len(cmds)*versions)
			for i := range varied {
				c := cmds[i%len(cmds)]
				varied[i] = []byte(strings.Replace(string(c), `"content":"x`, fmt.Sprintf(`"content":"%c`, 'a'+byte(i/len(cmds))), 1))
			}
			indexes := make([]uint64, batch)
			data := make([][]byte, batch)
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i += batch {
				n := min(batch, b.N-i)
				for j := range n {
					indexes[j] = uint64(i + j + 1)
					data[j] = varied[(i+j)%len(varied)]
				}
				for _, res := range f.ApplyBatch(indexes[:n], data[:n]) {
					if res.Err != nil {
						b.Fatal(res.Err)
					}
				}
			}
		})
	}
}

// benchIntent is the i-th intent BenchmarkApplyPutIntent writes: about
// 512 bytes encoded, as bench/intents sends.
func benchIntent(i int) *intent.Intent {
	return &intent.Intent{
		Name:     fmt.Sprintf("bench-%04d", i),
		Selector: map[string]string{"fleet": "bench"},
		Resources: []intent.Resource{{ID: "cfg", Type: "file", Spec: map[string]any{
			"path": "/etc/bench/" + fmt.Sprint(i), "content": strings.Repeat("x", 380),
		}}},
	}
}

// BenchmarkPutIntentEncoding measures the parts of a put-intent command's
// encoding and decoding that a compact binary command would change
// (docs/performance.md, "The compact command, measured and left out"):
//
//   - proposer/json: what the proposer does today, json.Marshal of the
//     request;
//   - proposer/fixed-point: what it would do so that replicas could take
//     the command's document as the intent's canonical form: Canonical,
//     decoded as a replica decodes, Canonical again, compared (replicas
//     decode numbers as float64, so the first canonical form is not
//     always the one a replica would compute);
//   - replica/envelope, replica/intent and replica/canonical: the three
//     steps of applyPutIntent's decoding on every replica; a binary
//     command with a trusted canonical document would save the first and
//     the last.
func BenchmarkPutIntentEncoding(b *testing.B) {
	in := benchIntent(1)
	cmd, err := json.Marshal(&PutIntentRequest{Intent: in, Time: 1})
	if err != nil {
		b.Fatal(err)
	}
	doc, err := json.Marshal(in)
	if err != nil {
		b.Fatal(err)
	}
	b.Run("proposer/json", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := json.Marshal(&PutIntentRequest{Intent: in, Time: 1}); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("proposer/fixed-point", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			c1, err := in.Canonical()
			if err != nil {
				b.Fatal(err)
			}
			var d intent.Intent
			if err := decodeCommand(c1, &d); err != nil {
				b.Fatal(err)
			}
			c2, err := d.Canonical()
			if err != nil || string(c1) != string(c2) {
				b.Fatalf("not a fixed point: %v", err)
			}
		}
	})
	b.Run("replica/envelope", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var w putIntentWire
			if err := decodeCommand(cmd, &w); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("replica/intent", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var d intent.Intent
			if err := decodeCommand(doc, &d); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("replica/canonical", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := in.Canonical(); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkApplyStatusBatch applies status batches of 512 transitions of
// reports of 5 resources each, as owners commit them during a change.
func BenchmarkApplyStatusBatch(b *testing.B) {
	const devices, batch = 4096, 512
	f := newTestFSM(b, 0)
	idx := uint64(0)
	for i := range devices {
		idx++
		cmd := mustEncode(b, DeviceSessionType, &DeviceSessionRequest{ID: fmt.Sprintf("dev-%05d", i), Labels: map[string]string{"region": "eu"}, SessionID: "s", Server: "s1", Connected: true, Time: 1})
		if res := f.Apply(idx, cmd); res.Err != nil {
			b.Fatal(res.Err)
		}
	}
	seq := uint64(0)
	next := func() []byte {
		seq++
		req := &StatusBatchRequest{Owner: "s1", Transitions: make([]StatusTransition, batch)}
		for i := range req.Transitions {
			tr := StatusTransition{Device: fmt.Sprintf("dev-%05d", (int(seq)*batch+i)%devices), Seq: seq, Full: true, Time: int64(seq), Revision: 7,
				Status: "progressing", Reason: "2 of 5 resources converged; app/cfg: applied; the probe has not confirmed it yet",
				ResourceStates: map[string]string{"app/cfg": "progressing"}, LastSeen: int64(seq)}
			for r := range 5 {
				tr.Resources = append(tr.Resources, ResourceStatus{Key: fmt.Sprintf("app/r%d", r), AppliedDigest: strings.Repeat("ab", 32), AppliedRevision: 7, Effective: "ok", State: "converged", UpdatedAt: int64(seq)})
			}
			req.Transitions[i] = tr
		}
		return mustEncode(b, StatusBatchType, req)
	}
	cmds := make([][]byte, 16)
	for i := range cmds {
		cmds[i] = next()
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		idx++
		if res := f.Apply(idx, cmds[i%len(cmds)]); res.Err != nil {
			b.Fatal(res.Err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/batch, "ns/transition")
}

// BenchmarkDeviceMemoryThroughChanges measures what a fleet's status
// costs a replica's heap as it goes through changes: 10,000 devices, each
// change committing two transitions a device (progressing, then
// converged, each with a resource state, as owners do), in batches of 512.
// It reports the heap above the fleet's first records, per device, after
// 4, 12 and 32 changes (by then each device's timeline holds the 64
// entries DefaultTimelineLimit keeps): the device records, their
// timelines and the old record versions that the state checkpoints pin
// (checkpoint.go). Run it with -benchtime 1x.
func BenchmarkDeviceMemoryThroughChanges(b *testing.B) {
	const devices = 10000
	for b.Loop() {
		f := newTestFSM(b, 0)
		idx := uint64(1)
		var sessions []DeviceSessionRequest
		for i := range devices {
			sessions = append(sessions, DeviceSessionRequest{ID: fmt.Sprintf("dev-%05d", i), Labels: map[string]string{"region": "eu"}, SessionID: "s", Server: "s1", Connected: true, Time: 1})
		}
		if res := f.Apply(idx, mustEncode(b, DeviceSessionBatchType, &DeviceSessionBatchRequest{Sessions: sessions})); res.Err != nil {
			b.Fatal(res.Err)
		}
		heap := func() float64 {
			runtime.GC()
			var m runtime.MemStats
			runtime.ReadMemStats(&m)
			return float64(m.HeapAlloc)
		}
		base, seq := heap(), uint64(0)
		for change := 1; change <= 32; change++ {
			for _, st := range []string{"progressing", "converged"} {
				seq++
				for start := 0; start < devices; start += 512 {
					req := &StatusBatchRequest{Owner: "s1"}
					for i := start; i < min(start+512, devices); i++ {
						tr := StatusTransition{Device: fmt.Sprintf("dev-%05d", i), Seq: seq, Full: true, Time: int64(seq), Revision: uint64(change),
							Status: st, Reason: "1 of 1 resources " + st, ResourceStates: map[string]string{"app/cfg": st}, LastSeen: int64(seq)}
						tr.Resources = []ResourceStatus{{Key: "app/cfg", AppliedDigest: strings.Repeat(fmt.Sprintf("%02x", change), 32),
							AppliedRevision: uint64(change), Effective: "ok", State: st, UpdatedAt: int64(seq)}}
						req.Transitions = append(req.Transitions, tr)
					}
					idx++
					if res := f.Apply(idx, mustEncode(b, StatusBatchType, req)); res.Err != nil {
						b.Fatal(res.Err)
					}
				}
			}
			switch change {
			case 4:
				b.ReportMetric((heap()-base)/devices, "B/device@4")
			case 12:
				b.ReportMetric((heap()-base)/devices, "B/device@12")
			case 32:
				b.ReportMetric((heap()-base)/devices, "B/device@32")
			}
		}
		runtime.KeepAlive(f)
	}
}

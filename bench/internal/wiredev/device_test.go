package wiredev

import (
	"crypto/tls"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/meteor-edge/meteor/wire"
)

// upserts returns an upsert of each key at rev, with the key as its body.
func upserts(rev uint64, keys ...string) []wire.Upsert {
	var out []wire.Upsert
	for _, k := range keys {
		out = append(out, wire.Upsert{Key: k, Digest: wire.DigestOf([]byte(k)), Revision: rev, Body: []byte(k)})
	}
	return out
}

func TestDeviceTakeAndInventory(t *testing.T) {
	d := NewDevice("d", tls.Certificate{}, map[string]string{"fleet": "bench"})
	ack := d.Take([]*wire.Delta{
		{BaseRevision: 0, TargetRevision: 5, Upserts: upserts(5, "i/b", "i/a")},
		{BaseRevision: 0, TargetRevision: 5, Complete: true, Upserts: upserts(4, "i/c")},
	})
	if ack != 5 || d.Acked != 5 {
		t.Fatalf("ack %d, acked %d", ack, d.Acked)
	}
	if ack := d.Take([]*wire.Delta{{BaseRevision: 5, TargetRevision: 5, Complete: true, Deletes: []string{"i/b"}}}); ack != 0 {
		t.Errorf("no-op Delta acked %d", ack)
	}
	var keys []string
	for _, a := range d.Inventory() {
		keys = append(keys, a.Key)
	}
	if diff := cmp.Diff([]string{"i/a", "i/c"}, keys); diff != "" {
		t.Error(diff)
	}
	h := d.Hello(true)
	if !h.Inventory || len(h.Applied) != 2 || h.AckedRevision != 5 || h.Labels["fleet"] != "bench" {
		t.Errorf("hello %+v", h)
	}
	if h := d.Hello(false); h.Inventory || h.Applied != nil {
		t.Errorf("revision-only hello %+v", h)
	}
	if p := d.Pull(true); p.KnownRevision != 5 || len(p.Applied) != 2 {
		t.Errorf("pull %+v", p)
	}
	// Every message the device sends is valid on the wire.
	for _, m := range []wire.Message{d.Hello(true), d.Pull(true), d.Report(), d.Hello(false)} {
		if _, err := wire.DecodeMessage(m.Type(), m.Append(nil)); err != nil {
			t.Errorf("%s does not decode: %v", m.Type(), err)
		}
	}
}

func TestDeviceReportsCountUntilAcknowledged(t *testing.T) {
	d := NewDevice("d", tls.Certificate{}, nil)
	body := []byte("body")
	frame := &wire.Delta{TargetRevision: 5, Complete: true, Upserts: []wire.Upsert{{Key: "fanout/config", Digest: wire.DigestOf(body), Revision: 5, Body: body}}}
	if d.Take([]*wire.Delta{frame}) != 5 {
		t.Fatalf("take: acked %d", d.Acked)
	}
	r := d.Report()
	if r.Seq != 1 || r.DesiredRevision != 5 || len(r.Resources) != 1 || r.Resources[0].Effective != wire.EffectiveOK || !d.Unacked() {
		t.Fatalf("report %+v", r)
	}
	frame7 := &wire.Delta{BaseRevision: 5, TargetRevision: 7, Complete: true}
	d.Take([]*wire.Delta{frame7})
	if r := d.Report(); r.Seq != 2 || r.DesiredRevision != 7 {
		t.Fatalf("second report %+v", r)
	}
	if rev := d.Acknowledged(0); rev != 0 || !d.Unacked() {
		t.Errorf("ReportAck 0 confirmed revision %d", rev)
	}
	// A resend is the reports as sent, seqs and all: the server applies a
	// seq once, and a new seq a resend would be a report of its own.
	again := d.Unacknowledged()
	if len(again) != 2 || again[0] != r || again[0].Seq != 1 || again[1].Seq != 2 || again[1].DesiredRevision != 7 {
		t.Fatalf("unacknowledged %+v, want reports 1 and 2 as sent", again)
	}
	if r := d.Report(); r.Seq != 3 {
		t.Fatalf("the report after a resend has seq %d, want 3", r.Seq)
	}
	d.Acknowledged(0)
	if rev := d.Acknowledged(1); rev != 5 || !d.Unacked() {
		t.Errorf("ReportAck 1 confirmed revision %d, unacked %v", rev, d.Unacked())
	}
	if again := d.Unacknowledged(); len(again) != 2 || again[0].Seq != 2 {
		t.Fatalf("unacknowledged after ReportAck 1: %+v", again)
	}
	if rev := d.Acknowledged(3); rev != 7 || d.Unacked() || len(d.Unacknowledged()) != 0 {
		t.Errorf("ReportAck 3 confirmed revision %d, unacked %v", rev, d.Unacked())
	}
}

func TestBackoffDoublesToItsBound(t *testing.T) {
	for n, want := range map[int]int64{1: 500, 2: 1000, 3: 2000, 7: 30000, 50: 30000} {
		if got := backoff(500e6, 30e9, n).Milliseconds(); got != want {
			t.Errorf("backoff after %d failures = %d ms, want %d", n, got, want)
		}
	}
	for range 100 {
		if j := jittered(1000e6); j < 500e6 || j > 1000e6 {
			t.Fatalf("jittered(1 s) = %v", j)
		}
	}
}

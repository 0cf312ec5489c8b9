package wiredev

import (
	"crypto/tls"
	"crypto/x509"
	"maps"
	"slices"
	"time"

	"github.com/meteor-edge/meteor/wire"
)

// AgentVersion is what the devices send as their agent version.
const AgentVersion = "meteor-bench"

// Device is one simulated agent's identity and the state the real agent
// journals. It does no I/O and is not safe for concurrent use.
type Device struct {
	ID     string
	Cert   tls.Certificate
	Labels map[string]string

	Session wire.SessionID
	Token   []byte
	// Acked is the revision the device last acknowledged; Applied its
	// applied inventory, by resource key.
	Acked   uint64
	Applied map[string]wire.AppliedResource

	seq     uint64       // the last report's seq
	unacked []sentReport // reports sent and not yet acknowledged, by seq
}

type sentReport struct {
	seq, revision uint64
	report        *wire.Report // as sent: a resend sends it again
}

// NewDevice returns a device without a session. Devices may share labels (the
// map is only read).
func NewDevice(id string, cert tls.Certificate, labels map[string]string) *Device {
	return &Device{ID: id, Cert: cert, Labels: labels, Applied: map[string]wire.AppliedResource{}}
}

// TLSConfig returns the device's TLS configuration for a dial; with cache
// nil it keeps no session ticket, so every dial is a full handshake.
func (d *Device) TLSConfig(roots *x509.CertPool, cache tls.ClientSessionCache) *tls.Config {
	c := wire.ClientTLSConfig(roots, d.Cert, "")
	c.ClientSessionCache = cache
	return c
}

// Inventory returns the applied set sorted by key, as the agent sends it.
func (d *Device) Inventory() []wire.AppliedResource {
	out := make([]wire.AppliedResource, 0, len(d.Applied))
	for _, k := range slices.Sorted(maps.Keys(d.Applied)) {
		out = append(out, d.Applied[k])
	}
	return out
}

// Fingerprint is the wire.SetFingerprint of the applied set, which is
// also the device's desired set: it applies every Delta at once.
func (d *Device) Fingerprint() wire.Digest {
	f := wire.NewSetFingerprint()
	for _, a := range d.Inventory() {
		f.Add(a.Key, a.Digest)
	}
	return f.Sum()
}

// Hello is the agent's Hello: its session if it has one, its
// acknowledged revision and, with inventory, its whole applied set.
func (d *Device) Hello(inventory bool) *wire.Hello {
	h := &wire.Hello{
		Major: wire.ProtocolMajor, Minor: wire.ProtocolMinor, AgentVersion: AgentVersion,
		SessionID: d.Session, ResumeToken: d.Token, Labels: d.Labels, AckedRevision: d.Acked,
	}
	if inventory {
		h.Inventory, h.Applied = true, d.Inventory()
	}
	return h
}

// Pull asks for the desired state after the acknowledged revision.
func (d *Device) Pull(inventory bool) *wire.Pull {
	p := &wire.Pull{KnownRevision: d.Acked}
	if inventory {
		p.Inventory, p.Applied = true, d.Inventory()
	}
	return p
}

// Welcomed takes the session a Welcome gives.
func (d *Device) Welcomed(w *wire.Welcome) { d.Session, d.Token = w.SessionID, w.ResumeToken }

// Take records the frames of a complete Delta as applied and returns the
// revision to acknowledge, or 0 if the Delta moved nothing.
func (d *Device) Take(frames []*wire.Delta) uint64 {
	for _, f := range frames {
		for _, u := range f.Upserts {
			d.Applied[u.Key] = wire.AppliedResource{Key: u.Key, Digest: u.Digest, Revision: u.Revision}
		}
		for _, k := range f.Deletes {
			delete(d.Applied, k)
		}
	}
	target := frames[len(frames)-1].TargetRevision
	if target <= d.Acked {
		return 0
	}
	d.Acked = target
	return target
}

// Report is a full report that every applied resource is in effect, with
// the next seq; it counts as unacknowledged until Acknowledged covers it.
func (d *Device) Report() *wire.Report {
	d.seq++
	r := &wire.Report{Seq: d.seq, DesiredRevision: d.Acked, Full: true, Status: "converged"}
	now := time.Now().UnixNano()
	for _, a := range d.Inventory() {
		r.Resources = append(r.Resources, wire.ResourceReport{
			Key: a.Key, AppliedDigest: a.Digest, AppliedRevision: a.Revision,
			Effective: wire.EffectiveOK, UpdatedAtUnixNano: now,
		})
	}
	d.unacked = append(d.unacked, sentReport{seq: d.seq, revision: d.Acked, report: r})
	return r
}

// Unacknowledged returns the reports sent and not yet acknowledged, oldest
// first, as they were sent. A resend sends these again, seq and all, as
// the agent resends its journal's pending reports: the server applies a
// seq once and only acknowledges it again, so a resend while the first
// send's commit is slow adds no commit of its own.
func (d *Device) Unacknowledged() []*wire.Report {
	out := make([]*wire.Report, len(d.unacked))
	for i, r := range d.unacked {
		out[i] = r.report
	}
	return out
}

// Acknowledged drops the reports up to seq and returns the highest
// revision they reported, 0 if none.
func (d *Device) Acknowledged(seq uint64) uint64 {
	var rev uint64
	keep := d.unacked[:0]
	for _, r := range d.unacked {
		if r.seq <= seq {
			rev = max(rev, r.revision)
		} else {
			keep = append(keep, r)
		}
	}
	d.unacked = keep
	return rev
}

// Unacked reports whether a report sent is not yet acknowledged.
func (d *Device) Unacked() bool { return len(d.unacked) > 0 }

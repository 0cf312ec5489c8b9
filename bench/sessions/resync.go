package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"slices"
	"time"

	"github.com/quic-go/quic-go"

	"github.com/meteor-edge/meteor/bench/internal/wiredev"
	"github.com/meteor-edge/meteor/cluster"
	"github.com/meteor-edge/meteor/cluster/api"
	"github.com/meteor-edge/meteor/wire"
)

// resyncResult is part 1.
type resyncResult struct {
	Resources   int    `json:"resources"`
	BodyBytes   int    `json:"body_bytes_each"`
	Revisions   int    `json:"revisions"`
	Changed     int    `json:"resources_changed"`
	Churn       string `json:"churn"`
	ChurnDetail string `json:"churn_detail"`

	// InitialSync is the first Delta of a new device (every resource).
	InitialSync deltaBytes `json:"initial_sync"`

	// Resync is the Delta a device resuming its session with its inventory
	// received; ServerBytes and ServerFrames what the server's AgentStats
	// counted for it. Uplink is the Hello and Pull it sent.
	Resync       deltaBytes `json:"resync"`
	ResyncKeys   []string   `json:"resync_upserts"`
	ServerBytes  uint64     `json:"resync_bytes_server_counted"`
	ServerFrames uint64     `json:"resync_frames_server_counted"`
	Uplink       int        `json:"resync_uplink_hello_pull_bytes"`
	Used0RTT     bool       `json:"resync_used_0rtt"`

	// Replay is every revision's Delta, as received by a device that stayed
	// connected and pulled after each revision.
	Replay       deltaBytes `json:"replay"`
	ReplayDeltas int        `json:"replay_deltas"`

	// RevisionOnly is the Delta a device resuming by revision only (no
	// inventory in Hello or Pull) received.
	RevisionOnly       deltaBytes `json:"revision_only_resync"`
	RevisionOnlyUplink int        `json:"revision_only_uplink_bytes"`

	RatioExclHeader float64 `json:"ratio_resync_minus_header_over_bodies"`
	RatioRaw        float64 `json:"ratio_resync_over_bodies"`
	RatioReplay     float64 `json:"ratio_replay_over_resync"`
}

// runResync measures part 1 against srv.
func runResync(ctx context.Context, cfg *config, srv *cluster.Server, p *pki, log io.Writer) (*resyncResult, error) {
	res := &resyncResult{
		Resources: cfg.resources, BodyBytes: cfg.bodySize, Revisions: cfg.revisions,
		Changed: cfg.changed, Churn: cfg.churn,
	}
	if cfg.churn == "rotate" {
		res.ChurnDetail = fmt.Sprintf("each revision gives one of the same %d resources, in turn, a new version", cfg.changed)
	} else {
		res.ChurnDetail = fmt.Sprintf("every revision gives the same %d resources a new version", cfg.changed)
	}
	cl := api.NewClient(srv.HTTPAddr(), nil)
	addr, err := net.ResolveUDPAddr("udp", srv.AgentAddr())
	if err != nil {
		return nil, err
	}
	f, err := newFleetIntent(cfg.resources, cfg.bodySize)
	if err != nil {
		return nil, err
	}
	if _, err := putIntent(ctx, cl, f); err != nil {
		return nil, err
	}

	udp, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	tr := &quic.Transport{Conn: udp}
	defer func() {
		tr.Close()
		udp.Close()
	}()
	ids := []string{"resync-inventory", "resync-revision-only", "resync-replay"}
	certs, err := p.issueDevices(ids)
	if err != nil {
		return nil, err
	}
	type dev struct {
		d     *wiredev.Device
		cache *ticketCache
		conn  *quic.Conn
		s     *session
	}
	devs := make([]*dev, len(ids))
	for i, id := range ids {
		devs[i] = &dev{d: wiredev.NewDevice(id, certs[i], fleetLabels), cache: newTicketCache()}
	}
	defer func() {
		for _, v := range devs {
			if v.conn != nil {
				v.conn.CloseWithError(wire.CloseNormal, "")
			}
		}
	}()
	dial := func(v *dev) (*quic.Conn, error) {
		dctx, cancel := context.WithTimeout(ctx, cfg.timeout)
		defer cancel()
		return tr.DialEarly(dctx, addr, v.d.TLSConfig(p.pool, v.cache), deviceQUIC())
	}

	// Every device converges: a new session, the whole state, a full
	// report. Two then go offline; the third stays to measure the replay.
	fmt.Fprintf(log, "resync: %d devices converge on %d resources\n", len(devs), cfg.resources)
	for i, v := range devs {
		conn, err := dial(v)
		if err != nil {
			return nil, fmt.Errorf("%s: dial: %w", v.d.ID, err)
		}
		v.conn = conn
		o, err := openSession(ctx, v.d, conn, openOpts{inventory: true, start: time.Now(), timeout: cfg.timeout})
		if err != nil {
			return nil, fmt.Errorf("%s: first session: %w", v.d.ID, err)
		}
		v.s = o.s
		acc := accountDelta(o.delta)
		if acc.Upserts != cfg.resources {
			return nil, fmt.Errorf("%s: first Delta has %d upserts, want %d", v.d.ID, acc.Upserts, cfg.resources)
		}
		if i == 0 {
			res.InitialSync = acc
		}
		for _, fr := range o.delta {
			for _, u := range fr.Upserts {
				if len(u.Body) != cfg.bodySize {
					return nil, fmt.Errorf("%s: body of %s is %d bytes, want %d", v.d.ID, u.Key, len(u.Body), cfg.bodySize)
				}
			}
		}
		if err := v.s.send(v.d.Report()); err != nil {
			return nil, err
		}
		if err := v.s.waitReportAck(1); err != nil {
			return nil, fmt.Errorf("%s: %w", v.d.ID, err)
		}
	}
	for _, v := range devs[:2] {
		waitTicket(v.cache, 0, 2*time.Second)
		v.conn.CloseWithError(wire.CloseNormal, "going offline")
		v.conn, v.s = nil, nil
	}

	fmt.Fprintf(log, "resync: %d revisions (%s)\n", cfg.revisions, res.ChurnDetail)
	obs := devs[2]
	for k := 1; k <= cfg.revisions; k++ {
		idx := f.revise(k, cfg.changed, cfg.churn)
		if _, err := putIntent(ctx, cl, f); err != nil {
			return nil, err
		}
		if err := obs.s.send(obs.d.Pull(true)); err != nil {
			return nil, err
		}
		frames, err := obs.s.recvDelta()
		if err != nil {
			return nil, fmt.Errorf("replay device, revision %d: %w", k, err)
		}
		want := make([]string, len(idx))
		for j, i := range idx {
			want[j] = resourceKey(i)
		}
		if got := upsertKeys(frames); !slices.Equal(got, want) {
			return nil, fmt.Errorf("replay device, revision %d: Delta upserts %v, want %v", k, got, want)
		}
		res.Replay.add(accountDelta(frames))
		res.ReplayDeltas++
		if rev := obs.d.Take(frames); rev != 0 {
			if err := obs.s.send(&wire.Ack{Revision: rev}); err != nil {
				return nil, err
			}
		}
	}

	// The device resumes with its inventory, Hello and Pull pipelined as
	// the agent sends them in 0-RTT.
	resync := func(v *dev, inventory bool) (*opened, uint64, uint64, error) {
		prev := v.d.Session
		before := srv.AgentStats()
		conn, err := dial(v)
		if err != nil {
			return nil, 0, 0, err
		}
		v.conn = conn
		o, err := openSession(ctx, v.d, conn, openOpts{inventory: inventory, pipeline: true, start: time.Now(), timeout: cfg.timeout})
		if err != nil {
			return nil, 0, 0, err
		}
		v.s = o.s
		if o.welcome.SessionID != prev {
			return nil, 0, 0, fmt.Errorf("the session was not resumed (new session %x)", o.welcome.SessionID)
		}
		for _, fr := range o.delta {
			if err := fr.Verify(); err != nil {
				return nil, 0, 0, err
			}
		}
		// The server counts a frame just after writing it.
		after := srv.AgentStats()
		for deadline := time.Now().Add(time.Second); after.Deltas < before.Deltas+uint64(len(o.delta)) && time.Now().Before(deadline); {
			time.Sleep(time.Millisecond)
			after = srv.AgentStats()
		}
		return o, after.DeltaBytes - before.DeltaBytes, after.Deltas - before.Deltas, nil
	}
	fmt.Fprintln(log, "resync: the devices resume and pull")
	o, sb, sf, err := resync(devs[0], true)
	if err != nil {
		return nil, fmt.Errorf("%s: resync: %w", devs[0].d.ID, err)
	}
	res.Resync, res.ServerBytes, res.ServerFrames = accountDelta(o.delta), sb, sf
	res.ResyncKeys = upsertKeys(o.delta)
	res.Uplink = o.s.tx.bytesOf(wire.TypeHello, wire.TypePull)
	res.Used0RTT = o.used0RTT

	o, _, _, err = resync(devs[1], false)
	if err != nil {
		return nil, fmt.Errorf("%s: resync: %w", devs[1].d.ID, err)
	}
	res.RevisionOnly = accountDelta(o.delta)
	res.RevisionOnlyUplink = o.s.tx.bytesOf(wire.TypeHello, wire.TypePull)

	res.RatioExclHeader, res.RatioRaw = resyncRatio(res.Resync)
	if res.Resync.Total > 0 {
		res.RatioReplay = float64(res.Replay.Total) / float64(res.Resync.Total)
	}
	return res, nil
}

func upsertKeys(frames []*wire.Delta) []string {
	var out []string
	for _, f := range frames {
		for _, u := range f.Upserts {
			out = append(out, u.Key)
		}
	}
	return out
}

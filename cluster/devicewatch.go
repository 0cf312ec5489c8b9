package cluster

import (
	"bytes"
	"context"
	"errors"
	"maps"
	"slices"
	"sync"

	"github.com/hashicorp/go-memdb"
	"github.com/quic-go/quic-go"

	"github.com/meteor-edge/meteor/fsm"
	"github.com/meteor-edge/meteor/scheduler"
	"github.com/meteor-edge/meteor/wire"
)

// Every session follows the replica's record and revocation of its
// device, and the configuration its settings come from, for as long as
// its connection lasts (deviceWatch.check). It closes the connection once
// the device is revoked, re-evaluates the desired state when the labels
// the device is selected by change, which takes no intent change and so
// does not wake notifyLoop, and sends the settings again when they
// changed (sendSettings).
//
// Sessions share the goroutines that wait for those changes: a
// watchGroup of up to deviceWatchGroupSize sessions waits on the union of
// its members' memdb watch channels and checks again the members whose
// channels fired. A goroutine of its own a session took 4.2 KiB of stack
// and 1.2 KiB of live heap at 10,000 idle sessions (docs/performance.md,
// "An idle session's memory, part by part"). Level-based: a check
// compares what the replica holds now with what the member saw or sent
// last, so a member checked late, or once for two changes, ends where one
// checked at every change would.
//
// A group's goroutine never waits on a session's stream: closing a
// revoked device's connection and writing settings, which wait while the
// agent's flow-control window is full (sessionWriteTimeout), run in
// goroutines of their own, so that a stalled agent holds up no other
// member's revocation.

// deviceWatchGroupSize is how many sessions a watchGroup holds. A member
// watches about three channels of its own (its device's record and
// revocation, its connection's end) beside a few the members share (the
// classes and windows tables, the replica's restore), and memdb waits on
// up to 32 channels in the goroutine that waits (WatchSet.WatchCtx); more
// would start a goroutine for every 32 at every wait.
const deviceWatchGroupSize = 8

// deviceWatches assigns sessions to watchGroups.
type deviceWatches struct {
	a  *agentServer
	mu sync.Mutex
	// open holds the groups with room, and only those: a group that
	// fills up leaves it and comes back once a member leaves, and one
	// whose goroutine finds it empty leaves it for good, in the same
	// critical section. Guarded by mu, as are every group's members and
	// the counts.
	open []*watchGroup
	// groups counts the groups whose goroutine runs, members the
	// sessions in them.
	groups, members int
}

// watchGroup is one goroutine's share of the sessions.
type watchGroup struct {
	w       *deviceWatches
	members []*deviceWatch
	// kick wakes the goroutine when a member joins (buffered, one).
	kick chan struct{}
}

// deviceWatch is one session's watch: what its last check watched and
// found.
type deviceWatch struct {
	sess *agentSession
	done <-chan struct{} // the connection's end
	// ws holds the channels the last check watched, done among them; nil
	// before the first check.
	ws memdb.WatchSet
	// labels is the key of the selection labels the last check found.
	labels string
	// settings is the encoding (Seq aside) of the settings the last
	// check handed to sendSettings; nil before the Welcome. rec is the
	// device record they were computed from, and config fires once the
	// classes or maintenance windows they follow change: while neither
	// has, and the record's part in them is the same (sameSettingsOf,
	// which covers the selection labels too), they are the same, and a
	// check does not compute them again (most checks are of a record that
	// a status commit moved).
	settings []byte
	rec      *fsm.DeviceRecord
	config   memdb.WatchSet
	// ended: the connection ended, or the check closed it.
	ended bool
}

func newDeviceWatches(a *agentServer) *deviceWatches { return &deviceWatches{a: a} }

// join starts following sess's device until ctx (its connection's) ends.
func (w *deviceWatches) join(ctx context.Context, sess *agentSession) {
	m := &deviceWatch{sess: sess, done: ctx.Done()}
	w.mu.Lock()
	var g *watchGroup
	if n := len(w.open); n > 0 {
		g = w.open[n-1]
	}
	start := g == nil
	if start {
		g = &watchGroup{w: w, kick: make(chan struct{}, 1)}
		w.open = append(w.open, g)
		w.groups++
	}
	g.members = append(g.members, m)
	w.members++
	if len(g.members) == deviceWatchGroupSize {
		w.open = slices.DeleteFunc(w.open, func(o *watchGroup) bool { return o == g })
	}
	w.mu.Unlock()
	if start {
		w.a.wg.Go(g.run)
		return
	}
	select {
	case g.kick <- struct{}{}:
	default:
	}
}

// watching returns the number of watch groups, each a goroutine, and of
// sessions in them.
func (w *deviceWatches) watching() (groups, sessions int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.groups, w.members
}

// run checks the group's members as their channels fire, until the last
// one has left.
func (g *watchGroup) run() {
	w := g.w
	// The members as of this wake, and the union of their channels:
	// built anew at every wake, in the same slice and map.
	var members []*deviceWatch
	set := memdb.NewWatchSet()
	for {
		// Taken before the members are read: a member that joins after
		// that kicks again, and the wait below sees it.
		select {
		case <-g.kick:
		default:
		}
		w.mu.Lock()
		members = append(members[:0], g.members...)
		if len(members) == 0 {
			w.open = slices.DeleteFunc(w.open, func(o *watchGroup) bool { return o == g })
			w.groups--
			w.mu.Unlock()
			return
		}
		w.mu.Unlock()
		var read *fsm.Read // read once a wake, for every member it checks
		clear(set)
		set.Add(g.kick)
		var ended []*deviceWatch
		for _, m := range members {
			if m.ws == nil || fired(m.ws) {
				if read == nil {
					read = w.a.state.Read()
				}
				m.check(read)
			}
			if m.ended {
				ended = append(ended, m)
				continue
			}
			for ch := range m.ws {
				set.Add(ch)
			}
		}
		if len(ended) > 0 {
			g.leave(ended)
			continue
		}
		// Background: the members' ends are among the channels, and
		// WatchCtx, unlike Watch, starts no goroutine to wait.
		set.WatchCtx(context.Background())
	}
}

// leave removes the ended members; a group that was full has room again.
func (g *watchGroup) leave(ended []*deviceWatch) {
	w := g.w
	w.mu.Lock()
	defer w.mu.Unlock()
	full := len(g.members) >= deviceWatchGroupSize
	g.members = slices.DeleteFunc(g.members, func(m *deviceWatch) bool { return slices.Contains(ended, m) })
	w.members -= len(ended)
	if full && len(g.members) < deviceWatchGroupSize {
		w.open = append(w.open, g)
	}
}

// check compares what read holds for the member's device with what the
// last check found, acts on the difference, and records the channels to
// wait on for the next change.
func (m *deviceWatch) check(read *fsm.Read) {
	sess := m.sess
	select {
	case <-m.done:
		m.ended = true
		return
	default:
	}
	ws := memdb.NewWatchSet()
	ws.Add(m.done)
	// A session whose device can no longer be watched is closed: it
	// would otherwise outlive a revocation. The agent reconnects, with a
	// watch of its own.
	revoked, rev, err := read.DeviceRevoked(ws, sess.deviceID)
	if err != nil {
		sess.logger.Error("watch revocation: closing the session", "error", err)
		m.close(wire.CloseInternalError, "cannot watch the device's revocation")
		return
	}
	if revoked {
		sess.logger.Info("closing the session of a revoked device", "reason", rev.Reason)
		m.close(wire.CloseUnauthorized, revokedReason(sess.deviceID, rev))
		return
	}
	rec, err := read.Device(ws, sess.deviceID)
	if err != nil && !errors.Is(err, fsm.ErrNotFound) {
		sess.logger.Error("watch device record: closing the session", "error", err)
		m.close(wire.CloseInternalError, "cannot watch the device's record")
		return
	}
	labels := sess.selectionLabels(read)
	key := fsm.MapKey(labels)
	if m.ws != nil && key != m.labels {
		sess.logger.Debug("selection labels changed", "labels", labels)
		sess.maybeNotify(read, map[string]*scheduler.DesiredState{})
	}
	m.labels = key
	// The settings follow the classes, the labels and the rest.
	config := memdb.NewWatchSet()
	_, err = read.Classes(config)
	if err == nil {
		_, err = read.Windows(config)
	}
	if err != nil {
		sess.logger.Error("watch the configuration: closing the session", "error", err)
		m.close(wire.CloseInternalError, "cannot watch the configuration")
		return
	}
	for ch := range config {
		ws.Add(ch)
	}
	m.sendSettings(read, rec, config)
	m.ws = ws
}

// sameSettingsOf reports whether two records of a device say the same in
// what its settings take from its record (settingsFor): its labels and
// their source (and so its selection labels, Config.selectionLabels), and
// its lock-break orders.
func sameSettingsOf(a, b *fsm.DeviceRecord) bool {
	if a == b {
		return true
	}
	if a == nil || b == nil {
		return false
	}
	return a.LabelsControlled == b.LabelsControlled && maps.Equal(a.Labels, b.Labels) &&
		maps.Equal(a.ReportedLabels, b.ReportedLabels) && slices.Equal(a.Unlocks, b.Unlocks)
}

// close ends the member and closes its connection, in a goroutine of its
// own: quic-go's close waits for the connection's loop.
func (m *deviceWatch) close(code quic.ApplicationErrorCode, reason string) {
	m.ended = true
	m.sess.a.wg.Go(func() { m.sess.conn.CloseWithError(code, reason) })
}

// sendSettings hands the settings as of read to the session
// (sendSettingsOf), in a goroutine of its own (it may wait on the
// stream), if they differ from those the last check handed over. Before
// the Welcome it hands nothing: the Welcome sends the settings, and the
// session's record commits soon after it, which fires the watch again.
func (m *deviceWatch) sendSettings(read *fsm.Read, rec *fsm.DeviceRecord, config memdb.WatchSet) {
	sess := m.sess
	if sess.minor < wire.MinorEdge || !sess.welcomed.Load() {
		return
	}
	same := m.settings != nil && m.config != nil && !fired(m.config) && sameSettingsOf(m.rec, rec)
	m.rec, m.config = rec, config
	if same {
		return
	}
	s := sess.settingsFor(read)
	body := settingsBody(s)
	if bytes.Equal(body, m.settings) {
		return
	}
	m.settings = body
	sess.a.wg.Go(func() {
		if err := sess.sendSettingsOf(s, body); err != nil {
			sess.writeFailed("Settings", err)
		}
	})
}

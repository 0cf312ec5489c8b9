package cluster

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/meteor-edge/meteor/fsm"
)

// sessionSync is the one loop that keeps the replicated session records of
// the devices connected here true. It is level-based: it compares the
// table of sessions live on this server with the replica's device records
// and commits whatever differs, a connect (with the acknowledged
// revision) for a live session the replica does not show as connected
// here, a disconnect for an ended one the replica still shows connected
// here; it never relies on having seen an event. From feature level 4 an
// acknowledged revision that a report being handed to the device's owner
// carries is left to that report's commit (agentSession.carrying).
// Events only say which devices to compare first; every
// SessionCheckInterval it compares them all, which repairs a record
// another server overwrote (a late connect of an earlier connection). A
// commit that fails (no leader during an election) is retried promptly
// with backoff, so a lost disconnect is recorded once the cluster has a
// leader again.
//
// Whatever differs when a pass starts goes into one group commit through
// the sessionRecorder (a sessionCommitter), so a reconnect storm costs a
// few Raft entries. It reads the replica's records through a stateReader,
// stamps records with its clock's wall time and measures how long ended
// sessions are watched on its monotonic readings.
type sessionSync struct {
	self         string // this server's node ID
	logger       hclog.Logger
	clock        Clock
	state        stateReader
	records      sessionCommitter
	interval     time.Duration // SessionCheckInterval
	applyTimeout time.Duration
	rerecords    *atomic.Uint64 // sessions recorded again (agentCounters)
	kick         chan struct{}
	// beforeCommit, if set, runs before sessionSync commits session
	// records; an error it returns fails that commit (fault injection:
	// a commit lost in an election).
	beforeCommit atomic.Pointer[func([]fsm.DeviceSessionRequest) error]

	mu    sync.Mutex
	live  map[string][]*agentSession // device → its sessions here, oldest first; guarded by mu
	ended map[string]endedSession    // device → its last session that ended here, until the replica no longer shows it connected here; guarded by mu
	dirty map[string]struct{}        // devices to compare in the next pass; guarded by mu
}

// endedSession is what identifies an ended session in its record.
type endedSession struct {
	sessionID, conn string
	labels          map[string]string
	acked           uint64
	at              time.Time // when it ended (monotonic)
}

// endedKeep is how long an ended session is watched after its record
// last needed correcting: a connect committed before it ended may still
// reach the log late (an entry of a deposed leader that its successor
// commits), and must then be corrected too.
const endedKeep = time.Minute

// retry backoff after a failed commit.
const (
	syncRetryMin = 100 * time.Millisecond
	syncRetryMax = time.Second
)

// sessionCommitter commits session events as group commits and waits for
// them (sessionRecorder.recordAll).
type sessionCommitter interface {
	recordAll(ctx context.Context, reqs []fsm.DeviceSessionRequest) error
}

func newSessionSync(cfg *Config, logger hclog.Logger, clock Clock, state stateReader, records sessionCommitter, rerecords *atomic.Uint64) *sessionSync {
	return &sessionSync{
		self: cfg.NodeID, logger: logger, clock: clock, state: state, records: records,
		interval: cfg.SessionCheckInterval, applyTimeout: cfg.ApplyTimeout, rerecords: rerecords,
		kick: make(chan struct{}, 1),
		live: map[string][]*agentSession{}, ended: map[string]endedSession{}, dirty: map[string]struct{}{},
	}
}

// started adds a session to the live table.
func (y *sessionSync) started(sess *agentSession) {
	y.mu.Lock()
	y.live[sess.deviceID] = append(y.live[sess.deviceID], sess)
	delete(y.ended, sess.deviceID)
	y.markLocked(sess.deviceID)
	y.mu.Unlock()
}

// changed says that a live session's state (its acknowledged revision)
// moved on.
func (y *sessionSync) changed(sess *agentSession) {
	y.mu.Lock()
	y.markLocked(sess.deviceID)
	y.mu.Unlock()
}

// changedAfter says that a live session's acknowledged revision moved on
// and that its record is to be compared after d: in the meantime the
// report that follows may commit it with the device's status.
func (y *sessionSync) changedAfter(sess *agentSession, d time.Duration) {
	y.clock.AfterFunc(d, func() { y.changed(sess) })
}

// stopped removes a session from the live table. If it was the device's
// last session here, the device's record must come to show it
// disconnected (unless another server or connection took over).
func (y *sessionSync) stopped(sess *agentSession) {
	sess.mu.Lock()
	e := endedSession{sessionID: sessionString(sess.id), conn: sess.connID, labels: sess.labels, acked: sess.acked, at: y.clock.Mono()}
	sess.mu.Unlock()
	y.mu.Lock()
	defer y.mu.Unlock()
	rest := slices.DeleteFunc(y.live[sess.deviceID], func(s *agentSession) bool { return s == sess })
	if len(rest) == 0 {
		delete(y.live, sess.deviceID)
		y.ended[sess.deviceID] = e
	} else {
		y.live[sess.deviceID] = rest
	}
	y.markLocked(sess.deviceID)
}

func (y *sessionSync) markLocked(device string) {
	y.dirty[device] = struct{}{}
	select {
	case y.kick <- struct{}{}:
	default:
	}
}

// Run keeps the records true until ctx ends. A stopping server's sessions
// end unrecorded; their owners see the silence.
func (y *sessionSync) Run(ctx context.Context) error {
	full := y.clock.NewTicker(y.interval)
	defer full.Stop()
	backoff := time.Duration(0)
	for {
		if backoff > 0 {
			if !sleep(y.clock, backoff, ctx.Done()) {
				return nil
			}
		} else {
			select {
			case <-ctx.Done():
				return nil
			case <-y.kick:
			case <-full.C():
				y.markAll()
			case <-y.state.Read().Replaced():
				// A snapshot restore replaced the records: compare them
				// all now rather than at the next full pass.
				y.markAll()
			}
		}
		if err := y.pass(ctx); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			backoff = min(max(2*backoff, syncRetryMin), syncRetryMax)
			y.logger.Warn("could not record device sessions; retrying", "in", backoff, "error", err)
			continue
		}
		backoff = 0
	}
}

func (y *sessionSync) markAll() {
	y.mu.Lock()
	defer y.mu.Unlock()
	for dev := range y.live {
		y.dirty[dev] = struct{}{}
	}
	for dev := range y.ended {
		y.dirty[dev] = struct{}{}
	}
}

// pass compares the dirty devices' records with the live table and commits
// the differences. On failure the devices stay dirty.
func (y *sessionSync) pass(ctx context.Context) error {
	self := y.self
	read := y.state.Read()
	now := y.clock.Now().UnixNano()

	y.mu.Lock()
	devices := make([]string, 0, len(y.dirty))
	for dev := range y.dirty {
		devices = append(devices, dev)
	}
	clear(y.dirty)
	var reqs []fsm.DeviceSessionRequest
	var recording []*agentSession // live sessions the reqs record, in order
	var acks []uint64
	// From this level on, an owner commits the acknowledged revision a
	// report carries with the report (agentSession.recordReport).
	carried := read.ActiveLevel() >= fsm.LevelAckWithStatus
	for _, dev := range devices {
		rec, _ := read.Device(nil, dev)
		if sessions := y.live[dev]; len(sessions) > 0 {
			// The newest connection is the one the device uses.
			sess := sessions[len(sessions)-1]
			sess.mu.Lock()
			acked, carrying := sess.acked, sess.carrying
			req := fsm.DeviceSessionRequest{
				ID: dev, Labels: sess.labels, SessionID: sessionString(sess.id),
				Server: self, Conn: sess.connID, Connected: true, AckedRevision: acked, Time: now,
			}
			sess.mu.Unlock()
			here := sess.recordedHere(rec, self)
			if here && rec.AckedRevision >= acked {
				sess.markAttempted(acked, true)
				continue
			}
			if here && carried && carrying >= acked {
				// Only the acknowledgement lags, and the report being
				// recorded carries it; should that fail, the session
				// marks the device again.
				continue
			}
			if rec != nil && sess.wasRecorded() && !here {
				// Recorded before and lost since: another server's late
				// write, or a commit the replica lost. (A record that
				// only lags the acknowledged revision is not lost.)
				y.rerecords.Add(1)
			}
			reqs = append(reqs, req)
			recording = append(recording, sess)
			acks = append(acks, acked)
			continue
		}
		e, ok := y.ended[dev]
		if !ok {
			continue
		}
		if rec == nil || !rec.Connected || rec.Server != self || rec.Conn != e.conn || rec.SessionID != e.sessionID {
			if y.clock.Mono().Sub(e.at) > endedKeep {
				delete(y.ended, dev) // nothing of it left to correct
			}
			continue
		}
		e.at = y.clock.Mono()
		y.ended[dev] = e
		reqs = append(reqs, fsm.DeviceSessionRequest{
			ID: dev, Labels: e.labels, SessionID: e.sessionID,
			Server: self, Conn: e.conn, Connected: false, AckedRevision: e.acked, Time: now,
		})
	}
	y.mu.Unlock()
	if len(reqs) == 0 {
		return nil
	}

	ctx, cancel := context.WithTimeout(ctx, y.applyTimeout)
	defer cancel()
	var err error
	if hook := y.beforeCommit.Load(); hook != nil {
		err = (*hook)(reqs)
	}
	if err == nil {
		err = y.records.recordAll(ctx, reqs)
	}
	for i, sess := range recording {
		sess.markAttempted(acks[i], err == nil)
	}
	if err != nil {
		y.remark(devices)
	}
	return err
}

func (y *sessionSync) remark(devices []string) {
	y.mu.Lock()
	defer y.mu.Unlock()
	for _, dev := range devices {
		y.dirty[dev] = struct{}{}
	}
}

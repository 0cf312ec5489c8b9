package cluster

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/meteor-edge/meteor/fsm"
)

// maxSessionBatch bounds the session events in one Raft entry.
const maxSessionBatch = 1024

// sessionRecorder commits device session events (connects, acknowledged
// revisions, disconnects) as group commits: whatever was queued while the
// previous entry was being committed goes into the next one
// (device-session-batch). An idle server commits an event at once; a
// reconnect storm of thousands of devices costs tens of entries and, on a
// follower, as many forwarded requests, not thousands. Events keep their
// order: one server's events for one device commit in the order they
// were queued.
type sessionRecorder struct {
	propose      proposer
	applyTimeout time.Duration
	kick         chan struct{}
	// entries and events count Raft entries committed and the events in
	// them.
	entries, events atomic.Uint64

	mu    sync.Mutex
	queue []*pendingSession // guarded by mu
}

type pendingSession struct {
	req  fsm.DeviceSessionRequest
	done chan error
}

// proposer commits a command through Raft from any server: on the leader
// directly, elsewhere by forwarding it to the leader (Server.apply). A
// rejection by the state machine is in ApplyResult.Err. The session
// recorder and the status owner commit through it.
type proposer interface {
	apply(ctx context.Context, t fsm.MessageType, req any) (fsm.ApplyResult, uint64, error)
}

func newSessionRecorder(p proposer, applyTimeout time.Duration) *sessionRecorder {
	return &sessionRecorder{propose: p, applyTimeout: applyTimeout, kick: make(chan struct{}, 1)}
}

// record queues one event and waits for its commit. If ctx ends first the
// event may still be committed.
func (r *sessionRecorder) record(ctx context.Context, req *fsm.DeviceSessionRequest) error {
	return r.recordAll(ctx, []fsm.DeviceSessionRequest{*req})
}

// recordAll queues events and waits for all of their commits; it returns
// the first error.
func (r *sessionRecorder) recordAll(ctx context.Context, reqs []fsm.DeviceSessionRequest) error {
	ps := make([]*pendingSession, len(reqs))
	r.mu.Lock()
	for i := range reqs {
		ps[i] = &pendingSession{req: reqs[i], done: make(chan error, 1)}
		r.queue = append(r.queue, ps[i])
	}
	r.mu.Unlock()
	select {
	case r.kick <- struct{}{}:
	default:
	}
	var first error
	for _, p := range ps {
		select {
		case err := <-p.done:
			if first == nil {
				first = err
			}
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return first
}

// Run commits queued events until ctx ends; events still queued then
// fail.
func (r *sessionRecorder) Run(ctx context.Context) error {
	for {
		r.mu.Lock()
		n := min(len(r.queue), maxSessionBatch)
		batch := r.queue[:n:n]
		r.queue = append(r.queue[:0:0], r.queue[n:]...)
		r.mu.Unlock()
		if n > 0 {
			r.commit(ctx, batch)
			continue
		}
		select {
		case <-ctx.Done():
			r.mu.Lock()
			queued := r.queue
			r.queue = nil
			r.mu.Unlock()
			for _, p := range queued {
				p.done <- errors.New("server shutting down")
			}
			return nil
		case <-r.kick:
		}
	}
}

func (r *sessionRecorder) commit(ctx context.Context, batch []*pendingSession) {
	req := &fsm.DeviceSessionBatchRequest{Sessions: make([]fsm.DeviceSessionRequest, len(batch))}
	for i, p := range batch {
		req.Sessions[i] = p.req
	}
	ctx, cancel := context.WithTimeout(ctx, r.applyTimeout)
	res, _, err := r.propose.apply(ctx, fsm.DeviceSessionBatchType, req)
	cancel()
	if err == nil {
		err = res.Err
	}
	if err == nil {
		r.entries.Add(1)
		r.events.Add(uint64(len(batch)))
	}
	for _, p := range batch {
		p.done <- err
	}
}

package cluster

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/meteor-edge/meteor/cluster/api"
	"github.com/meteor-edge/meteor/fsm"
)

// peerAPIBatch is the level of the server-to-server API (nodeMeta.PeerAPI)
// from which a server takes forwarded commands in batches
// (/v1/internal/apply-batch). A server of an earlier release says nothing
// (0): commands go to it one request each, as it expects.
const peerAPIBatch = 1

// Limits of a forwarded batch. A batch holds what was queued while the
// batches before it were in flight, up to maxForwardBatch commands and
// maxForwardBatchBytes of them (one larger command goes alone); at most
// forwardBatchesInFlight batches a leader are in flight at once.
const (
	maxForwardBatch        = 256
	maxForwardBatchBytes   = 1 << 20
	forwardBatchesInFlight = 4
)

// forwardBatched says whether commands of type t are forwarded in
// batches. The session recorder's and the status owner's entries are
// group commits already, each with one in flight a server, so a batch
// would seldom hold two of them, and the fan-out to 10,000 devices went no
// faster with them batched (docs/performance.md, "Per device"): they keep
// a request each.
func forwardBatched(t fsm.MessageType) bool {
	return t != fsm.DeviceSessionBatchType && t != fsm.StatusBatchType
}

// applyBatcher forwards the commands this server proposes while another
// server leads: the API's writes (intents, tokens, enrolments, rollout
// controls; not the group commits of forwardBatched). One HTTP request a
// command made the leader pay for a request's parsing, signature check and
// response per write, and the follower the same; the batcher sends the commands
// queued meanwhile in one signed request, which the leader proposes in
// order before waiting for any of them, so that they also share Raft's log
// appends. It is group commit: a command waits for no timer, only for a
// place among the batches in flight, so a lone write goes at once and a
// burst goes in few requests.
//
// Each caller keeps its own deadline: the leader gives each command the
// time its caller had left, and a caller that stops waiting learns that
// its command's outcome is unknown, as with a single request.
type applyBatcher struct {
	p            *peerClient
	ctx          context.Context // the server's: its values only (batches in flight outlive its end)
	applyTimeout time.Duration
	q            *groupSender[*forwardCall] // by the leader's HTTP address

	// batches and commands count what went to leaders as batches
	// (meteor_forward_batches_total, meteor_forward_commands_total).
	batches, commands atomic.Uint64
}

// forwardCall is one forwarded command, its caller's context, and, once
// done is closed, its outcome.
type forwardCall struct {
	ctx  context.Context
	cmd  batchCommand // its timeout is set when the batch goes
	done chan struct{}
	out  batchOutcome
}

func newApplyBatcher(ctx context.Context, p *peerClient, applyTimeout time.Duration) *applyBatcher {
	b := &applyBatcher{p: p, ctx: ctx, applyTimeout: applyTimeout}
	b.q = newGroupSender(forwardBatchesInFlight, maxForwardBatch, maxForwardBatchBytes,
		func(c *forwardCall) int { return len(c.cmd.data) }, b.send)
	return b
}

// apply has the leader at addr commit an encoded command, batched with
// the others forwarded meanwhile. Its outcome is what peerClient.apply's
// would be: a rejection by the state machine is an *api.Error in
// ApplyResult.Err; a failure to reach the leader wraps ErrNoLeader
// (nothing was written); a failure after sending is an
// OutcomeUnknownError.
func (b *applyBatcher) apply(ctx context.Context, addr string, t fsm.MessageType, data []byte) (fsm.ApplyResult, uint64, error) {
	if err := ctx.Err(); err != nil {
		return fsm.ApplyResult{}, 0, fmt.Errorf("forward %s to the leader: %w; nothing was sent", t, err)
	}
	c := &forwardCall{ctx: ctx, cmd: batchCommand{t: t, data: data}, done: make(chan struct{})}
	if !b.q.queue(addr, c) {
		return fsm.ApplyResult{}, 0, fmt.Errorf("forward %s to the leader: the server is shutting down; nothing was sent", t)
	}
	select {
	case <-c.done:
		return c.out.res, c.out.index, c.out.err
	case <-ctx.Done():
		return fsm.ApplyResult{}, 0, &OutcomeUnknownError{Err: fmt.Errorf("gave up waiting for the leader's answer: %w", ctx.Err())}
	}
}

// send forwards one batch and hands each call its outcome. Calls whose
// callers stopped waiting before it went are left out.
func (b *applyBatcher) send(addr string, batch []*forwardCall) {
	var live []*forwardCall
	var cmds []batchCommand
	longest := time.Duration(0)
	for _, c := range batch {
		if err := c.ctx.Err(); err != nil {
			c.finish(batchOutcome{err: err})
			continue
		}
		// What is left of the caller's time, its wait in the queue
		// deducted.
		c.cmd.timeout = timeLeft(c.ctx, b.applyTimeout)
		longest = max(longest, c.cmd.timeout)
		live, cmds = append(live, c), append(cmds, c.cmd)
	}
	if len(live) == 0 {
		return
	}
	// The leader answers once the last command is committed or timed out;
	// the answer itself gets a little more. A batch in flight outlives
	// this server's shutdown, as a single forwarded request outlives it
	// with its caller's context: cut off, its commands' outcomes would be
	// unknown to clients whose writes the leader goes on to commit
	// (TestRollingUpgradeAcrossAWireMinor). Shutdown waits for it (wait).
	ctx, cancel := context.WithTimeout(context.WithoutCancel(b.ctx), longest+2*time.Second)
	defer cancel()
	b.batches.Add(1)
	b.commands.Add(uint64(len(cmds)))
	done := make([]bool, len(live))
	err := b.p.applyBatch(ctx, addr, cmds, func(i int, o batchOutcome) {
		done[i] = true
		live[i].finish(o)
	})
	if errors.Is(err, errBatchUnsupported) {
		// Leadership moved to a server of an earlier release between
		// reading its gossip and sending.
		var wg sync.WaitGroup
		for _, c := range live {
			wg.Go(func() {
				var o batchOutcome
				o.res, o.index, o.err = b.p.apply(c.ctx, addr, c.cmd.t, c.cmd.data)
				c.finish(o)
			})
		}
		wg.Wait()
		return
	}
	for i, c := range live {
		if !done[i] {
			if err == nil {
				err = &OutcomeUnknownError{Err: errors.New("the leader's answer ended early")}
			}
			c.finish(batchOutcome{err: err})
		}
	}
}

func (c *forwardCall) finish(o batchOutcome) {
	c.out = o
	close(c.done)
}

// wait refuses what is forwarded from now on and waits for the batches
// in flight, each within its commands' deadlines.
func (b *applyBatcher) wait() { b.q.wait() }

// batchCommand is one command of a forwarded batch, with the time its
// proposer gives it to commit.
type batchCommand struct {
	t       fsm.MessageType
	data    []byte
	timeout time.Duration
}

// batchOutcome is the outcome of one command of a batch.
type batchOutcome struct {
	res   fsm.ApplyResult
	index uint64
	err   error
}

// encodeBatch frames commands for /v1/internal/apply-batch: their count,
// then for each the milliseconds it has to commit, its length and its
// bytes, all counts as unsigned varints.
func encodeBatch(cmds []batchCommand) []byte {
	size := binary.MaxVarintLen64
	for _, c := range cmds {
		size += 2*binary.MaxVarintLen64 + len(c.data)
	}
	buf := make([]byte, 0, size)
	buf = binary.AppendUvarint(buf, uint64(len(cmds)))
	for _, c := range cmds {
		buf = appendTimeout(buf, c.timeout)
		buf = appendBytes(buf, c.data)
	}
	return buf
}

// decodeBatch reads what encodeBatch wrote. Every command must have a
// type byte; the commands' bytes are not copied.
func decodeBatch(buf []byte) ([]batchCommand, error) {
	// Each command takes at least three bytes.
	r, n, err := newBatchReader(buf, "batch", "command", 3)
	if err != nil {
		return nil, err
	}
	cmds := make([]batchCommand, 0, n)
	for i := range n {
		r.next(i)
		timeout, err := r.timeout()
		if err != nil {
			return nil, err
		}
		data, err := r.bytes("command")
		if err != nil {
			return nil, err
		}
		cmds = append(cmds, batchCommand{t: fsm.MessageType(data[0]), data: data, timeout: timeout})
	}
	if err := r.end(); err != nil {
		return nil, err
	}
	return cmds, nil
}

// batchResult is one command's answer in /v1/internal/apply-batch's
// response: the index of the command in the request, and its
// applyResponse or the error the single endpoint would have answered
// with, and that error's HTTP status.
type batchResult struct {
	I int `json:"i"`
	applyResponse
	Error  *api.Error `json:"failed,omitempty"`
	Status int        `json:"status,omitempty"`
}

// errBatchUnsupported says the leader does not serve
// /v1/internal/apply-batch: it runs an earlier release.
var errBatchUnsupported = errors.New("the leader does not take forwarded batches")

// applyBatch has the leader at addr commit cmds (/v1/internal/apply-batch)
// and hands each command's outcome to deliver, with the command's index,
// as the leader answers it: the leader streams the answers in the order
// the commands commit, so that none waits for the slowest of its batch.
// The error is set when the batch failed before every command was
// answered; it holds for the commands not delivered.
func (p *peerClient) applyBatch(ctx context.Context, addr string, cmds []batchCommand, deliver func(int, batchOutcome)) error {
	resp, err := p.post(ctx, addr, "/v1/internal/apply-batch", encodeBatch(cmds))
	if err != nil {
		return forwardError(addr, fmt.Sprintf("forward %d commands to the leader", len(cmds)), err)
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusNotFound || resp.StatusCode == http.StatusMethodNotAllowed {
		return errBatchUnsupported
	}
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		return leaderRefusal(resp, body)
	}
	err = readAnswers(resp.Body, len(cmds), func(r *batchResult) int { return r.I }, func(i int, r *batchResult) {
		var o batchOutcome
		switch {
		case r.Error != nil:
			r.Error.StatusCode = r.Status
			o.err = r.Error
		default:
			o.res, o.index = r.result(), r.Index
		}
		deliver(i, o)
	})
	if err != nil {
		return &OutcomeUnknownError{Err: fmt.Errorf("read the leader's answers: %w", err)}
	}
	return nil
}

// handleInternalApplyBatch proposes the commands of a batch forwarded by
// another server (applyBatcher), all before waiting for the first, and
// streams each command's answer (one JSON object a line, with its index)
// as soon as it is committed or failed. Each command is checked as
// /v1/internal/apply checks it; one refused does not refuse the others.
func (h *httpAPI) handleInternalApplyBatch(w http.ResponseWriter, r *http.Request) {
	body, ok := h.readSigned(w, r)
	if !ok {
		return
	}
	cmds, err := decodeBatch(body)
	if err != nil {
		writeError(w, badRequest("%v", err))
		return
	}
	if !h.node.IsLeader() {
		writeError(w, toAPIError(fmt.Errorf("%w: leadership moved while the commands were forwarded", ErrNoLeader)))
		return
	}
	refused := make([]*api.Error, len(cmds))
	for i, c := range cmds {
		refused[i] = h.forwardable(c.t)
	}
	outs := make(chan indexedOutcome, len(cmds))
	h.node.proposeBatch(r.Context(), cmds, refused, outs)
	w.Header().Set("Content-Type", "application/x-ndjson")
	w.WriteHeader(http.StatusOK)
	streamAnswers(w, len(cmds), outs, func(o indexedOutcome) any {
		res := batchResult{I: o.i}
		if o.err != nil {
			e := toAPIError(o.err) // a refusal is an *api.Error already
			res.Error, res.Status = e, e.StatusCode
		} else {
			res.applyResponse = responseOf(o.res, o.index)
		}
		return res
	})
}

// indexedOutcome is the outcome of the command at index i of a batch.
type indexedOutcome struct {
	i int
	batchOutcome
}

// proposeBatch proposes the commands of a forwarded batch that are not
// refused, in order, and sends each command's outcome to outs (which has
// room for all) once it is known: refused ones (their refusal as the
// error) and failed ones at once, the others as they commit.
func (s *Server) proposeBatch(ctx context.Context, cmds []batchCommand, refused []*api.Error, outs chan<- indexedOutcome) {
	for i, c := range cmds {
		if refused[i] != nil {
			outs <- indexedOutcome{i: i, batchOutcome: batchOutcome{err: refused[i]}}
			continue
		}
		p, err := s.startProposal(c.t, c.data, min(c.timeout, s.config.ApplyTimeout))
		if err != nil {
			outs <- indexedOutcome{i: i, batchOutcome: batchOutcome{err: err}}
			continue
		}
		go func() {
			o := indexedOutcome{i: i}
			o.res, o.index, o.err = s.awaitProposal(ctx, p)
			outs <- o
		}()
	}
}

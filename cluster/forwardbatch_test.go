package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/meteor-edge/meteor/cluster/api"
	"github.com/meteor-edge/meteor/fsm"
)

// TestForwardedWritesGoInBatches: writes proposed at once on a follower
// reach the leader in fewer requests than writes, each is committed once
// with its own revision, and a write the state machine rejects (a
// conflicting If-Match) fails alone, with the rejection the single
// endpoint would give. A command the leader refuses to take forwarded is
// refused alone too.
func TestForwardedWritesGoInBatches(t *testing.T) {
	c := newTestCluster(t, 3, nil)
	leader := c.waitLeader()
	f := c.follower()
	waitFor(t, 10*time.Second, func() error {
		if m, ok := f.gossip.memberByID(leader.config.NodeID); !ok || m.PeerAPI < peerAPIBatch {
			return fmt.Errorf("the follower does not know the leader takes batches: %+v", m)
		}
		return nil
	})

	const writers, each, conflicting = 32, 8, 16
	type outcome struct {
		name string
		res  fsm.ApplyResult
		err  error
	}
	outs := make(chan outcome, writers*each+conflicting)
	start := make(chan struct{})
	var wg sync.WaitGroup
	put := func(name string, ifMatch *uint64) {
		<-start
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		res, _, err := f.apply(ctx, fsm.PutIntentType, &fsm.PutIntentRequest{Intent: simpleIntent(name, "v1"), IfMatch: ifMatch, Time: time.Now().UnixNano()})
		outs <- outcome{name, res, err}
	}
	for w := range writers {
		wg.Go(func() {
			for i := range each {
				put(fmt.Sprintf("w%d-%d", w, i), nil)
			}
		})
	}
	stale := uint64(999)
	for i := range conflicting {
		wg.Go(func() { put(fmt.Sprintf("conflict-%d", i), &stale) })
	}
	close(start)
	wg.Wait()
	close(outs)

	revisions := map[uint64]string{}
	for o := range outs {
		if o.err != nil {
			t.Fatalf("%s: %v", o.name, o.err)
		}
		if o.name[0] == 'c' {
			var e *api.Error
			if !errors.As(o.res.Err, &e) || e.Code != api.CodeConflict || e.StatusCode != http.StatusConflict {
				t.Errorf("%s: got %v, want the state machine's conflict", o.name, o.res.Err)
			}
			continue
		}
		if o.res.Err != nil {
			t.Errorf("%s: rejected: %v", o.name, o.res.Err)
			continue
		}
		if prev, ok := revisions[o.res.Revision]; ok {
			t.Errorf("%s and %s both got revision %d", o.name, prev, o.res.Revision)
		}
		revisions[o.res.Revision] = o.name
	}
	read := leader.State().Read()
	for w := range writers {
		for i := range each {
			if _, err := read.Intent(nil, fmt.Sprintf("w%d-%d", w, i)); err != nil {
				t.Errorf("w%d-%d: %v", w, i, err)
			}
		}
	}
	batches, commands := f.forwarder.batches.Load(), f.forwarder.commands.Load()
	t.Logf("%d commands forwarded in %d batches", commands, batches)
	if commands != writers*each+conflicting {
		t.Errorf("%d commands forwarded in batches, want %d", commands, writers*each+conflicting)
	}
	if batches >= commands {
		t.Errorf("%d batches for %d commands: none was batched", batches, commands)
	}

	// One command of a batch the leader may not take forwarded.
	good, err := fsm.Encode(fsm.PutIntentType, &fsm.PutIntentRequest{Intent: simpleIntent("batched", "v1"), Time: time.Now().UnixNano()})
	if err != nil {
		t.Fatal(err)
	}
	bad, err := fsm.Encode(fsm.RolloutStepType, &fsm.RolloutStepRequest{Intent: "batched"})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	res := map[int]batchOutcome{}
	err = f.peers.applyBatch(ctx, leader.HTTPAddr(), []batchCommand{
		{t: fsm.RolloutStepType, data: bad, timeout: 5 * time.Second},
		{t: fsm.PutIntentType, data: good, timeout: 5 * time.Second},
	}, func(i int, o batchOutcome) { res[i] = o })
	if err != nil {
		t.Fatal(err)
	}
	var e *api.Error
	if !errors.As(res[0].err, &e) || e.StatusCode != http.StatusBadRequest {
		t.Errorf("rollout step forwarded: got %v, want a refusal", res[0].err)
	}
	if res[1].err != nil || res[1].res.Err != nil || res[1].res.Revision == 0 {
		t.Errorf("intent batched with a refused command: %+v", res[1])
	}
}

// TestApplyBatchFraming: a batch decodes to what was encoded, and every
// truncation of it, and a count larger than its bytes could hold, is
// refused.
func TestApplyBatchFraming(t *testing.T) {
	cmds := []batchCommand{
		{t: fsm.PutIntentType, data: []byte{byte(fsm.PutIntentType), '{', '}'}, timeout: 5 * time.Second},
		{t: fsm.StatusBatchType, data: append([]byte{byte(fsm.StatusBatchType)}, make([]byte, 300)...), timeout: 1500 * time.Millisecond},
	}
	enc := encodeBatch(cmds)
	got, err := decodeBatch(enc)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(cmds, got, cmp.AllowUnexported(batchCommand{}), cmpopts.EquateEmpty()); diff != "" {
		t.Errorf("decoded batch differs (-want +got):\n%s", diff)
	}
	for n := range len(enc) {
		if _, err := decodeBatch(enc[:n]); err == nil {
			t.Errorf("the first %d of %d bytes decoded", n, len(enc))
		}
	}
	if _, err := decodeBatch(append(enc, 0)); err == nil {
		t.Error("a trailing byte decoded")
	}
	if _, err := decodeBatch([]byte{0xff, 0xff, 0x03, 1, 1, 1}); err == nil {
		t.Error("a count of 65,535 commands in three bytes decoded")
	}
}

// TestForwardBatchToAnEarlierLeader: a leader that does not serve
// /v1/internal/apply-batch (an earlier release, gossip not caught up) is
// sent the batch's commands one request each, and each caller gets its
// own answer.
func TestForwardBatchToAnEarlierLeader(t *testing.T) {
	var mu sync.Mutex
	singles := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/v1/internal/apply":
			mu.Lock()
			singles++
			n := singles
			mu.Unlock()
			writeJSON(w, http.StatusOK, applyResponse{Revision: uint64(100 + n), Index: uint64(200 + n)})
		default:
			http.NotFound(w, r)
		}
	}))
	defer srv.Close()
	u, _ := url.Parse(srv.URL)
	p := testPeerClient(t, nil)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	b := newApplyBatcher(ctx, p, 5*time.Second)
	defer b.wait()

	const n = 12
	var wg sync.WaitGroup
	revs := make(chan uint64, n)
	for range n {
		wg.Go(func() {
			res, _, err := b.apply(ctx, u.Host, fsm.PutIntentType, []byte{byte(fsm.PutIntentType), '{', '}'})
			if err != nil {
				t.Error(err)
				return
			}
			revs <- res.Revision
		})
	}
	wg.Wait()
	close(revs)
	seen := map[uint64]bool{}
	for r := range revs {
		if seen[r] {
			t.Errorf("revision %d answered twice", r)
		}
		seen[r] = true
	}
	if len(seen) != n || singles != n {
		t.Errorf("%d distinct answers from %d single requests, want %d", len(seen), singles, n)
	}
}

// TestForwardBatchAnswerDecodes: the answers of a batch, streamed in the
// order the leader knew them, reach each caller as the single endpoint's
// would: a failure, a rejection and a commit. An answer stream that ends
// early, or names a command twice, fails the rest.
func TestForwardBatchAnswerDecodes(t *testing.T) {
	answers := []batchResult{
		{I: 2, applyResponse: applyResponse{Revision: 8, Index: 10, Unchanged: true}},
		{I: 0, Error: &api.Error{Code: api.CodeNoLeader, Message: "no leader; nothing was written"}, Status: http.StatusServiceUnavailable},
		{I: 1, applyResponse: applyResponse{Revision: 7, Index: 9, Rejected: &api.Error{Code: api.CodeConflict, Message: "stale"}}},
	}
	serve := func(answers []batchResult) *url.URL {
		var stream []byte
		for _, a := range answers {
			b, _ := json.Marshal(a)
			stream = append(append(stream, b...), '\n')
		}
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/x-ndjson")
			w.Write(stream)
		}))
		t.Cleanup(srv.Close)
		u, _ := url.Parse(srv.URL)
		return u
	}
	u := serve(answers)
	twice := serve(append(answers, batchResult{I: 1}))
	p := testPeerClient(t, nil)
	cmd := batchCommand{t: fsm.PutIntentType, data: []byte{byte(fsm.PutIntentType)}, timeout: time.Second}
	var order []int
	outs := map[int]batchOutcome{}
	collect := func(i int, o batchOutcome) { order, outs[i] = append(order, i), o }
	if err := p.applyBatch(context.Background(), u.Host, []batchCommand{cmd, cmd, cmd}, collect); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]int{2, 0, 1}, order); diff != "" {
		t.Errorf("delivered in another order than answered (-want +got):\n%s", diff)
	}
	var e *api.Error
	if !errors.As(outs[0].err, &e) || e.StatusCode != http.StatusServiceUnavailable || e.Code != api.CodeNoLeader {
		t.Errorf("first: %v", outs[0].err)
	}
	if !errors.As(outs[1].res.Err, &e) || e.StatusCode != http.StatusConflict || outs[1].res.Revision != 7 || outs[1].index != 9 {
		t.Errorf("second: %+v", outs[1])
	}
	if outs[2].err != nil || outs[2].res.Err != nil || !outs[2].res.Unchanged || outs[2].index != 10 {
		t.Errorf("third: %+v", outs[2])
	}
	// Four commands: the stream ends after three answers.
	var unknown *OutcomeUnknownError
	if err := p.applyBatch(context.Background(), u.Host, []batchCommand{cmd, cmd, cmd, cmd}, func(int, batchOutcome) {}); !errors.As(err, &unknown) {
		t.Errorf("an answer stream ended early: %v, want an unknown outcome", err)
	}
	// Four commands: the fourth answer names the second again.
	if err := p.applyBatch(context.Background(), twice.Host, []batchCommand{cmd, cmd, cmd, cmd}, func(int, batchOutcome) {}); !errors.As(err, &unknown) || !strings.Contains(err.Error(), "twice") {
		t.Errorf("a command answered twice: %v, want an unknown outcome", err)
	}
}

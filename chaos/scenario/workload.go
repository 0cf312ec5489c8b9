package scenario

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"sync"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/hashicorp/go-hclog"

	"github.com/meteor-edge/meteor/cluster/api"
	"github.com/meteor-edge/meteor/fsm/intent"
)

// workload runs concurrent clients against a harness and records their
// operations.
// targets are the servers a workload talks to: a Harness, or the HTTP
// addresses of a deployment.
type targets interface {
	Alive() []int
	// HTTPURL is the base URL of server i's HTTP API.
	HTTPURL(i int) string
}

type workload struct {
	h       targets
	names   []string
	clients int
	seed    uint64
	stale   bool      // read with ?stale=true (to show the checker failing)
	start   time.Time // the history's clock: time.Since(start)
	hc      *http.Client
	token   string // the operator token, if the servers require one

	mu  sync.Mutex
	ops []porcupine.Operation // guarded by mu
	// unknown lists the indexes in ops of operations that never returned
	// a definite outcome; their Return is set when the history is closed.
	unknown []int // guarded by mu
	dropped int   // guarded by mu; operations that certainly had no effect
	// completed counts operations with a definite outcome: answered, or
	// refused with a conflict.
	completed int // guarded by mu
}

// newWorkload returns a workload against h's servers, reached with
// tlsConf (nil: plain HTTP) and token.
func newWorkload(h targets, tlsConf *tls.Config, token string, seed uint64, clients int, names []string) *workload {
	return &workload{
		h:       h,
		names:   names,
		clients: clients,
		seed:    seed,
		start:   time.Now(),
		token:   token,
		hc: &http.Client{
			Timeout:   5 * time.Second,
			Transport: &http.Transport{TLSClientConfig: tlsConf, MaxIdleConnsPerHost: 8, IdleConnTimeout: 10 * time.Second},
		},
	}
}

// apiClient returns an API client for the server at addr (an address or a
// base URL) with the workload's HTTP client and token.
func (w *workload) apiClient(addr string) *api.Client {
	cl := api.NewClient(addr, w.hc)
	cl.Token = w.token
	return cl
}

func (w *workload) now() int64 { return time.Since(w.start).Nanoseconds() }

// completedOps returns the number of operations with a definite outcome
// so far.
func (w *workload) completedOps() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.completed
}

// run drives the clients until ctx ends and returns once they all have.
func (w *workload) run(ctx context.Context) {
	var wg sync.WaitGroup
	for c := range w.clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			w.client(ctx, c)
		}()
	}
	wg.Wait()
}

// client issues operations in a loop. It remembers the last revision it
// saw of each intent for its conditional puts, so some of them match.
func (w *workload) client(ctx context.Context, id int) {
	rng := rand.New(rand.NewPCG(w.seed, uint64(id)+1))
	seen := map[string]uint64{}
	for seq := 0; ctx.Err() == nil; seq++ {
		alive := w.h.Alive()
		if len(alive) == 0 {
			sleep(ctx, 50*time.Millisecond)
			continue
		}
		cl := w.apiClient(w.h.HTTPURL(alive[rng.IntN(len(alive))]))
		cl.RetryNoLeader = 0
		name := w.names[rng.IntN(len(w.names))]
		var in Input
		switch r := rng.IntN(10); {
		case r < 4:
			in = Input{Name: name, Op: OpGet}
		case r < 7:
			in = Input{Name: name, Op: OpPut, Value: fmt.Sprintf("c%d-%d", id, seq)}
		default:
			rev := seen[name]
			in = Input{Name: name, Op: OpPut, Value: fmt.Sprintf("c%d-%d", id, seq), IfMatch: &rev}
		}
		out, definite := w.do(cl, id, in)
		if !definite {
			// Back off a little: the cluster is probably without a leader.
			sleep(ctx, time.Duration(20+rng.IntN(80))*time.Millisecond)
			continue
		}
		if out.Found || (in.Op == OpPut && !out.Unknown && !out.Conflict) {
			seen[name] = out.Revision
		} else if out.Current != nil {
			seen[name] = *out.Current
		}
	}
}

// do performs one operation and records it. It reports whether the
// operation had a definite outcome (false: dropped or unknown).
func (w *workload) do(cl *api.Client, client int, in Input) (Output, bool) {
	// Operations are not cancelled by the end of the run: a put cut short
	// by the client would only add unknown outcomes.
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Second)
	defer cancel()
	call := w.now()
	var (
		out Output
		err error
	)
	switch in.Op {
	case OpGet:
		var r *api.IntentResponse
		r, err = cl.GetIntent(ctx, in.Name, api.ReadOptions{Stale: w.stale})
		if err == nil {
			out = Output{Found: true, Revision: r.Revision, Value: content(r.Intent)}
		} else if apiCode(err) == api.CodeNotFound {
			out, err = Output{}, nil
		}
	case OpPut:
		var r *api.WriteResponse
		r, err = cl.PutIntent(ctx, in.Name, document(in.Name, in.Value), in.IfMatch)
		if err == nil {
			out = Output{Revision: r.Revision}
		}
	}
	ret := w.now()
	w.mu.Lock()
	defer w.mu.Unlock()
	if err == nil {
		w.ops = append(w.ops, porcupine.Operation{ClientId: client, Input: in, Call: call, Output: out, Return: ret})
		w.completed++
		return out, true
	}
	var apiErr *api.Error
	switch {
	case in.Op == OpGet:
		// A failed read had no effect.
		w.dropped++
		return out, false
	case errors.As(err, &apiErr) && apiErr.Code == api.CodeConflict:
		out = Output{Conflict: true, Current: apiErr.CurrentRevision}
		w.ops = append(w.ops, porcupine.Operation{ClientId: client, Input: in, Call: call, Output: out, Return: ret})
		w.completed++
		return out, true
	case errors.As(err, &apiErr) && (apiErr.Code == api.CodeNoLeader || apiErr.StatusCode/100 == 4):
		// Certainly not applied.
		w.dropped++
		return out, false
	default:
		// unknown_outcome, timeout, shutting_down, a broken connection:
		// the put may have been applied.
		w.unknown = append(w.unknown, len(w.ops))
		w.ops = append(w.ops, porcupine.Operation{ClientId: client, Input: in, Call: call, Output: Output{Unknown: true}, Return: ret})
		return Output{Unknown: true}, false
	}
}

// finalReads reads every intent once through the leader after the cluster
// has converged, so that the history ends with what the cluster kept.
func (w *workload) finalReads(ctx context.Context, addr string) error {
	w.stale = false
	cl := w.apiClient(addr)
	for _, name := range w.names {
		in := Input{Name: name, Op: OpGet}
		if _, ok := w.do(cl, w.clients, in); !ok {
			return fmt.Errorf("final read of %q failed", name)
		}
	}
	return ctx.Err()
}

// history closes the history: operations with an unknown outcome get a
// return time after every other operation, so the checker may place them
// anywhere after their call, including "never".
func (w *workload) history() (ops []porcupine.Operation, unknown, dropped int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	var end int64
	for _, op := range w.ops {
		end = max(end, op.Return)
	}
	ops = append([]porcupine.Operation(nil), w.ops...)
	for _, i := range w.unknown {
		ops[i].Return = end + int64(time.Second)
	}
	return ops, len(w.unknown), w.dropped
}

func (w *workload) close() { w.hc.CloseIdleConnections() }

func apiCode(err error) string {
	var apiErr *api.Error
	if errors.As(err, &apiErr) {
		return apiErr.Code
	}
	return ""
}

// document is the intent a put writes: one file resource whose content is
// the value.
func document(name, value string) []byte {
	in := &intent.Intent{
		Name:     name,
		Selector: map[string]string{"region": "eu"},
		Resources: []intent.Resource{{
			ID: "motd", Type: "file", Spec: map[string]any{"path": "/etc/motd", "content": value},
		}},
	}
	b, err := in.Canonical()
	if err != nil {
		panic(fmt.Sprintf("encode intent %q: %v", name, err)) // a fixed, valid document
	}
	return b
}

// content extracts the value a put wrote from an intent.
func content(in *intent.Intent) string {
	if in == nil || len(in.Resources) == 0 {
		return ""
	}
	s, _ := in.Resources[0].Spec["content"].(string)
	return s
}

// runLength is how long a workload runs: at least d, and then on until
// it has completed minOps operations with a definite outcome, but no
// longer than limit. On a busy host a few seconds of faults can pass with
// the cluster mostly between leaders and every operation waiting out its
// timeout; a history of a handful of operations would prove nothing.
type runLength struct {
	d, limit time.Duration
	minOps   int
}

// newRunLength applies the defaults of Options.MinOps and MaxDuration.
func newRunLength(d, limit time.Duration, minOps int) runLength {
	if minOps == 0 {
		minOps = 50
	}
	if limit <= 0 {
		limit = d + 30*time.Second
	}
	return runLength{d: d, limit: max(limit, d), minOps: minOps}
}

// wait blocks for the run's length, polling completed once d has passed,
// or until ctx ends. It returns how long it blocked, and logs a run that
// went on past d.
func (l runLength) wait(ctx context.Context, logger hclog.Logger, completed func() int) time.Duration {
	start := time.Now()
	sleep(ctx, l.d) // the run's duration itself: time for the faults to act
	n := completed()
	if n >= l.minOps || ctx.Err() != nil {
		return time.Since(start)
	}
	logger.Warn("too few operations completed in the run's duration: going on", "completed", n, "min_ops", l.minOps, "limit", l.limit)
	for ctx.Err() == nil && n < l.minOps && time.Since(start) < l.limit {
		sleep(ctx, 50*time.Millisecond)
		n = completed()
	}
	ran := time.Since(start)
	if n < l.minOps {
		logger.Warn("too few operations completed under faults", "completed", n, "min_ops", l.minOps, "ran", ran)
	} else {
		logger.Info("minimum of operations completed", "completed", n, "ran", ran)
	}
	return ran
}

func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}
